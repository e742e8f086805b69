#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
import Synchronization

/// An open container directory: every file of the container is reached through this
/// one descriptor, never by a path that could be redirected.
///
/// The directory is opened with `O_DIRECTORY | O_NOFOLLOW` relative to its parent, after
/// `.` and trailing slashes are removed from the path (so `/link/.` cannot pass for the
/// directory behind `link`), and is then checked on the open descriptor: owned by this
/// user, no access for other users, and a parent that other users cannot use to replace
/// it (not writable by them, or sticky). Files are opened with `openat` and
/// `O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC`, and only regular files are used: a symbolic
/// link, a FIFO or a device in the container is an error, never followed, never waited on.
///
/// When the directory at the path is replaced (moved away and made again, deleted and
/// recreated), ``refresh()`` opens the new one, with the same checks.
final class ContainerDirectory: Sendable {
    /// The absolute path, normalised.
    let path: String
    private let state: Locked<State>

    private struct State {
        var descriptor: FileDescriptor
        var device: UInt64
        var inode: UInt64
        /// Bumped each time the directory is opened anew.
        var generation: UInt64
    }

    /// Opens (creating with mode 0700, and its parents when `createParents`) and checks
    /// the directory at `path`.
    init(path: String, createParents: Bool = true) throws(WormholeError) {
        let normalized = try Self.normalize(path)
        self.path = normalized
        let (descriptor, status) = try Self.open(normalized, createParents: createParents)
        state = Locked(State(descriptor: descriptor, device: UInt64(status.deviceID.rawValue), inode: UInt64(status.inode.rawValue), generation: 1))
    }

    deinit {
        state.withLock { try? $0.descriptor.close() }
    }

    /// The descriptor and its generation. The descriptor stays open until the directory
    /// is refreshed and the last user of it is done: callers use it within one call.
    var current: (descriptor: FileDescriptor, generation: UInt64) {
        state.withLock { ($0.descriptor, $0.generation) }
    }

    /// Whether the directory at ``path`` is still the one this descriptor holds; if not
    /// (or it is gone), opens the one there now (creating it when missing). Returns the
    /// new generation when it changed. Costs one `fstatat`; used after inotify says the
    /// directory went away, never on the hot path.
    @discardableResult
    func refresh(create: Bool = true) throws(WormholeError) -> UInt64? {
        let status = try? Syscalls.linkStatus(path).get()
        let held = state.withLock { ($0.device, $0.inode) }
        if let status, UInt64(status.deviceID.rawValue) == held.0 && UInt64(status.inode.rawValue) == held.1 { return nil }
        if status == nil && !create { return nil }
        let (descriptor, opened) = try Self.open(path, createParents: true)
        return state.withLock { state -> UInt64 in
            // Descriptors of the old directory may be in use by another thread's call:
            // it is kept open until this object goes (at most one per refresh).
            retired.withLock { $0.append(state.descriptor) }
            state.descriptor = descriptor
            state.device = UInt64(opened.deviceID.rawValue)
            state.inode = UInt64(opened.inode.rawValue)
            state.generation += 1
            return state.generation
        }
    }

    private let retired = Locked<[FileDescriptor]>([])

    // MARK: - Files in the container

    /// How ``openFile(_:_:create:)`` opens a file.
    enum Access {
        case readOnly, readWrite
    }

