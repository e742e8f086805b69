#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
@_spi(Backend) import WormholeCore

/// What this process can and cannot tell about the owners of files from inside a user
/// namespace (a sandbox such as Flatpak, or `bwrap --unshare-user`).
///
/// Inside a user namespace other than the initial one, a file whose owner (or group) is
/// not mapped into it shows the overflow id, `/proc/sys/kernel/overflowuid` (or
/// `overflowgid`), 65534 by default: root's shared containers, and files other members
/// made, look alike and look like the user `nobody`'s. Their owner cannot be checked from
/// inside. ``ContainerAccess`` then checks what can be: the mode, and that the kernel lets
/// this process read, write and search the directory (``usable(_:name:)``); the owner is
/// vouched for by whoever bound the directory into the sandbox (Security.md,
/// "Sandboxes: user namespaces"). In the initial user namespace (`/proc/self/uid_map` is `0 0 4294967295`)
/// every owner is seen as it is, and nothing here applies.
package enum UserNamespace {
    /// Whether this process is in a user namespace other than the initial one: its
    /// `/proc/self/uid_map` is not the single line `0 0 4294967295`. `false` when `/proc`
    /// cannot be read (a sandbox without `/proc` gets no relaxation). Read once.
    package static let isNested: Bool = {
        guard let map = read("/proc/self/uid_map") else { return false }
        let fields = map.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" })
        return fields != ["0", "0", "4294967295"]
    }()

    /// `/proc/sys/kernel/overflowuid`, read once, when it is not itself mapped into this
    /// user namespace (`/proc/self/uid_map`): only then does a file of that uid mean an
    /// owner that cannot be seen, rather than a user of the namespace (a rootless
    /// container that maps a whole range has a real `nobody`). `nil` otherwise.
    package static let overflowUserID: UInt32? = unmappedOverflow("/proc/sys/kernel/overflowuid", map: "/proc/self/uid_map")

    /// `/proc/sys/kernel/overflowgid`, read once, when it is not mapped into this user
    /// namespace (`/proc/self/gid_map`); `nil` otherwise.
    package static let overflowGroupID: UInt32? = unmappedOverflow("/proc/sys/kernel/overflowgid", map: "/proc/self/gid_map")

    /// Whether the owner `user` of a file is one that this process cannot see: it runs in
    /// a nested user namespace and `user` is the overflow uid, which it does not map.
    package static func hidesOwner(_ user: UInt32) -> Bool {
        isNested && overflowUserID == user
    }

    /// Whether the group `group` of a file is one that this process cannot see: it runs
    /// in a nested user namespace and `group` is the overflow gid, which it does not map
    /// (the group of a shared container whose Unix group is one of this process's
    /// supplementary groups, which are kept but not mapped).
    package static func hidesGroup(_ group: UInt32) -> Bool {
        isNested && overflowGroupID == group
    }

    /// The overflow id in `path`, unless one of the ranges of `map` (lines of "first id
    /// inside, first id outside, count") holds it.
    private static func unmappedOverflow(_ path: String, map: String) -> UInt32? {
        guard let overflow = read(path).flatMap({ UInt64($0.filter { !$0.isWhitespace }) }), overflow <= UInt32.max,
              let ranges = read(map) else { return nil }
        for line in ranges.split(separator: "\n") {
            let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" }).compactMap { UInt64($0) }
            if fields.count == 3 && fields[0] <= overflow && overflow < fields[0] + fields[2] { return nil }
        }
        return UInt32(overflow)
    }

    /// Whether this process may read, write and search the directory `name` in
    /// `directory` (`"."` for `directory` itself), as the kernel decides with the
    /// effective ids and every group the process holds, mapped or not. The corresponding
    /// C function is `faccessat` with `AT_EACCESS | AT_SYMLINK_NOFOLLOW`.
    package static func usable(_ directory: FileDescriptor?, name: String) -> Bool {
        faccessat(directory?.rawValue ?? AT_FDCWD, name, R_OK | W_OK | X_OK, AT_EACCESS | AT_SYMLINK_NOFOLLOW) == 0
    }

    /// A sentence that says why `user` cannot be named, for error messages.
    package static func ownerDescription(_ user: UInt32) -> String {
        "a user not mapped into this user namespace (uid \(user) is the overflow uid, /proc/sys/kernel/overflowuid: the owner cannot be seen from inside a sandbox)"
    }

    private static func read(_ path: String) -> String? {
        guard let fd = try? FileDescriptor.open(FilePath(path), .readOnly, options: .closeOnExec) else { return nil }
        defer { try? fd.close() }
        var bytes = [UInt8](repeating: 0, count: 4096)
        guard let count = try? bytes.withUnsafeMutableBytes({ try fd.read(into: $0) }), count > 0 else { return nil }
        return String(decoding: bytes[..<count], as: UTF8.self)
    }
}
