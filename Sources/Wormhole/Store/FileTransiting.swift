#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Logging
import SystemPackage
import Synchronization

/// The default back end: one append-only log file per identifier in a shared directory,
/// and a ``DarwinNotificationCenter`` in the same directory to wake listeners.
///
/// Files in the directory (the format is specified in `Docs/Protocol.md`):
/// - `<identifier>.wormhole`: the message log: a header and framed, checksummed records;
/// - `<identifier>.notification`: the notification file that a pass touches;
/// - `.listeners/<identifier>/`: the claims of live listeners (see ``ListenerCursor``).
///
/// Writers append under `flock(LOCK_EX)`, so processes agree on one order per
/// identifier. A record becomes visible only when the header's commit offset moves past
/// it, after the record is written whole: a writer killed at any instant leaves nothing
/// partial for a reader to see, and the next writer writes over the uncommitted bytes.
public final class FileTransiting: WormholeTransiting {
    /// The shared directory.
    public let directory: String
    public let configuration: Wormhole.Configuration
    /// The notification center whose posts wake this directory's listeners.
    public let notificationCenter: DarwinNotificationCenter

    /// Open log descriptors kept for writing, at most ``cachedLogLimit`` of them.
    private let logs = Locked<[String: LogHandle]>([:])
    ///
    /// A pass to a log that is not cached costs an `open` and the `close` of another:
    /// about as much again as the pass itself. The limit is an eighth of the process's
    /// descriptor limit, between 64 and 1,024, so that a writer to a few hundred
    /// identifiers keeps them all open while a program with the usual limit of 1,024
    /// gives the cache 128 at most.
    static let cachedLogLimit: Int = {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 64 }
        let soft = Int(clamping: limit.rlim_cur)
        return min(1024, max(64, soft / 8))
    }()

    /// Uses `directory` (created 0700 when missing, refused when unsafe).
    public init(directory: String, configuration: Wormhole.Configuration = .init()) throws(WormholeError) {
        self.configuration = try configuration.validated()
        self.notificationCenter = try DarwinNotificationCenter(directory: directory)
        self.directory = notificationCenter.directory
    }

    func logPath(_ identifier: String) -> String {
        directory + "/" + identifier + LogFormat.fileSuffix
    }

    // MARK: - Writing

    public func append(_ payload: Data, kind: WormholePayloadKind, identifier: String) throws(WormholeError) -> WormholeRecord {
        try Identifier.validate(identifier)
        guard payload.count <= configuration.maximumMessageSize else {
            throw WormholeError(.messageTooLarge,
                "message for '\(identifier)' is \(payload.count) bytes; the limit is \(configuration.maximumMessageSize) bytes (Wormhole.Configuration.maximumMessageSize)")
        }
        let nanoseconds = Syscalls.wallClockNanoseconds()
        let processID = Syscalls.cachedProcessID
        let handle = handle(for: identifier)
        let sequence: UInt64? = try withLockedLog(handle, create: true) { (log: inout LockedLog) throws(WormholeError) -> UInt64 in
            var header: LogFormat.Header
            if let existing = log.header {
                header = existing
            } else {
                header = try log.initialize(configuration)
            }
            let sequence = header.lastSequence + 1
            // The record is its 36-byte header (on the stack) and the payload where it
            // is: one pwritev, no copy of the message.
            let written: Result<Void, Errno> = payload.withUnsafeBytes { payload in
                withUnsafeTemporaryAllocation(byteCount: LogFormat.recordHeaderSize, alignment: 8) { recordHeader in
                    LogFormat.writeRecordHeader(into: recordHeader, sequence: sequence, nanoseconds: nanoseconds,
                                                processID: processID, kind: kind, payload: payload)
                    return Syscalls.write(log.fd, UnsafeRawBufferPointer(recordHeader), payload, at: Int64(header.committedEnd))
                }
            }
            if case .failure(let errno) = written {
                if errno == .noSpace {
                    throw WormholeError(.systemError,
                        "no space left on the device of '\(log.path)': the message for '\(identifier)' was not passed; earlier messages are intact. Free some space and pass it again",
                        path: log.path, errno: errno)
                }
                throw WormholeError.system("append to", errno, path: log.path)
            }
            header.lastRecordOffset = header.committedEnd
            header.committedEnd += UInt64(LogFormat.recordHeaderSize + payload.count)
            header.lastSequence = sequence
            header.recordCount += 1
            try log.write(header)
            if header.recordCount > header.compactionRecordThreshold || header.committedEnd > header.compactionByteThreshold {
                do throws(WormholeError) {
                    try compact(&log, identifier: identifier)
                } catch {
                    // The message is committed; compaction is retried by the next pass.
                    Logger(label: "Wormhole").warning("could not compact '\(log.path)': \(error)")
                }
            }
            return sequence
        }
        guard let sequence else { throw WormholeError(.containerUnavailable, "cannot create '\(handle.path)'", path: handle.path) }
        try notificationCenter.post(validatedName: identifier, path: handle.notificationPath)
        return WormholeRecord(identifier: identifier, sequence: sequence,
                              date: Date(timeIntervalSince1970: Double(nanoseconds) / 1_000_000_000),
                              processID: processID, kind: kind, payload: payload)
    }

    public func clearMessageContents(identifier: String) throws(WormholeError) {
        try Identifier.validate(identifier)
        _ = try withLockedLog(identifier, create: false) { (log: inout LockedLog) throws(WormholeError) -> Bool in
            guard var header = log.header else { return false }
            header.clearedThrough = header.lastSequence
            try log.write(header)
            try compact(&log, identifier: identifier)
            return true
        }
    }

    public func clearAllMessageContents() throws(WormholeError) {
        for identifier in try identifiers() {
            do throws(WormholeError) {
                try clearMessageContents(identifier: identifier)
            } catch where error.code == .unsupportedFormat {
                // Not a log of ours: left as it is.
                continue
            }
        }
    }

    /// Identifiers that have a log file in the directory.
    func identifiers() throws(WormholeError) -> [String] {
        let names = try Syscalls.directoryEntries(directory).orThrow("list", path: directory)
        return names.compactMap { name in
            guard name.hasSuffix(LogFormat.fileSuffix), !name.hasPrefix(".") else { return nil }
            let identifier = String(name.dropLast(LogFormat.fileSuffix.count))
            return (try? Identifier.validate(identifier)) == nil ? nil : identifier
        }.sorted()
    }

    // MARK: - Reading

    public func latestRecord(identifier: String) throws(WormholeError) -> WormholeRecord? {
        try Identifier.validate(identifier)
        do throws(WormholeError) {
            return try LogSnapshot(path: logPath(identifier), identifier: identifier, wholeLog: false)?.latest()
        } catch where error.code == .corruptRecord {
            // A header read torn by a concurrent append can point past what was read:
            // look once more before calling the record corrupt.
            return try LogSnapshot(path: logPath(identifier), identifier: identifier, wholeLog: false)?.latest()
        }
    }

    public func summaries() throws(WormholeError) -> [WormholeIdentifierSummary] {
        var result: [WormholeIdentifierSummary] = []
        for identifier in try identifiers() {
            guard let snapshot = try? LogSnapshot(path: logPath(identifier), identifier: identifier, wholeLog: true) else { continue }
            let visible = snapshot.records.filter { $0.sequence > snapshot.header.clearedThrough }
            result.append(WormholeIdentifierSummary(
                identifier: identifier, messageCount: visible.count,
                byteCount: visible.reduce(0) { $0 + $1.payload.count },
                lastSequence: snapshot.header.lastSequence, lastUpdate: visible.last?.date))
        }
        return result
    }

    public func makeReader(identifier: String, startingFrom start: Wormhole.StartingPoint) throws(WormholeError) -> any WormholeTransitingReader {
        try Identifier.validate(identifier)
        return try FileLogReader(transiting: self, identifier: identifier, start: start)
    }

    public func observe(identifier: String, handler: @escaping @Sendable (WormholeTransitingEvent) -> Void) throws(WormholeError) -> any WormholeTransitingObservation {
        try Identifier.validate(identifier)
        let id = try notificationCenter.subscribe(identifier) { event in
            switch event {
            case .changed, .rescan: handler(.wake)
            case .failed(let error): handler(.failed(error))
            }
        }
        return EngineObservation(id: id)
    }

    // MARK: - The locked log

    /// One identifier's log, opened for writing, under its `flock` and the handle's mutex.
    struct LockedLog {
        let fd: FileDescriptor
        let path: String
        /// `nil` when the file has just been created and has no header yet.
        var header: LogFormat.Header?

        mutating func initialize(_ configuration: Wormhole.Configuration) throws(WormholeError) -> LogFormat.Header {
            var header = LogFormat.Header()
            header.logID = UInt64.random(in: 1...UInt64.max)
            header.compactionRecordThreshold = UInt32(clamping: 2 * configuration.retainedMessageCount)
            header.compactionByteThreshold = UInt64(LogFormat.headerSize + 2 * configuration.retainedByteCount)
            try write(header)
            return header
        }

        /// Writes the header with one 128-byte `pwrite` (the commit point of an append).
        mutating func write(_ header: LogFormat.Header) throws(WormholeError) {
            let fd = self.fd
            let result = withUnsafeTemporaryAllocation(byteCount: LogFormat.headerSize, alignment: 8) { bytes in
                header.encode(into: bytes)
                return Syscalls.write(fd, UnsafeRawBufferPointer(bytes), at: 0)
            }
            try result.orThrow("write the header of", path: path)
            self.header = header
        }
    }

    /// A cached descriptor for one identifier's log, and the paths of its files. Its
    /// mutex keeps threads of this process apart (a `flock` is shared by every thread
    /// using the same descriptor).
    final class LogHandle: Sendable {
        let descriptor = Locked<FileDescriptor?>(nil)
        /// `<directory>/<identifier>.wormhole`.
        let path: String
        /// `<directory>/<identifier>.notification`, touched after each append.
        let notificationPath: String

        init(path: String, notificationPath: String) {
            self.path = path
            self.notificationPath = notificationPath
        }

        func close() {
            descriptor.withLock { fd in
                try? fd?.close()
                fd = nil
            }
        }
    }

    private func handle(for identifier: String) -> LogHandle {
        let (handle, evicted) = logs.withLock { logs -> (LogHandle, [LogHandle]) in
            if let handle = logs[identifier] { return (handle, []) }
            var evicted: [LogHandle] = []
            while logs.count >= Self.cachedLogLimit, let key = logs.keys.first {
                evicted.append(logs.removeValue(forKey: key)!)
            }
            let handle = LogHandle(path: logPath(identifier), notificationPath: notificationCenter.path(forName: identifier))
            logs[identifier] = handle
            return (handle, evicted)
        }
        for old in evicted { old.close() }
        return handle
    }

    /// Runs `body` with the log of `identifier` locked against every other writer. The
    /// log is opened (and created when `create`) as needed; a log that was replaced or
    /// deleted since it was opened is opened again. Returns `nil` when the log does not
    /// exist and `create` is false.
    func withLockedLog<T: Sendable>(_ identifier: String, create: Bool, _ body: (inout LockedLog) throws(WormholeError) -> T) throws(WormholeError) -> T? {
        try withLockedLog(handle(for: identifier), create: create, body)
    }

    /// ``withLockedLog(_:create:_:)`` with the handle already found.
    func withLockedLog<T: Sendable>(_ handle: LogHandle, create: Bool, _ body: (inout LockedLog) throws(WormholeError) -> T) throws(WormholeError) -> T? {
        let path = handle.path
        return try handle.descriptor.withLock { (cached: inout FileDescriptor?) throws(WormholeError) -> T? in
            for _ in 0..<64 {
                let fd: FileDescriptor
                if let open = cached {
                    fd = open
                } else {
                    guard let opened = try openLog(path, create: create) else { return nil }
                    fd = opened
                    cached = opened
                }
                try Syscalls.lock(fd).orThrow("lock", path: path)
                let status: stat
                do throws(WormholeError) {
                    status = try Syscalls.fileStatus(fd).orThrow("inspect", path: path)
                } catch {
                    Syscalls.unlock(fd)
                    throw error
                }
                if status.st_nlink == 0 {
                    // Replaced by a compaction, or deleted: this inode is no longer the log.
                    Syscalls.unlock(fd)
                    try? fd.close()
                    cached = nil
                    continue
                }
                do throws(WormholeError) {
                    let header = try Self.readHeader(fd, path: path)
                    // Under the lock a log's data is always written before its header: a
                    // commit offset past the end of the file is damage, not a write in flight.
                    if let header, header.committedEnd > UInt64(status.st_size) {
                        throw WormholeError(.unsupportedFormat,
                            "'\(path)' has a damaged header (commit offset \(header.committedEnd) is past the end of the file); move it out of the container or delete it",
                            path: path)
                    }
                    var log = LockedLog(fd: fd, path: path, header: header)
                    let result = try body(&log)
                    Syscalls.unlock(fd)
                    return result
                } catch {
                    Syscalls.unlock(fd)
                    throw error
                }
            }
            throw WormholeError(.systemError, "'\(path)' kept being replaced while this process tried to lock it", path: path)
        }
    }

    private func openLog(_ path: String, create: Bool) throws(WormholeError) -> FileDescriptor? {
        var options: FileDescriptor.OpenOptions = [.noFollow, .closeOnExec]
        if create { options.insert(.create) }
        for attempt in 0..<2 {
            do {
                return try FileDescriptor.open(FilePath(path), .readWrite, options: options, permissions: [.ownerReadWrite])
            } catch {
                let errno = (error as? Errno) ?? .ioError
                if errno == .noSuchFileOrDirectory {
                    guard create, attempt == 0 else { return nil }
                    // The directory was deleted: recreate it, as the listeners do.
                    try WormholeContainer.prepare(directory, createParents: true)
                    continue
                }
                if errno == .tooManySymbolicLinkLevels {
                    throw WormholeError(.containerInsecure, "'\(path)' is a symbolic link; Wormhole does not follow links in its container. Remove it", path: path, errno: errno)
                }
                throw WormholeError.system("open", errno, path: path)
            }
        }
        return nil
    }

    /// Reads a header without holding the lock, as readers do. A writer may be rewriting
    /// it at that instant, and a read that overlaps the write can mix old and new fields
    /// (seen: a new last-record offset with an old commit offset), so a header that looks
    /// damaged is read again before it is reported.
    static func readHeaderUnlocked(_ fd: FileDescriptor, path: String) throws(WormholeError) -> LogFormat.Header? {
        var attempt = 0
        while true {
            do throws(WormholeError) {
                return try readHeader(fd, path: path)
            } catch where error.code == .unsupportedFormat && attempt < 3 {
                attempt += 1
                sched_yield()
            }
        }
    }

    /// Reads and decodes the header with one `pread` into a buffer on the stack; `nil`
    /// for an empty file (a log being created).
    static func readHeader(_ fd: FileDescriptor, path: String) throws(WormholeError) -> LogFormat.Header? {
        try withUnsafeTemporaryAllocation(byteCount: LogFormat.headerSize, alignment: 8) { bytes -> Result<LogFormat.Header?, WormholeError> in
            switch Syscalls.read(fd, into: bytes, at: 0) {
            case .success(let count):
                return Result { () throws(WormholeError) in
                    try LogFormat.Header.decode(UnsafeRawBufferPointer(rebasing: bytes[..<count]), path: path)
                }
            case .failure(let errno):
                return .failure(WormholeError.system("read the header of", errno, path: path))
            }
        }.get()
    }

    // MARK: - Compaction

    /// Rewrites the log with only what must be kept: the retained history (the last
    /// ``Wormhole/Configuration/retainedMessageCount`` messages within
    /// ``Wormhole/Configuration/retainedByteCount``, never cleared ones) and every record
    /// a live listener has not read yet. The new file replaces the old by `rename`;
    /// readers holding the old one read it to its end, then move to the new one.
    func compact(_ log: inout LockedLog, identifier: String) throws(WormholeError) {
        guard let header = log.header else { return }
        let bytes = try LogSnapshot.read(log.fd, from: LogFormat.headerSize, to: Int(header.committedEnd), path: log.path)
        // Where each record starts, and its sequence number and size.
        var entries: [(offset: Int, sequence: UInt64, length: Int)] = []
        bytes.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                if let (sequence, length) = LogFormat.peek(buffer, at: offset), offset + length <= buffer.count {
                    entries.append((offset, sequence, length))
                    offset += length
                } else {
                    offset = LogFormat.nextMarker(in: buffer, after: offset) ?? buffer.count
                }
            }
        }
        // The retained history: newest first, within both limits, the latest always.
        var keepFrom = header.lastSequence + 1
        var keptCount = 0
        var keptBytes = 0
        for entry in entries.reversed() where entry.sequence > header.clearedThrough {
            let payload = entry.length - LogFormat.recordHeaderSize
            if keptCount > 0 && (keptCount >= configuration.retainedMessageCount || keptBytes + payload > configuration.retainedByteCount) { break }
            keepFrom = entry.sequence
            keptCount += 1
            keptBytes += payload
        }
        // A claim is another process's file: any value must be safe here.
        if let claim = ListenerCursor.lowestLiveClaim(container: directory, identifier: identifier),
           case (let next, false) = claim.addingReportingOverflow(1) {
            keepFrom = min(keepFrom, next)
        }
        let firstKept = entries.firstIndex { $0.sequence >= keepFrom } ?? entries.count
        let start = firstKept < entries.count ? entries[firstKept].offset : bytes.count
        let kept = entries.count - firstKept

        var newHeader = header
        newHeader.recordCount = UInt32(kept)
        newHeader.committedEnd = UInt64(LogFormat.headerSize + bytes.count - start)
        newHeader.lastRecordOffset = kept > 0 ? UInt64(LogFormat.headerSize + entries[entries.count - 1].offset - start) : 0
        newHeader.compactionRecordThreshold = UInt32(clamping: max(2 * configuration.retainedMessageCount, kept + configuration.retainedMessageCount))
        newHeader.compactionByteThreshold = UInt64(LogFormat.headerSize) + UInt64(max(2 * configuration.retainedByteCount, bytes.count - start + configuration.retainedByteCount))

        let temporary = directory + "/." + identifier + LogFormat.fileSuffix + ".compacting"
        do {
            let fd = try FileDescriptor.open(FilePath(temporary), .writeOnly,
                                             options: [.create, .truncate, .noFollow, .closeOnExec],
                                             permissions: [.ownerReadWrite])
            defer { try? fd.close() }
            _ = try fd.writeAll(toAbsoluteOffset: 0, newHeader.encoded())
            _ = try bytes[start...].withUnsafeBytes { try fd.writeAll(toAbsoluteOffset: Int64(LogFormat.headerSize), $0) }
        } catch {
            _ = Syscalls.unlink(temporary)
            throw WormholeError.system("write compacted log", (error as? Errno) ?? .ioError, path: temporary)
        }
        try Syscalls.rename(temporary, log.path).orThrow("replace", path: log.path)
        log.header = newHeader
    }
}

/// An engine subscription, as a ``WormholeTransitingObservation``.
final class EngineObservation: WormholeTransitingObservation {
    private let id: UInt64
    private let cancelled = Atomic<Bool>(false)
    init(id: UInt64) { self.id = id }
    func cancel() {
        guard !cancelled.exchange(true, ordering: .acquiringAndReleasing) else { return }
        InotifyEngine.shared.unsubscribe(id)
    }
    deinit { cancel() }
}
