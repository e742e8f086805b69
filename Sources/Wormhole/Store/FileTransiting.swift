#if canImport(Glibc)
import Glibc
#endif
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Logging
import SystemPackage
import Synchronization

/// The default back end: one append-only log file per identifier in a shared directory,
/// woken by inotify.
///
/// Files in the directory (the format is specified in `Docs/Protocol.md`, version 3):
/// - `<identifier>.wormhole`: the message log: a header and framed, checksummed records;
/// - `.listeners/<identifier>/`: the claims of live listeners (see `ListenerCursor`);
/// - `<name>.notification`: bare notifications of ``DarwinNotificationCenter``.
///
/// A pass appends one record under `flock(LOCK_EX)`, so processes agree on one order per
/// identifier. The append is the commit (a record carries its length at both ends and a
/// checksum) and its own inotify event (IN_MODIFY on the log) is the wake-up: a steady
/// pass is four system calls, `flock`, `fstat`, `pwritev` and `flock` again. Every file
/// is reached through the container's directory descriptor (`ContainerDirectory`).
public final class FileTransiting: WormholeTransiting {
    /// The shared directory.
    public let directory: String
    public let configuration: WormholeConfiguration
    /// The notification center of the same directory, for bare posts.
    public let notificationCenter: DarwinNotificationCenter
    let container: ContainerDirectory

    /// Open logs kept for writing, at most ``cachedLogLimit`` of them.
    private let logs = Locked<[String: LogHandle]>([:])

