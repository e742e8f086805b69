import SystemPackage
@_spi(Backend) import WormholeCore

/// A listener's position in one identifier's log, as an explicit state machine.
///
/// - ``State/waiting``: no log file yet (or it was deleted): each wake-up looks whether
///   it exists now.
/// - ``State/following(_:)``: reading one file from an offset. A wake-up costs one
///   `pread`; whole records above the last delivered one are delivered, an incomplete one
///   (being written, or torn by a killed writer) waits for the next wake-up.
/// - ``State/parked(device:inode:header:offset:)``: a reader made not to hold its log
///   between reads (``holdsLog`` false: a tap on every identifier of a container, which
///   would otherwise hold one descriptor per identifier) closes it after each read and
///   keeps where it stood; the next read opens the file at the name again and goes on
///   from there if it is the same file, or reads the one there now as after an
///   invalidation. Records appended to a file after the read before its replacement are
///   read from the new file when a compaction kept them (it keeps the retained ones);
///   a file deleted outright takes them with it.
/// - ``State/closed``.
///
/// When inotify says the file at the log's name changed (a compaction renamed a new one
/// over it, or it was deleted), the reader is invalidated: it reads the file it holds to
/// its end (nothing is appended to a replaced file), then opens the one at the name. The
/// same log (same identity) goes on after the last delivered sequence; a new log starts
/// from its first record. A sequence number above the next expected one means messages
/// were dropped before this reader read them: it reports how many, once, in order.
package final class FileLogReader: WormholeTransitingReader {
    package enum State {
        case waiting
        case following(LogFile, offset: Int)
        case parked(device: UInt64, inode: UInt64, header: LogFormat.Header?, offset: Int)
        case closed
    }

    private let identifier: String
    private let container: ContainerDirectory
    private let maximumPayload: Int
    private var state: State = .waiting
    /// The log this position belongs to; a new one restarts its sequence numbers.
    private var logID: UInt64?
    /// The `logID` of the log the records last read came from; `nil` before any.
    package var currentLogID: UInt64? { logID }
    /// The sequence number of the last record delivered (or skipped by the start).
    private var delivered: UInt64 = 0
    /// The file at the name must be looked at once the held one is read to its end.
    private var invalidated = false
    /// Damage already reported, so that a damaged record is reported once.
    private var reportedDamage: Int = -1
    /// A position that resumes (a durable name, a work queue's state): it gets every
    /// message after it, cleared or not, as a listener that never stopped would, since
    /// its claim kept them (a clear hides messages from readers that start later, not
    /// from those whose claim kept them: Protocol.md §10.3, §11.3). Its gaps are reported
    /// whatever the clears.
    private var seesClearedMessages = false
    /// The offset at which this reader last found its file cut or rewritten, so that a
    /// rescan happens once per finding.
    private var rescannedAt = -1
    private var cursor: ListenerCursor?
    /// The container's generation when the claim (or durable position) was made: a
    /// container replaced since holds neither, and they are made again in it.
    private var claimedGeneration: UInt64 = 0
    private let claimStep: UInt64
    /// A durable listener's stored position, written as each message is handled.
    private var durable: DurablePosition?
    private let buffer = ReadBuffer()
    /// Whether the log stays open between reads; without, the reader holds no descriptor
    /// while it waits (``State/parked(device:inode:header:offset:)``).
    private let holdsLog: Bool

    /// - Parameters:
    ///   - durableName: For a durable listener, its name: the start is where its position
    ///     says (`start` applies the first time the name is used).
    ///   - claims: Whether the reader keeps a listener claim (§12). A work queue's member
    ///     reads without one: its queue's state keeps what the queue has not handled
    ///     (§18.4), and `status` lists the member once, under its queue.
    ///   - holdsLog: Whether the log stays open between reads. A reader that does not
    ///     hold it costs an `open` and a `close` per read, and no descriptor while it waits.
    ///   - positionLogID: For a position kept elsewhere (a work queue's state, §18.4),
    ///     with `start` after its sequence number: the log that number belongs to (0: none
    ///     yet). Such a position claims what follows it, so it is not raised to what a
    ///     clear hid; in another log (the log was made anew) it starts at that log's first
    ///     message, as its claim of another log kept everything.
    package init(transiting: FileTransiting, identifier: String, start: WormholeStartingPoint, durableName: String? = nil, claims: Bool = true,
         holdsLog: Bool = true, positionLogID: UInt64? = nil) throws(WormholeError) {
        self.identifier = identifier
        if let positionLogID {
            logID = positionLogID == 0 ? nil : positionLogID
            seesClearedMessages = true
        }
        self.holdsLog = holdsLog
        self.container = transiting.container
        self.maximumPayload = transiting.configuration.maximumMessageSize
        // Claim first (0: keep everything), then look: nothing can be compacted away
        // between looking and claiming. A durable listener's position is its claim.
        claimStep = UInt64(max(1, transiting.configuration.retainedMessageCount / 4))
        claimedGeneration = container.current.generation
        if durableName == nil && claims {
            cursor = try ListenerCursor(container: container, identifier: identifier, step: claimStep)
        }
        do throws(WormholeError) {
            try begin(start: start, durableName: durableName, retained: UInt64(transiting.configuration.retainedMessageCount))
        } catch {
            close()
            throw error
        }
        if !holdsLog { park() }
    }

    /// Closes the log and keeps where the reader stands in it, for a reader that does not
    /// hold its log between reads.
    private func park() {
        guard case .following(let log, let offset) = state else { return }
        state = .parked(device: log.device, inode: log.inode, header: log.header, offset: offset)
        log.close()
    }

    /// Opens the file at the log's name for a parked reader: the file it read goes on at
    /// its offset, with the header it had (a change under it is found as for a held log);
    /// another file, or none, is looked at as after an invalidation. Out of descriptors,
    /// the reader stays parked, and the next read tries again.
    private func unpark(device: UInt64, inode: UInt64, header: LogFormat.Header?, offset: Int) throws(WormholeError) {
        // What ``openCurrent()`` does when the file may have been replaced: the directory
        // at the path now, and the claim made again in it.
        let opened = try openAtName(followingTheDirectory: invalidated)
        guard var opened, opened.device == device, opened.inode == inode else {
            opened?.close()
            state = .waiting
            return
        }
        // This reader held no descriptor: a log deleted and made again (the events said
        // the file at the name may have changed) can have the deleted one's inode number.
        // Without the header it read (none yet, or another logID) it is another log, read
        // from its start, not the old one emptied under this reader.
        if invalidated, let header, opened.header?.logID != header.logID {
            opened.close()
            state = .waiting
            return
        }
        if let header { opened.header = header }
        invalidated = false
        state = .following(opened, offset: offset)
    }

    private func begin(start: WormholeStartingPoint, durableName: String?, retained: UInt64) throws(WormholeError) {
        var start = start
        if let durableName {
            let durable = try DurablePosition(container: container, identifier: identifier, name: durableName)
            self.durable = durable
            if let stored = durable.stored {
                // Resume after the last message handled. A position in another log (the
                // log was removed and made again) resumes at the start of this one.
                start = .after(sequence: stored.position)
                logID = stored.logID == 0 ? nil : stored.logID
                seesClearedMessages = true
            }
        }
        try locate(start: start, retained: retained)
        // Where it starts, stored at once: a name used for the first time keeps what it
        // starts from.
        try durable?.store(delivered, logID: logID ?? 0)
    }

    private func locate(start: WormholeStartingPoint, retained: UInt64) throws(WormholeError) {
        var start = start
        if case .after(let sequence) = start { delivered = sequence }
        guard let log = try LogFile.open(identifier, in: container, access: .readOnly, create: false) else {
            if logID != nil { delivered = 0; logID = nil }
            return
        }
        guard let header = log.header else {
            // Being created: its first record will be new.
            if logID != nil { delivered = 0; logID = nil }
            state = .following(log, offset: LogFormat.headerSize)
            return
        }
        if let logID, logID != header.logID {
            // The position belongs to an older log: everything in this one is new, and
            // its claim (0 in another log: Protocol.md §12.3 Q1, §18.4) kept all of it,
            // cleared or not (§12.4 D4).
            start = .after(sequence: 0)
            delivered = 0
        }
        logID = header.logID
        var offset = LogFormat.headerSize
        switch start {
        case .now, .latest:
            let tail = try log.findTail(size: Int(try log.status().size), header: header, maximumPayload: maximumPayload, buffer: buffer)
            delivered = tail.lastSequence
            offset = tail.end
            if case .latest = start, let last = tail.lastRecordOffset, tail.lastSequence > header.clearedThrough {
                delivered = tail.lastSequence - 1
                offset = last
            }
        case .history:
            let tail = try log.findTail(size: Int(try log.status().size), header: header, maximumPayload: maximumPayload, buffer: buffer)
            delivered = max(header.clearedThrough, header.baseSequence, tail.lastSequence > retained ? tail.lastSequence - retained : 0)
        case .after(let sequence):
            // Older than what is kept: the first read reports the gap.
            delivered = seesClearedMessages ? sequence : max(sequence, header.clearedThrough)
        }
        buffer.shrink()
        state = .following(log, offset: offset)
        cursor?.update(delivered, logID: logID ?? 0, force: true)
    }

    deinit { close() }

    package func close() {
        if case .following(let log, _) = state { log.close() }
        state = .closed
        cursor?.close()
        cursor = nil
        durable?.close()
        durable = nil
    }

    /// A durable listener handled the message `sequence` of the log being read: its
    /// position moves there. (A batch never spans two logs, so the log is this one.)
    package func acknowledge(_ sequence: UInt64) throws(WormholeError) {
        try durable?.store(sequence, logID: logID ?? 0)
    }

    package func invalidate() {
        invalidated = true
    }

    /// Set when a read caught up without writing the claim (at most once per idle
    /// interval): a read after ``ListenerCursor/idleInterval`` writes it.
    private var positionIsUnpublished = false

    package var unpublishedPositionDelay: Double? { positionIsUnpublished ? ListenerCursor.idleSeconds : nil }

    /// A read stopped at the end of a replaced file with records already in hand (a
    /// durable reader's batch never spans two logs): the next read moves on.
    package var mayHaveMore: Bool {
        if pendingError != nil { return true }
        switch state {
        case .following, .parked: return invalidated
        case .waiting, .closed: return false
        }
    }

    /// A failure met after records were already taken in the same read: those records are
    /// returned (the position has moved past them), and the failure is thrown by the next
    /// read, so that it is neither lost nor the cause of a skip.
    private var pendingError: WormholeError?

    package func read(maximumCount: Int) throws(WormholeError) -> [Result<WormholeRecord, WormholeError>] {
        if let pendingError {
            self.pendingError = nil
            throw pendingError
        }
        defer { if !holdsLog { park() } }
        var results: [Result<WormholeRecord, WormholeError>] = []
        do throws(WormholeError) {
            let records = try readRecords(maximumCount: maximumCount, into: &results)
            // Caught up (a short read, nothing more to come without a wake-up): the claim
            // is written now rather than at its next step, so that status shows an idle
            // listener's exact position; at most once per idle interval, so that a busy
            // listener does not write it on every wake-up. No write when it has not moved.
            if records.count < maximumCount && !mayHaveMore {
                positionIsUnpublished = cursor?.caughtUp(at: delivered, logID: logID ?? 0) ?? false
            }
            return withoutExpired(records)
        } catch {
            guard !results.isEmpty else { throw error }
            pendingError = error
            return withoutExpired(finish(results))
        }
    }

    /// Whether records whose expiry has passed are left out (and counted in a
    /// ``WormholeError/Code/messagesExpired`` report in their place). A work queue reads
    /// them, to count them in its state.
    package var dropsExpired = true

    private func withoutExpired(_ results: [Result<WormholeRecord, WormholeError>]) -> [Result<WormholeRecord, WormholeError>] {
        dropsExpired ? WormholeRecord.withoutExpired(results, identifier: identifier) : results
    }

    private func readRecords(maximumCount: Int, into results: inout [Result<WormholeRecord, WormholeError>]) throws(WormholeError) -> [Result<WormholeRecord, WormholeError>] {
        while results.count < maximumCount {
            switch state {
            case .closed:
                return results
            case .parked(let device, let inode, let header, let offset):
                try unpark(device: device, inode: inode, header: header, offset: offset)
            case .waiting:
                // Any wake-up may mean the file exists now: its creation can go unseen when
                // the directory itself was being watched again at that moment.
                guard try openCurrent() else { return finish(results) }
            case .following(let log, let offset):
                guard try readFollowed(log, from: offset, maximumCount: maximumCount, into: &results) else { return finish(results) }
            }
        }
        return finish(results)
    }

    /// Reads the held log from `offset` into `results` (up to `maximumCount`). Returns
    /// whether to read on (the file was cut or rewritten under this reader, or replaced),
    /// `false` when the read is over.
    private func readFollowed(_ log: LogFile, from offset: Int, maximumCount: Int,
                              into results: inout [Result<WormholeRecord, WormholeError>]) throws(WormholeError) -> Bool {
        var log = log
        if log.header == nil, let read = try? log.readHeader() {
            log.header = read
            state = .following(log, offset: offset)
        }
        guard let header = log.header else {
            // Still empty: its creator is writing the header.
            return invalidated && (durable == nil || results.isEmpty) ? try openCurrent() : false
        }
        if logID != header.logID {
            // A log opened while its creator was still writing the header: if it
            // is another log than the one this position belongs to, its numbers
            // start over.
            if logID != nil { delivered = 0 }
            logID = header.logID
        }
        let found = results.count
        let (newOffset, reachedEnd, rewrittenUnderfoot) = try walkFollowed(log, header: header, from: offset,
                                                                           maximumCount: maximumCount, into: &results)
        state = .following(log, offset: newOffset)
        if buffer.capacity > ReadBuffer.standardCapacity { buffer.shrink() }
        // Nothing new: one `fstat` says whether the file is now shorter than where
        // this reader stands (emptied or cut by another program).
        if rewrittenUnderfoot || (newOffset == offset && results.count == found && offset > LogFormat.headerSize
                                  && rescannedAt != offset && changedUnderfoot(log, header: header, at: offset)) {
            rescan(log, from: offset, into: &results)
            return true
        }
        if !reachedEnd { return false }
        // At the end of the held file: if it may have been replaced, move on (a
        // durable reader first returns what it read here: one batch, one log).
        return invalidated && (durable == nil || results.isEmpty) ? try openCurrent() : false
    }

    /// Walks the held log from `offset`, appending to `results` what this reader has not
    /// delivered (records, gaps, damage, records too large) until it holds `maximumCount`.
    /// Returns where the walk stopped, whether it reached the end, and whether damage
    /// where this reader stands shows the file was cut or rewritten under it.
    private func walkFollowed(_ log: LogFile, header: LogFormat.Header, from offset: Int, maximumCount: Int,
                              into results: inout [Result<WormholeRecord, WormholeError>]) throws(WormholeError)
        -> (offset: Int, reachedEnd: Bool, rewrittenUnderfoot: Bool) {
        var reachedEnd = true
        var clearedThrough = header.clearedThrough
        // Damage met by the walk, reported with the next whole record, which says
        // which messages it held (the numbers between the last whole record and
        // that one); `nil` once reported, or when it was reported before.
        var damage: (detail: String, offset: Int)?
        // The last whole record the walk met, or before it (where this reader stands).
        var lastSeen = max(header.baseSequence, delivered)
        // Where this reader stands a record must start: damage there means the file
        // was cut or rewritten under it.
        var rewrittenUnderfoot = false
        let newOffset = try log.walk(from: offset, header: header, maximumPayload: maximumPayload, buffer: buffer) { item in
            if case .corrupt(_, let at) = item, at == offset, offset > LogFormat.headerSize, rescannedAt != offset {
                rewrittenUnderfoot = true
                return false
            }
            switch item {
            case .record(let frame, let bytes, let local, _, _):
                lastSeen = max(lastSeen, frame.sequence)
                reportDamage(&damage, before: frame.sequence, clearedThrough: clearedThrough, path: log.path, into: &results)
                guard frame.sequence > delivered else { return true }
                reportGap(before: frame.sequence, logBase: header.baseSequence, clearedThrough: &clearedThrough, into: &results)
                results.append(.success(LogFormat.record(frame, in: bytes, at: local, identifier: identifier)))
                delivered = frame.sequence
            case .tooLarge(let sequence, let at, let length):
                lastSeen = max(lastSeen, sequence)
                reportDamage(&damage, before: sequence, clearedThrough: clearedThrough, path: log.path, into: &results)
                guard sequence > delivered else { return true }
                reportGap(before: sequence, logBase: header.baseSequence, clearedThrough: &clearedThrough, into: &results)
                results.append(.failure(WormholeError(.messageTooLarge,
                    "message \(sequence) of '\(identifier)' is \(length - header.layout.overhead) bytes, more than this reader's limit of \(maximumPayload) (Wormhole.Configuration.maximumMessageSize); skipped, at offset \(at) of '\(log.path)'",
                    path: log.path, sequence: sequence)))
                delivered = sequence
            case .corrupt(let detail, let at):
                if at > reportedDamage {
                    reportedDamage = at
                    damage = (detail, at)
                }
            }
            if results.count >= maximumCount {
                reachedEnd = false
                return false
            }
            return true
        }
        if damage != nil {
            // A damaged record, whole, ends the file: it took the number after the
            // last whole record (Protocol.md §9.3), which the next message does not.
            reportDamage(&damage, before: lastSeen + 2, clearedThrough: clearedThrough, path: log.path, into: &results)
        }
        return (newOffset, reachedEnd, rewrittenUnderfoot)
    }

    /// Whether the held file was cut or rewritten under this reader, which stands at
    /// `offset` and found nothing new there: it is shorter than `offset`; or bytes follow
    /// that do not start a record; or, with fewer than 4, its header changed. (A writer's
    /// record being written starts with its marker.) One `fstat`, and a `pread` only
    /// when bytes that are not a whole record follow.
    private func changedUnderfoot(_ log: LogFile, header: LogFormat.Header, at offset: Int) -> Bool {
        guard let size = try? log.status().size else { return false }
        if Int(size) < offset { return true }
        if Int(size) == offset { return false }
        if Int(size) - offset >= 4 {
            var marker: UInt32 = 0
            guard case .success(4) = withUnsafeMutableBytes(of: &marker, { Syscalls.read(log.fd, into: $0, at: Int64(offset)) }) else { return false }
            return UInt32(littleEndian: marker) != header.layout.marker
        }
        return (try? log.readHeader()).map { $0 != header } ?? true
    }

    /// The held file was cut or rewritten below `offset` by a program that does not follow
    /// the protocol: reports it once and reads the file again from its first record,
    /// skipping what was delivered. A writer that repairs the log numbers new messages
    /// above every listener's position (``LogRepair``), so nothing new is skipped, and a
    /// gap report says how many of the messages this listener had not read are gone.
    /// This reader's claim is written at once, so that a writer sees its exact position.
    private func rescan(_ log: LogFile, from offset: Int, into results: inout [Result<WormholeRecord, WormholeError>]) {
        rescannedAt = offset
        var log = log
        let size = (try? log.status().size).map(Int.init) ?? 0
        let previous = log.header
        let header = try? log.readHeader()
        log.header = header
        state = .following(log, offset: LogFormat.headerSize)
        cursor?.update(delivered, logID: logID ?? 0, force: true)
        if let header, header.logID == logID, header != previous, header.clearedThrough == header.baseSequence {
            // Emptied by a clear that had no room for a cleared copy (Protocol.md §10.3):
            // what this listener had not read is gone, and it says how much.
            if delivered < header.baseSequence {
                let missed = header.baseSequence - delivered
                results.append(.failure(WormholeError(.messagesLost,
                    "\(missed) message\(missed == 1 ? "" : "s") of '\(identifier)' (\(delivered + 1)...\(header.baseSequence)) were cleared before this listener read them, on a filesystem with no room to keep them for it",
                    path: log.path, missedMessageCount: missed)))
                delivered = header.baseSequence
            }
            return
        }
        let what: String
        if let header, header.logID == logID {
            // Shorter than what was read: cut; as long or longer (bytes that are no record
            // appended, or written over what was read): rewritten.
            what = "\(size < offset ? "cut" : "rewritten") by another program (\(size) bytes where this listener had read \(offset)); it goes on after message \(delivered), and is told of any message it had not read that is gone"
        } else if header != nil {
            what = "emptied by another program and started again as a new log; messages this listener had not read before that are gone, how many is not known"
        } else {
            what = "emptied or overwritten by another program (\(size) bytes where this listener had read \(offset)); messages this listener had not read before that may be gone"
        }
        results.append(.failure(WormholeError(.logChangedOutsideWormhole, "'\(log.path)' was \(what)", path: log.path)))
    }

    private func finish(_ results: [Result<WormholeRecord, WormholeError>]) -> [Result<WormholeRecord, WormholeError>] {
        cursor?.update(delivered, logID: logID ?? 0)
        return results
    }

    /// Reports damage that the walk skipped, before the whole record numbered `sequence`
    /// that follows it: the numbers between the last delivered message and that record
    /// were in the damaged bytes, and are lost to this reader. They count as delivered,
    /// so that the gap is not reported a second time as messages missing from the log.
    private func reportDamage(_ damage: inout (detail: String, offset: Int)?, before sequence: UInt64, clearedThrough: UInt64,
                              path: String, into results: inout [Result<WormholeRecord, WormholeError>]) {
        guard let (detail, offset) = damage else { return }
        damage = nil
        let from = seesClearedMessages ? delivered : max(delivered, clearedThrough)
        guard sequence > from + 1 else {
            results.append(.failure(.corrupt("\(detail), at offset \(offset); skipped (it held no message this listener had not read)", path: path)))
            return
        }
        let missed = sequence - from - 1
        let which = missed == 1 ? "message \(from + 1)" : "messages \(from + 1)...\(sequence - 1)"
        results.append(.failure(WormholeError(.corruptRecord,
            "corrupt record in '\(path)': \(detail), at offset \(offset); skipped up to the next whole record: \(which) of '\(identifier)' \(missed == 1 ? "was" : "were") in the damaged bytes and \(missed == 1 ? "is" : "are") lost",
            path: path, missedMessageCount: missed, sequence: from + 1)))
        delivered = sequence - 1
    }

    /// Reports the messages between the last delivered one and `sequence` that this
    /// reader never saw, unless they were cleared, and why: those at or below the log's
    /// base (`logBase`) were compacted away (the backlog cap, or older than what is
    /// kept); numbers missing above it were in the log and are not there any more (the
    /// file was changed outside the protocol).
    private func reportGap(before sequence: UInt64, logBase: UInt64, clearedThrough: inout UInt64,
                           into results: inout [Result<WormholeRecord, WormholeError>]) {
        let from = seesClearedMessages ? delivered : max(delivered, clearedThrough)
        guard sequence > from + 1 else { return }
        let missed = sequence - from - 1
        let what = "\(missed) message\(missed == 1 ? "" : "s") of '\(identifier)' (\(from + 1)...\(sequence - 1))"
        let why = sequence - 1 <= logBase
            ? "were compacted away before this listener read them: it fell behind by more than the backlog cap (Wormhole.Configuration.maximumBacklogMessageCount, maximumBacklogByteCount), or started before the oldest message kept"
            : "are missing from the log: damaged, or removed by something that changed the file outside the protocol"
        results.append(.failure(WormholeError(.messagesLost, "\(what) \(why)", missedMessageCount: missed)))
    }

    /// After the container was replaced (deleted and made again, or another directory
    /// moved to its path), this listener's claim, or its durable position, is in the old
    /// directory: made again in the new one, before its log is opened (as a new listener
    /// claims before it looks), so that compactions there keep what it has not read.
    private func claimAgainIfReplaced() throws(WormholeError) {
        let generation = container.current.generation
        guard generation != claimedGeneration else { return }
        if cursor != nil {
            let fresh = try ListenerCursor(container: container, identifier: identifier, step: claimStep)
            cursor?.close()
            cursor = fresh
        } else if let durable {
            let fresh = try DurablePosition(container: container, identifier: identifier, name: durable.name)
            durable.close()
            self.durable = fresh
        }
        claimedGeneration = generation
    }

    /// The file at the log's name now; `nil` when there is none. With
    /// `followingTheDirectory`, first the directory at the container's path (a listener
    /// follows it but never makes it: only passes and posts make a deleted container
    /// again) and this reader's claim made again in a replaced one. A file of a format this
    /// library does not read leaves the reader waiting, and is thrown.
    private func openAtName(followingTheDirectory: Bool) throws(WormholeError) -> LogFile? {
        if followingTheDirectory {
            _ = try? container.refresh(create: false)
            try claimAgainIfReplaced()
        }
        do throws(WormholeError) {
            return try LogFile.open(identifier, in: container, access: .readOnly, create: false)
        } catch where error.code == .unsupportedFormat {
            if case .following(let log, _) = state { log.close() }
            state = .waiting
            throw error
        }
    }

    /// Looks at the file at the log's name once the held one is read to its end. Returns
    /// whether the state changed (a new file to read).
    private func openCurrent() throws(WormholeError) -> Bool {
        invalidated = false
        let opened: LogFile?
        do throws(WormholeError) {
            opened = try openAtName(followingTheDirectory: true)
        } catch where error.code != .unsupportedFormat {
            // Out of descriptors, or something that is not a log at the name for now: the
            // next wake-up tries again, so no message of the new file is left unread.
            invalidated = true
            throw error
        }
        guard let opened else {
            if case .following(let log, _) = state { log.close() }
            state = .waiting
            return false
        }
        if case .following(let log, _) = state {
            if log.device == opened.device && log.inode == opened.inode {
                opened.close()
                return false
            }
            log.close()
        }
        if let header = opened.header, let logID, header.logID != logID {
            // Created anew: its numbers start over.
            delivered = 0
        }
        logID = opened.header?.logID ?? logID
        reportedDamage = -1
        state = .following(opened, offset: LogFormat.headerSize)
        return true
    }
}
