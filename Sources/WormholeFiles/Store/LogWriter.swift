#if canImport(Glibc)
import Glibc
#endif
import Logging
import SystemPackage
@_spi(Backend) import WormholeCore

/// When a writer compacts a log, and the thresholds each log's header carries: handed the
/// configuration, used by the writer (is it due?), by a new log's header and by
/// ``LogCompaction`` (the thresholds of the log it writes).
package struct CompactionPolicy {
    package let configuration: WormholeConfiguration

    /// Whether the locked log, with its whole records ending at `tail`, is due for compaction.
    package func isDue(_ header: LogFormat.Header, _ tail: LogFile.Tail) -> Bool {
        tail.end > header.compactionByteThreshold || tail.lastSequence &- header.baseSequence > header.compactionRecordThreshold
    }

    /// The header of a log created now: a random identity, numbering from 1, the
    /// thresholds of a log that holds nothing yet.
    package func newHeader() -> LogFormat.Header {
        var header = LogFormat.Header()
        header.logID = UInt64.random(in: 1...UInt64.max)
        (header.compactionByteThreshold, header.compactionRecordThreshold) = thresholds(keptCount: 0, keptBytes: 0)
        return header
    }

    /// The thresholds of a log that holds `keptCount` records in `keptBytes` after its
    /// header: twice what was kept, or twice the retention if more (Protocol.md §10.1), so
    /// that each record is copied a bounded number of times on average.
    package func thresholds(keptCount: Int, keptBytes: Int) -> (bytes: UInt64, records: UInt64) {
        let retention = configuration.retainedByteCount + configuration.retainedMessageCount * LogFormat.recordOverhead
        return (UInt64(LogFormat.headerSize) + 2 * UInt64(max(retention, keptBytes)),
                2 * UInt64(max(configuration.retainedMessageCount, keptCount)))
    }
}

