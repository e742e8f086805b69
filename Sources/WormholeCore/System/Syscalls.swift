#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SystemPackage

/// Thin EINTR-safe wrappers over the Linux calls that swift-system does not cover.
/// Each reads `errno` immediately after the failing call.
package enum Syscalls {
    /// Runs `body`, one system call named `name`, until it does not fail with EINTR;
    /// returns its result or the errno. Every call passes through ``SystemCallFaults``,
    /// where a test can make it fail or end the process after it.
    @inline(__always)
    package static func retrying<T: BinaryInteger>(_ name: StaticString = "call", _ body: () -> T) -> Result<T, Errno> {
        while true {
            let fault = SystemCallFaults.next(name)
            if case .fail(let errno) = fault {
                if errno == .interrupted { continue }
                return .failure(errno)
            }
            let result = body()
            SystemCallFaults.after(fault)
            if result >= 0 { return .success(result) }
            let code = Glibc.errno
            if code == EINTR { continue }
            return .failure(Errno(rawValue: code))
        }
    }

    /// `pwritev` of `vectors`, through ``SystemCallFaults`` (where a short write writes
    /// half), again after EINTR.
    private static func writeVectors(_ fd: FileDescriptor, _ vectors: UnsafeMutableBufferPointer<iovec>, count: Int, at offset: Int64) -> Result<Int, Errno> {
        while true {
            let fault = SystemCallFaults.next("pwritev")
            if case .fail(let errno) = fault {
                if errno == .interrupted { continue }
                return .failure(errno)
            }
            var used = count
            if fault == .shortWrite {
                // Keep the first half of the bytes: whole vectors, then part of one.
                var keep = max(1, (0..<count).reduce(0) { $0 + vectors[$1].iov_len } / 2)
                used = 0
                while used < count && keep > 0 {
                    let length = min(keep, vectors[used].iov_len)
                    vectors[used].iov_len = length
                    keep -= length
                    used += 1
                }
            }
            let result = pwritev(fd.rawValue, vectors.baseAddress, Int32(used), off_t(offset))
            SystemCallFaults.after(fault)
            if result >= 0 { return .success(result) }
            let code = Glibc.errno
            if code == EINTR { continue }
            return .failure(Errno(rawValue: code))
        }
    }

    /// The corresponding C function is `flock`.
    package static func lock(_ fd: FileDescriptor, exclusive: Bool = true, wait: Bool = true) -> Result<Void, Errno> {
        var operation = exclusive ? LOCK_EX : LOCK_SH
        if !wait { operation |= LOCK_NB }
        return retrying("flock") { flock(fd.rawValue, operation) }.map { _ in () }
    }

    /// The corresponding C function is `flock(fd, LOCK_UN)`.
    package static func unlock(_ fd: FileDescriptor) {
        _ = retrying("flock(LOCK_UN)") { flock(fd.rawValue, LOCK_UN) }
    }

    /// The status of an open file. The corresponding C function is `fstat`.
    package static func status(_ fd: FileDescriptor) -> Result<Stat, Errno> {
        var status = stat()
        return retrying("fstat") { fstat(fd.rawValue, &status) }.map { _ in Stat(rawValue: status) }
    }

    /// How a file in a container is opened. Every mode refuses to follow a symbolic link
    /// at the name, never blocks on a FIFO or a device, and is closed on `exec`.
    package enum OpenMode {
        /// A directory, to list or to reach files through.
        case directory
        /// A file, to read.
        case read
        /// A file, to read and write.
        case readWrite
        /// A file, to read and write, created (0600) when missing.
        case createOrOpen
        /// A new file (0600); fails when the name exists.
        case createExclusive
        /// A file without a name (`O_TMPFILE`), made in the directory opened as `"."`:
        /// nobody sees it until ``Syscalls/linkOpenFile(_:to:in:)`` gives it one.
        case unnamed

        package var flags: Int32 {
            switch self {
            case .directory: O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC
            case .read: O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC
            case .readWrite: O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC
            case .createOrOpen: O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC
            case .createExclusive: O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC
            // `O_TMPFILE` is `__O_TMPFILE | O_DIRECTORY`, a macro Swift does not import;
            // `__O_TMPFILE` is 020000000 on x86-64, AArch64 and the other generic ABIs.
            case .unnamed: O_RDWR | O_NONBLOCK | O_CLOEXEC | O_DIRECTORY | 0o20000000
            }
        }
    }

    /// Opens `name` relative to the directory `directory`; a file it creates gets
    /// `permissions` less the umask. The corresponding C function is `openat`.
    package static func open(_ name: String, in directory: FileDescriptor, _ mode: OpenMode, permissions: mode_t = 0o600) -> Result<FileDescriptor, Errno> {
        retrying("openat") { openat(directory.rawValue, name, mode.flags, permissions) }.map(FileDescriptor.init(rawValue:))
    }

    /// Makes the directory `name` (`permissions` less the umask, 0700 by default) in
    /// `directory`; one that exists is fine. The corresponding C function is `mkdirat`.
    package static func makeDirectory(_ name: String, in directory: FileDescriptor, permissions: mode_t = 0o700) -> Result<Void, Errno> {
        switch retrying("mkdirat", { mkdirat(directory.rawValue, name, permissions) }) {
        case .success, .failure(.fileExists): .success(())
        case .failure(let errno): .failure(errno)
        }
    }

    /// Renames `from` to `to`, both in `directory`. The corresponding C function is
    /// `renameat`.
    package static func rename(_ from: String, to: String, in directory: FileDescriptor) -> Result<Void, Errno> {
        retrying("renameat") { renameat(directory.rawValue, from, directory.rawValue, to) }.map { _ in () }
    }

    /// Gives the file `from` a second name `to`, both in `directory`; fails with EEXIST
    /// when `to` exists. The corresponding C function is `linkat`.
    package static func link(_ from: String, to: String, in directory: FileDescriptor) -> Result<Void, Errno> {
        retrying("linkat") { linkat(directory.rawValue, from, directory.rawValue, to, 0) }.map { _ in () }
    }

    /// Gives the open file `fd`, made by ``OpenMode/unnamed``, the name `to` in
    /// `directory`; fails with EEXIST when `to` exists, never replacing it. The
    /// corresponding C function is `linkat` (of `/proc/self/fd/<fd>`, with
    /// `AT_SYMLINK_FOLLOW`: `AT_EMPTY_PATH` needs a capability).
    package static func linkOpenFile(_ fd: FileDescriptor, to name: String, in directory: FileDescriptor) -> Result<Void, Errno> {
        let source = "/proc/self/fd/\(fd.rawValue)"
        return retrying("linkat") { linkat(AT_FDCWD, source, directory.rawValue, name, AT_SYMLINK_FOLLOW) }.map { _ in () }
    }

    /// Renames `from` to `to`, both in `directory`, failing with EEXIST when `to` exists
    /// (a directory too, which `renameat` would replace when empty); ENOSYS or EINVAL
    /// where the C library or the filesystem cannot. The corresponding C function is
    /// `renameat2` with `RENAME_NOREPLACE`.
    package static func renameNoReplace(_ from: String, to: String, in directory: FileDescriptor) -> Result<Void, Errno> {
        guard let renameat2 = renameat2Function else { return .failure(.noFunction) }
        return retrying("renameat2") { renameat2(directory.rawValue, from, directory.rawValue, to, 1 /* RENAME_NOREPLACE */) }.map { _ in () }
    }

    /// glibc's `renameat2` (2.28 and later), which Swift's Glibc module does not declare.
    private static let renameat2Function: (@convention(c) (Int32, UnsafePointer<CChar>?, Int32, UnsafePointer<CChar>?, UInt32) -> Int32)? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "renameat2") else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (Int32, UnsafePointer<CChar>?, Int32, UnsafePointer<CChar>?, UInt32) -> Int32).self)
    }()

    /// Sets the permission bits of an open file. The corresponding C function is `fchmod`.
    package static func changeMode(_ fd: FileDescriptor, to mode: mode_t) -> Result<Void, Errno> {
        retrying("fchmod") { fchmod(fd.rawValue, mode) }.map { _ in () }
    }

    /// The status of `name` in `directory`, not following a link. The corresponding C
    /// function is `fstatat` with `AT_SYMLINK_NOFOLLOW`.
    package static func status(of name: String, in directory: FileDescriptor) -> Result<Stat, Errno> {
        var status = stat()
        return retrying("fstatat") { fstatat(directory.rawValue, name, &status, AT_SYMLINK_NOFOLLOW) }.map { _ in Stat(rawValue: status) }
    }

    /// Removes `name` from the directory `directory`. The corresponding C function is
    /// `unlinkat`.
    @discardableResult
    package static func remove(_ name: String, in directory: FileDescriptor, flags: Int32 = 0) -> Result<Void, Errno> {
        retrying("unlinkat") { unlinkat(directory.rawValue, name, flags) }.map { _ in () }
    }

    /// The status of the path itself, not of what a symbolic link there points to
    /// (swift-system's `Stat`, as `lstat`).
    package static func linkStatus(_ path: String) -> Result<Stat, Errno> {
        Result { () throws(Errno) in try Stat(FilePath(path), followTargetSymlink: false) }
    }

    /// The corresponding C function is `mkdir`.
    package static func makeDirectory(_ path: String, mode: mode_t = 0o700) -> Result<Void, Errno> {
        retrying("mkdir") { mkdir(path, mode) }.map { _ in () }
    }

    /// Sets a file's access and modification times to now, without following a symbolic
    /// link there. The corresponding C function is `utimensat`; it produces inotify's
    /// IN_ATTRIB on the file.
    package static func touch(_ path: String) -> Result<Void, Errno> {
        retrying("utimensat") { utimensat(AT_FDCWD, path, nil, AT_SYMLINK_NOFOLLOW) }.map { _ in () }
    }

    /// The corresponding C function is `ftruncate`.
    package static func truncate(_ fd: FileDescriptor, to size: Int64) -> Result<Void, Errno> {
        retrying("ftruncate") { ftruncate(fd.rawValue, off_t(size)) }.map { _ in () }
    }

    /// The corresponding C function is `rename`.
    package static func rename(_ from: String, _ to: String) -> Result<Void, Errno> {
        retrying("rename") { Glibc.rename(from, to) }.map { _ in () }
    }

    /// The corresponding C function is `unlink`.
    package static func unlink(_ path: String) -> Result<Void, Errno> {
        retrying("unlink") { Glibc.unlink(path) }.map { _ in () }
    }

    /// Names in a directory, without `.` and `..`. The corresponding C functions are
    /// `opendir`, `readdir` and `closedir`.
    package static func directoryEntries(_ path: String) -> Result<[String], Errno> {
        guard let directory = opendir(path) else { return .failure(Errno(rawValue: Glibc.errno)) }
        return entries(of: directory)
    }

    /// Names in the directory `name` relative to the open directory `parent` (`"."` for
    /// `parent` itself), without `.` and `..`, never following a link. The corresponding
    /// C functions are `openat`, `fdopendir`, `readdir` and `closedir`.
    package static func directoryEntries(at parent: FileDescriptor, name: String) -> Result<[String], Errno> {
        let opened = retrying("openat(directory)") { openat(parent.rawValue, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
        guard case .success(let fd) = opened else {
            if case .failure(let errno) = opened { return .failure(errno) }
            return .failure(.ioError)
        }
        guard let directory = fdopendir(fd) else {
            let errno = Errno(rawValue: Glibc.errno)
            Glibc.close(fd)
            return .failure(errno)
        }
        return entries(of: directory)
    }

    private static func entries(of directory: OpaquePointer) -> Result<[String], Errno> {
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafePointer(to: entry.pointee.d_name) { pointer in
                pointer.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return .success(names)
    }

    /// Reads up to `buffer.count` bytes at `offset`, again after EINTR; fewer only at the
    /// end of the file. The corresponding C function is `pread`.
    package static func read(_ fd: FileDescriptor, into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) -> Result<Int, Errno> {
        var filled = 0
        while filled < buffer.count {
            let result = retrying("pread") { pread(fd.rawValue, buffer.baseAddress! + filled, buffer.count - filled, off_t(offset) + off_t(filled)) }
            switch result {
            case .success(0): return .success(filled)
            case .success(let count): filled += count
            case .failure(let errno): return .failure(errno)
            }
        }
        return .success(filled)
    }

    /// One `pread` of up to `buffer.count` bytes at `offset`: for a regular file that
    /// nobody writes meanwhile (its writers take a lock the caller holds), fewer bytes
    /// than asked is its end, and ``read(_:into:at:)``'s second call to find that out is
    /// spared.
    package static func readOnce(_ fd: FileDescriptor, into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) -> Result<Int, Errno> {
        retrying("pread") { pread(fd.rawValue, buffer.baseAddress!, buffer.count, off_t(offset)) }
    }

    /// Writes `first` then `second` at `offset`, as one `pwritev` when the kernel takes
    /// it all (it does for regular files unless the disk is full), looping on short
    /// writes. The corresponding C function is `pwritev`.
    package static func write(_ fd: FileDescriptor, _ first: UnsafeRawBufferPointer, _ second: UnsafeRawBufferPointer = UnsafeRawBufferPointer(start: nil, count: 0), at offset: Int64) -> Result<Void, Errno> {
        var done = 0
        return write(fd, first, second, at: offset, progress: &done)
    }

    /// ``write(_:_:_:at:)``, saying in `done` how many bytes were written, also when it fails.
    package static func write(_ fd: FileDescriptor, _ first: UnsafeRawBufferPointer, _ second: UnsafeRawBufferPointer = UnsafeRawBufferPointer(start: nil, count: 0),
                      at offset: Int64, progress done: inout Int) -> Result<Void, Errno> {
        let total = first.count + second.count
        done = 0
        while done < total {
            let result: Result<Int, Errno>
            if done < first.count {
                result = withUnsafeTemporaryAllocation(of: iovec.self, capacity: 2) { vectors in
                    vectors[0] = iovec(iov_base: UnsafeMutableRawPointer(mutating: first.baseAddress! + done), iov_len: first.count - done)
                    vectors[1] = iovec(iov_base: UnsafeMutableRawPointer(mutating: second.baseAddress), iov_len: second.count)
                    return writeVectors(fd, vectors, count: second.isEmpty ? 1 : 2, at: offset + Int64(done))
                }
            } else {
                let skip = done - first.count
                result = withUnsafeTemporaryAllocation(of: iovec.self, capacity: 1) { vectors in
                    vectors[0] = iovec(iov_base: UnsafeMutableRawPointer(mutating: second.baseAddress! + skip), iov_len: second.count - skip)
                    return writeVectors(fd, vectors, count: 1, at: offset + Int64(done))
                }
            }
            switch result {
            case .success(let count):
                // A regular file accepts at least one byte, or fails (ENOSPC).
                if count == 0 { return .failure(.ioError) }
                done += count
            case .failure(let errno):
                return .failure(errno)
            }
        }
        return .success(())
    }

    /// Writes `header`, `payload` and `trailer` at `offset` with one `pwritev` (again,
    /// from where it stopped, after a short write). The corresponding C function is
    /// `pwritev`.
    package static func write(_ fd: FileDescriptor, header: UnsafeRawBufferPointer, payload: UnsafeRawBufferPointer,
                      trailer: UnsafeRawBufferPointer, at offset: Int64) -> Result<Void, Errno> {
        let total = header.count + payload.count + trailer.count
        let first = withUnsafeTemporaryAllocation(of: iovec.self, capacity: 3) { vectors in
            vectors[0] = iovec(iov_base: UnsafeMutableRawPointer(mutating: header.baseAddress), iov_len: header.count)
            vectors[1] = iovec(iov_base: UnsafeMutableRawPointer(mutating: payload.baseAddress), iov_len: payload.count)
            vectors[2] = iovec(iov_base: UnsafeMutableRawPointer(mutating: trailer.baseAddress), iov_len: trailer.count)
            return writeVectors(fd, vectors, count: 3, at: offset)
        }
        switch first {
        case .failure(let errno): return .failure(errno)
        case .success(let count) where count == total: return .success(())
        case .success(let count):
            // Short (a full disk, a signal): write the rest from a copy, piece by piece.
            var rest = [UInt8](header) + [UInt8](payload) + [UInt8](trailer)
            rest.removeFirst(count)
            return rest.withUnsafeBytes { write(fd, $0, at: offset + Int64(count)) }
        }
    }

    /// The current directory. The corresponding C function is `getcwd`.
    package static func currentDirectory() -> String {
        guard let pointer = getcwd(nil, 0) else { return "/" }
        defer { free(pointer) }
        return String(cString: pointer)
    }

    package static var effectiveUserID: uid_t { geteuid() }

    /// Whether this process is in the group `group` (its effective group or one of its
    /// supplementary groups). The corresponding C functions are `getegid` and `getgroups`.
    package static func isMember(ofGroup group: gid_t) -> Bool {
        if getegid() == group { return true }
        let count = getgroups(0, nil)
        guard count > 0 else { return false }
        var groups = [gid_t](repeating: 0, count: Int(count))
        let got = getgroups(count, &groups)
        return got > 0 && groups.prefix(Int(got)).contains(group)
    }

    /// The id of the Unix group `name`, or `nil`. The corresponding C function is `getgrnam_r`.
    package static func groupID(named name: String) -> gid_t? {
        var group = group()
        var result: UnsafeMutablePointer<group>?
        var buffer = [CChar](repeating: 0, count: 16_384)
        guard getgrnam_r(name, &group, &buffer, buffer.count, &result) == 0, result != nil else { return nil }
        return group.gr_gid
    }

    /// The name of the Unix group `id`, or its number. The corresponding C function is `getgrgid_r`.
    package static func groupName(_ id: gid_t) -> String {
        var group = group()
        var result: UnsafeMutablePointer<group>?
        var buffer = [CChar](repeating: 0, count: 16_384)
        guard getgrgid_r(id, &group, &buffer, buffer.count, &result) == 0, result != nil else { return String(id) }
        return String(cString: group.gr_name)
    }

    /// The name of the user `id`, or its number. The corresponding C function is `getpwuid_r`.
    package static func userName(_ id: uid_t) -> String {
        var user = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 16_384)
        guard getpwuid_r(id, &user, &buffer, buffer.count, &result) == 0, result != nil else { return String(id) }
        return String(cString: user.pw_name)
    }
    package static var processID: Int32 { getpid() }
    /// This process's id, read once: records carry it for information only, and glibc
    /// no longer caches `getpid`, so asking for every message would cost a system call.
    package static let cachedProcessID: Int32 = getpid()

    /// The identity of this process's PID namespace (the inode number of
    /// `/proc/self/ns/pid`), read once; 0 when `/proc` does not say. Process ids are
    /// shown, and compared, only beside it: the same number means another process in
    /// another namespace (a container and its sidecar sharing a volume).
    package static let pidNamespace: UInt64 = {
        var status = stat()
        guard stat("/proc/self/ns/pid", &status) == 0 else { return 0 }
        return UInt64(status.st_ino)
    }()

    /// Wall-clock time in nanoseconds since 1970. The corresponding C function is
    /// `clock_gettime(CLOCK_REALTIME)`.
    package static func wallClockNanoseconds() -> Int64 {
        var time = timespec()
        clock_gettime(CLOCK_REALTIME, &time)
        return Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec)
    }
}

extension Result where Failure == Errno {
    /// Unwraps, turning the errno into a ``WormholeError`` that names the operation.
    /// (Inlinable: its callers are in other modules.)
    @inlinable @inline(__always)
    package func orThrow(_ operation: @autoclosure () -> String, path: String? = nil) throws(WormholeError) -> Success {
        switch self {
        case .success(let value): return value
        case .failure(let errno): throw WormholeError.system(operation(), errno, path: path)
        }
    }
}

extension Stat {
    package var isDirectory: Bool { type == .directory }
    package var isSymbolicLink: Bool { type == .symbolicLink }
    package var isRegularFile: Bool { type == .regular }
    /// The permission bits, for messages and checks (`0o700`).
    package var modeBits: mode_t { permissions.rawValue & 0o7777 }
}
