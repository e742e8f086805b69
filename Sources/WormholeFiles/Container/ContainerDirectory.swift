#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
import Synchronization
@_spi(Backend) import WormholeCore

/// An open container directory: every file of the container is reached through this
/// one descriptor, never by a path that could be redirected.
///
/// The directory is opened with `O_DIRECTORY | O_NOFOLLOW` relative to its parent, after
/// the path is normalised once (``ContainerPath``), and is then checked on the open
/// descriptor: private to this user, or shared by a Unix group this process belongs to
/// (``ContainerAccess``), and a parent that other users cannot use to replace it. Files are opened with `openat` and
/// `O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC`, and only regular files are used: a symbolic
/// link, a FIFO or a device in the container is an error, never followed, never waited on.
///
/// When the directory at the path is replaced (moved away and made again, deleted and
/// recreated), ``refresh()`` opens the new one, with the same checks.
package final class ContainerDirectory: Sendable {
    /// The absolute path, normalised.
    package let path: String
    private let location: ContainerPath
    private let state: Locked<State>

    private struct State {
        var descriptor: FileDescriptor
        var access: ContainerAccess
        var device: UInt64
        var inode: UInt64
        /// Bumped each time the directory is opened anew.
        var generation: UInt64
    }

    /// Opens (creating with mode 0700 when `create`, and its parents when
    /// `createParents`) and checks the directory at `path`. Without `create`, a missing
    /// directory is ``WormholeError/Code/containerUnavailable`` with `ENOENT`.
    package init(path: String, create: Bool = true, createParents: Bool = true) throws(WormholeError) {
        let location = try ContainerPath(path)
        self.location = location
        self.path = location.description
        let (descriptor, status, access) = try Self.open(location, create: create, createParents: createParents && create)
        state = Locked(State(descriptor: descriptor, access: access, device: UInt64(status.deviceID.rawValue), inode: UInt64(status.inode.rawValue), generation: 1))
        // Shared, in a parent that is not: root made it (`wormhole share`), and only root
        // removes it (`--revoke`) or makes it again.
        if case .shared = access, case .success(let parent) = Syscalls.linkStatus(location.parent),
           case .shared? = try? ContainerAccess.of(parent, path: location.parent) {
            sharedByRoot = false
        } else if case .shared = access {
            sharedByRoot = true
        } else {
            sharedByRoot = false
        }
    }

    /// Whether this is a shared container that root made (`wormhole share`), rather than
    /// a directory inside one: members can neither remove nor make it.
    private let sharedByRoot: Bool

    /// When this is a shared container that root made and it is gone (`wormhole share
    /// --revoke` removed it, with its messages), the error that says so: nothing will be
    /// passed here again, and no member can make it again, so listeners end with it
    /// rather than wait in a deleted directory, and passes fail with it rather than make
    /// a directory in its place. `nil` otherwise (a personal container that was removed
    /// is made again by the next pass, and its listeners follow). One `lstat`.
    package func revocation() -> WormholeError? {
        guard sharedByRoot, case .failure(.noSuchFileOrDirectory) = Syscalls.linkStatus(path) else { return nil }
        return WormholeError(.containerUnavailable,
            "the shared container '\(path)' was removed ('wormhole share --revoke' stops sharing a group, and removes its messages): nothing will be passed here again, and only root can share the group again. Processes started now use their own containers ('wormhole doctor' shows which): start this one again",
            path: path, errno: .noSuchFileOrDirectory)
    }

    /// Who may use the container: this user, or a Unix group's members.
    package var access: ContainerAccess { state.withLock { $0.access } }

    deinit {
        try? state.withLock { $0.descriptor }.close()
    }

    /// The descriptor and its generation. The descriptor stays open until the directory
    /// is refreshed and the last user of it is done: callers use it within one call.
    package var current: (descriptor: FileDescriptor, generation: UInt64) {
        state.withLock { ($0.descriptor, $0.generation) }
    }

    /// Whether the directory at ``path`` is still the one this descriptor holds; if not
    /// (or it is gone), opens the one there now (creating it when missing). Returns the
    /// new generation when it changed. Costs one `fstatat`; used after inotify says the
    /// directory went away, never on the hot path.
    @discardableResult
    package func refresh(create: Bool = true) throws(WormholeError) -> UInt64? {
        let status = try? Syscalls.linkStatus(path).get()
        let held = state.withLock { ($0.device, $0.inode) }
        if let status, UInt64(status.deviceID.rawValue) == held.0 && UInt64(status.inode.rawValue) == held.1 { return nil }
        if status == nil && !create { return nil }
        if status == nil, let revoked = revocation() { throw revoked }
        let (descriptor, opened, access) = try Self.open(location, create: create, createParents: create)
        let changed = state.withLock { state -> (generation: UInt64, old: FileDescriptor)? in
            // Another thread opened this same directory meanwhile: one generation per
            // directory, or what is made again in a new one (a claim) is made twice.
            if UInt64(opened.deviceID.rawValue) == state.device && UInt64(opened.inode.rawValue) == state.inode {
                return nil
            }
            let old = state.descriptor
            state.descriptor = descriptor
            state.access = access
            state.device = UInt64(opened.deviceID.rawValue)
            state.inode = UInt64(opened.inode.rawValue)
            state.generation += 1
            return (state.generation, old)
        }
        guard let changed else {
            try? descriptor.close()
            return nil
        }
        // Descriptors of the old directory may be in use by another thread's call: it is
        // kept open until this object goes (at most one per refresh). Kept after the
        // state's lock, not under it: no lock is taken under another.
        retired.withLock { $0.append(changed.old) }
        return changed.generation
    }

    private let retired = Locked<[FileDescriptor]>([])

    // MARK: - Files in the container

    /// How ``openFile(_:_:create:)`` opens a file.
    package enum Access {
        case readOnly, readWrite
    }

    /// Opens the regular file `name` in the container: `O_NOFOLLOW | O_NONBLOCK |
    /// O_CLOEXEC`, then `fstat` to refuse anything that is not a regular file. `nil`
    /// when it does not exist (and `create` is false).
    package func openFile(_ name: String, _ access: Access, create: Bool = false) throws(WormholeError) -> (FileDescriptor, Stat)? {
        let sharing = self.access
        let directory = current.descriptor
        let fd: FileDescriptor
        if create, case .shared = sharing {
            // Made with its mode before it has its name (``createFile(_:in:)``): a member
            // killed in between leaves nothing another member cannot open.
            fd = try openOrPublish(name, in: directory, sharing)
        } else {
            let mode: Syscalls.OpenMode = create ? .createOrOpen : access == .readOnly ? .read : .readWrite
            switch Syscalls.open(name, in: directory, mode, permissions: sharing.fileMode) {
            case .success(let opened): fd = opened
            case .failure(.noSuchFileOrDirectory) where !create: return nil
            case .failure(.permissionDenied) where sharing != .personal:
                throw refusal(name, in: directory, path: filePath(name), errno: .permissionDenied)
            case .failure(let errno): throw fileError(name, errno)
            }
        }
        let status: Stat
        switch Syscalls.status(fd) {
        case .success(let value):
            status = value
        case .failure(let errno):
            try? fd.close()
            throw WormholeError.system("inspect", errno, path: filePath(name))
        }
        guard status.isRegularFile else {
            try? fd.close()
            throw WormholeError(.containerInsecure,
                "'\(filePath(name))' is not a regular file (\(status.kindDescription)); Wormhole neither reads nor waits on it. Remove it",
                path: filePath(name))
        }
        sharing.settle(fd, status: status)
        return (fd, status)
    }

    /// Opens `name` for reading and writing, or makes it (``createFile(_:in:)``) when
    /// it is missing: in a shared container, where a file must never be seen without the
    /// group's mode.
    private func openOrPublish(_ name: String, in directory: FileDescriptor, _ sharing: ContainerAccess) throws(WormholeError) -> FileDescriptor {
        for _ in 0..<4 {
            switch Syscalls.open(name, in: directory, .readWrite) {
            case .success(let fd): return fd
            case .failure(.noSuchFileOrDirectory): break
            case .failure(.permissionDenied): throw refusal(name, in: directory, path: filePath(name), errno: .permissionDenied)
            case .failure(let errno): throw fileError(name, errno)
            }
            switch createFile(name, in: directory) {
            case .success(let fd): return fd
            case .failure(.fileExists): continue     // another process made it first: open that one
            case .failure(let errno): throw fileError(name, errno)
            }
        }
        throw WormholeError(.containerInsecure, "'\(filePath(name))' keeps appearing and disappearing while Wormhole opens it; another process is interfering with the container", path: filePath(name))
    }

    /// The error for `name` in `directory` (a file or a directory of a shared container)
    /// that this process may not open: whose it is and who must repair it, when another
    /// member's user made it without the group's access.
    package func refusal(_ name: String, in directory: FileDescriptor, path: String, errno: Errno) -> WormholeError {
        guard case .success(let status) = Syscalls.status(of: name, in: directory) else { return WormholeError.system("open", errno, path: path) }
        return access.refusal(status, path: path, errno: errno)
    }

    /// Creates `name` exclusively with the container's file mode (0600, or 0660 when it
    /// is shared) after removing a leftover of that name (a link someone planted there is
    /// removed, never written through).
    package func createExclusive(_ name: String) throws(WormholeError) -> FileDescriptor {
        let directory = current.descriptor
        for _ in 0..<4 {
            Syscalls.remove(name, in: directory)
            switch createFile(name, in: directory) {
            case .success(let fd): return fd
            case .failure(.fileExists): continue
            case .failure(let errno): throw fileError(name, errno)
            }
        }
        throw WormholeError(.containerInsecure, "'\(filePath(name))' keeps reappearing while Wormhole creates it; another process is interfering with the container", path: filePath(name))
    }

    /// `renameat` within the container.
    package func rename(_ from: String, to: String) -> Result<Void, Errno> {
        Syscalls.rename(from, to: to, in: current.descriptor)
    }

    /// `unlinkat` within the container.
    package func remove(_ name: String, directory isDirectory: Bool = false) -> Result<Void, Errno> {
        Syscalls.remove(name, in: current.descriptor, flags: isDirectory ? AT_REMOVEDIR : 0)
    }

    /// Creates the file `name` in `directory` (the container or one of its
    /// sub-directories) exclusively, with the container's file mode, whatever the umask;
    /// fails with EEXIST when the name exists.
    ///
    /// In a shared container the file has the group's mode before anyone can see it: it
    /// is made without a name (`O_TMPFILE`), given its mode with `fchmod`, then linked
    /// to `name` (`linkat`, which never replaces a file). A process killed in between
    /// leaves nothing in the container. Where `O_TMPFILE` or `/proc` is missing, the file
    /// is made under a temporary name (`.<name>.<random>.making`, which no reader looks
    /// at), then linked and unlinked.
    package func createFile(_ name: String, in directory: FileDescriptor) -> Result<FileDescriptor, Errno> {
        let sharing = access
        guard case .shared = sharing else {
            return Syscalls.open(name, in: directory, .createExclusive, permissions: sharing.fileMode)
        }
        switch Syscalls.open(".", in: directory, .unnamed, permissions: sharing.fileMode) {
        case .success(let fd):
            var linked = Syscalls.changeMode(fd, to: sharing.fileMode)
            if case .success = linked { linked = Syscalls.linkOpenFile(fd, to: name, in: directory) }
            switch linked {
            case .success:
                // Opened again by its name: inotify names a file's writes after the entry it
                // was opened through, and this descriptor's has no name (a watcher of `name`
                // would never hear of them).
                defer { try? fd.close() }
                return Self.reopen(name, in: directory, sameAs: fd)
            case .failure(.noSuchFileOrDirectory) where (try? Syscalls.status(of: ".", in: directory).get()) != nil:
                try? fd.close()     // no /proc: a temporary name instead
            case .failure(let errno):
                try? fd.close()
                return .failure(errno)
            }
        case .failure:
            // A filesystem without O_TMPFILE, or a directory that was removed (ext4 says
            // EPERM then): a temporary name instead, whose failure says why.
            break
        }
        let temporary = Self.temporaryName(for: name)
        let made = Syscalls.open(temporary, in: directory, .createExclusive, permissions: sharing.fileMode)
        guard case .success(let fd) = made else { return made }
        defer { Syscalls.remove(temporary, in: directory) }
        defer { try? fd.close() }
        var linked = Syscalls.changeMode(fd, to: sharing.fileMode)
        if case .success = linked { linked = Syscalls.link(temporary, to: name, in: directory) }
        guard case .failure(let errno) = linked else { return Self.reopen(name, in: directory, sameAs: fd) }
        return .failure(errno)
    }

    /// `name` in `directory` opened for reading and writing, when it is the file `made`
    /// (EEXIST when another process replaced it meanwhile).
    private static func reopen(_ name: String, in directory: FileDescriptor, sameAs made: FileDescriptor) -> Result<FileDescriptor, Errno> {
        Syscalls.open(name, in: directory, .readWrite).flatMap { fd in
            if case .success(let opened) = Syscalls.status(fd), case .success(let original) = Syscalls.status(made),
               opened.deviceID == original.deviceID && opened.inode == original.inode {
                return .success(fd)
            }
            try? fd.close()
            return .failure(.fileExists)
        }
    }

    /// A name for what is being made as `name`, which no reader of the container looks at
    /// (it begins with a dot and ends with `.making`), unique to this call.
    package static func temporaryName(for name: String) -> String {
        "." + String(decoding: name.utf8.prefix(200), as: UTF8.self) + "." + String(UInt64.random(in: 0...UInt64.max), radix: 16) + ".making"
    }

    /// Makes the directory `name` in `parent` with `mode`, in a shared container (or
    /// for one): made under a temporary name, given its mode with `fchmod`, then renamed
    /// to `name` with `renameat2(RENAME_NOREPLACE)`, so that it is never seen at `name`
    /// without the group's access. One that exists already is fine (another process made
    /// it first; it is checked when opened). A process killed in between leaves an empty
    /// directory `.<name>.<random>.making`, which no reader looks at. Where the filesystem
    /// cannot rename without replacing, `mkdirat` then `fchmod`, as before.
    package static func publishDirectory(_ name: String, in parent: FileDescriptor, mode: mode_t, owner: (user: uid_t, group: gid_t)? = nil) -> Result<Void, Errno> {
        let temporary = temporaryName(for: name)
        switch Syscalls.makeDirectory(temporary, in: parent, permissions: mode) {
        case .success: break
        case .failure(let errno): return .failure(errno)
        }
        var settled = Syscalls.open(temporary, in: parent, .directory).flatMap { fd -> Result<Void, Errno> in
            defer { try? fd.close() }
            if let owner, fchown(fd.rawValue, owner.user, owner.group) != 0 { return .failure(Errno(rawValue: Glibc.errno)) }
            return Syscalls.changeMode(fd, to: mode)
        }
        if case .success = settled { settled = Syscalls.renameNoReplace(temporary, to: name, in: parent) }
        switch settled {
        case .success:
            return .success(())
        case .failure(.fileExists):
            Syscalls.remove(temporary, in: parent, flags: AT_REMOVEDIR)
            return .success(())
        case .failure(.noFunction), .failure(.invalidArgument):
            Syscalls.remove(temporary, in: parent, flags: AT_REMOVEDIR)
            return Syscalls.makeDirectory(name, in: parent, permissions: mode)
        case .failure(let errno):
            Syscalls.remove(temporary, in: parent, flags: AT_REMOVEDIR)
            return .failure(errno)
        }
    }

    /// Creates the sub-directory `name` of the container (0700, or 2770 when it is
    /// shared) if missing and checks it as ``ContainerAccess`` says; returns it opened.
    package func subdirectory(_ name: String) throws(WormholeError) -> FileDescriptor {
        try subdirectory(name, in: current.descriptor, path: filePath(name), create: true)!
    }

    /// The sub-directory `name` of `parent` (the container or one of its
    /// sub-directories), created when `create`, checked, opened; `nil` when it is missing
    /// and not to be created.
    package func subdirectory(_ name: String, in parent: FileDescriptor, path: String, create: Bool) throws(WormholeError) -> FileDescriptor? {
        let sharing = access
        var notMade: Errno?
        var opened = Syscalls.open(name, in: parent, .directory)
        if create, case .failure(.noSuchFileOrDirectory) = opened {
            let made = if case .shared = sharing {
                Self.publishDirectory(name, in: parent, mode: sharing.directoryMode)
            } else {
                Syscalls.makeDirectory(name, in: parent, permissions: sharing.directoryMode)
            }
            if case .failure(let errno) = made { notMade = errno }
            opened = Syscalls.open(name, in: parent, .directory)
        }
        if case .failure(.permissionDenied) = opened, case .shared = sharing {
            // A member running an earlier version may have just made it, under its umask,
            // and not yet given it the group's mode, which it does at once: look again,
            // for up to a second (a member descheduled in between, on a loaded machine).
            for _ in 0..<200 {
                usleep(5_000)
                opened = Syscalls.open(name, in: parent, .directory)
                guard case .failure(.permissionDenied) = opened else { break }
            }
        }
        switch opened {
        case .success(let fd):
            do throws(WormholeError) {
                var status = try Syscalls.status(fd).orThrow("inspect", path: path)
                if status.modeBits != sharing.directoryMode, case .shared = sharing {
                    sharing.settle(fd, status: status, directory: true)
                    status = try Syscalls.status(fd).orThrow("inspect", path: path)
                }
                try sharing.checkSubdirectory(status, path: path)
            } catch {
                try? fd.close()
                throw error
            }
            return fd
        case .failure(.noSuchFileOrDirectory) where !create:
            return nil
        case .failure(.noSuchFileOrDirectory) where notMade != nil:
            // It could not be made (a full disk, an I/O error): that is the cause, not a
            // container removed.
            throw WormholeError.system("create the directory", notMade!, path: path)
        case .failure(.permissionDenied) where sharing != .personal:
            // Another member's user made it and never gave it the group's access.
            throw refusal(name, in: parent, path: path, errno: .permissionDenied)
        case .failure(let errno):
            throw fileError(String(path.dropFirst(self.path.count + 1)), errno)
        }
    }

    /// Names in the container, without `.` and `..`.
    package func entries() throws(WormholeError) -> [String] {
        try Syscalls.directoryEntries(at: current.descriptor, name: ".").orThrow("list", path: path)
    }

    package func filePath(_ name: String) -> String { path + "/" + name }

    private func fileError(_ name: String, _ errno: Errno) -> WormholeError {
        if errno == .tooManySymbolicLinkLevels {
            return WormholeError(.containerInsecure, "'\(filePath(name))' is a symbolic link; Wormhole does not follow links in its container. Remove it", path: filePath(name), errno: errno)
        }
        if errno == .noSuchFileOrDirectory || errno == .notDirectory {
            return WormholeError(.containerUnavailable, "cannot open '\(filePath(name))': the container was removed (\(errno.description))", path: filePath(name), errno: errno)
        }
        return WormholeError.system("open", errno, path: filePath(name))
    }

    // MARK: - Opening and checking the directory

    /// Opens the directory at `path` through its parent, creating what is missing when
    /// `create`, and checks it and its parent.
    package static func open(_ path: ContainerPath, create: Bool, createParents: Bool) throws(WormholeError) -> (FileDescriptor, Stat, ContainerAccess) {
        guard !path.isRoot else {
            throw WormholeError(.containerInsecure, "the root directory cannot be a container; choose a directory of your own", path: path.description)
        }
        let parentPath = path.parent
        let parentFD = try openParent(of: path, createParents: createParents)
        defer { try? parentFD.close() }
        let parentStatus = try Syscalls.status(parentFD).orThrow("inspect", path: parentPath)
        // A directory in a shared container (an optional directory of a shared group) is
        // shared as its parent is: made 2770 with its group, usable by every member.
        let sharedParent: ContainerAccess? = switch try? ContainerAccess.of(parentStatus, path: parentPath) {
        case .shared(let group)?: .shared(groupID: group)
        default: nil
        }
        if create {
            if let sharedParent, case .failure(.noSuchFileOrDirectory) = Syscalls.status(of: path.name, in: parentFD) {
                _ = publishDirectory(path.name, in: parentFD, mode: sharedParent.directoryMode)
            } else if sharedParent == nil {
                _ = Syscalls.makeDirectory(path.name, in: parentFD, permissions: 0o700)
            }
        }
        let fd = try openDirectory(path, in: parentFD, sharedParent: sharedParent)
        do throws(WormholeError) {
            var status = try Syscalls.status(fd).orThrow("inspect", path: path.description)
            if let sharedParent {
                if status.modeBits != sharedParent.directoryMode {
                    sharedParent.settle(fd, status: status, directory: true)
                    status = try Syscalls.status(fd).orThrow("inspect", path: path.description)
                }
                try sharedParent.checkSubdirectory(status, path: path.description)
                return (fd, status, sharedParent)
            }
            let access = try ContainerAccess.of(status, path: path.description, opened: fd)
            try access.checkParent(parentStatus, parentPath: parentPath, path: path.description)
            return (fd, status, access)
        } catch {
            try? fd.close()
            throw error
        }
    }

    /// Opens the parent directory of `path`, creating it and its ancestors when missing
    /// and `createParents`; a parent this user may not enter is refused with whose it is.
    private static func openParent(of path: ContainerPath, createParents: Bool) throws(WormholeError) -> FileDescriptor {
        let parentPath = path.parent
        var parent = Syscalls.retrying("open(parent)") { Glibc.open(parentPath, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        if case .failure(.noSuchFileOrDirectory) = parent, createParents {
            try path.createAncestors()
            parent = Syscalls.retrying("open(parent)") { Glibc.open(parentPath, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        }
        switch parent {
        case .success(let value):
            return FileDescriptor(rawValue: value)
        case .failure(.permissionDenied):
            // A directory in a shared container of a group this user is not in: say so.
            if case .success(let status) = Syscalls.linkStatus(parentPath) {
                _ = try ContainerAccess.of(status, path: parentPath)
            }
            throw unavailable(path.description, .permissionDenied)
        case .failure(let errno):
            throw unavailable(path.description, errno)
        }
    }

    /// Opens the container directory `path` in its parent `parentFD`, refusing a symbolic
    /// link or a file; one this user may not enter is refused with whose it is (and, in
    /// a shared container, who must repair it).
    private static func openDirectory(_ path: ContainerPath, in parentFD: FileDescriptor,
                                      sharedParent: ContainerAccess?) throws(WormholeError) -> FileDescriptor {
        switch Syscalls.open(path.name, in: parentFD, .directory) {
        case .success(let opened):
            return opened
        case .failure(.tooManySymbolicLinkLevels), .failure(.notDirectory):
            if (try? FilePath(path.name).stat(relativeTo: parentFD, flags: .symlinkNoFollow))?.isSymbolicLink == true {
                throw symbolicLinkRefused(path.description)
            }
            throw WormholeError(.containerInsecure, "container '\(path)' is not a directory; move that file away", path: path.description)
        case .failure(.permissionDenied):
            // A shared container of a group this user is not in: say so.
            if case .success(let status) = Syscalls.linkStatus(path.description) {
                // A directory of a shared container that another member's user made
                // without the group's access: whose it is, and who must repair it.
                if let sharedParent { throw sharedParent.refusal(status, path: path.description, errno: .permissionDenied) }
                _ = try ContainerAccess.of(status, path: path.description)
            }
            throw unavailable(path.description, .permissionDenied)
        case .failure(let errno):
            throw unavailable(path.description, errno)
        }
    }

    /// The error for a container path that is a symbolic link.
    package static func symbolicLinkRefused(_ path: String) -> WormholeError {
        WormholeError(.containerInsecure,
            "container '\(path)' is a symbolic link; Wormhole refuses it so that no one can redirect messages. Remove the link or pass the real directory",
            path: path)
    }

    package static func unavailable(_ path: String, _ errno: Errno) -> WormholeError {
        if errno == .noSuchFileOrDirectory {
            return WormholeError(.containerUnavailable, "no container at '\(path)'", path: path, errno: errno)
        }
        return WormholeError(.containerUnavailable, "cannot create or open container '\(path)': \(errno.description)", path: path, errno: errno)
    }
}

extension Stat {
    /// "a FIFO", "a directory", ... for error messages.
    package var kindDescription: String {
        switch type {
        case .fifo: "a FIFO"
        case .directory: "a directory"
        case .characterSpecial: "a character device"
        case .blockSpecial: "a block device"
        case .socket: "a socket"
        case .symbolicLink: "a symbolic link"
        default: "not a regular file"
        }
    }
}
