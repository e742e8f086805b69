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
@_spi(Backend) import WormholeCore

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
@_spi(Backend) public final class FileTransiting: WormholeTransiting {
    /// The shared directory.
    public let directory: String
    public let configuration: WormholeConfiguration
    /// The notification center of the same directory, for bare posts.
    public let notificationCenter: DarwinNotificationCenter
    package let container: ContainerDirectory

    /// Open logs kept for writing, at most ``openLogLimit`` of them.
    private let logs = Locked<[String: LogWriter]>([:])
    /// ``WormholeConfiguration/maximumOpenLogCount``, or ``cachedLogLimit``.
    private let openLogLimit: Int

    /// A pass to a log that is not cached costs an `open` and the `close` of another:
    /// about as much again as the pass itself. The limit is an eighth of the process's
    /// descriptor limit, at most 1,024 and at least 2 (2 under `ulimit -n 16`), so that the
    /// cache never takes the descriptors the program needs; a pass that finds none left
    /// (EMFILE) closes the idle cached logs and tries once more.
    package static let cachedLogLimit: Int = {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 64 }
        let soft = Int(clamping: limit.rlim_cur)
        return min(1024, max(2, soft / 8))
    }()

    /// Closes the cached logs that no other thread is using, except `identifier`'s:
    /// when the process has run out of descriptors. Returns how many were closed.
    @discardableResult
    package func releaseIdleLogs(except identifier: String) -> Int {
        let candidates = logs.withLock { logs in logs.filter { $0.key != identifier } }
        let released = candidates.filter { $0.value.retireIfIdle() }
        logs.withLock { logs in
            for (key, handle) in released where logs[key] === handle { logs[key] = nil }
        }
        return released.count
    }

    /// Uses `directory` (created 0700 when missing and `createIfMissing`, refused when
    /// unsafe).
    public init(directory: String, configuration: WormholeConfiguration = .init(), createIfMissing: Bool = true) throws(WormholeError) {
        self.configuration = try configuration.validated()
        self.openLogLimit = configuration.maximumOpenLogCount ?? Self.cachedLogLimit
        self.container = try ContainerDirectory(path: directory, create: createIfMissing)
        self.notificationCenter = DarwinNotificationCenter(container: container)
        self.directory = container.path
    }

    deinit {
        for handle in logs.withLock({ $0.values }) { handle.retire() }
    }

    package func logPath(_ identifier: String) -> String {
        container.filePath(LogFile.name(identifier))
    }

    // MARK: - A container moved away

    /// Set when inotify says the container's directory went away or came back.
    private let containerMayHaveMoved = Atomic<Bool>(false)
    /// The writer's watch on the container, made at the second pass (best effort:
    /// without inotify a writer still finds a deleted container, just not a moved one).
    private let containerWatch = Locked<EngineSubscription?>(nil)
    /// 0 before the first pass, 1 after it, 2 once the container is watched.
    private let containerWatchStage = Atomic<Int>(FileTransiting.watchesContainerAtFirstPass ? 1 : 0)
    /// For the benchmark only (`Benchmarks/run --sections clever`): when the environment
    /// has `WORMHOLE_BENCH_CONTAINER_WATCH_AT_FIRST_PASS` (read once), the watch is made
    /// at the first pass, as it would be without the stages below.
    private static let watchesContainerAtFirstPass = getenv("WORMHOLE_BENCH_CONTAINER_WATCH_AT_FIRST_PASS") != nil

    /// Why the watch waits for the second pass: `wormhole send` (one message) ends in
    /// 21.0 ms at the median with it, against 31.7 ms with the watch made at the first pass
    /// (`Benchmarks/run --sections clever`, on a busy machine; Docs/Performance.md, "What
    /// the clever parts buy").
    ///
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
    package func noticeContainerMoves() {
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
        // Said only when the pass fails: no string is built on the way of a message.
        let what = { "the message for '\(identifier)' was not passed" }
        let sequence = try appendUnderLock(identifier, what: what) { (locked: inout LogWriter.LockedLog) -> Result<UInt64, WormholeError> in
            let (log, header, tail) = (locked.log, locked.header, locked.tail)
            let sequence = tail.lastSequence + 1
            // Header, payload and trailer in one `pwritev`: no copy of the message.
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
                // Whatever part was written is cut: earlier messages stay whole.
                _ = Syscalls.truncate(log.fd, to: Int64(tail.end))
                return .failure(Self.appendError(errno, log: log, what: what()))
            }
            locked.tail = LogFile.Tail(end: tail.end + LogFormat.recordOverhead + payload.count, lastSequence: sequence, lastRecordOffset: tail.end)
            return .success(sequence)
        }
        return WormholeRecord(identifier: identifier, sequence: sequence, fields: fields, payload: payload)
    }

    /// Passes `batch` as consecutive messages of `identifier`, under one lock with one
    /// write: each record still complete in itself (its own length, checksum and
    /// trailer), so a reader takes them one by one as it would separate passes. Returns
    /// their sequence numbers (an empty range for an empty batch, which writes nothing).
    ///
    /// If the write fails part-way (a full disk), the records written whole before the
    /// failure are kept (a listener may have read them) and the error says how many of
    /// the batch were passed; the rest is cut.
    public func append(batch: [(payload: Data, kind: WormholePayloadKind)], identifier: String) throws(WormholeError) -> Range<UInt64> {
        try Identifier.validate(identifier)
        guard !batch.isEmpty else { return 0..<0 }
        var total = 0
        for entry in batch {
            try configuration.checkMessageSize(entry.payload.count, identifier: identifier)
            total += LogFormat.recordOverhead + entry.payload.count
        }
        let nanoseconds = Syscalls.wallClockNanoseconds()
        let laidOut = Self.layOut(batch, total: total)
        var bytes = laidOut.bytes
        let ends = laidOut.ends
        let what = { "the \(batch.count) messages for '\(identifier)' were not passed" }
        let first = try appendUnderLock(identifier, what: what) { (locked: inout LogWriter.LockedLog) -> Result<UInt64, WormholeError> in
            let (log, header, tail) = (locked.log, locked.header, locked.tail)
            let first = tail.lastSequence + 1
            var progress = 0
            let written = bytes.withUnsafeMutableBytes { bytes -> Result<Void, Errno> in
                var start = 0
                for (index, entry) in batch.enumerated() {
                    let end = ends[index]
                    let record = UnsafeMutableRawBufferPointer(rebasing: bytes[start..<end])
                    let fields = LogFormat.RecordFields(nanoseconds: nanoseconds, processID: Syscalls.cachedProcessID,
                                                        userID: Syscalls.effectiveUserID, kind: entry.kind)
                    LogFormat.writeRecordFrame(into: UnsafeMutableRawBufferPointer(rebasing: record[0..<LogFormat.recordHeaderSize]),
                                               trailer: UnsafeMutableRawBufferPointer(rebasing: record[(record.count - LogFormat.recordTrailerSize)...]),
                                               logID: header.logID, sequence: first + UInt64(index), fields: fields,
                                               payload: UnsafeRawBufferPointer(rebasing: record[LogFormat.recordHeaderSize..<(record.count - LogFormat.recordTrailerSize)]))
                    start = end
                }
                return Syscalls.write(log.fd, UnsafeRawBufferPointer(bytes), at: Int64(tail.end), progress: &progress)
            }
            if case .failure(let errno) = written {
                // Whole records written before the failure stay (a listener may have read
                // them); the rest is cut.
                let whole = ends.lastIndex { $0 <= progress }.map { $0 + 1 } ?? 0
                let kept = whole == 0 ? 0 : ends[whole - 1]
                _ = Syscalls.truncate(log.fd, to: Int64(tail.end + kept))
                if whole > 0 {
                    locked.tail = LogFile.Tail(end: tail.end + kept, lastSequence: first + UInt64(whole - 1),
                                               lastRecordOffset: tail.end + (whole >= 2 ? ends[whole - 2] : 0))
                }
                let partly = whole == 0 ? what()
                    : "\(whole) of the \(batch.count) messages for '\(identifier)' were passed (\(first)...\(first + UInt64(whole - 1))), the other \(batch.count - whole) were not"
                return .failure(Self.appendError(errno, log: log, what: partly))
            }
            locked.tail = LogFile.Tail(end: tail.end + total, lastSequence: first + UInt64(batch.count - 1),
                                       lastRecordOffset: tail.end + (batch.count >= 2 ? ends[batch.count - 2] : 0))
            return .success(first)
        }
        return first..<(first + UInt64(batch.count))
    }

    /// The records of `batch` end to end (`total` bytes), payloads in place, and the offset
    /// where each ends; their headers and trailers are written under the lock, when the
    /// sequence numbers are known.
    private static func layOut(_ batch: [(payload: Data, kind: WormholePayloadKind)], total: Int) -> (bytes: [UInt8], ends: [Int]) {
        var bytes = [UInt8](repeating: 0, count: total)
        var ends: [Int] = []
        ends.reserveCapacity(batch.count)
        bytes.withUnsafeMutableBytes { bytes in
            var offset = 0
            for entry in batch {
                entry.payload.withUnsafeBytes { payload in
                    if !payload.isEmpty {
                        (bytes.baseAddress! + offset + LogFormat.recordHeaderSize).copyMemory(from: payload.baseAddress!, byteCount: payload.count)
                    }
                }
                offset += LogFormat.recordOverhead + entry.payload.count
                ends.append(offset)
            }
        }
        return (bytes, ends)
    }

    /// Runs `write` on the locked log (it appends at `locked.tail` and moves the tail past
    /// what it wrote), opening, creating, repairing or converting the log as needed. A
    /// write that failed is `write`'s result, already worded; a full filesystem met while
    /// the log is created or extended is said here, with `what` (what was not passed).
    private func appendUnderLock<T: Sendable>(_ identifier: String, what: () -> String,
                                    _ write: (inout LogWriter.LockedLog) -> Result<T, WormholeError>) throws(WormholeError) -> T {
        var outcome: Result<T, WormholeError>?
        do throws(WormholeError) {
            for _ in 0..<4 {
                outcome = try writer(for: identifier).withLockedLog(self, create: true) { (locked: inout LogWriter.LockedLog) throws(WormholeError) in
                    write(&locked)
                }
                if outcome != nil { break }
            }
        } catch where error.errno == .noSpace || error.errno == .diskQuotaExceeded {
            // Out of blocks, inodes or quota when the log is created or extended.
            throw WormholeError(error.code,
                "\(error.message): the filesystem is full (no space or no inodes left: see 'df' and 'df -i'); \(what()), earlier messages are intact",
                path: error.path, errno: error.errno)
        }
        guard let outcome else {
            throw WormholeError(.systemError, "'\(logPath(identifier))' kept being replaced while this process tried to append to it", path: logPath(identifier))
        }
        return try outcome.get()
    }

    /// The error of an append whose write failed with `errno`; `what` says what was not passed.
    private static func appendError(_ errno: Errno, log: LogFile, what: String) -> WormholeError {
        if errno == .noSpace {
            return WormholeError(.systemError,
                "no space left on the device of '\(log.path)': \(what); earlier messages are intact. Free some space and pass it again",
                path: log.path, errno: errno)
        }
        return WormholeError.system("append to", errno, path: log.path)
    }

    public func clearMessageContents(identifier: String) throws(WormholeError) {
        try Identifier.validate(identifier)
        guard try LogFile.open(identifier, in: container, access: .readOnly, create: false).map({ $0.close() }) != nil else { return }
        for _ in 0..<4 {
            let done = try writer(for: identifier).withLockedLog(self, create: false, clearing: true) { _ throws(WormholeError) in true }
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
    package func identifiers() throws(WormholeError) -> [String] {
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
                path: log.path, sequence: tail.lastSequence)
        }
        let bytes = try buffer.read(log.fd, from: offset, count: tail.end - offset, path: log.path)
        let parsed = LogFormat.parse(bytes, at: 0, logID: header.logID, layout: header.layout, maximumPayload: configuration.maximumMessageSize)
        guard case .record(let frame, _) = parsed else {
            if case .corrupt(let detail, _) = parsed {
                throw WormholeError.corrupt("the latest message of '\(identifier)' (\(tail.lastSequence)) is damaged: \(detail), at offset \(offset)", path: log.path)
            }
            throw WormholeError.corrupt("the last record changed while it was read", path: log.path)
        }
        let record = LogFormat.record(frame, in: bytes, at: 0, identifier: identifier)
        // §11.1 L4: an expired latest message is none (an older one is not the latest).
        return record.isExpired(at: Syscalls.wallClockNanoseconds()) ? nil : record
    }

    public func summaries() throws(WormholeError) -> [WormholeIdentifierSummary] {
        let buffer = ReadBuffer()
        return try identifiers().compactMap { summary(of: $0, buffer: buffer) }
    }

    /// What is retained for `identifier`; `nil` when it has no readable log.
    package func summary(of identifier: String, buffer: ReadBuffer = ReadBuffer()) -> WormholeIdentifierSummary? {
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

    // MARK: - Work queues

    /// A member of the queue's files in `.queues/<identifier>/<name>/` (Protocol.md §18).
    public func joinWorkQueue(identifier: String, name: String, startingFrom start: WormholeStartingPoint) throws(WormholeError) -> any WormholeTransitingWorkQueue {
        try WorkQueueFile(transiting: self, identifier: identifier, name: name, start: start)
    }

    public func workQueues(identifier: String?) throws(WormholeError) -> [WormholeWorkQueueStatus] {
        if let identifier { try Identifier.validate(identifier) }
        return WormholeWorkQueueStatus.read(transiting: self, identifier: identifier)
    }

    public func observe(identifier: String, handler: @escaping @Sendable (WormholeTransitingEvent) -> Void) throws(WormholeError) -> any WormholeTransitingObservation {
        try Identifier.validate(identifier)
        return try InotifyEngine.shared.subscribe(directory: directory, names: [LogFile.name(identifier)], changes: Self.logChanges) { [container] event in
            // A shared container that root removed is not coming back: the listener ends,
            // saying so, instead of waiting in a deleted directory.
            if case .rescan = event, let revoked = container.revocation() {
                handler(.failed(revoked))
                return
            }
            handler(Self.transitingEvent(for: event))
        }
    }

    /// Calls `handler` with the identifier of each log that appears in the container
    /// (created, or moved to its name), and with `nil` when anything may have changed
    /// (events lost, the directory replaced): look at every identifier again.
    public func observeIdentifiers(handler: @escaping @Sendable (String?) -> Void) throws(WormholeError) -> any WormholeTransitingObservation {
        try InotifyEngine.shared.subscribe(directory: directory, names: [], changes: [.entry]) { event in
            switch event {
            case .changed(let name, _):
                guard name.hasSuffix(LogFormat.fileSuffix), !name.hasPrefix(".") else { return }
                handler(String(name.dropLast(LogFormat.fileSuffix.count)))
            case .rescan, .failed:
                handler(nil)
            }
        }
    }

    /// A reader that opens the log for each read and keeps no claim: nothing of the
    /// identifier's stays open while a tap waits.
    public func makeTapReader(identifier: String, startingFrom start: WormholeStartingPoint) throws(WormholeError) -> any WormholeTransitingReader {
        try FileLogReader(transiting: self, identifier: identifier, start: start, claims: false, holdsLog: false)
    }

    public func containerRevocation() -> WormholeError? { container.revocation() }

    /// Listeners without a queue read and run on the inotify reader thread that was woken.
    public var handlesOnTheWakingThread: Bool { true }

    public var containerDirectory: String? { directory }

    public var offersChangeWaiters: Bool { true }

    /// A waiter with an inotify instance of its own on the log, from the process's few.
    public func takeChangeWaiter(identifier: String) -> (waiter: any WormholeChangeWaiter, watchedBefore: Bool)? {
        LogWaiter.take(watching: directory + "/" + LogFile.name(identifier)).map { ($0.waiter, $0.watchedBefore) }
    }

    /// The process's inotify reader thread.
    public var isOnWakingThread: Bool { InotifyEngine.shared.isOnReaderThread }

    public func serveWakeUps(until done: () -> Bool) { InotifyEngine.shared.serveNested(until: done) }

    public func wakeWakingThread() { InotifyEngine.shared.wakeReaderThread() }

    /// What a listener hears of its log: writes (appends, and the cut of a torn tail) and
    /// the file at the name coming and going (created, replaced by compaction, deleted).
    package static let logChanges: FileChanges = [.written, .entry]

    /// What an engine event about a log means to its listener (Protocol §11.3): a write is
    /// a wake-up; a file created, replaced or deleted at the name, or a rescan, means the
    /// file there may be another one now.
    package static func transitingEvent(for event: DirectoryEvent) -> WormholeTransitingEvent {
        switch event {
        case .changed(_, let changes): changes.contains(.entry) ? .replaced : .wake
        case .rescan: .replaced
        case .failed(let error): .failed(error)
        }
    }

    // MARK: - The locked log

    private func writer(for identifier: String) -> LogWriter {
        let (writer, evicted) = logs.withLock { logs -> (LogWriter, [LogWriter]) in
            if let writer = logs[identifier] { return (writer, []) }
            var evicted: [LogWriter] = []
            while logs.count >= openLogLimit, let key = logs.keys.first {
                evicted.append(logs.removeValue(forKey: key)!)
            }
            let writer = LogWriter(identifier: identifier)
            logs[identifier] = writer
            return (writer, evicted)
        }
        for old in evicted { old.retire() }
        return writer
    }
}
