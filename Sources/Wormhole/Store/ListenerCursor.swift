#if canImport(Glibc)
import Glibc
#endif
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SystemPackage

/// A live listener's claim on a log: "keep every record after sequence N until I have
/// read it". One file per listener in `.listeners/<identifier>/`, holding N as 8 bytes
/// little-endian, locked with `flock(LOCK_EX)` for as long as the listener lives.
///
/// Compaction keeps records above the lowest claim of a live listener, up to the backlog
/// cap, so a listener that stalls (or whose process is stopped) loses nothing within it.
/// A claim whose file is not locked belongs to a process that died; compaction deletes
/// it. The claim is written in batches (see ``update(_:)``): a claim that lags only makes
/// compaction keep a little more.
final class ListenerCursor {
    private let fd: FileDescriptor
    private let container: ContainerDirectory
    private let identifier: String
    private let name: String
    private var written: UInt64 = 0
    private var closed = false
    /// The claim is written when it has moved at least this far.
    private let step: UInt64

    static let claimsDirectory = ".listeners"

    /// Opens (creating, 0700, checked like the container) `.listeners/<identifier>/`.
    static func openDirectory(in container: ContainerDirectory, identifier: String, create: Bool) throws(WormholeError) -> FileDescriptor? {
        let top: FileDescriptor
        if create {
            top = try container.subdirectory(claimsDirectory)
        } else {
            switch Syscalls.retrying({ openat(container.current.descriptor.rawValue, claimsDirectory, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }) {
            case .success(let value): top = FileDescriptor(rawValue: value)
            case .failure: return nil
            }
        }
        defer { try? top.close() }
        if create { _ = mkdirat(top.rawValue, identifier, 0o700) }
        switch Syscalls.retrying({ openat(top.rawValue, identifier, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }) {
        case .success(let value):
            let fd = FileDescriptor(rawValue: value)
            do throws(WormholeError) {
                try ContainerDirectory.checkOwnership(fd, path: container.filePath(claimsDirectory + "/" + identifier))
            } catch {
                try? fd.close()
                throw error
            }
            return fd
        case .failure(let errno):
            if !create { return nil }
            throw WormholeError.system("open", errno, path: container.filePath(claimsDirectory + "/" + identifier))
        }
    }

    /// Creates the claim, initially empty, which reads as 0 (keep everything), already locked when it appears
    /// under its final name. Its temporary name starts with `.` and holds this process's
    /// id: a compactor leaves it alone while this process lives.
    init(container: ContainerDirectory, identifier: String, step: UInt64) throws(WormholeError) {
        guard let directory = try Self.openDirectory(in: container, identifier: identifier, create: true) else {
            throw WormholeError(.containerUnavailable, "cannot create the listener claims of '\(identifier)'", path: container.path)
        }
        let name = "\(Syscalls.processID)-\(String(UInt64.random(in: 1...UInt64.max), radix: 16))"
        let temporary = "." + name
        let where_ = container.filePath(Self.claimsDirectory + "/" + identifier + "/" + name)
        let opened = Syscalls.retrying { openat(directory.rawValue, temporary, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode_t(0o600)) }
        guard case .success(let raw) = opened else {
            try? directory.close()
            if case .failure(let errno) = opened { throw WormholeError.system("create listener claim", errno, path: where_) }
            throw WormholeError.system("create listener claim", .ioError, path: where_)
        }
        let fd = FileDescriptor(rawValue: raw)
        do throws(WormholeError) {
            // Left empty: an empty claim reads as 0 (keep everything), so a full disk does
            // not stop a listener from claiming.
            try Syscalls.lock(fd).orThrow("lock listener claim", path: where_)
            try Syscalls.retrying({ renameat(directory.rawValue, temporary, directory.rawValue, name) })
                .map { _ in () }.orThrow("publish listener claim", path: where_)
        } catch {
            _ = unlinkat(directory.rawValue, temporary, 0)
            try? fd.close()
            try? directory.close()
            throw error
        }
        // The directory is not kept open: a listener costs its claim's descriptor and its
        // log's, no more.
        try? directory.close()
        self.fd = fd
        self.container = container
        self.identifier = identifier
        self.name = name
        self.step = max(1, step)
    }

    /// Records that everything up to `sequence` has been read: written when it moved at
    /// least the step since the last write, or when `force` is set.
    func update(_ sequence: UInt64, force: Bool = false) {
        guard !closed, sequence != written, force || sequence &- written >= step || sequence < written else { return }
        try? Self.write(sequence, to: fd, path: name)
        written = sequence
    }

    /// Withdraws the claim. A claim that cannot be removed (its container was moved, or
    /// the process is out of descriptors) is unlocked all the same, and the next
    /// compaction deletes it as a dead listener's.
    func close() {
        guard !closed else { return }
        closed = true
        if let directory = try? Self.openDirectory(in: container, identifier: identifier, create: false) {
            _ = unlinkat(directory.rawValue, name, 0)
            try? directory.close()
        }
        try? fd.close()
    }

    deinit { close() }

    private static func write(_ sequence: UInt64, to fd: FileDescriptor, path: String) throws(WormholeError) {
        var value = sequence.littleEndian
        let result = withUnsafeBytes(of: &value) { Syscalls.write(fd, $0, at: 0) }
        try result.orThrow("write listener claim", path: path)
    }

    /// The lowest claim among live listeners of `identifier` and the durable positions
    /// in the log `logID` (running or not), deleting the claims of listeners that died.
    /// `nil` when there is neither.
    static func lowestLiveClaim(container: ContainerDirectory, identifier: String, logID: UInt64) -> UInt64? {
        guard let directory = try? openDirectory(in: container, identifier: identifier, create: false) else { return nil }
        defer { try? directory.close() }
        guard case .success(let names) = Syscalls.directoryEntries(at: directory, name: ".") else { return nil }
        var lowest: UInt64?
        for name in names {
            let opened = Syscalls.retrying { openat(directory.rawValue, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) }
            guard case .success(let raw) = opened else { continue }
            let fd = FileDescriptor(rawValue: raw)
            defer { try? fd.close() }
            guard (try? fd.stat())?.isRegularFile == true else { continue }
            if name.hasPrefix(DurablePosition.prefix) {
                // Kept whether its listener runs or not, until it is forgotten; a position
                // in an older log (or a damaged file) keeps nothing.
                if let value = DurablePosition.read(fd), value.logID == 0 || value.logID == logID {
                    lowest = min(lowest ?? value.position, value.position)
                }
                continue
            }
            let being = name.hasPrefix(".")
            switch Syscalls.lock(fd, exclusive: false, wait: false) {
            case .success:
                Syscalls.unlock(fd)
                // Nobody holds it. A claim being created is unlocked for a moment between
                // its creation and its lock: it is removed only once its process is gone.
                if being, processIsAlive(name.dropFirst()) { continue }
                _ = unlinkat(directory.rawValue, name, 0)
            case .failure(.wouldBlock):
                if being { continue }
                var value: UInt64 = 0
                let count = withUnsafeMutableBytes(of: &value) { Syscalls.read(fd, into: $0, at: 0) }
                let claim = (try? count.get()) == 8 ? UInt64(littleEndian: value) : 0
                lowest = min(lowest ?? claim, claim)
            case .failure:
                continue
            }
        }
        return lowest
    }

    /// Whether the process whose id starts `name` (`<pid>-<hex>`) exists.
    private static func processIsAlive(_ name: Substring) -> Bool {
        guard let dash = name.firstIndex(of: "-"), let pid = Int32(name[..<dash]), pid > 0 else { return false }
        return kill(pid, 0) == 0 || Glibc.errno != ESRCH
    }

    // MARK: - Who listens

    /// The identifiers that have a claims directory (live listeners or durable names).
    static func identifiersWithListeners(container: ContainerDirectory) throws(WormholeError) -> [String] {
        let top: FileDescriptor
        switch Syscalls.retrying({ openat(container.current.descriptor.rawValue, claimsDirectory, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }) {
        case .success(let value): top = FileDescriptor(rawValue: value)
        case .failure(.noSuchFileOrDirectory): return []
        case .failure(let errno): throw WormholeError.system("open", errno, path: container.filePath(claimsDirectory))
        }
        defer { try? top.close() }
        let names = try Syscalls.directoryEntries(at: top, name: ".").orThrow("list", path: container.filePath(claimsDirectory))
        return names.filter { (try? Identifier.validate($0)) != nil }.sorted()
    }

    /// The live listeners and durable names of `identifier`; `logID` and `lastSequence`
    /// describe its log now (0 when it has none), to say how far behind each one is.
    static func listeners(container: ContainerDirectory, identifier: String, logID: UInt64, lastSequence: UInt64) -> [WormholeListenerStatus] {
        guard let directory = try? openDirectory(in: container, identifier: identifier, create: false) else { return [] }
        defer { try? directory.close() }
        guard case .success(let names) = Syscalls.directoryEntries(at: directory, name: ".") else { return [] }
        var result: [WormholeListenerStatus] = []
        for name in names.sorted() where !name.hasPrefix(".") {
            let opened = Syscalls.retrying { openat(directory.rawValue, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) }
            guard case .success(let raw) = opened else { continue }
            let fd = FileDescriptor(rawValue: raw)
            defer { try? fd.close() }
            guard let status = try? fd.stat(), status.isRegularFile else { continue }
            let running: Bool
            switch Syscalls.lock(fd, exclusive: false, wait: false) {
            case .success:
                Syscalls.unlock(fd)
                running = false
            case .failure:
                running = true
            }
            if name.hasPrefix(DurablePosition.prefix) {
                let value = DurablePosition.read(fd)
                // A position in another log than the current one: all of this log is ahead.
                let position = value.map { $0.logID == 0 || $0.logID == logID ? $0.position : 0 } ?? 0
                result.append(WormholeListenerStatus(
                    identifier: identifier, durableName: String(name.dropFirst(DurablePosition.prefix.count)),
                    processID: value.map { Int32(bitPattern: $0.processID) }, isRunning: running,
                    position: position, behind: lastSequence > position ? lastSequence - position : 0,
                    lastSeen: Date(timeIntervalSince1970: Double(status.st_mtim.tv_sec) + Double(status.st_mtim.tv_nsec) / 1e9)))
            } else if running {
                var value: UInt64 = 0
                let count = withUnsafeMutableBytes(of: &value) { Syscalls.read(fd, into: $0, at: 0) }
                let position = (try? count.get()) == 8 ? UInt64(littleEndian: value) : 0
                let pid = name.split(separator: "-").first.flatMap { Int32($0) }
                result.append(WormholeListenerStatus(
                    identifier: identifier, durableName: nil, processID: pid, isRunning: true,
                    position: position, behind: lastSequence > position ? lastSequence - position : 0, lastSeen: nil))
            }
        }
        return result
    }

    /// Removes the durable position `name` of `identifier`: `false` when there is none;
    /// throws while its listener runs.
    static func forgetDurable(container: ContainerDirectory, identifier: String, name: String) throws(WormholeError) -> Bool {
        guard let directory = try openDirectory(in: container, identifier: identifier, create: false) else { return false }
        defer { try? directory.close() }
        let file = DurablePosition.prefix + name
        let path = container.filePath(claimsDirectory + "/" + identifier + "/" + file)
        let opened = Syscalls.retrying { openat(directory.rawValue, file, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) }
        guard case .success(let raw) = opened else { return false }
        let fd = FileDescriptor(rawValue: raw)
        defer { try? fd.close() }
        switch Syscalls.lock(fd, exclusive: true, wait: false) {
        case .success:
            // Removed while locked, so that a listener starting now either finds it
            // gone (and makes a new one) or waits for nothing.
            _ = unlinkat(directory.rawValue, file, 0)
            Syscalls.unlock(fd)
            return true
        case .failure:
            throw WormholeError(.durableNameInUse,
                "the durable listener '\(name)' of '\(identifier)' is running; stop it before forgetting its position", path: path)
        }
    }
}
