#if canImport(Glibc)
import Glibc
#endif
import SystemPackage

/// What a thread blocked in a request waits on, so that the reply's append wakes that
/// thread itself: an inotify instance of its own watching the reply log, and a
/// ``WakeChannel`` on which a reply delivered by another thread wakes it.
///
/// The process's reader thread is woken by the same append, and delivers the reply if it
/// gets there first; the waiter only spares the hop from that thread to the requester's
/// (a round trip is two wake-ups, the responder's and the requester's, not four), and
/// lets a request made on the reader thread itself (a responder or listener without a
/// queue that asks another service) be answered instead of waiting for its own thread.
/// Waiters are kept by their router and reused: three descriptors each.
final class ReplyWaiter: Sendable {
    private let inotify: Inotify
    private let channel: WakeChannel
    private let path: String
    /// The watch of the log; replaced when the log was (compaction renames a new file
    /// over it). Touched only by the thread using the waiter.
    private nonisolated(unsafe) var watch: Int32 = -1

    /// The waiter of the log at `path`; `nil` when the kernel gives no instance, channel
    /// or watch (the reader thread then delivers, as for asynchronous requests).
    init?(watching path: String) {
        guard let inotify = try? Inotify() else { return nil }
        guard let channel = try? WakeChannel() else {
            inotify.close()
            return nil
        }
        self.inotify = inotify
        self.channel = channel
        self.path = path
        // A waiter given up on is closed by its deinit.
        guard rewatch() else { return nil }
    }

    deinit { close() }

    /// Wakes the thread waiting in ``wait(milliseconds:)``, from another thread.
    func wake() { channel.wake() }

    /// Waits until the log is written, ``wake()`` is called, or `milliseconds` pass; then
    /// empties what woke it, so that the next wait blocks. Events are read before the
    /// caller reads the log: an append after that read wakes the next wait. Returns
    /// whether the log may have been replaced (an event other than a write, or none
    /// within the time: a replacement whose watch was missed): read it at its name.
    func wait(milliseconds: Int32) -> Bool {
        guard case .success(let ready) = channel.wait(alongside: inotify.descriptor, milliseconds: milliseconds) else { return true }
        if ready.woken { channel.drain() }
        guard ready.events else { return !ready.woken }
        return readEvents()
    }

    /// Reads the events that are there; any but a write means the log may have been
    /// replaced, and the path is watched again.
    private func readEvents() -> Bool {
        let capacity = 4096
        var replaced = false
        withUnsafeTemporaryAllocation(byteCount: capacity, alignment: 8) { buffer in
            guard case .success(let count) = inotify.read(into: buffer.baseAddress!, capacity: capacity) else {
                replaced = true
                return
            }
            var offset = 0
            let header = MemoryLayout<inotify_event>.size
            while offset + header <= count {
                let mask = buffer.baseAddress!.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self)
                let length = Int(buffer.baseAddress!.loadUnaligned(fromByteOffset: offset + 12, as: UInt32.self))
                if mask & UInt32(IN_MODIFY) == 0 { replaced = true }
                offset += header + length
            }
        }
        if replaced { rewatch() }
        return replaced
    }

    /// Watches the file now at the path (a new watch descriptor when it is another file).
    @discardableResult
    private func rewatch() -> Bool {
        let mask = UInt32(IN_MODIFY) | UInt32(IN_ATTRIB) | UInt32(IN_DELETE_SELF) | UInt32(IN_MOVE_SELF)
        guard let made = try? inotify.addWatch(path, mask: mask) else { return false }
        if watch >= 0, watch != made { inotify.removeWatch(watch) }
        watch = made
        return true
    }

    private func close() {
        inotify.close()
        channel.close()
    }
}
