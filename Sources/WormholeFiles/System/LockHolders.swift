#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
@_spi(Backend) import WormholeCore

/// Who holds the `flock` locks of this system, as the kernel lists them in `/proc/locks`:
/// the process that took each exclusive lock, and that process's effective user.
///
/// A running listener holds its claim (or its durable position) locked as long as it
/// runs; which process holds the lock, and as which user it runs, is the kernel's record,
/// which no process can write. The owner of the file says only which user created it, and
/// in a shared group a member can give any name to another member's file (`rename`, or a
/// hard link): `wormhole status` names the lock holder's user instead (Security.md).
package struct LockHolders {
    /// A locked file: its device as `/proc/locks` prints it, and its inode.
    private struct File: Hashable {
        let major: UInt32
        let minor: UInt32
        let inode: UInt64
    }
    private var holders: [File: Int32] = [:]
    private var byInode: [UInt64: [Int32]] = [:]

    /// The exclusive `flock` locks listed now (none when `/proc/locks` cannot be read).
    package static func current() -> LockHolders {
        var result = LockHolders()
        guard let text = read("/proc/locks") else { return result }
        for line in text.split(separator: "\n") {
            // "12: FLOCK  ADVISORY  WRITE 7094 fe:00:16221893 0 EOF" (a waiter has "->").
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard fields.count >= 6, fields[1] == "FLOCK", fields[3] == "WRITE",
                  let pid = Int32(fields[4]), pid > 0 else { continue }
            let location = fields[5].split(separator: ":")
            guard location.count == 3, let major = UInt32(location[0], radix: 16),
                  let minor = UInt32(location[1], radix: 16), let inode = UInt64(location[2]) else { continue }
            result.holders[File(major: major, minor: minor, inode: inode)] = pid
            result.byInode[inode, default: []].append(pid)
        }
        return result
    }

    /// The effective user of the process that holds `status`'s file locked exclusively;
    /// `nil` when no process this one can see does (another PID namespace's shows as
    /// none), or its user cannot be read.
    ///
    /// The device must match, unless the file is on a filesystem whose `stat` device is
    /// not the one the kernel locks on (overlayfs): then an inode locked by one process
    /// alone is taken.
    package func userID(holding status: Stat) -> UInt32? {
        let device = UInt64(status.rawValue.st_dev)
        // The user-space encoding of a device number (glibc's gnu_dev_major/minor).
        let major = UInt32(truncatingIfNeeded: ((device >> 8) & 0xFFF) | ((device >> 32) & ~UInt64(0xFFF)))
        let minor = UInt32(truncatingIfNeeded: (device & 0xFF) | ((device >> 12) & ~UInt64(0xFF)))
        let inode = UInt64(status.rawValue.st_ino)
        var pid = holders[File(major: major, minor: minor, inode: inode)]
        if pid == nil, let candidates = byInode[inode], Set(candidates).count == 1 { pid = candidates[0] }
        guard let pid, let text = Self.read("/proc/\(pid)/status") else { return nil }
        // "Uid:\t<real>\t<effective>\t<saved>\t<filesystem>"
        for line in text.split(separator: "\n") where line.hasPrefix("Uid:") {
            let ids = line.dropFirst(4).split(whereSeparator: { $0 == "\t" || $0 == " " })
            return ids.count >= 2 ? UInt32(ids[1]) : nil
        }
        return nil
    }

    /// The whole of a `/proc` file (its size is not known before it is read).
    private static func read(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16_384)
        while true {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            bytes += chunk.prefix(count)
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