/// The writing side of one identifier's log in this process: a cached descriptor and what
/// this process learned of the log (its tail), behind a mutex that keeps the process's
/// threads apart (a `flock` is shared by every thread using the same descriptor). Once
/// retired (evicted from the cache, or its wormhole released) its descriptor is closed; a
/// call that took the writer before that still completes, with a descriptor opened for
/// that call alone.
package final class LogWriter: Sendable {
    package let identifier: String
    private let state = Locked(State(), rank: .logWriter)

    private struct State {
        var log: LogFile?
        var tail: LogFile.Tail?
        var retired = false
        /// The container's generation when the log was opened.
        var generation: UInt64 = 0
        var buffer: ReadBuffer?

        mutating func closeLog() {
            log?.close()
            log = nil
            tail = nil
        }
    }

    /// What a writer's body is handed while the log is locked against every other
    /// writer: the log, its header, and the tail (the end of its whole records; a torn
    /// tail was cut), which the body moves past what it appends.
    package struct LockedLog {
        package let log: LogFile
        package let header: LogFormat.Header
        package var tail: LogFile.Tail
    }

    /// What one locked pass came to; whatever it is, the log was unlocked before the
    /// caller sees it, and only then is a file closed.
    private enum Pass<T> {
        /// Done; `replacement` is the log's new file (compacted or converted) when there is one.
        case done(T, replacement: (log: LogFile, tail: LogFile.Tail)?)
        /// The file is no longer the log (replaced or deleted): open the one at the name.
        case reopen
        /// Converted to this version: lock the new file and start again.
        case converted(log: LogFile, tail: LogFile.Tail)
    }

    package init(identifier: String) { self.identifier = identifier }

    package func retire() {
        state.withLock {
            $0.retired = true
            $0.closeLog()
        }
    }

    /// Retires the writer unless another thread is inside ``withLockedLog(_:create:clearing:_:)``;
    /// returns whether it did. Never waits: the caller may hold another writer's lock.
    package func retireIfIdle() -> Bool {
        state.withLockIfAvailable { (state: inout State) -> Void in
            state.retired = true
            state.closeLog()
        } != nil
    }

    /// Runs `body` with the log locked against every other writer. The log is opened
    /// (and created when `create`) as needed; one that was replaced or deleted since it
    /// was opened is opened again; one of an earlier version is converted first. After
    /// `body` the log is compacted when due (always when `clearing`). Returns `nil` when
    /// the log does not exist and `create` is false.
    package func withLockedLog<T: Sendable>(_ transiting: FileTransiting, create: Bool, clearing: Bool = false,
                          _ body: (inout LockedLog) throws(WormholeError) -> T) throws(WormholeError) -> T? {
        try state.withLock { (state: inout State) throws(WormholeError) -> T? in
            // A retired writer (evicted by another thread after this one took it) still
            // works, for this call: it opens the log and closes it after.
            defer { if state.retired { state.closeLog() } }
            transiting.noticeContainerMoves()
            if state.log != nil, state.generation != transiting.container.current.generation {
                // The container was replaced: this log belongs to the old directory.
                state.closeLog()
            }
            let buffer = state.buffer ?? ReadBuffer()
            state.buffer = buffer
            for _ in 0..<64 {
                if state.log == nil {
                    guard try open(transiting, create: create, into: &state) else { return nil }
                }
                let log = state.log!
                let pass: Pass<T>
                do throws(WormholeError) {
                    pass = try log.whileLocked { () throws(WormholeError) -> Pass<T> in
                        try locked(log, &state, transiting, clearing: clearing, buffer: buffer, body)
                    }
                } catch {
                    if error.code == .unsupportedFormat { state.closeLog() }
                    throw error
                }
                switch pass {
                case .reopen:
                    state.closeLog()
                case .converted(let newLog, let newTail):
                    log.close()
                    state.log = newLog
                    state.tail = newTail
                case .done(let result, let replacement):
                    if let replacement {
                        log.close()
                        state.log = replacement.log
                        state.tail = replacement.tail
                        buffer.shrink()
                    }
                    return result
                }
            }
            throw WormholeError(.systemError, "'\(transiting.logPath(identifier))' kept being replaced while this process tried to lock it",
                                path: transiting.logPath(identifier))
        }
    }

    /// Opens the log into `state`; `false` when there is none and `create` is false.
    private func open(_ transiting: FileTransiting, create: Bool, into state: inout State) throws(WormholeError) -> Bool {
        let container = transiting.container
        var generation = container.current.generation
        let opened: LogFile?
        do throws(WormholeError) {
            opened = try LogFile.open(identifier, in: container, access: .readWrite, create: create)
        } catch where error.errno == .tooManyOpenFiles && transiting.releaseIdleLogs(except: identifier) > 0 {
            // Out of descriptors, some held by this cache: freed, tried once more.
            opened = try LogFile.open(identifier, in: container, access: .readWrite, create: create)
        } catch where error.code == .containerUnavailable && create {
            // The container was deleted (or moved away): make it again, as the listeners
            // expect, and open the log in the new one.
            try container.refresh()
            generation = container.current.generation
            opened = try LogFile.open(identifier, in: container, access: .readWrite, create: create)
        }
        guard let opened else { return false }
        state.log = opened
        state.generation = generation
        state.tail = nil
        return true
    }

    /// One pass over the locked `log`: its header and tail, the body, then compaction.
    /// Never closes or unlocks a file: it says what is to be done once the lock is released.
    private func locked<T: Sendable>(_ log: LogFile, _ state: inout State, _ transiting: FileTransiting, clearing: Bool, buffer: ReadBuffer,
                           _ body: (inout LockedLog) throws(WormholeError) -> T) throws(WormholeError) -> Pass<T> {
        let configuration = transiting.configuration
        let policy = CompactionPolicy(configuration: configuration)
        var log = log
        let status = try log.status()
        // Replaced by a compaction, or deleted: this inode is no longer the log.
        if status.linkCount == 0 { return .reopen }
        let size = Int(status.size)
        let repair = LogRepair(log: log, identifier: identifier, container: transiting.container,
                               maximumPayload: configuration.maximumMessageSize, buffer: buffer)
        let header = try header(of: log, size: size, &state, repair: repair, policy: policy)
        log.header = header
        state.log = log
        let cold = state.tail == nil
        var tail = try Self.currentTail(log, header: header, size: max(size, LogFormat.headerSize), known: state.tail,
                                        maximumPayload: configuration.maximumMessageSize, buffer: buffer)
        // This process does not know what was handed out: the listeners' positions in
        // this log say at least that much. Above the file's last record, the log was cut
        // behind everyone's back.
        if cold { repair.noticeCut(header: header, tail: &tail) }
        if tail.end < size {
            // A record torn by a writer that was killed: cut it.
            try Syscalls.truncate(log.fd, to: Int64(tail.end)).orThrow("cut the torn end of", path: log.path)
        }
        state.tail = tail
        let compaction = LogCompaction(container: transiting.container, identifier: identifier, policy: policy)
        if header.version != LogFormat.version && !clearing {
            // A log of an earlier version: converted to this one (a compaction that
            // writes each record again) before anything is appended to it. (A clear's
            // own compaction converts it.)
            let (newLog, newTail) = try compaction.compact(log, header: header, tail: tail, clearing: false, buffer: buffer)
            return .converted(log: newLog, tail: newTail)
        }
        var locked = LockedLog(log: log, header: header, tail: tail)
        let result = try body(&locked)
        tail = locked.tail
        state.tail = tail
        guard clearing || policy.isDue(header, tail) else { return .done(result, replacement: nil) }
        return .done(result, replacement: try compact(log, header: header, tail: tail, &state, clearing: clearing,
                                                      compaction: compaction, buffer: buffer))
    }

    /// The header of the locked `log` of `size` bytes: the one this process knows while
    /// the file is no shorter than it left it; repaired when it is (emptied or cut by a
    /// program that does not follow the protocol); written, when the file is new.
    private func header(of log: LogFile, size: Int, _ state: inout State, repair: LogRepair,
                        policy: CompactionPolicy) throws(WormholeError) -> LogFormat.Header {
        if let known = log.header, size >= state.tail?.end ?? LogFormat.headerSize {
            return known
        } else if let known = log.header {
            let repaired = try repair.repairShrunk(known: known, knownTail: state.tail, size: size)
            state.tail = repaired.tail
            return repaired.header
        } else if size == 0 {
            let header = policy.newHeader()
            try header.encoded().withUnsafeBytes { Syscalls.write(log.fd, $0, at: 0) }.orThrow("write the header of", path: log.path)
            state.tail = LogFile.Tail(end: LogFormat.headerSize, lastSequence: 0, lastRecordOffset: nil)
            return header
        }
        guard let read = try log.readHeader() else { throw WormholeError(.unsupportedFormat, "'\(log.path)' has no header", path: log.path) }
        return read
    }

    /// Compacts the locked `log` after a pass's body; returns the replacement, if any. A
    /// clear with no room for its cleared copy empties the log in place; another
    /// compaction that fails is tried again by the next pass (the message is committed).
    private func compact(_ log: LogFile, header: LogFormat.Header, tail: LogFile.Tail, _ state: inout State, clearing: Bool,
                         compaction: LogCompaction, buffer: ReadBuffer) throws(WormholeError) -> (log: LogFile, tail: LogFile.Tail)? {
        var log = log
        do throws(WormholeError) {
            return try compaction.compact(log, header: header, tail: tail, clearing: clearing, buffer: buffer)
        } catch where clearing && (error.errno == .noSpace || error.errno == .diskQuotaExceeded) {
            // No room for the cleared copy (out of blocks or inodes): the log gets a header
            // with everything cleared and is emptied in place, which frees its blocks
            // (Protocol.md §10.3). Same identity, numbering goes on; listeners that had not
            // read what was cleared are told how many they lost.
            let emptied = try Self.emptyInPlace(log, header: header, through: tail.lastSequence, compaction.policy)
            log.header = emptied.header
            state.log = log
            state.tail = emptied.tail
            return nil
        } catch {
            if clearing { throw error }
            Logger(label: "Wormhole").warning("could not compact '\(log.path)': \(error)")
            return nil
        }
    }

    /// Empties the locked `log` and writes its header again, with every message up to
    /// `last` cleared: a clear with no room for a cleared copy. Returns the new tail.
    private static func emptyInPlace(_ log: LogFile, header: LogFormat.Header, through last: UInt64,
                                     _ policy: CompactionPolicy) throws(WormholeError) -> (header: LogFormat.Header, tail: LogFile.Tail) {
        var emptied = policy.newHeader()
        emptied.logID = header.logID
        emptied.baseSequence = last
        emptied.clearedThrough = last
        // The header first, over the old one (no new block needed), then the records go:
        // a reader sees the old log or the emptied one, never an empty file.
        try emptied.encoded().withUnsafeBytes { Syscalls.write(log.fd, $0, at: 0) }.orThrow("write the header of", path: log.path)
        try Syscalls.truncate(log.fd, to: Int64(LogFormat.headerSize)).orThrow("empty", path: log.path)
        return (emptied, LogFile.Tail(end: LogFormat.headerSize, lastSequence: last, lastRecordOffset: nil))
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
            tail.includeDamagedEnd(end)
            return tail
        }
        return try log.findTail(size: size, header: header, maximumPayload: maximumPayload, buffer: buffer)
    }
}
