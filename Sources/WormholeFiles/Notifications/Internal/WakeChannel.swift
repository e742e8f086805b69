#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
@_spi(Backend) import WormholeCore

/// A way to wake the inotify reader thread that does not go through inotify: a connected
/// pair of local datagram sockets, both ends close-on-exec and non-blocking.
///
/// The reader thread waits in `poll` on the inotify descriptor and on one end of this
/// channel; another thread sends a byte on the other end when the reader must look at
/// the engine's state (its last subscriber went). This is what swift-subprocess and
/// NIOPosix do with an eventfd. Swift's Glibc module has no `eventfd` and no `pipe2`
/// (both need `_GNU_SOURCE`), and `pipe` followed by `fcntl` leaves a moment in which a
/// `fork` and `exec` on another thread hands the descriptors to a child; `socketpair`
/// takes `SOCK_CLOEXEC | SOCK_NONBLOCK` in the call itself.
package struct WakeChannel: Sendable {
    /// The end the reader thread waits on.
    package let receiver: FileDescriptor
    /// The end other threads send on.
    package let sender: FileDescriptor

    /// The corresponding C function is `socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK)`.
    package init() throws(WormholeError) {
        var descriptors: [Int32] = [-1, -1]
        let type = Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue)
        guard socketpair(AF_UNIX, type, 0, &descriptors) == 0 else {
            let errno = Errno(rawValue: Glibc.errno)
            throw WormholeError.system("create the descriptors that wake the inotify reader", errno)
        }
        receiver = FileDescriptor(rawValue: descriptors[0])
        sender = FileDescriptor(rawValue: descriptors[1])
    }

    /// Wakes the thread waiting on ``receiver``. A full channel already holds a wake-up
    /// (`EAGAIN`), which is as good.
    package func wake() {
        var byte: UInt8 = 1
        _ = Syscalls.retrying("send") { send(sender.rawValue, &byte, 1, Int32(MSG_DONTWAIT)) }
    }

    /// Empties the channel, so that the next wait blocks until the next wake-up.
    package func drain() {
        var bytes = (UInt64(0), UInt64(0), UInt64(0), UInt64(0))
        while case .success(let count) = Syscalls.retrying("recv", { withUnsafeMutableBytes(of: &bytes) { recv(receiver.rawValue, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) } }),
              count > 0 {}
    }

    /// What woke ``wait(alongside:)``.
    package struct Readiness {
        /// The other descriptor can be read.
        package var events = false
        /// ``wake()`` was called.
        package var woken = false
    }

    /// Blocks until `descriptor` can be read or the channel is woken, or `milliseconds`
    /// have passed (-1: no timeout). The corresponding C function is `poll`.
    package func wait(alongside descriptor: FileDescriptor, milliseconds: Int32 = -1) -> Result<Readiness, Errno> {
        var descriptors = [pollfd(fd: descriptor.rawValue, events: Int16(POLLIN), revents: 0),
                           pollfd(fd: receiver.rawValue, events: Int16(POLLIN), revents: 0)]
        return Syscalls.retrying("poll") { poll(&descriptors, 2, milliseconds) }.map { _ in
            // An error or hang-up on the inotify descriptor is reported by the read that
            // follows; on the channel it cannot happen while this end holds the other.
            Readiness(events: descriptors[0].revents != 0, woken: descriptors[1].revents != 0)
        }
    }

    package func close() {
        try? receiver.close()
        try? sender.close()
    }
}