    /// A pass to a log that is not cached costs an `open` and the `close` of another:
    /// about as much again as the pass itself. The limit is an eighth of the process's
    /// descriptor limit, at most 1,024 and at least 2 (2 under `ulimit -n 16`), so that the
    /// cache never takes the descriptors the program needs; a pass that finds none left
    /// (EMFILE) closes the idle cached logs and tries once more.
    static let cachedLogLimit: Int = {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 64 }
        let soft = Int(clamping: limit.rlim_cur)
        return min(1024, max(2, soft / 8))
    }()

    /// Closes the cached logs that no other thread is using, except `identifier`'s:
    /// when the process has run out of descriptors. Returns how many were closed.
    @discardableResult
    func releaseIdleLogs(except identifier: String) -> Int {
        let candidates = logs.withLock { logs in logs.filter { $0.key != identifier } }
        let released = candidates.filter { $0.value.retireIfIdle() }
        logs.withLock { logs in
            for (key, handle) in released where logs[key] === handle { logs[key] = nil }
        }
        return released.count
    }

    /// Uses `directory` (created 0700 when missing, refused when unsafe).
    public init(directory: String, configuration: WormholeConfiguration = .init()) throws(WormholeError) {
        self.configuration = try configuration.validated()
        self.container = try ContainerDirectory(path: directory)
        self.notificationCenter = DarwinNotificationCenter(container: container)
        self.directory = container.path
    }

    deinit {
        for handle in logs.withLock({ $0.values }) { handle.retire() }
    }

    func logPath(_ identifier: String) -> String {
        container.filePath(LogFile.name(identifier))
    }

    // MARK: - A container moved away

    /// Set when inotify says the container's directory went away or came back.
    private let containerMayHaveMoved = Atomic<Bool>(false)
    /// The writer's watch on the container, made at the second pass (best effort:
    /// without inotify a writer still finds a deleted container, just not a moved one).
    private let containerWatch = Locked<EngineSubscription?>(nil)
    /// 0 before the first pass, 1 after it, 2 once the container is watched.
    private let containerWatchStage = Atomic<Int>(0)

    /// Before a pass: a container moved away (`mv`) keeps its files, so the writer's
    /// descriptor would go on writing into the moved directory, where no listener of the
    /// path looks. The engine says when the directory at the path changed; the next pass
    /// then opens the one there now. Costs one atomic load when nothing happened.
    ///
    /// The first pass looks at the path instead (one `lstat`), and the watch is made at
    /// the second, between two more looks (the directory must exist to be watched, and
    /// may move before the watch is in place): a process that passes one message and ends
    /// (the CLI's `send`) starts no inotify instance and no thread, and its exit does not
    /// wait for the kernel to tear a watch down (milliseconds at times).
    func noticeContainerMoves() {
        if containerWatchStage.load(ordering: .acquiring) < 2 {
            if containerWatchStage.compareExchange(expected: 0, desired: 1, ordering: .acquiringAndReleasing).exchanged {
                _ = try? container.refresh(create: true)
                return
            }
            if containerWatchStage.compareExchange(expected: 1, desired: 2, ordering: .acquiringAndReleasing).exchanged {
                // A container moved away since the first pass has no directory at the path
                // to watch: make it first.
                _ = try? container.refresh(create: true)
                // No file's changes: only that the directory went away or came back.
                let watch = try? InotifyEngine.shared.subscribe(directory: directory, names: [], changes: []) { [weak self] event in
                    if case .changed = event { return }
                    self?.containerMayHaveMoved.store(true, ordering: .releasing)
                }
                containerWatch.withLock { $0 = watch }
                // A move between that look and the watch.
                _ = try? container.refresh(create: true)
                return
            }
        }
        if containerMayHaveMoved.load(ordering: .acquiring), containerMayHaveMoved.exchange(false, ordering: .acquiringAndReleasing) {
            _ = try? container.refresh(create: true)
        }
    }

    // MARK: - Writing

    public func append(_ payload: Data, kind: WormholePayloadKind, identifier: String,
                       attributes: WormholeRecordAttributes) throws(WormholeError) -> WormholeRecord {
        try Identifier.validate(identifier)
        try configuration.checkMessageSize(payload.count, identifier: identifier)
        let fields = LogFormat.RecordFields(nanoseconds: Syscalls.wallClockNanoseconds(), processID: Syscalls.cachedProcessID,
                                            userID: Syscalls.effectiveUserID, kind: kind,
                                            expires: attributes.expires?.nanosecondsSince1970 ?? 0,
                                            correlation: attributes.correlation, role: attributes.role)
        var sequence: UInt64?
        // Set when the append itself failed (its error says all); other failures for
        // want of space come from creating or extending the log, and are said again below.
        var appendFailed = false
        do throws(WormholeError) {
            for _ in 0..<4 {
                let handle = handle(for: identifier)
                sequence = try handle.withLockedLog(self, create: true) { (log: LogFile, header: LogFormat.Header, tail: inout LogFile.Tail) throws(WormholeError) in
                    let sequence = tail.lastSequence + 1
                    let written: Result<Void, Errno> = payload.withUnsafeBytes { payload in
                        withUnsafeTemporaryAllocation(byteCount: LogFormat.recordHeaderSize + LogFormat.recordTrailerSize, alignment: 8) { frame in
                            let head = UnsafeMutableRawBufferPointer(rebasing: frame[0..<LogFormat.recordHeaderSize])
                            let trailer = UnsafeMutableRawBufferPointer(rebasing: frame[LogFormat.recordHeaderSize...])
                            LogFormat.writeRecordFrame(into: head, trailer: trailer, logID: header.logID, sequence: sequence,
                                                       fields: fields, payload: payload)
                            return Syscalls.write(log.fd, header: UnsafeRawBufferPointer(head), payload: payload,
                                                  trailer: UnsafeRawBufferPointer(trailer), at: Int64(tail.end))
                        }
                    }
                    if case .failure(let errno) = written {
                        appendFailed = true
                        // Whatever part was written is cut: earlier messages stay whole.
                        _ = Syscalls.truncate(log.fd, to: Int64(tail.end))
                        if errno == .noSpace {
                            throw WormholeError(.systemError,
                                "no space left on the device of '\(log.path)': the message for '\(identifier)' was not passed; earlier messages are intact. Free some space and pass it again",
                                path: log.path, errno: errno)
                        }
                        throw WormholeError.system("append to", errno, path: log.path)
                    }
                    tail = LogFile.Tail(end: tail.end + LogFormat.recordOverhead + payload.count, lastSequence: sequence, lastRecordOffset: tail.end)
                    return sequence
                }
                if sequence != nil { break }
            }
        } catch where (error.errno == .noSpace || error.errno == .diskQuotaExceeded) && !appendFailed {
            // Out of inodes or quota when the log is created or extended.
            throw WormholeError(error.code,
                "\(error.message): the filesystem is full (no space or no inodes left: see 'df' and 'df -i'); the message for '\(identifier)' was not passed, earlier messages are intact",
                path: error.path, errno: error.errno)
        }
        guard let sequence else {
            throw WormholeError(.systemError, "'\(logPath(identifier))' kept being replaced while this process tried to append to it", path: logPath(identifier))
        }
        return WormholeRecord(identifier: identifier, sequence: sequence, fields: fields, payload: payload)
    }

    public func clearMessageContents(identifier: String) throws(WormholeError) {
        try Identifier.validate(identifier)
        guard try LogFile.open(identifier, in: container, access: .readOnly, create: false).map({ $0.close() }) != nil else { return }
        for _ in 0..<4 {
            let done = try handle(for: identifier).withLockedLog(self, create: false, clearing: true) { _, _, _ throws(WormholeError) in true }
            if done != nil { return }
        }
    }

    public func clearAllMessageContents() throws(WormholeError) {
        for identifier in try identifiers() {
            do throws(WormholeError) {
                try clearMessageContents(identifier: identifier)
            } catch where error.code == .unsupportedFormat {
                // Not a log of ours (or of another version): left as it is.
                continue
            }
        }
    }

    /// Identifiers that have a log file in the directory.
    func identifiers() throws(WormholeError) -> [String] {
        try container.entries().compactMap { name in
            guard name.hasSuffix(LogFormat.fileSuffix), !name.hasPrefix(".") else { return nil }
            let identifier = String(name.dropLast(LogFormat.fileSuffix.count))
            return (try? Identifier.validate(identifier)) == nil ? nil : identifier
        }.sorted()
    }

    // MARK: - Reading

    public func latestRecord(identifier: String) throws(WormholeError) -> WormholeRecord? {
        try Identifier.validate(identifier)
        guard let log = try LogFile.open(identifier, in: container, access: .readOnly, create: false) else { return nil }
        defer { log.close() }
        guard let header = log.header else { return nil }
        let buffer = ReadBuffer()
        let size = Int(try log.status().size)
        let tail = try log.findTail(size: size, header: header, maximumPayload: configuration.maximumMessageSize, buffer: buffer)
        guard let offset = tail.lastRecordOffset, tail.lastSequence > header.clearedThrough else { return nil }
        let payloadLength = tail.end - offset - header.layout.overhead
        guard payloadLength <= configuration.maximumMessageSize else {
            throw WormholeError(.messageTooLarge,
                "the latest message of '\(identifier)' (\(tail.lastSequence)) is \(payloadLength) bytes, more than this reader's limit of \(configuration.maximumMessageSize) (Wormhole.Configuration.maximumMessageSize); it was not read",
                path: log.path)
        }
        let bytes = try buffer.read(log.fd, from: offset, count: tail.end - offset, path: log.path)
        guard case .record(let frame, _) = LogFormat.parse(bytes, at: 0, logID: header.logID, layout: header.layout, maximumPayload: configuration.maximumMessageSize) else {
            throw WormholeError.corrupt("the last record changed while it was read", path: log.path)
        }
        return LogFormat.record(frame, in: bytes, at: 0, identifier: identifier)
    }

    public func summaries() throws(WormholeError) -> [WormholeIdentifierSummary] {
        let buffer = ReadBuffer()
        return try identifiers().compactMap { summary(of: $0, buffer: buffer) }
    }

    /// What is retained for `identifier`; `nil` when it has no readable log.
    func summary(of identifier: String, buffer: ReadBuffer = ReadBuffer()) -> WormholeIdentifierSummary? {
        guard let log = try? LogFile.open(identifier, in: container, access: .readOnly, create: false) else { return nil }
        defer { log.close() }
        guard let header = log.header else { return nil }
        var count = 0
        var bytes = 0
        var last = header.baseSequence
        var lastNanoseconds: Int64?
        _ = try? log.walk(from: LogFormat.headerSize, header: header, maximumPayload: configuration.maximumMessageSize, buffer: buffer) { item in
            switch item {
            case .record(let frame, _, _, _, _):
                last = max(last, frame.sequence)
                if frame.sequence > header.clearedThrough {
                    count += 1
                    bytes += frame.payloadLength
                    lastNanoseconds = frame.fields.nanoseconds
                }
            case .tooLarge(let sequence, _, let length):
                // Counted, not read: larger than this process accepts.
                last = max(last, sequence)
                if sequence > header.clearedThrough {
                    count += 1
                    bytes += length - header.layout.overhead
                }
            case .corrupt:
                break
            }
            return true
        }
        return WormholeIdentifierSummary(
            identifier: identifier, messageCount: count, byteCount: bytes, lastSequence: last,
            lastUpdate: lastNanoseconds.map(Date.init(nanosecondsSince1970:)))
    }

    public func makeReader(identifier: String, startingFrom start: WormholeStartingPoint) throws(WormholeError) -> any WormholeTransitingReader {
        try Identifier.validate(identifier)
        return try FileLogReader(transiting: self, identifier: identifier, start: start)
    }

    public func makeReader(identifier: String, startingFrom start: WormholeStartingPoint, durableName name: String) throws(WormholeError) -> any WormholeTransitingReader {
        try Identifier.validate(identifier)
        return try FileLogReader(transiting: self, identifier: identifier, start: start, durableName: name)
    }

    // MARK: - Listeners

    public func listeners(identifier: String?) throws(WormholeError) -> [WormholeListenerStatus] {
        if let identifier { try Identifier.validate(identifier) }
        let identifiers: [String]
        if let identifier { identifiers = [identifier] } else { identifiers = try ListenerCursor.identifiersWithListeners(container: container) }
        var result: [WormholeListenerStatus] = []
        let buffer = ReadBuffer()
        for identifier in identifiers {
            // Where the log is now: its identity and its last sequence number.
            var logID: UInt64 = 0
            var last: UInt64 = 0
            if let log = try? LogFile.open(identifier, in: container, access: .readOnly, create: false) {
                if let header = log.header, let size = try? log.status().size,
                   let tail = try? log.findTail(size: Int(size), header: header, maximumPayload: configuration.maximumMessageSize, buffer: buffer) {
                    logID = header.logID
                    last = max(tail.lastSequence, header.baseSequence)
                }
                log.close()
            }
            result += ListenerCursor.listeners(container: container, identifier: identifier, logID: logID, lastSequence: last)
        }
        return result
    }

    public func forgetDurableListener(named name: String, identifier: String?) throws(WormholeError) -> Int {
        try Identifier.validate(name, kind: "durable listener name")
        if let identifier { try Identifier.validate(identifier) }
        let identifiers: [String]
        if let identifier { identifiers = [identifier] } else { identifiers = try ListenerCursor.identifiersWithListeners(container: container) }
        var removed = 0
        for identifier in identifiers {
            if try ListenerCursor.forgetDurable(container: container, identifier: identifier, name: name) { removed += 1 }
        }
        return removed
    }

    public func observe(identifier: String, handler: @escaping @Sendable (WormholeTransitingEvent) -> Void) throws(WormholeError) -> any WormholeTransitingObservation {
        try Identifier.validate(identifier)
        return try InotifyEngine.shared.subscribe(directory: directory, names: [LogFile.name(identifier)], changes: Self.logChanges) { event in
            handler(Self.transitingEvent(for: event))
        }
    }

    /// What a listener hears of its log: writes (appends, and the cut of a torn tail) and
    /// the file at the name coming and going (created, replaced by compaction, deleted).
    static let logChanges: FileChanges = [.written, .entry]

    /// What an engine event about a log means to its listener (Protocol §11.3): a write is
    /// a wake-up; a file created, replaced or deleted at the name, or a rescan, means the
    /// file there may be another one now.
    static func transitingEvent(for event: DirectoryEvent) -> WormholeTransitingEvent {
        switch event {
        case .changed(_, let changes): changes.contains(.entry) ? .replaced : .wake
        case .rescan: .replaced
        case .failed(let error): .failed(error)
        }
    }

    // MARK: - The locked log

    private func handle(for identifier: String) -> LogHandle {
        let (handle, evicted) = logs.withLock { logs -> (LogHandle, [LogHandle]) in
            if let handle = logs[identifier] { return (handle, []) }
            var evicted: [LogHandle] = []
            while logs.count >= Self.cachedLogLimit, let key = logs.keys.first {
                evicted.append(logs.removeValue(forKey: key)!)
            }
            let handle = LogHandle(identifier: identifier)
            logs[identifier] = handle
            return (handle, evicted)
        }
        for old in evicted { old.retire() }
        return handle
    }

    /// A cached descriptor for one identifier's log, with what a writer learned of it.
    /// Its mutex keeps threads of this process apart (a `flock` is shared by every
    /// thread using the same descriptor). Once retired (evicted from the cache, or its
    /// wormhole released) its descriptor is closed; a call that took the handle before
    /// that still completes, with a descriptor opened for that call alone.
    final class LogHandle: Sendable {
        let identifier: String
        private let state = Locked(State())

        private struct State {
            var log: LogFile?
            var tail: LogFile.Tail?
            var retired = false
            /// The container's generation when the log was opened.
            var generation: UInt64 = 0
            var buffer: ReadBuffer?
        }

        init(identifier: String) { self.identifier = identifier }

        func retire() {
            state.withLock { Self.retire(&$0) }
        }

        /// Retires the handle unless another thread is inside ``withLockedLog``; returns
        /// whether it did. Never waits: the caller may hold another handle's lock.
        func retireIfIdle() -> Bool {
            state.withLockIfAvailable { Self.retire(&$0) } != nil
        }

        private static func retire(_ state: inout State) {
            state.retired = true
            state.log?.close()
            state.log = nil
            state.tail = nil
        }

        /// Runs `body` with the log locked against every other writer, its header and
        /// the tail (the end of its whole records; a torn tail was cut). The log is opened
        /// (and created when `create`) as needed; one that was replaced or deleted since it
        /// was opened is opened again. After `body` the log is compacted when due (always
        /// when `clearing`). Returns `nil` when the handle was retired meanwhile, or when
        /// the log does not exist and `create` is false.
        func withLockedLog<T>(_ transiting: FileTransiting, create: Bool, clearing: Bool = false,
                              _ body: (LogFile, LogFormat.Header, inout LogFile.Tail) throws(WormholeError) -> T) throws(WormholeError) -> T? {
            try state.withLock { (state: inout State) throws(WormholeError) -> T? in
                // A retired handle (evicted by another thread after this one took it)
                // still works, for this call: it opens the log and closes it after.
                defer {
                    if state.retired {
                        state.log?.close()
                        state.log = nil
                        state.tail = nil
                    }
                }
                transiting.noticeContainerMoves()
                let generation = transiting.container.current.generation
                if state.log != nil, state.generation != generation {
                    // The container was replaced: this log belongs to the old directory.
                    state.log?.close()
                    state.log = nil
                    state.tail = nil
                }
                let configuration = transiting.configuration
                let buffer = state.buffer ?? ReadBuffer()
                state.buffer = buffer
                for _ in 0..<64 {
                    if state.log == nil {
                        let opened: LogFile?
                        var openedIn = generation
                        do throws(WormholeError) {
                            opened = try LogFile.open(identifier, in: transiting.container, access: .readWrite, create: create)
                        } catch where error.errno == .tooManyOpenFiles && transiting.releaseIdleLogs(except: identifier) > 0 {
                            // Out of descriptors, some held by this cache: freed, tried once more.
                            opened = try LogFile.open(identifier, in: transiting.container, access: .readWrite, create: create)
                        } catch where error.code == .containerUnavailable && create {
                            // The container was deleted (or moved away): make it again, as
                            // the listeners expect, and open the log in the new one.
                            try transiting.container.refresh()
                            openedIn = transiting.container.current.generation
                            opened = try LogFile.open(identifier, in: transiting.container, access: .readWrite, create: create)
                        }
                        guard let opened else { return nil }
                        state.log = opened
                        state.generation = openedIn
                        state.tail = nil
                    }
                    var log = state.log!
                    try Syscalls.lock(log.fd).orThrow("lock", path: log.path)
                    do throws(WormholeError) {
                        let status = try log.status()
                        if status.linkCount == 0 {
                            // Replaced by a compaction, or deleted: this inode is no longer the log.
                            Syscalls.unlock(log.fd)
                            log.close()
                            state.log = nil
                            continue
                        }
                        let size = Int(status.size)
                        let header: LogFormat.Header
                        if let known = log.header, size >= state.tail?.end ?? LogFormat.headerSize {
                            header = known
                        } else if let known = log.header {
                            // Shorter than this process left it: emptied or cut by a
                            // program that does not follow the protocol.
                            let repair = LogRepair(log: log, identifier: identifier, container: transiting.container,
                                                   maximumPayload: configuration.maximumMessageSize, buffer: buffer)
                            let repaired = try repair.repairShrunk(known: known, knownTail: state.tail, size: size)
                            header = repaired.header
                            state.tail = repaired.tail
                        } else if size == 0 {
                            header = Self.newHeader(configuration)
                            try header.encoded().withUnsafeBytes { Syscalls.write(log.fd, $0, at: 0) }.orThrow("write the header of", path: log.path)
                            state.tail = LogFile.Tail(end: LogFormat.headerSize, lastSequence: 0, lastRecordOffset: nil)
                        } else {
                            guard let read = try log.readHeader() else { throw WormholeError(.unsupportedFormat, "'\(log.path)' has no header", path: log.path) }
                            header = read
                        }
                        log.header = header
                        state.log = log
                        let cold = state.tail == nil
                        var tail = try Self.currentTail(log, header: header, size: max(size, LogFormat.headerSize), known: state.tail,
                                                        maximumPayload: configuration.maximumMessageSize, buffer: buffer)
                        if cold {
                            // This process does not know what was handed out: the listeners'
                            // positions in this log say at least that much. Above the file's
                            // last record, the log was cut behind everyone's back.
                            let repair = LogRepair(log: log, identifier: identifier, container: transiting.container,
                                                   maximumPayload: configuration.maximumMessageSize, buffer: buffer)
                            repair.noticeCut(header: header, tail: &tail)
                        }
                        if tail.end < size {
                            // A record torn by a writer that was killed: cut it.
                            try Syscalls.truncate(log.fd, to: Int64(tail.end)).orThrow("cut the torn end of", path: log.path)
                        }
                        state.tail = tail
                        if header.version != LogFormat.version && !clearing {
                            // A log of an earlier version: converted to this one (a
                            // compaction that writes each record again) before anything
                            // else, then locked again as this version's log.
                            let compaction = LogCompaction(container: transiting.container, identifier: identifier, configuration: configuration)
                            let (newLog, newTail) = try compaction.compact(log, header: header, tail: tail, clearing: false, buffer: buffer)
                            Syscalls.unlock(log.fd)
                            log.close()
                            Syscalls.unlock(newLog.fd)
                            state.log = newLog
                            state.tail = newTail
                            continue
                        }
                        let result = try body(log, header, &tail)
                        state.tail = tail
                        if clearing || tail.end > header.compactionByteThreshold
                            || tail.lastSequence &- header.baseSequence > header.compactionRecordThreshold {
                            do throws(WormholeError) {
                                let compaction = LogCompaction(container: transiting.container, identifier: identifier, configuration: configuration)
                                let (newLog, newTail) = try compaction.compact(log, header: header, tail: tail, clearing: clearing, buffer: buffer)
                                Syscalls.unlock(log.fd)
                                log.close()
                                state.log = newLog
                                state.tail = newTail
                                Syscalls.unlock(newLog.fd)
                                buffer.shrink()
                                return result
                            } catch where clearing && (error.errno == .noSpace || error.errno == .diskQuotaExceeded) {
                                // No room for the cleared copy (out of blocks or inodes): the
                                // log gets a header with everything cleared and is emptied in
                                // place, which frees its blocks (Protocol.md §10.3). Same
                                // identity, numbering goes on; listeners that had not read
                                // what was cleared are told how many they lost.
                                let emptied = try Self.emptyInPlace(log, header: header, through: tail.lastSequence, configuration)
                                log.header = emptied.header
                                state.log = log
                                state.tail = emptied.tail
                                Syscalls.unlock(log.fd)
                                return result
                            } catch {
                                if clearing { throw error }
                                // The message is committed; compaction is tried again by the next pass.
                                Logger(label: "Wormhole").warning("could not compact '\(log.path)': \(error)")
                            }
                        }
                        Syscalls.unlock(log.fd)
                        return result
                    } catch {
                        Syscalls.unlock(log.fd)
                        if error.code == .unsupportedFormat {
                            log.close()
                            state.log = nil
                        }
                        throw error
                    }
                }
                throw WormholeError(.systemError, "'\(transiting.logPath(identifier))' kept being replaced while this process tried to lock it", path: transiting.logPath(identifier))
            }
        }

        /// Empties the locked `log` and writes its header again, with every message up to
        /// `last` cleared: a clear with no room for a cleared copy. Returns the new tail.
        private static func emptyInPlace(_ log: LogFile, header: LogFormat.Header, through last: UInt64,
                                         _ configuration: WormholeConfiguration) throws(WormholeError) -> (header: LogFormat.Header, tail: LogFile.Tail) {
            var emptied = newHeader(configuration)
            emptied.logID = header.logID
            emptied.baseSequence = last
            emptied.clearedThrough = last
            // The header first, over the old one (no new block needed), then the records
            // go: a reader sees the old log or the emptied one, never an empty file.
            try emptied.encoded().withUnsafeBytes { Syscalls.write(log.fd, $0, at: 0) }.orThrow("write the header of", path: log.path)
            try Syscalls.truncate(log.fd, to: Int64(LogFormat.headerSize)).orThrow("empty", path: log.path)
            return (emptied, LogFile.Tail(end: LogFormat.headerSize, lastSequence: last, lastRecordOffset: nil))
        }

        private static func newHeader(_ configuration: WormholeConfiguration) -> LogFormat.Header {
            var header = LogFormat.Header()
            header.logID = UInt64.random(in: 1...UInt64.max)
            header.compactionByteThreshold = UInt64(LogFormat.headerSize)
                + 2 * UInt64(configuration.retainedByteCount + configuration.retainedMessageCount * LogFormat.recordOverhead)
            header.compactionRecordThreshold = 2 * UInt64(configuration.retainedMessageCount)
            return header
        }

        /// The tail of a locked log of `size` bytes: what this process knows when nobody
        /// wrote since its last pass, else what the records after that say, else found anew.
        private static func currentTail(_ log: LogFile, header: LogFormat.Header, size: Int, known: LogFile.Tail?,
                                        maximumPayload: Int, buffer: ReadBuffer) throws(WormholeError) -> LogFile.Tail {
            if let known, known.end == size { return known }
            if let known, known.end < size {
                var tail = known
                let end = try log.walk(from: known.end, header: header, maximumPayload: maximumPayload, buffer: buffer) { item in
                    tail.advance(past: item)
                    return true
                }
                tail.end = end
                return tail
            }
            return try log.findTail(size: size, header: header, maximumPayload: maximumPayload, buffer: buffer)
        }
    }
}
