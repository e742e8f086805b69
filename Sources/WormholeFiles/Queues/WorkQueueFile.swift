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

/// One member's handle on a work queue of the file back end (Protocol.md §18):
/// `.queues/<identifier>/<name>/state` (what the queue has taken and handed out) and
/// `.queues/<identifier>/<name>/members/<token>` (one file per live member, held with
/// `flock(LOCK_EX)` for as long as the member lives).
///
/// Every change of the state happens under `flock(LOCK_EX)` on the state file: take the
/// oldest message that a dead member held (or the next one of the log), acknowledge, give
/// back. A member is dead when its file is missing or can be locked: liveness is by
/// locks alone, never by process ids (PID namespaces). Used by one thread at a time.
package final class WorkQueueFile: WormholeTransitingWorkQueue {
    package static let directory = ".queues"
    package static let stateFile = "state"
    package static let membersDirectory = "members"

    package let identifier: String
    package let name: String
    /// This member's token: its file's name in hexadecimal, and its mark on the entries
    /// it holds.
    package let token: UInt64
    private let transiting: FileTransiting
    private let queueDirectory: FileDescriptor
    private let members: FileDescriptor
    private let stateFD: FileDescriptor
    private let memberFD: FileDescriptor
    private let statePath: String
    /// Open member files of the other members, by token: a lock test needs no `open`.
    private var others: [UInt64: FileDescriptor] = [:]
    /// Reads the log after the queue's position; made at the first take.
    private var reader: FileLogReader?
    /// What the reader returned and the take has not looked at yet, with the `logID` of
    /// the log it came from: a read of one record may return a gap report before it.
    private var unread: [(item: Result<WormholeRecord, WormholeError>, logID: UInt64?)] = []
    /// Messages whose dead letter could not be passed, with the failure reported for
    /// each: a take tries each again, and reports it again only when the failure changed
    /// (once per take would flood the queue's owner: 120 reports every
    /// `redeliveryInterval`).
    private var deadLetterFailures: [UInt64: String] = [:]
    /// Whether this member said that the state is full of such messages (once, until it
    /// is not).
    private var reportedFull = false
    private var closed = false
    /// The back-off of a message that failed, by its deliveries (seconds); none until
    /// the member sets it.
    private var redeliveryDelay: @Sendable (UInt32) -> Double = { _ in 0 }

    package func delayRedeliveries(_ delay: @escaping @Sendable (UInt32) -> Double) {
        redeliveryDelay = delay
    }

    /// What a take found besides a message: gaps, damaged records, dead letters.
    package typealias Report = (WormholeError) -> Void

    /// Opens the queue `name` of `identifier` (creating its files, the first time with
    /// its position at `start`) and registers this process as a live member.
    package init(transiting: FileTransiting, identifier: String, name: String, start: WormholeStartingPoint) throws(WormholeError) {
        try Identifier.validate(identifier)
        try Identifier.validate(name, kind: "work queue name")
        self.transiting = transiting
        self.identifier = identifier
        self.name = name
        let container = transiting.container
        let relative = Self.directory + "/" + identifier + "/" + name
        statePath = container.filePath(relative + "/" + Self.stateFile)
        let queueDirectory = try Self.openDirectories([identifier, name], container: container)
        var opened: [FileDescriptor] = [queueDirectory]
        do throws(WormholeError) {
            let members = try container.subdirectory(Self.membersDirectory, in: queueDirectory, path: container.filePath(relative + "/" + Self.membersDirectory), create: true)!
            opened.append(members)
            try Self.createState(in: queueDirectory, container: container, path: statePath,
                                 start: Self.startingPosition(start, transiting: transiting, identifier: identifier))
            let stateFD = try Syscalls.open(Self.stateFile, in: queueDirectory, .readWrite).orThrow("open the work queue state", path: statePath)
            opened.append(stateFD)
            // Registered under the queue's lock: nobody takes the new file, unlocked for a
            // moment, for a dead member's.
            try Syscalls.lock(stateFD).orThrow("lock the work queue state", path: statePath)
            let (token, memberFD): (UInt64, FileDescriptor)
            do throws(WormholeError) {
                (token, memberFD) = try Self.register(in: members, container: container, path: container.filePath(relative + "/" + Self.membersDirectory))
            } catch {
                Syscalls.unlock(stateFD)
                throw error
            }
            opened.append(memberFD)
            self.queueDirectory = queueDirectory
            self.members = members
            self.stateFD = stateFD
            self.token = token
            self.memberFD = memberFD
            removeDeadMemberFiles()
            Syscalls.unlock(stateFD)
        } catch {
            for fd in opened { try? fd.close() }
            throw error
        }
    }

    /// Creates this member's file, `members/<token in hexadecimal>`, locked, holding the
    /// process id (u32), 4 zero bytes and the PID namespace (u64). With the container's
    /// file mode: in a shared group the members of other users test its lock.
    private static func register(in members: FileDescriptor, container: ContainerDirectory, path: String) throws(WormholeError) -> (UInt64, FileDescriptor) {
        for _ in 0..<8 {
            let token = UInt64.random(in: 1...UInt64.max)
            switch container.createFile(String(token, radix: 16), in: members) {
            case .success(let fd):
                _ = Syscalls.lock(fd, exclusive: true, wait: false)
                var identity = (UInt32(bitPattern: Syscalls.cachedProcessID).littleEndian, UInt32(0), Syscalls.pidNamespace.littleEndian)
                _ = withUnsafeBytes(of: &identity) { Syscalls.write(fd, $0, at: 0) }
                return (token, fd)
            case .failure(.fileExists):
                continue
            case .failure(let errno):
                throw WormholeError.system("create a work queue member file in", errno, path: path)
            }
        }
        throw WormholeError(.systemError, "cannot find a free member name in '\(path)'", path: path)
    }

    deinit { close() }

    /// Leaves the queue: what this member still holds goes to the others.
    package func close() {
        guard !closed else { return }
        closed = true
        reader?.close()
        unread = []
        if (try? Syscalls.lock(stateFD).get()) != nil {
            if var state = try? readState() {
                for index in state.entries.indices where state.entries[index].member == token { state.entries[index].member = 0 }
                try? writeState(state)
            }
            Syscalls.remove(String(token, radix: 16), in: members)
            Syscalls.unlock(stateFD)
        }
        for fd in others.values { try? fd.close() }
        others = [:]
        for fd in [memberFD, stateFD, members, queueDirectory] { try? fd.close() }
    }

    // MARK: - Taking and acknowledging

    /// Hands this member the oldest message nobody alive holds: first one whose member
    /// died (or gave it back), then the next of the log. A message handed out
    /// `maximumDeliveries` times already goes to `deadLetters` instead; an expired one is
    /// counted and skipped. `nil` when there is nothing to take.
    package func take(maximumDeliveries: UInt32, deadLetters: String, report: Report) throws(WormholeError) -> WormholeWorkQueueDelivery? {
        try withLockedState { state throws(WormholeError) -> WormholeWorkQueueDelivery? in
            try take(from: &state, maximumDeliveries: maximumDeliveries, deadLetters: deadLetters, report: report)
        }
    }

    /// ``acknowledge(_:)`` and ``take(maximumDeliveries:deadLetters:report:)`` under one
    /// lock of the state, read and written once: what a member that goes on taking does
    /// after each message (a responder after each reply).
    package func acknowledge(_ sequence: UInt64, thenTakeWithMaximumDeliveries maximumDeliveries: UInt32, deadLetters: String,
                     report: Report) throws(WormholeError) -> WormholeWorkQueueDelivery? {
        try withLockedState { state throws(WormholeError) -> WormholeWorkQueueDelivery? in
            acknowledge(sequence, in: &state)
            return try take(from: &state, maximumDeliveries: maximumDeliveries, deadLetters: deadLetters, report: report)
        }
    }

    private func take(from state: inout WorkQueueState, maximumDeliveries: UInt32, deadLetters: String,
                      report: Report) throws(WormholeError) -> WormholeWorkQueueDelivery? {
        let now = Syscalls.wallClockNanoseconds()
        state.releaseEntries(heldBy: token, now: now, isAlive: isAlive, delay: redeliveryDelay)
        var unmoved: Set<UInt64> = []
        if let delivery = try takeWaiting(from: &state, now: now, maximumDeliveries: maximumDeliveries,
                                          deadLetters: deadLetters, unmoved: &unmoved, report: report) {
            return delivery
        }
        if !deadLetterFailures.isEmpty {
            // Moved or lost meanwhile (by another member): forgotten.
            let held = Set(state.entries.map(\.sequence))
            deadLetterFailures = deadLetterFailures.filter { held.contains($0.key) }
        }
        guard state.entries.count < WorkQueueState.maximumEntries else {
            if !unmoved.isEmpty, !reportedFull {
                reportedFull = true
                report(WormholeError(.systemError,
                    "the work queue '\(name)' of '\(identifier)' holds \(state.entries.count) messages, as many as its state can, \(unmoved.count) of them waiting until they can be moved to its dead letters '\(deadLetters)' (see the errors reported for them): it takes no new message until some are moved",
                    path: statePath))
            }
            return nil
        }
        reportedFull = false
        return try takeNext(from: &state, now: now, report: report)
    }

    /// Hands out the oldest entry of the state that is due (``WorkQueueState/nextWaitingEntry(at:maximumDeliveries:skipping:)``),
    /// passing to `deadLetters` those handed out `maximumDeliveries` times and dropping
    /// the expired and the lost on the way. Those whose dead letter could not be passed go
    /// in `unmoved`, kept for the next take.
    private func takeWaiting(from state: inout WorkQueueState, now: Int64, maximumDeliveries: UInt32, deadLetters: String,
                             unmoved: inout Set<UInt64>, report: Report) throws(WormholeError) -> WormholeWorkQueueDelivery? {
        // Once one failed for want of a writable dead-letter log, those that failed
        // before are not tried again in this take: they would fail alike.
        var deadLettersFailing = false
        while let index = state.nextWaitingEntry(at: now, maximumDeliveries: maximumDeliveries, skipping: unmoved) {
            let entry = state.entries[index]
            if deadLettersFailing, entry.deliveries >= maximumDeliveries, deadLetterFailures[entry.sequence] != nil {
                unmoved.insert(entry.sequence)
                continue
            }
            guard let record = try record(entry.sequence, in: state.logID) else {
                // Gone from the log (cleared, or past the backlog cap).
                state.entries.remove(at: index)
                state.lost += 1
                report(lostError(1, because: "it was cleared or dropped from the log before it was handled"))
                continue
            }
            if entry.deliveries >= maximumDeliveries {
                do throws(WormholeError) {
                    try deadLetter(record, deliveries: entry.deliveries, to: deadLetters,
                                   reason: WormholeDeadLetter.membersEndedReason(deliveries: entry.deliveries))
                } catch {
                    if deadLetterFailures[entry.sequence] != error.message {
                        deadLetterFailures[entry.sequence] = error.message
                        report(error)
                    }
                    unmoved.insert(entry.sequence)
                    // Too large for a message is this letter's own; anything else is the
                    // dead-letter log's (or the disk's).
                    deadLettersFailing = error.code != .messageTooLarge
                    continue
                }
                deadLetterFailures[entry.sequence] = nil
                state.entries.remove(at: index)
                state.deadLettered += 1
                continue
            }
            if record.isExpired(at: now) {
                state.entries.remove(at: index)
                state.expired += 1
                continue
            }
            state.entries[index].member = token
            state.entries[index].deliveries += 1
            state.entries[index].delivered = now
            state.entries[index].retryDelay = 0
            return WormholeWorkQueueDelivery(record: record, deliveries: entry.deliveries + 1)
        }
        return nil
    }

    /// Hands out the next message of the log after what the queue has taken, counting the
    /// gaps before it as lost and skipping the expired; `nil` when the log has no more.
    private func takeNext(from state: inout WorkQueueState, now: Int64, report: Report) throws(WormholeError) -> WormholeWorkQueueDelivery? {
        let reader = try currentReader(after: state.taken, in: state.logID)
        while true {
            if unread.isEmpty {
                var batch = try reader.read(maximumCount: 1)
                if batch.isEmpty, reader.mayHaveMore { batch = try reader.read(maximumCount: 1) }
                // Every item of the read is looked at: a gap report comes before the
                // record that follows it, in the same read.
                let logID = reader.currentLogID
                unread = batch.map { ($0, logID) }
            }
            guard !unread.isEmpty else { return nil }
            let (first, readLogID) = unread.removeFirst()
            switch first {
            case .failure(let error):
                // Gaps are counted below, from the sequence numbers.
                if error.code != .messagesLost { report(error) }
            case .success(let record):
                if let logID = readLogID, logID != state.logID {
                    if state.logID != 0 { startOver(&state, logID: logID, report: report) } else { state.logID = logID }
                }
                guard record.sequence > state.taken else { continue }
                if record.sequence > state.taken + 1 {
                    let missed = record.sequence - state.taken - 1
                    state.lost += missed
                    report(lostError(missed, because: "they were cleared, damaged, or dropped by the backlog cap before the queue took them"))
                }
                state.taken = record.sequence
                if record.isExpired(at: now) {
                    state.expired += 1
                    continue
                }
                state.entries.append(.init(sequence: record.sequence, member: token, deliveries: 1, delivered: now))
                return WormholeWorkQueueDelivery(record: record, deliveries: 1)
            }
        }
    }

    /// The log was made anew (deleted outside the protocol, numbers from 1 again): the
    /// queue starts at its beginning; what it held of the old one is lost.
    private func startOver(_ state: inout WorkQueueState, logID: UInt64, report: Report) {
        if !state.entries.isEmpty {
            state.lost += UInt64(state.entries.count)
            report(lostError(UInt64(state.entries.count), because: "the log of '\(identifier)' was deleted and made anew before they were handled"))
        }
        state.entries = []
        state.taken = 0
        state.logID = logID
    }

    /// The message `sequence` was handled: it leaves the queue for good.
    package func acknowledge(_ sequence: UInt64) throws(WormholeError) {
        try withLockedState { state throws(WormholeError) in acknowledge(sequence, in: &state) }
    }

    private func acknowledge(_ sequence: UInt64, in state: inout WorkQueueState) {
        guard let index = state.entries.firstIndex(where: { $0.sequence == sequence && $0.member == token }) else { return }
        state.entries.remove(at: index)
        state.acknowledged += 1
    }

    /// The message `sequence` was not handled (its handler threw `reason`): another
    /// member (or this one) gets it again once its retry delay ran out (Protocol.md
    /// §18.1), or, after `maximumDeliveries`, the dead letters.
    /// A dead letter that cannot be passed leaves the message in the queue, held by
    /// nobody: the next take tries again (Protocol.md §18.3 T2) and reports the failure.
    package func giveBack(_ sequence: UInt64, reason: String, maximumDeliveries: UInt32, deadLetters: String) throws(WormholeError) {
        try withLockedState { state throws(WormholeError) in
            guard let index = state.entries.firstIndex(where: { $0.sequence == sequence && $0.member == token }) else { return }
            let entry = state.entries[index]
            guard entry.deliveries >= maximumDeliveries else {
                state.entries[index].member = 0
                state.entries[index].waitBeforeRedelivery(redeliveryDelay(entry.deliveries), now: Syscalls.wallClockNanoseconds())
                return
            }
            if let record = try record(sequence, in: state.logID) {
                do throws(WormholeError) {
                    try deadLetter(record, deliveries: entry.deliveries, to: deadLetters, reason: reason)
                } catch {
                    // Kept, for nobody: the next take tries its dead letter again and
                    // reports it if it fails again (once, not at each take). This member
                    // goes on taking meanwhile.
                    state.entries[index].member = 0
                    return
                }
                state.deadLettered += 1
            } else {
                state.lost += 1
            }
            state.entries.remove(at: index)
        }
    }

    // MARK: - Internals

    private func withLockedState<T>(_ body: (inout WorkQueueState) throws(WormholeError) -> T) throws(WormholeError) -> T {
        guard !closed else { throw WormholeError(.invalidConfiguration, "the work queue '\(name)' of '\(identifier)' was left") }
        try Syscalls.lock(stateFD).orThrow("lock the work queue state", path: statePath)
        defer { Syscalls.unlock(stateFD) }
        let before = try readState()
        var state = before
        let result: T
        do throws(WormholeError) {
            result = try body(&state)
        } catch {
            // What the body did before it failed (a dead letter passed) is kept.
            if state != before { try? writeState(state) }
            throw error
        }
        guard state != before else { return result }
        do throws(WormholeError) {
            try writeState(state)
        } catch {
            // Written whole or not at all from the caller's view: once more, and the
            // result stands only if it is stored (a take stored but not returned would
            // hold its message in silence).
            try writeState(state)
        }
        return result
    }

    private func readState() throws(WormholeError) -> WorkQueueState {
        let read = Self.readStateOrError(stateFD)
        if case .failure(let errno) = read { throw WormholeError.system("read the work queue state", errno, path: statePath) }
        guard case .success(let state?) = read else {
            throw WormholeError(.corruptRecord,
                "the state of the work queue '\(name)' of '\(identifier)' is damaged; remove the directory '\(statePath.dropLast(Self.stateFile.count + 1))' to start the queue anew (it then takes again what the log retains)",
                path: statePath)
        }
        return state
    }

    /// Reads the state, whole, under its lock (one read: the state is never larger than
    /// ``WorkQueueState/maximumSize``, and its writers hold the lock).
    package static func readState(_ fd: FileDescriptor) -> WorkQueueState? {
        guard case .success(let state) = readStateOrError(fd) else { return nil }
        return state
    }

    /// ``readState(_:)``, telling a read that failed (an error to report, the state being
    /// possibly whole) from a state that is damaged (`nil`).
    package static func readStateOrError(_ fd: FileDescriptor) -> Result<WorkQueueState?, Errno> {
        // On the stack and not filled first: only the bytes read are decoded (a filled
        // array of this size cost more instructions than the rest of a take).
        withUnsafeTemporaryAllocation(byteCount: WorkQueueState.maximumSize, alignment: 8) { buffer in
            Syscalls.readOnce(fd, into: buffer, at: 0).map { count in
                WorkQueueState.decode(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
            }
        }
    }

    private func writeState(_ state: WorkQueueState) throws(WormholeError) {
        let bytes = state.encoded()
        try bytes.withUnsafeBytes { Syscalls.write(stateFD, $0, at: 0) }.orThrow("write the work queue state", path: statePath)
    }

    /// Whether the member `token` lives: its file exists and is locked.
    private func isAlive(_ member: UInt64) -> Bool {
        let fd: FileDescriptor
        if let cached = others[member] {
            fd = cached
        } else {
            guard case .success(let opened) = Syscalls.open(String(member, radix: 16), in: members, .read) else { return false }
            fd = opened
        }
        switch Syscalls.lock(fd, exclusive: false, wait: false) {
        case .failure(.wouldBlock):
            others[member] = fd
            return true
        default:
            // Dead (or unreadable): its file goes, and with it the descriptor.
            Syscalls.unlock(fd)
            Syscalls.remove(String(member, radix: 16), in: members)
            others[member] = nil
            try? fd.close()
            return false
        }
    }

    /// Removes the files of members that died holding nothing (under the queue's lock).
    private func removeDeadMemberFiles() {
        guard case .success(let names) = Syscalls.directoryEntries(at: members, name: ".") else { return }
        for name in names where name != String(token, radix: 16) {
            if let member = UInt64(name, radix: 16) { _ = isAlive(member) }
        }
    }

    private func currentReader(after sequence: UInt64, in logID: UInt64) throws(WormholeError) -> FileLogReader {
        if let reader { return reader }
        // No listener claim: the queue's state is the member's claim (§18.4), which kept
        // what a clear hid after `taken` (T3).
        let made = try FileLogReader(transiting: transiting, identifier: identifier, start: .after(sequence: sequence), claims: false,
                                     positionLogID: logID)
        // The queue counts expired messages in its state: it reads them.
        made.dropsExpired = false
        reader = made
        return made
    }

    /// The log's record `sequence`, when it is still there: cleared or not, as the queue's
    /// claim kept it (T2).
    private func record(_ sequence: UInt64, in logID: UInt64) throws(WormholeError) -> WormholeRecord? {
        let reader = try FileLogReader(transiting: transiting, identifier: identifier, start: .after(sequence: sequence &- 1), claims: false,
                                       positionLogID: logID)
        reader.dropsExpired = false
        defer { reader.close() }
        for result in try reader.read(maximumCount: 4) {
            // In a log made anew, the same number is another message.
            guard logID == 0 || reader.currentLogID == logID else { return nil }
            if case .success(let record) = result, record.sequence >= sequence { return record.sequence == sequence ? record : nil }
        }
        return nil
    }

    private func deadLetter(_ record: WormholeRecord, deliveries: UInt32, to deadLetters: String, reason: String) throws(WormholeError) {
        let letter = WormholeDeadLetter(record: record, queue: name, deliveries: deliveries, reason: reason)
        do throws(WormholeError) {
            _ = try transiting.append(try letter.encoded(fitting: transiting.configuration.maximumMessageSize),
                                      kind: .json, identifier: deadLetters)
        } catch {
            throw WormholeError(error.code,
                "the work queue '\(name)' of '\(identifier)' cannot move message \(record.sequence) to its dead letters '\(deadLetters)': \(error.message); it stays in the queue, and is moved when it can be",
                path: error.path, errno: error.errno)
        }
    }

    /// Tells the rest (here "read the log again") when the reader may be stale.
    package func invalidate() { reader?.invalidate() }

    private func lostError(_ count: UInt64, because reason: String) -> WormholeError {
        .workQueueLost(count, queue: name, identifier: identifier, because: reason)
    }

    // MARK: - Files

    /// Where a new queue starts (Protocol.md §18.1): `taken` and the log it belongs to.
    /// A new queue is a reader that starts now: what was cleared before is not its to
    /// handle (§10.3), so its start is never below the log's `clearedThrough`. Once made,
    /// its claim keeps what it has not handled, and a later clear does not withdraw it.
    private static func startingPosition(_ start: WormholeStartingPoint, transiting: FileTransiting, identifier: String) -> (taken: UInt64, logID: UInt64) {
        guard let log = try? LogFile.open(identifier, in: transiting.container, access: .readOnly, create: false) else {
            if case .after(let sequence) = start { return (sequence, 0) }
            return (0, 0)
        }
        defer { log.close() }
        guard let header = log.header else { return (0, 0) }
        let cleared = header.clearedThrough
        let last: UInt64
        switch start {
        case .history:
            return (cleared, header.logID)
        case .after(let sequence):
            return (max(sequence, cleared), header.logID)
        case .now, .latest:
            guard let size = try? log.status().size,
                  let tail = try? log.findTail(size: Int(size), header: header, maximumPayload: transiting.configuration.maximumMessageSize, buffer: ReadBuffer())
            else { return (cleared, header.logID) }
            last = tail.lastSequence
        }
        if case .latest = start, last > cleared { return (last - 1, header.logID) }
        return (max(last, cleared), header.logID)
    }

    /// Makes the state file whole under its name: written under a temporary name, then
    /// linked, so that nobody ever reads a partial one. Nothing when it exists. With the
    /// container's file mode: in a shared group every member's user changes it.
    private static func createState(in directory: FileDescriptor, container: ContainerDirectory, path: String,
                                    start: (taken: UInt64, logID: UInt64)) throws(WormholeError) {
        if case .success(let fd) = Syscalls.open(stateFile, in: directory, .read) {
            try? fd.close()
            return
        }
        let temporary = ".\(stateFile).\(Syscalls.processID)-\(String(UInt64.random(in: 1...UInt64.max), radix: 16))"
        let fd = try container.createFile(temporary, in: directory).orThrow("create the work queue state", path: path)
        defer {
            Syscalls.remove(temporary, in: directory)
            try? fd.close()
        }
        let bytes = WorkQueueState(taken: start.taken, logID: start.logID).encoded()
        switch bytes.withUnsafeBytes({ Syscalls.write(fd, $0, at: 0) }) {
        case .success: break
        case .failure(let errno) where errno == .noSpace || errno == .diskQuotaExceeded:
            throw WormholeError(.systemError,
                "cannot write the work queue state '\(path)': the filesystem is full (no space or no inodes left: see 'df' and 'df -i'); the member did not join, and no state was written (the next member to join makes it)",
                path: path, errno: errno)
        case .failure(let errno): throw WormholeError.system("write the work queue state", errno, path: path)
        }
        switch Syscalls.link(temporary, to: stateFile, in: directory) {
        case .success, .failure(.fileExists): return
        case .failure(let errno): throw WormholeError.system("create the work queue state", errno, path: path)
        }
    }

    /// Opens (creating with the container's modes, checked like it) `.queues/<components...>`.
    package static func openDirectories(_ components: [String], container: ContainerDirectory) throws(WormholeError) -> FileDescriptor {
        var current = try container.subdirectory(directory)
        var path = container.filePath(directory)
        for component in components {
            path += "/" + component
            do throws(WormholeError) {
                let next = try container.subdirectory(component, in: current, path: path, create: true)!
                try? current.close()
                current = next
            } catch {
                try? current.close()
                throw error
            }
        }
        return current
    }

    // MARK: - Readers without membership (compaction, status)

    /// A live member of a queue: its token, process id and PID namespace.
    package typealias LiveMember = (token: UInt64, processID: Int32, pidNamespace: UInt64?)

    /// The queues of `identifier` and their states (`nil`: damaged), without locking; with
    /// `liveMembers`, also each queue's live members (``liveMembers(_:)``; `nil` when its
    /// directory could not be opened). Every descriptor it opens is closed before it returns.
    package static func states(container: ContainerDirectory, identifier: String,
                       liveMembers withMembers: Bool = false) -> [(name: String, state: WorkQueueState?, members: [LiveMember]?)] {
        guard case .success(let top) = Syscalls.open(directory, in: container.current.descriptor, .directory) else { return [] }
        defer { try? top.close() }
        guard case .success(let queues) = Syscalls.open(identifier, in: top, .directory) else { return [] }
        defer { try? queues.close() }
        guard case .success(let names) = Syscalls.directoryEntries(at: queues, name: ".") else { return [] }
        var result: [(String, WorkQueueState?, [LiveMember]?)] = []
        for name in names.sorted() where !name.hasPrefix(".") {
            guard case .success(let queue) = Syscalls.open(name, in: queues, .directory) else { continue }
            defer { try? queue.close() }
            var state: WorkQueueState?
            switch Syscalls.open(stateFile, in: queue, .read) {
            case .success(let fd):
                state = readState(fd)
                try? fd.close()
            case .failure(.noSuchFileOrDirectory):
                // Not made yet (its first member is joining, or could not: a full disk):
                // no queue yet, neither damaged nor keeping anything.
                continue
            case .failure:
                break
            }
            var members: [LiveMember]?
            if withMembers, case .success(let directory) = Syscalls.open(membersDirectory, in: queue, .directory) {
                members = liveMembers(directory)
                try? directory.close()
            }
            result.append((name, state, members))
        }
        return result
    }

    /// What the work queues of `identifier` ask compaction to keep: every message after
    /// the lowest sequence number one of them has not handed out or not seen acknowledged;
    /// 0 (keep everything) for a damaged state. `nil` when it has no queue.
    package static func lowestUnhandled(container: ContainerDirectory, identifier: String, logID: UInt64) -> UInt64? {
        var lowest: UInt64?
        for (_, state, _) in states(container: container, identifier: identifier) {
            let keep = state?.lowestUnhandled(in: logID) ?? 0
            lowest = min(lowest ?? keep, keep)
        }
        return lowest
    }

    /// The highest sequence number of the log `logID` that a work queue of `identifier`
    /// has taken: handed out, whatever the log says now (a cut log goes on above it).
    /// `nil` when no queue has taken from that log.
    package static func highestTaken(container: ContainerDirectory, identifier: String, logID: UInt64) -> UInt64? {
        var highest: UInt64?
        for (_, state, _) in states(container: container, identifier: identifier) {
            guard let state, state.logID == logID, state.taken > 0 else { continue }
            highest = max(highest ?? state.taken, state.taken)
        }
        return highest
    }

    /// The identifiers that have work queues.
    package static func identifiersWithQueues(container: ContainerDirectory) -> [String] {
        guard case .success(let names) = Syscalls.directoryEntries(at: container.current.descriptor, name: directory) else { return [] }
        return names.filter { (try? Identifier.validate($0)) != nil }.sorted()
    }

    /// The live members of a queue, from its `members` directory: process id and PID
    /// namespace of each file that is locked.
    package static func liveMembers(_ members: FileDescriptor) -> [LiveMember] {
        guard case .success(let names) = Syscalls.directoryEntries(at: members, name: ".") else { return [] }
        var result: [LiveMember] = []
        for name in names.sorted() where !name.hasPrefix(".") {
            guard let token = UInt64(name, radix: 16), case .success(let fd) = Syscalls.open(name, in: members, .read) else { continue }
            defer { try? fd.close() }
            guard case .failure(.wouldBlock) = Syscalls.lock(fd, exclusive: false, wait: false) else {
                Syscalls.unlock(fd)
                continue
            }
            var identity: (UInt32, UInt32, UInt64) = (0, 0, 0)
            _ = withUnsafeMutableBytes(of: &identity) { Syscalls.read(fd, into: $0, at: 0) }
            let namespace = UInt64(littleEndian: identity.2)
            result.append((token, Int32(bitPattern: UInt32(littleEndian: identity.0)), namespace == 0 ? nil : namespace))
        }
        return result
    }
}
