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

/// A live listener's claim on a log: "keep every record after sequence N of the log
/// `logID` until I have read it". One file per listener in `.listeners/<identifier>/`,
/// named `<pid>-<hex>`, holding N, the log's identity and the PID namespace of the
/// listener's process (3 × 8 bytes little-endian), locked with `flock(LOCK_EX)` for as
/// long as the listener lives.
///
/// Compaction keeps records above the lowest claim of a live listener, up to the backlog
/// cap, so a listener that stalls (or whose process is stopped) loses nothing within it.
/// A claim on another log (the log was removed and made again while the listener was
/// stopped) keeps all of the new one: that listener reads it from its start. A claim whose
/// file is not locked belongs to a process that died; compaction deletes it. The claim is
/// written in batches (see ``update(_:logID:)``): a claim that lags only makes compaction
/// keep a little more.
///
/// Liveness is by locks alone, never by process ids, which mean nothing across PID
/// namespaces: a claim is created under a temporary name while its creator holds a shared
/// lock on the claims directory, and a compactor removes an unlocked temporary claim only
/// when it can take that directory's lock exclusively (nobody is creating one).
package final class ListenerCursor {
    private let fd: FileDescriptor
    private let container: ContainerDirectory
    private let identifier: String
    private let name: String
    private var written: UInt64 = 0
    private var writtenLog: UInt64 = 0
    private var closed = false
    /// The claim is written when it has moved at least this far.
    private let step: UInt64

    package static let claimsDirectory = ".listeners"
    /// The size of a claim written by this version; claims of 8 bytes (the sequence
    /// alone, from earlier versions) count for any log.
    package static let claimSize = 24

    /// Opens (creating, 0700 or a shared container's 2770, checked as ``ContainerAccess``
    /// says) `.listeners/<identifier>/`.
    package static func openDirectory(in container: ContainerDirectory, identifier: String, create: Bool) throws(WormholeError) -> FileDescriptor? {
        let top: FileDescriptor
        if create {
            top = try container.subdirectory(claimsDirectory)
        } else {
            switch Syscalls.open(claimsDirectory, in: container.current.descriptor, .directory) {
            case .success(let opened): top = opened
            case .failure(.noSuchFileOrDirectory): return nil
            case .failure(let errno): throw WormholeError.system("open", errno, path: container.filePath(claimsDirectory))
            }
        }
        defer { try? top.close() }
        // Missing (not to be created): nil; any other failure (EMFILE, EIO) is thrown, so
        // that compaction never takes an unreadable directory for no claim.
        return try container.subdirectory(identifier, in: top, path: container.filePath(claimsDirectory + "/" + identifier), create: create)
    }

    /// Creates the claim, initially empty, which reads as 0 (keep everything), already
    /// locked when it appears under its final name. Its temporary name starts with `.`;
    /// while it has it, this process holds a shared lock on the claims directory, so that
    /// no compactor takes it for a dead listener's.
    package init(container: ContainerDirectory, identifier: String, step: UInt64) throws(WormholeError) {
        guard let directory = try Self.openDirectory(in: container, identifier: identifier, create: true) else {
            throw WormholeError(.containerUnavailable, "cannot create the listener claims of '\(identifier)'", path: container.path)
        }
        // The directory is not kept open: a listener costs its claim's descriptor and its
        // log's, no more. Closing it releases its lock.
        defer { try? directory.close() }
        let name = "\(Syscalls.processID)-\(String(UInt64.random(in: 1...UInt64.max), radix: 16))"
        let temporary = "." + name
        let where_ = container.filePath(Self.claimsDirectory + "/" + identifier + "/" + name)
        try Syscalls.lock(directory, exclusive: false).orThrow("lock the listener claims of", path: container.filePath(Self.claimsDirectory + "/" + identifier))
        let fd = try container.createFile(temporary, in: directory).orThrow("create listener claim", path: where_)
        do throws(WormholeError) {
            // Left empty: an empty claim reads as 0 (keep everything), so a full disk does
            // not stop a listener from claiming.
            try Syscalls.lock(fd).orThrow("lock listener claim", path: where_)
            try Syscalls.rename(temporary, to: name, in: directory).orThrow("publish listener claim", path: where_)
        } catch {
            Syscalls.remove(temporary, in: directory)
            try? fd.close()
            throw error
        }
        self.fd = fd
        self.container = container
        self.identifier = identifier
        self.name = name
        self.step = max(1, step)
    }

    /// Records that everything up to `sequence` of the log `logID` has been read: written
    /// when it moved at least the step since the last write, went back, moved to another
    /// log, or when `force` is set. A claim that cannot be written (a full disk) keeps
    /// its older, lower value: compaction keeps more, never less.
    package func update(_ sequence: UInt64, logID: UInt64, force: Bool = false) {
        guard !closed, sequence != written || logID != writtenLog else { return }
        guard force || logID != writtenLog || sequence &- written >= step || sequence < written else { return }
        if (try? Self.write(sequence, logID: logID, to: fd, path: name)) != nil {
            written = sequence
            writtenLog = logID
            writtenAt = MonotonicCondition.now()
        }
    }

    /// Records that a reader caught up at `sequence`: the claim is written at once unless
    /// it was written less than ``idleInterval`` ago, so that `status` shows an idle
    /// listener's exact position without a write on every wake-up of a busy one. Returns
    /// whether the claim still lags (the reader's owner then reads again after the
    /// interval, see ``WormholeTransitingReader/positionIsUnpublished``).
    package func caughtUp(at sequence: UInt64, logID: UInt64) -> Bool {
        guard !closed, sequence != written || logID != writtenLog else { return false }
        if MonotonicCondition.now() &- writtenAt >= Self.idleInterval {
            update(sequence, logID: logID, force: true)
        }
        return sequence != written || logID != writtenLog
    }

    /// At most one write of a caught-up claim per this many nanoseconds (50 ms).
    package static let idleInterval: UInt64 = 50_000_000
    /// In seconds, for the timers of the reader's owners.
    package static let idleSeconds = Double(idleInterval) / 1e9
    /// When the claim was last written (CLOCK_MONOTONIC, ns).
    private var writtenAt: UInt64 = 0

    /// Withdraws the claim. A claim that cannot be removed (its container was moved, or
    /// the process is out of descriptors) is unlocked all the same, and the next
    /// compaction deletes it as a dead listener's.
    package func close() {
        guard !closed else { return }
        closed = true
        if let directory = try? Self.openDirectory(in: container, identifier: identifier, create: false) {
            Syscalls.remove(name, in: directory)
            try? directory.close()
        }
        try? fd.close()
    }

    deinit { close() }

    private static func write(_ sequence: UInt64, logID: UInt64, to fd: FileDescriptor, path: String) throws(WormholeError) {
        var bytes = (sequence.littleEndian, logID.littleEndian, Syscalls.pidNamespace.littleEndian)
        let result = withUnsafeBytes(of: &bytes) { Syscalls.write(fd, $0, at: 0) }
        try result.orThrow("write listener claim", path: path)
    }

    /// What a live listener's claim file holds.
    package struct Claim {
        /// The last sequence number read; 0 (keep everything) for an empty claim.
        package var sequence: UInt64 = 0
        /// The log it belongs to; `nil` for a claim of an earlier version, or empty.
        package var logID: UInt64?
        /// The PID namespace of its process; `nil` when not known.
        package var pidNamespace: UInt64?

        /// What the claim asks a compaction of the log `logID` to keep: everything after
        /// its sequence, or all of it for a claim on another log.
        package func keeps(afterIn logID: UInt64) -> UInt64 {
            self.logID == nil || self.logID == logID ? sequence : 0
        }
    }

    /// Reads an open claim: 24 bytes, or 8 from an earlier version, or fewer (being
    /// written for the first time: keep everything).
    package static func readClaim(_ fd: FileDescriptor) -> Claim {
        var bytes: (UInt64, UInt64, UInt64) = (0, 0, 0)
        let count = (try? withUnsafeMutableBytes(of: &bytes) { Syscalls.read(fd, into: $0, at: 0) }.get()) ?? 0
        switch count {
        case claimSize...:
            return Claim(sequence: UInt64(littleEndian: bytes.0), logID: UInt64(littleEndian: bytes.1),
                         pidNamespace: UInt64(littleEndian: bytes.2) == 0 ? nil : UInt64(littleEndian: bytes.2))
        case 8..<claimSize:
            return Claim(sequence: UInt64(littleEndian: bytes.0))
        default:
            return Claim()
        }
    }

    /// The lowest claim among live listeners of `identifier` and the durable positions
    /// in the log `logID` (running or not), deleting the claims of listeners that died.
    /// `nil` when there is neither.
    package static func lowestLiveClaim(container: ContainerDirectory, identifier: String, logID: UInt64) throws(WormholeError) -> UInt64? {
        var lowest: UInt64?
        /// Whether nobody is creating a claim now: the directory's lock, taken once, held
        /// until the directory is closed.
        var nobodyCreating: Bool?
        try forEachClaimFile(container: container, identifier: identifier, includingBeingCreated: true) { name, fd, _, directory throws(WormholeError) in
            if name.hasPrefix(DurablePosition.prefix) {
                // Kept whether its listener runs or not, until it is forgotten; a position
                // in another log keeps all of this one (it resumes at its start); a damaged
                // file keeps nothing; one that cannot be read stops the compaction.
                if let value = try DurablePosition.readOrThrow(fd, path: container.filePath(claimsDirectory + "/" + identifier + "/" + name)) {
                    let claim = value.logID == 0 || value.logID == logID ? value.position : 0
                    lowest = min(lowest ?? claim, claim)
                }
                return
            }
            let being = name.hasPrefix(".")
            switch Syscalls.lock(fd, exclusive: false, wait: false) {
            case .success:
                Syscalls.unlock(fd)
                if being {
                    // A claim being created is unlocked for a moment between its creation
                    // and its lock, while its creator holds the directory's shared lock.
                    // An earlier version's creator takes no such lock: its claim is also
                    // left alone while a process of its id lives here.
                    if nobodyCreating == nil {
                        nobodyCreating = (try? Syscalls.lock(directory, exclusive: true, wait: false).get()) != nil
                    }
                    if nobodyCreating != true || processMayBeAlive(name.dropFirst()) { return }
                }
                Syscalls.remove(name, in: directory)
            case .failure(.wouldBlock):
                if being { return }
                let claim = readClaim(fd).keeps(afterIn: logID)
                lowest = min(lowest ?? claim, claim)
            case .failure:
                return
            }
        }
        // Work queues keep what they have not handed out or not seen acknowledged.
        if let queue = WorkQueueFile.lowestUnhandled(container: container, identifier: identifier, logID: logID) {
            lowest = min(lowest ?? queue, queue)
        }
        return lowest
    }

    /// Calls `visit` with each regular file of `.listeners/<identifier>/` (names starting
    /// with `.` too when `includingBeingCreated`), opened for reading, with its status, in
    /// name order, and with the directory (for its lock and `unlinkat`). Nothing when the
    /// directory is missing. The one walk of the claims that compaction, writers and
    /// `status` share.
    ///
    /// A claims directory or a claim that cannot be read for a reason that is not about
    /// the file (out of descriptors, an I/O error) throws: a compaction that went on
    /// without it would drop messages that listener has not read. A file that went away,
    /// a symbolic link, a device or a file this user may not read is not a claim.
    private static func forEachClaimFile(container: ContainerDirectory, identifier: String, includingBeingCreated: Bool,
                                         _ visit: (_ name: String, _ fd: FileDescriptor, _ status: Stat, _ directory: FileDescriptor) throws(WormholeError) -> Void) throws(WormholeError) {
        guard let directory = try openDirectory(in: container, identifier: identifier, create: false) else { return }
        defer { try? directory.close() }
        let path = container.filePath(claimsDirectory + "/" + identifier)
        let names = try Syscalls.directoryEntries(at: directory, name: ".").orThrow("list", path: path)
        for name in names.sorted() where includingBeingCreated || !name.hasPrefix(".") {
            let fd: FileDescriptor
            switch Syscalls.open(name, in: directory, .read) {
            case .success(let opened): fd = opened
            case .failure(.noSuchFileOrDirectory), .failure(.tooManySymbolicLinkLevels), .failure(.noSuchAddressOrDevice),
                 .failure(.permissionDenied), .failure(.notPermitted):
                continue
            case .failure(let errno): throw WormholeError.system("open", errno, path: path + "/" + name)
            }
            defer { try? fd.close() }
            let status = try Syscalls.status(fd).orThrow("inspect", path: path + "/" + name)
            guard status.isRegularFile else { continue }
            try visit(name, fd, status, directory)
        }
    }

    /// The highest position in the log `logID` among live listeners' claims, durable
    /// positions and what work queues took (their members read without claims):
    /// messages up to it were handed out, whatever the file says now. `nil` when none is
    /// in that log. Claims lag (they are written in batches), so this is a lower bound.
    package static func highestPosition(container: ContainerDirectory, identifier: String, logID: UInt64) -> UInt64? {
        var highest = WorkQueueFile.highestTaken(container: container, identifier: identifier, logID: logID)
        try? forEachClaimFile(container: container, identifier: identifier, includingBeingCreated: false) { name, fd, _, _ in
            let position: UInt64?
            if name.hasPrefix(DurablePosition.prefix) {
                position = DurablePosition.read(fd).flatMap { $0.logID == logID ? $0.position : nil }
            } else {
                let claim = readClaim(fd)
                position = claim.logID == logID ? claim.sequence : nil
            }
            if let position { highest = max(highest ?? position, position) }
        }
        return highest
    }

    /// Whether a process whose id starts `name` (`<pid>-<hex>`) may exist in this PID
    /// namespace: a hint for claims of earlier versions only, never proof of death.
    /// `name` is a temporary name without its leading `.`: `<pid>-<hex>` (a claim) or
    /// `durable-<name>.<pid>-<hex>` (a durable position, §12.4 D1): the pid is the decimal
    /// number between the last `.` (or the start) and the `-` that follows it (§12.3 Q4).
    package static func processMayBeAlive(_ name: Substring) -> Bool {
        let tail = name.lastIndex(of: ".").map { name[name.index(after: $0)...] } ?? name
        guard let dash = tail.firstIndex(of: "-"), let pid = Int32(tail[..<dash]), pid > 0 else { return false }
        return kill(pid, 0) == 0 || Glibc.errno != ESRCH
    }

    // MARK: - Who listens

    /// The identifiers that have a claims directory (live listeners or durable names).
    package static func identifiersWithListeners(container: ContainerDirectory) throws(WormholeError) -> [String] {
        let top: FileDescriptor
        switch Syscalls.open(claimsDirectory, in: container.current.descriptor, .directory) {
        case .success(let opened): top = opened
        case .failure(.noSuchFileOrDirectory): return []
        case .failure(let errno): throw WormholeError.system("open", errno, path: container.filePath(claimsDirectory))
        }
        defer { try? top.close() }
        let names = try Syscalls.directoryEntries(at: top, name: ".").orThrow("list", path: container.filePath(claimsDirectory))
        return names.filter { (try? Identifier.validate($0)) != nil }.sorted()
    }

    /// The live listeners and durable names of `identifier`; `logID` and `lastSequence`
    /// describe its log now (0 when it has none), to say how far behind each one is.
    package static func listeners(container: ContainerDirectory, identifier: String, logID: UInt64, lastSequence: UInt64) -> [WormholeListenerStatus] {
        var result: [WormholeListenerStatus] = []
        let holders = LockHolders.current()
        /// A running listener's user is the lock holder's (the kernel's record); else the
        /// file's owner, unless the file has several names (a member's link of another's)
        /// or the owner is hidden by a user namespace (the overflow uid names no one).
        func user(_ status: Stat, running: Bool) -> UInt32? {
            if running, let holder = holders.userID(holding: status) { return holder }
            return status.linkCount == 1 && !UserNamespace.hidesOwner(status.userID.rawValue) ? status.userID.rawValue : nil
        }
        try? forEachClaimFile(container: container, identifier: identifier, includingBeingCreated: false) { name, fd, status, _ in
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
                    lastSeen: Date(timeIntervalSince1970: Double(status.st_mtim.tv_sec) + Double(status.st_mtim.tv_nsec) / 1e9),
                    pidNamespace: value.flatMap { $0.pidNamespace == 0 ? nil : $0.pidNamespace }, userID: user(status, running: running)))
            } else if running {
                let claim = readClaim(fd)
                let position = claim.keeps(afterIn: logID)
                let pid = name.split(separator: "-").first.flatMap { Int32($0) }
                result.append(WormholeListenerStatus(
                    identifier: identifier, durableName: nil, processID: pid, isRunning: true,
                    position: position, behind: lastSequence > position ? lastSequence - position : 0, lastSeen: nil,
                    pidNamespace: claim.pidNamespace, userID: user(status, running: running)))
            }
        }
        return result
    }

    /// Removes the durable position `name` of `identifier`: `false` when there is none;
    /// throws while its listener runs.
    package static func forgetDurable(container: ContainerDirectory, identifier: String, name: String) throws(WormholeError) -> Bool {
        guard let directory = try openDirectory(in: container, identifier: identifier, create: false) else { return false }
        defer { try? directory.close() }
        let file = DurablePosition.prefix + name
        let path = container.filePath(claimsDirectory + "/" + identifier + "/" + file)
        guard case .success(let fd) = Syscalls.open(file, in: directory, .read) else { return false }
        defer { try? fd.close() }
        switch Syscalls.lock(fd, exclusive: true, wait: false) {
        case .success:
            // Removed while locked, so that a listener starting now either finds it
            // gone (and makes a new one) or waits for nothing.
            Syscalls.remove(file, in: directory)
            Syscalls.unlock(fd)
            return true
        case .failure:
            throw WormholeError(.durableNameInUse,
                "the durable listener '\(name)' of '\(identifier)' is running; stop it before forgetting its position", path: path)
        }
    }
}
