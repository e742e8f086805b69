#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
@_spi(Backend) import WormholeCore

/// Who may use a container: one Unix user, or the members of one Unix group (an
/// application group shared by `wormhole share`, Protocol.md §4).
///
/// | | owner | mode | files | sub-directories |
/// |---|---|---|---|---|
/// | personal | this user | no write for others (`mode & 0o022 == 0`), 0700 when created | 0600 | 0700 |
/// | shared | root (or this user) | setgid, group `rwx`, nothing for others: `2770` | 0660 | 2770 |
///
/// A shared container's group must be one of this process's groups (root may use any),
/// and its parent must be root's (or this user's) and writable by its owner alone (Protocol.md §4): members may
/// then pass, read, listen and compact, but cannot rename the container or put another
/// in its place, and other users cannot even list it. New files and directories get
/// their mode with `fchmod` before they have their name (``ContainerDirectory``), so
/// that a member's umask cannot take the group's access away, not even from a member
/// killed in between, and the group from the setgid directory.
package enum ContainerAccess: Sendable, Hashable {
    /// Private to the user that owns it.
    case personal
    /// Shared by the members of the Unix group `groupID`.
    case shared(groupID: UInt32)

    /// The mode of the files Wormhole makes in the container.
    package var fileMode: mode_t {
        switch self {
        case .personal: 0o600
        case .shared: 0o660
        }
    }

    /// The mode of the directories Wormhole makes in the container (`.listeners`, ...).
    package var directoryMode: mode_t {
        switch self {
        case .personal: 0o700
        case .shared: 0o2770
        }
    }

    /// The access the container `status` (taken with `fstat` or `lstat`) gives this
    /// process, or an error that says why it may not be used.
    ///
    /// Inside a user namespace other than the initial one (a sandbox), an owner that is
    /// not mapped into it shows as the overflow uid (``UserNamespace``): root's shared
    /// container and another user's look alike. Such a directory is taken as the owner
    /// it may be (root for a shared one, this user for a personal one) when what can
    /// still be checked holds: it has the mode the container must have, and this process
    /// may read, write and search it (`faccessat` with the effective ids, of `opened`, the
    /// directory's own descriptor, when given, else of `path`). A group that shows as the
    /// overflow gid is checked the same way, by the kernel's decision rather than by the
    /// process's group list. Outside a user namespace nothing of this applies.
    package static func of(_ status: Stat, path: String, opened: FileDescriptor? = nil) throws(WormholeError) -> ContainerAccess {
        guard status.isDirectory else {
            throw WormholeError(.containerInsecure, "container '\(path)' is not a directory; move that file away", path: path)
        }
        let me = Syscalls.effectiveUserID
        let owner = status.userID.rawValue
        let mode = status.modeBits
        let sharedMode = mode & 0o2070 == 0o2070 && mode & 0o007 == 0
        let personalMode = mode & 0o022 == 0
        // What the kernel lets this process do with it, asked only where an id cannot be seen.
        func usable() -> Bool {
            opened.map { UserNamespace.usable($0, name: ".") } ?? UserNamespace.usable(nil, name: path)
        }
        if owner == me && personalMode { return .personal }
        let hiddenOwner = owner != me && UserNamespace.hidesOwner(owner)
        if hiddenOwner && (personalMode || sharedMode) && !usable() {
            throw WormholeError(.containerInsecure,
                "container '\(path)' belongs to \(UserNamespace.ownerDescription(owner)), has mode \(String(mode, radix: 8)), and this process may not read, write and search it: the sandbox bound a directory that is not this user's, nor of a Unix group this user is in. Bind the group's own container (Docs/Sandboxes.md)",
                path: path)
        }
        if hiddenOwner && personalMode { return .personal }
        if sharedMode && (owner == me || owner == 0 || hiddenOwner) {
            let group = status.groupID.rawValue
            // A group that cannot be seen cannot be looked up in this process's groups
            // (unmapped supplementary groups all show as the overflow gid): the kernel decides.
            guard me == 0 || (UserNamespace.hidesGroup(group) ? usable() : Syscalls.isMember(ofGroup: group)) else {
                throw WormholeError(.containerInsecure,
                    "container '\(path)' is shared with Unix group \(Syscalls.groupName(group)) (gid \(group)), and this user (uid \(me)) is not a member: ask an administrator to add it ('usermod -aG \(Syscalls.groupName(group)) \(Syscalls.userName(me))'), then log in again",
                    path: path)
            }
            return .shared(groupID: group)
        }
        if hiddenOwner {
            throw WormholeError(.containerInsecure,
                "container '\(path)' belongs to \(UserNamespace.ownerDescription(owner)) and has mode \(String(mode, radix: 8)), neither a personal container's (no write for group or others) nor a shared one's (setgid, group rwx, nothing for others): the sandbox bound a directory that is not a container. Bind the group's own container (Docs/Sandboxes.md)",
                path: path)
        }
        if owner != me {
            throw WormholeError(.containerInsecure,
                "container '\(path)' belongs to user \(owner), not to this user (\(me)); another user may have created it to read your messages. Remove it, or choose another directory. To share a group between users, an administrator runs 'wormhole share GROUP --unix-group NAME'",
                path: path)
        }
        throw WormholeError(.containerInsecure,
            "container '\(path)' has mode \(String(mode, radix: 8)): other users may write to it. Run 'chmod go-w \(path)' or choose another directory; to share a group between users, an administrator runs 'wormhole share GROUP --unix-group NAME'",
            path: path)
    }

    /// Checks a directory Wormhole made in the container (`.listeners`, its
    /// sub-directories): in a personal container owned by this user with no write for
    /// others; in a shared one, the container's group and nothing for others.
    package func checkSubdirectory(_ status: Stat, path: String) throws(WormholeError) {
        switch self {
        case .personal:
            guard try Self.of(status, path: path) == .personal else {
                throw WormholeError(.containerInsecure, "'\(path)' is shared with a group, but its container is private to this user; remove it", path: path)
            }
        case .shared(let group):
            guard status.isDirectory else {
                throw WormholeError(.containerInsecure, "'\(path)' is not a directory; move that file away", path: path)
            }
            if status.groupID.rawValue != group || status.modeBits & 0o002 != 0 {
                throw WormholeError(.containerInsecure,
                    "'\(path)' has group \(status.groupID.rawValue) and mode \(String(status.modeBits, radix: 8)), but its shared container has group \(group) and gives others nothing; remove it",
                    path: path)
            }
        }
    }

    /// Gives a file or directory of the container the container's mode, in a shared
    /// container, when it lacks it and this process may change it (it is this user's, or
    /// this process is root's): one that a member killed before it gave it that mode left
    /// (earlier versions made files before giving them their mode), or that a `chmod`
    /// changed. Nothing in a personal one, where the umask can only take access
    /// away. Costs one `fchmod`, only when needed.
    package func settle(_ fd: FileDescriptor, status: Stat? = nil, directory: Bool = false) {
        guard case .shared = self else { return }
        let wanted = directory ? directoryMode : fileMode
        if let status {
            let me = Syscalls.effectiveUserID
            if status.modeBits == wanted || (status.userID.rawValue != me && me != 0) { return }
        }
        _ = Syscalls.changeMode(fd, to: wanted)
    }

    /// Why this process may not use `path`, a file or directory of a shared container
    /// whose status is `status`: another member's user made it and did
    /// not give it the group's access (it was killed before its `fchmod`, or ran an
    /// earlier Wormhole). Says which user, and what that user, root, or any member must do.
    package func refusal(_ status: Stat, path: String, errno: Errno) -> WormholeError {
        guard case .shared(let group) = self else { return WormholeError.system("open", errno, path: path) }
        let owner = status.userID.rawValue
        let wanted = String(status.isDirectory ? directoryMode : fileMode, radix: 8)
        if UserNamespace.hidesOwner(owner) {
            // Inside a sandbox: the owner cannot be named, nor asked to repair it from here.
            return WormholeError(.containerInsecure,
                "'\(path)' belongs to \(UserNamespace.ownerDescription(owner)) and has mode \(String(status.modeBits, radix: 8)), so this process may not use it: its owner's next Wormhole process outside the sandbox repairs it, or its owner or root runs 'chmod \(wanted)' on it outside the sandbox",
                path: path, errno: errno)
        }
        let user = Syscalls.userName(owner)
        return WormholeError(.containerInsecure,
            "'\(path)' belongs to user \(user) (uid \(owner)) and has mode \(String(status.modeBits, radix: 8)), so the other members of Unix group \(Syscalls.groupName(group)) may not use it (a process of \(user)'s ended before it gave it the group's access, or an earlier Wormhole made it). \(user)'s next Wormhole process there repairs it; or \(user) or root runs 'chmod \(wanted) \(path)'" + (status.isDirectory ? "" : ", or a member removes it (what it holds is lost)"),
            path: path, errno: errno)
    }

    /// A parent that another user may write to, without the sticky bit, lets that user
    /// rename the container away and put one of hers in its place; so does a parent that
    /// another user owns, sticky or not (the sticky bit lets a directory's owner rename
    /// any entry). Refused, unless the parent is owned by this user or root, and others
    /// may write to it only with the sticky bit (`/tmp`, `/dev/shm`). A shared
    /// container's parent must not be writable by anyone but its owner, root: a member
    /// could otherwise rename the container away.
    package func checkParent(_ status: Stat, parentPath: String, path: String) throws(WormholeError) {
        let sticky = status.permissions.contains(.saveText)
        let othersMayWrite = status.modeBits & 0o022 != 0
        // An owner hidden by a user namespace (``UserNamespace``) cannot be checked: the
        // sandbox that bound the container vouches for it; the modes are still checked.
        let ownedBySomeoneElse = status.userID.rawValue != Syscalls.effectiveUserID && status.userID.rawValue != 0
            && !UserNamespace.hidesOwner(status.userID.rawValue)
        if case .shared = self, othersMayWrite || ownedBySomeoneElse {
            throw WormholeError(.containerInsecure,
                "the parent of shared container '\(path)', '\(parentPath)', has owner \(status.userID.rawValue) and mode \(String(status.modeBits, radix: 8)): a member could replace the container. A shared container's parent is root's and writable by its owner alone; 'wormhole share' makes one",
                path: parentPath)
        }
        if othersMayWrite && !sticky {
            throw WormholeError(.containerInsecure,
                "the parent of container '\(path)', '\(parentPath)', has mode \(String(status.modeBits, radix: 8)) without the sticky bit: another user could replace the container with one of hers. Run 'chmod +t \(parentPath)' or 'chmod go-w \(parentPath)', or choose another directory",
                path: parentPath)
        }
        if ownedBySomeoneElse {
            throw WormholeError(.containerInsecure,
                "the parent of container '\(path)', '\(parentPath)', belongs to user \(status.userID.rawValue): that user could replace the container. Choose a directory under one of your own",
                path: parentPath)
        }
    }
}
