#if canImport(Glibc)
import Glibc
#endif
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SystemPackage
@_spi(Backend) import WormholeCore

/// One inotify instance: the kernel calls the engine needs, over a descriptor created
/// close-on-exec. Its reader thread waits in `poll` (on this descriptor and on a
/// ``WakeChannel``), then reads what is there.
package struct Inotify: Sendable {
    package let descriptor: FileDescriptor

    /// The corresponding C function is `inotify_init1(IN_CLOEXEC)`.
    package init() throws(WormholeError) {
        let raw = inotify_init1(Int32(IN_CLOEXEC))
        guard raw >= 0 else {
            let errno = Errno(rawValue: Glibc.errno)
            if errno == .tooManyOpenFiles {
                throw WormholeError(.notificationLimitReached,
                    "cannot create an inotify instance: this user has reached the limit of inotify instances (\(Self.limitDescription("max_user_instances"))) or the process its descriptor limit; close other programs that watch files, or raise the limit",
                    errno: errno)
            }
            throw WormholeError.system("create an inotify instance", errno)
        }
        descriptor = FileDescriptor(rawValue: raw)
    }

    /// Watches `path` for `mask`; returns the watch descriptor. The corresponding C
    /// function is `inotify_add_watch`.
    package func addWatch(_ path: String, mask: UInt32) throws(WormholeError) -> Int32 {
        let watch = inotify_add_watch(descriptor.rawValue, path, mask)
        if watch >= 0 { return watch }
        let errno = Errno(rawValue: Glibc.errno)
        switch errno {
        case .noSpace:
            throw WormholeError(.notificationLimitReached,
                "cannot watch '\(path)': this user has reached the limit of inotify watches (\(Self.limitDescription("max_user_watches")))",
                path: path, errno: errno)
        case .noSuchFileOrDirectory:
            throw WormholeError(.containerUnavailable, "cannot watch '\(path)': it does not exist", path: path, errno: errno)
        default:
            throw WormholeError.system("watch", errno, path: path)
        }
    }

    /// The corresponding C function is `inotify_rm_watch`; the kernel queues IN_IGNORED.
    package func removeWatch(_ watch: Int32) {
        _ = inotify_rm_watch(descriptor.rawValue, watch)
    }

    /// Reads the events that arrived into `buffer` (blocking until some do); the byte
    /// count. The corresponding C function is `read`.
    package func read(into buffer: UnsafeMutableRawPointer, capacity: Int) -> Result<Int, Errno> {
        Syscalls.retrying("read(inotify)") { Glibc.read(descriptor.rawValue, buffer, capacity) }
    }

    package func close() { try? descriptor.close() }

    /// The limit in force, named as the sysctl that raises it: inside a user namespace
    /// the per-namespace `user.max_inotify_*` can be lower than `fs.inotify.*`.
    package static func limitDescription(_ name: String) -> String {
        func value(_ path: String) -> Int? {
            guard let fd = try? FileDescriptor.open(FilePath(path), .readOnly) else { return nil }
            defer { try? fd.close() }
            var bytes = [UInt8](repeating: 0, count: 32)
            let count = (try? bytes.withUnsafeMutableBytes { try fd.read(into: $0) }) ?? 0
            return Int(String(decoding: bytes[..<count], as: UTF8.self).filter { !$0.isWhitespace })
        }
        let namespaceName = name.hasPrefix("max_user_") ? "max_inotify_" + name.dropFirst("max_user_".count) : name
        let global = value("/proc/sys/fs/inotify/\(name)")
        let namespace = value("/proc/sys/user/\(namespaceName)")
        if let namespace, global == nil || namespace < global! {
            return "user.\(namespaceName) = \(namespace); raise it with 'sysctl -w user.\(namespaceName)=N'"
        }
        return "fs.inotify.\(name) = \(global.map(String.init) ?? "?"); raise it with 'sysctl -w fs.inotify.\(name)=N'"
    }
}