    /// Opens the regular file `name` in the container: `O_NOFOLLOW | O_NONBLOCK |
    /// O_CLOEXEC`, then `fstat` to refuse anything that is not a regular file. `nil`
    /// when it does not exist (and `create` is false).
    func openFile(_ name: String, _ access: Access, create: Bool = false) throws(WormholeError) -> (FileDescriptor, Stat)? {
        let mode: Syscalls.OpenMode = create ? .createOrOpen : access == .readOnly ? .read : .readWrite
        let fd: FileDescriptor
        switch Syscalls.open(name, in: current.descriptor, mode) {
        case .success(let opened): fd = opened
        case .failure(.noSuchFileOrDirectory) where !create: return nil
        case .failure(let errno): throw fileError(name, errno)
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
        return (fd, status)
    }

    /// Creates `name` exclusively with mode 0600 after removing a leftover of that name
    /// (a link someone planted there is removed, never written through).
    func createExclusive(_ name: String) throws(WormholeError) -> FileDescriptor {
        let directory = current.descriptor
        for _ in 0..<4 {
            Syscalls.remove(name, in: directory)
            switch Syscalls.open(name, in: directory, .createExclusive) {
            case .success(let fd): return fd
            case .failure(.fileExists): continue
            case .failure(let errno): throw fileError(name, errno)
            }
        }
        throw WormholeError(.containerInsecure, "'\(filePath(name))' keeps reappearing while Wormhole creates it; another process is interfering with the container", path: filePath(name))
    }

    /// `renameat` within the container.
    func rename(_ from: String, to: String) -> Result<Void, Errno> {
        Syscalls.rename(from, to: to, in: current.descriptor)
    }

    /// `unlinkat` within the container.
    func remove(_ name: String, directory isDirectory: Bool = false) -> Result<Void, Errno> {
        Syscalls.remove(name, in: current.descriptor, flags: isDirectory ? AT_REMOVEDIR : 0)
    }

    /// Creates the sub-directory `name` (0700) if missing and checks it like the
    /// container; returns it opened.
    func subdirectory(_ name: String) throws(WormholeError) -> FileDescriptor {
        let directory = current.descriptor
        _ = Syscalls.makeDirectory(name, in: directory)
        switch Syscalls.open(name, in: directory, .directory) {
        case .success(let fd):
            do throws(WormholeError) {
                try Self.checkOwnership(fd, path: filePath(name))
            } catch {
                try? fd.close()
                throw error
            }
            return fd
        case .failure(let errno):
            throw fileError(name, errno)
        }
    }

    /// Names in the container, without `.` and `..`.
    func entries() throws(WormholeError) -> [String] {
        try Syscalls.directoryEntries(at: current.descriptor, name: ".").orThrow("list", path: path)
    }

    func filePath(_ name: String) -> String { path + "/" + name }

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

    /// The absolute path without `.` components, repeated or trailing slashes; `..` is
    /// refused, since it would make the last component something other than what the
    /// path names.
    static func normalize(_ path: String) throws(WormholeError) -> String {
        let absolute = path.hasPrefix("/") ? path : Syscalls.currentDirectory() + "/" + path
        var components: [Substring] = []
        for component in absolute.split(separator: "/", omittingEmptySubsequences: true) {
            if component == "." { continue }
            if component == ".." {
                throw WormholeError(.containerUnavailable,
                    "container path '\(path)' contains '..'; give the directory's path without it", path: path)
            }
            components.append(component)
        }
        return "/" + components.joined(separator: "/")
    }

    /// Opens the directory at the normalised `path` through its parent, creating what is
    /// missing, and checks it.
    static func open(_ path: String, createParents: Bool) throws(WormholeError) -> (FileDescriptor, Stat) {
        guard path != "/" else {
            throw WormholeError(.containerInsecure, "the root directory cannot be a container; choose a directory of your own", path: path)
        }
        let slash = path.lastIndex(of: "/")!
        let parentPath = slash == path.startIndex ? "/" : String(path[..<slash])
        let name = String(path[path.index(after: slash)...])
        var parent = Syscalls.retrying("open(parent)") { Glibc.open(parentPath, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        if case .failure(.noSuchFileOrDirectory) = parent, createParents {
            try createAncestors(of: path)
            parent = Syscalls.retrying("open(parent)") { Glibc.open(parentPath, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        }
        let parentFD: FileDescriptor
        switch parent {
        case .success(let value): parentFD = FileDescriptor(rawValue: value)
        case .failure(let errno): throw unavailable(path, errno)
        }
        defer { try? parentFD.close() }
        _ = Syscalls.makeDirectory(name, in: parentFD)
        let fd: FileDescriptor
        switch Syscalls.open(name, in: parentFD, .directory) {
        case .success(let opened): fd = opened
        case .failure(.tooManySymbolicLinkLevels), .failure(.notDirectory):
            if (try? FilePath(name).stat(relativeTo: parentFD, flags: .symlinkNoFollow))?.isSymbolicLink == true {
                throw symbolicLinkRefused(path)
            }
            throw WormholeError(.containerInsecure, "container '\(path)' is not a directory; move that file away", path: path)
        case .failure(let errno):
            throw unavailable(path, errno)
        }
        do throws(WormholeError) {
            let status = try checkOwnership(fd, path: path)
            try checkParent(parentFD, parentPath: parentPath, path: path)
            return (fd, status)
        } catch {
            try? fd.close()
            throw error
        }
    }

    /// Checks on the open descriptor that the directory is owned by this user and that
    /// no other user may write to it.
    @discardableResult
    static func checkOwnership(_ fd: FileDescriptor, path: String) throws(WormholeError) -> Stat {
        let status = try Syscalls.status(fd).orThrow("inspect", path: path)
        try checkOwnership(status, path: path)
        return status
    }

    /// The error for a container path that is a symbolic link.
    static func symbolicLinkRefused(_ path: String) -> WormholeError {
        WormholeError(.containerInsecure,
            "container '\(path)' is a symbolic link; Wormhole refuses it so that no one can redirect messages. Remove the link or pass the real directory",
            path: path)
    }

    /// The checks of ``checkOwnership(_:path:)`` on a status already taken (by `fstat`
    /// on a descriptor, or `lstat` on a path that is not a link).
    static func checkOwnership(_ status: Stat, path: String) throws(WormholeError) {
        guard status.isDirectory else {
            throw WormholeError(.containerInsecure, "container '\(path)' is not a directory; move that file away", path: path)
        }
        let me = Syscalls.effectiveUserID
        if status.userID.rawValue != me {
            throw WormholeError(.containerInsecure,
                "container '\(path)' belongs to user \(status.userID.rawValue), not to this user (\(me)); another user may have created it to read your messages. Remove it, or choose another directory",
                path: path)
        }
        if status.modeBits & 0o022 != 0 {
            let mode = String(status.modeBits, radix: 8)
            throw WormholeError(.containerInsecure,
                "container '\(path)' has mode \(mode): other users may write to it. Run 'chmod go-w \(path)' or choose another directory",
                path: path)
        }
    }

    /// A parent that another user may write to, without the sticky bit, lets that user
    /// rename the container away and put one of hers in its place; so does a parent that
    /// another user owns, sticky or not (the sticky bit lets a directory's owner rename
    /// any entry). Refused, unless the parent is owned by this user or root, and others
    /// may write to it only with the sticky bit (`/tmp`, `/dev/shm`).
    static func checkParent(_ parent: FileDescriptor, parentPath: String, path: String) throws(WormholeError) {
        let status = try Syscalls.status(parent).orThrow("inspect", path: parentPath)
        let sticky = status.permissions.contains(.saveText)
        let othersMayWrite = status.modeBits & 0o022 != 0
        let ownedBySomeoneElse = status.userID.rawValue != Syscalls.effectiveUserID && status.userID.rawValue != 0
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

    private static func createAncestors(of path: String) throws(WormholeError) {
        var prefix = ""
        for component in path.split(separator: "/").dropLast() {
            prefix += "/" + component
            switch Syscalls.makeDirectory(prefix) {
            case .success, .failure(.fileExists): continue
            case .failure(let errno): throw unavailable(prefix, errno)
            }
        }
    }

    static func unavailable(_ path: String, _ errno: Errno) -> WormholeError {
        WormholeError(.containerUnavailable, "cannot create or open container '\(path)': \(errno.description)", path: path, errno: errno)
    }
}

extension Stat {
    /// "a FIFO", "a directory", ... for error messages.
    var kindDescription: String {
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
