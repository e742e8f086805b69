#if Postgres
import Foundation
import Logging
import NIOCore
import NIOFoundationCompat
import PostgresNIO
import Synchronization
@_spi(Backend) import Wormhole

/// A back end for processes that do not share a machine: messages in a PostgreSQL table,
/// wake-ups by `LISTEN`/`NOTIFY`.
///
/// The `Wormhole` API is the same as over the shared directory, and so are the
/// guarantees: one order per identifier that every reader sees, each message delivered to
/// a listener once, history bounded by the `Wormhole.Configuration`, messages a live
/// listener has not read kept for it. A notification carries the identifier and the
/// sequence number, never the message.
///
/// ```swift
/// let wormhole = try Wormhole(postgresURL: "postgres://app@db.example.com/app",
///                             applicationGroupIdentifier: "group.com.example.notes")
/// try wormhole.passMessage("hello", identifier: "note")
/// ```
///
/// A container is a name that scopes identifiers within the database, as the directory
/// does for files: processes that name the same container talk to each other. Each
/// instance holds up to two connections (one for statements; one for `LISTEN`, from its
/// first listener on) until
/// ``close()`` or until it is released.
///
/// Every call waits for the server: one round trip for a pass or a read. Calls from
/// several threads share the statement connection and run one after another; passes
/// made while another is on its way share the next statement and its commit, and a batch
/// (``append(batch:identifier:)``) is one `INSERT`.
@_spi(Backend) public final class PostgresTransiting: WormholeTransiting {
    /// Retention and size limits, enforced as by the file back end.
    public let configuration: Wormhole.Configuration
    /// The server, with its password hidden.
    public let server: PostgresServer
    /// The name that scopes this wormhole's identifiers in the database.
    public let container: String
    /// The `NOTIFY` channel of the container.
    public let channel: String

    let session: PostgresSession
    let notifier: PostgresNotifier
    /// Where passes and batches go: those that come together share a statement and a
    /// commit.
    let passes: PostgresPassQueue
    /// The claims of this instance's live readers, by claim name: moved to the new
    /// session when the statement connection is replaced.
    let claims = Claims<String>()
    /// The numbers of this instance's work queue members: moved to the new session with
    /// the claims.
    let members = Claims<Int64>()
    /// How many prunings this instance has run.
    let prunes = Atomic<Int>(0)

    final class Claims<Name: Hashable & Sendable>: Sendable {
        private let names = Mutex<Set<Name>>([])
        func insert(_ name: Name) { _ = names.withLock { $0.insert(name) } }
        func remove(_ name: Name) { _ = names.withLock { $0.remove(name) } }
        var all: [Name] { names.withLock { Array($0) } }
    }

    /// Connects to `server` and creates Wormhole's schema (`wormhole.*`) when missing.
    ///
    /// - Parameters:
    ///   - server: Where the server is (``PostgresServer/init(url:)`` parses a URL).
    ///   - container: The scope of the identifiers: processes that name the same one
    ///     exchange messages: an application group identifier, or one and a
    ///     sub-directory name joined by `/`, each following the rules of an identifier.
    ///   - configuration: Retention and size limits, enforced as by the file back end.
    ///   - logger: Where the connection's diagnostics go.
    /// - Throws: `WormholeError.Code.databaseError` when the server cannot be reached
    ///   or refuses the login or the schema, `WormholeError.Code.unsupportedFormat`
    ///   when the schema was made by a newer Wormhole.
    public init(
        server: PostgresServer,
        container: String,
        configuration: Wormhole.Configuration = .init(),
        logger: Logger = Logger(label: "Wormhole.Postgres")
    ) throws(WormholeError) {
        for part in container.split(separator: "/", omittingEmptySubsequences: false) {
            try Wormhole.validate(identifier: String(part), kind: "container name part")
        }
        self.configuration = try configuration.validated()
        self.server = server
        self.container = container
        self.channel = PostgresNotifier.channel(for: container)
        self.session = PostgresSession(server: server, logger: logger)
        self.notifier = PostgresNotifier(session: session, channel: channel)
        self.passes = PostgresPassQueue(session: session, container: container, channel: channel)
        session.setOnConnect { [claims, members] in
            let names = claims.all, tokens = members.all
            return names.isEmpty && tokens.isEmpty ? nil
                : (PostgresSchema.adoptClaims(names, members: tokens), "renew the listeners' claims and work queue memberships on \(server)")
        }
        do throws(WormholeError) {
            try session.query(PostgresSchema.create, "create Wormhole's schema in \(server)")
            try session.query(PostgresSchema.createDurable, "create Wormhole's table of durable listeners in \(server)")
            try session.query(PostgresSchema.createPruneThresholds, "add the pruning thresholds to Wormhole's schema in \(server)")
            try session.query(PostgresSchema.createQueues, "add requests and work queues to Wormhole's schema in \(server)")
            let found = try session.query(PostgresSchema.readVersion, "read the schema version in \(server)")
            let version = found.first.flatMap { row in (try? row.decode(Int32?.self)) ?? nil }
            guard let version, version <= PostgresSchema.version else {
                throw WormholeError(.unsupportedFormat,
                    "the schema 'wormhole' in \(server) has version \(version.map(String.init) ?? "none"); this Wormhole reads version \(PostgresSchema.version)")
            }
        } catch {
            session.close()
            throw error
        }
    }

    /// Connects to the server at `url` (see ``PostgresServer/init(url:)``).
    public convenience init(url: String, container: String, configuration: Wormhole.Configuration = .init()) throws(WormholeError) {
        try self.init(server: PostgresServer(url: url), container: container, configuration: configuration)
    }

    deinit { close() }

    /// Closes both connections. Listeners stop hearing of new messages; later calls throw.
    public func close() {
        notifier.close()
        session.close()
    }

    // MARK: - Writing

    /// Inserts the message as the identifier's next row, in one transaction that also
    /// sends the `NOTIFY`; blocks the calling thread until it has committed. Passes that
    /// other threads and tasks make meanwhile share its statement and commit
    /// (a queue of passes per transiting: Scaling.md, "Group commit and batches").
    public func append(_ payload: Data, kind: WormholePayloadKind, identifier: String,
                       attributes: WormholeRecordAttributes) throws(WormholeError) -> WormholeRecord {
        let pass = try preparePass(payload, kind: kind, identifier: identifier, attributes: attributes)
        let stored: [PostgresPassQueue.Stored]
        do {
            stored = try passes.pass([pass.row])
        } catch {
            throw PostgresSession.describe(error, doing: "pass a message to '\(identifier)' in \(server)")
        }
        let (record, prune) = finishPass(pass, stored[0])
        if prune {
            do throws(WormholeError) {
                try self.prune(identifier)
            } catch {
                // The message is committed; the next pass prunes again.
                session.logger.warning("could not prune '\(identifier)' in \(server): \(error)")
            }
        }
        return record
    }

    /// Inserts the batch as the identifier's next rows: one statement, one `INSERT` of
    /// all of them, one `NOTIFY`, one transaction (so either every message is stored or
    /// none); no other pass's message falls between them. Blocks the calling thread
    /// until it has committed.
    public func append(batch: [(payload: Data, kind: WormholePayloadKind)], identifier: String) throws(WormholeError) -> Range<UInt64> {
        try Wormhole.validate(identifier: identifier)
        guard !batch.isEmpty else { return 0..<0 }
        var rows: [PostgresPassQueue.Pass] = []
        rows.reserveCapacity(batch.count)
        for entry in batch {
            rows.append(try preparePass(entry.payload, kind: entry.kind, identifier: identifier, attributes: .message).row)
        }
        let stored: [PostgresPassQueue.Stored]
        do {
            stored = try passes.pass(rows)
        } catch {
            throw PostgresSession.describe(error, doing: "pass \(batch.count) messages to '\(identifier)' in \(server) (none of them was stored)")
        }
        let last = stored[stored.count - 1]
        if dueForPruning(last) {
            do throws(WormholeError) {
                try prune(identifier)
            } catch {
                session.logger.warning("could not prune '\(identifier)' in \(server): \(error)")
            }
        }
        return UInt64(stored[0].sequence)..<UInt64(last.sequence + 1)
    }

    /// A pass's row for the statement and the record it stores.
    struct Pass {
        let row: PostgresPassQueue.Pass
        let record: WormholeRecord
    }

    private func preparePass(_ payload: Data, kind: WormholePayloadKind, identifier: String,
                             attributes: WormholeRecordAttributes) throws(WormholeError) -> Pass {
        try Wormhole.validate(identifier: identifier)
        try configuration.checkMessageSize(payload.count, identifier: identifier)
        // Microseconds: what a timestamptz keeps, so the returned record equals the stored one.
        func microseconds(_ date: Date) -> Date {
            Date(timeIntervalSince1970: (date.timeIntervalSince1970 * 1_000_000).rounded(.down) / 1_000_000)
        }
        let date = microseconds(Date())
        var attributes = attributes
        attributes.expires = attributes.expires.map(microseconds)
        let processID = ProcessInfo.processInfo.processIdentifier
        let row = PostgresPassQueue.Pass(identifier: identifier, sentAt: date, kind: Int16(kind.rawValue),
                                         payload: ByteBuffer(data: payload), role: Int16(attributes.role.rawValue),
                                         correlation: Int64(bitPattern: attributes.correlation), expires: attributes.expires)
        return Pass(row: row, record: WormholeRecord(identifier: identifier, sequence: 0, date: date,
                                                     processID: processID, kind: kind, payload: payload, role: attributes.role,
                                                     correlation: attributes.correlation, expires: attributes.expires))
    }

    /// The stored record, and whether the identifier is due for pruning.
    private func finishPass(_ pass: Pass, _ stored: PostgresPassQueue.Stored) -> (WormholeRecord, prune: Bool) {
        let record = pass.record
        return (WormholeRecord(identifier: record.identifier, sequence: UInt64(stored.sequence), date: record.date,
                               processID: record.processID, kind: record.kind, payload: record.payload,
                               role: record.role, correlation: record.correlation, expires: record.expires),
                dueForPruning(stored))
    }

    /// Whether the identifier is due for pruning after a statement (decided by the
    /// caller whose message was the identifier's last in it): once twice what the last
    /// pruning kept has gathered (at least twice the retention), as the file back end
    /// compacts. A pruning reads every message it keeps, so while a stalled listener's
    /// claim keeps a backlog, pruning at every pass would make each pass cost as much as
    /// the backlog. The threshold is in the identifier's row
    /// (``PostgresSchema/createPruneThresholds``), so it holds for every process.
    private func dueForPruning(_ stored: PostgresPassQueue.Stored) -> Bool {
        guard stored.lastOfIdentifier else { return false }
        return stored.retainedCount > max(2 * Int64(configuration.retainedMessageCount), stored.pruneAtCount)
            || (stored.retainedCount > 1 && stored.retainedBytes > max(2 * Int64(configuration.retainedByteCount), stored.pruneAtBytes))
    }

    private func pruneQuery(_ identifier: String) -> PostgresQuery {
        PostgresSchema.prune(container: container, identifier: identifier,
                             retainedCount: configuration.retainedMessageCount,
                             retainedBytes: configuration.retainedByteCount,
                             backlogCount: configuration.maximumBacklogMessageCount,
                             backlogBytes: configuration.maximumBacklogByteCount)
    }

    func prune(_ identifier: String) throws(WormholeError) {
        prunes.add(1, ordering: .relaxed)
        try session.query(pruneQuery(identifier), "prune '\(identifier)' in \(server)")
    }

    /// Deletes the identifier's rows; its sequence numbers go on.
    public func clearMessageContents(identifier: String) throws(WormholeError) {
        try Wormhole.validate(identifier: identifier)
        try session.query(PostgresSchema.clear(container: container, identifier: identifier),
                          "clear '\(identifier)' in \(server)")
        try prune(identifier)
    }

    /// Deletes the rows of every identifier of the container.
    public func clearAllMessageContents() throws(WormholeError) {
        for identifier in try identifiers() {
            try clearMessageContents(identifier: identifier)
        }
    }

    func identifiers() throws(WormholeError) -> [String] {
        let rows = try session.query(PostgresSchema.identifiers(container: container), "list the identifiers in \(server)")
        return rows.compactMap { try? $0.decode(String.self) }
    }

    // MARK: - Reading

    /// The identifier's newest row, or `nil`.
    public func latestRecord(identifier: String) throws(WormholeError) -> WormholeRecord? {
        try Wormhole.validate(identifier: identifier)
        let rows = try session.query(PostgresSchema.latest(container: container, identifier: identifier),
                                     "read the latest message of '\(identifier)' in \(server)")
        return try rows.first.map { row throws(WormholeError) in try record(from: row, identifier: identifier).get() }
    }

    /// What is kept per identifier of the container: count, bytes, last update.
    public func summaries() throws(WormholeError) -> [WormholeIdentifierSummary] {
        summaries(from: try session.query(PostgresSchema.summaries(container: container), "summarize \(server)"))
    }

    private func summaries(from rows: [PostgresRow]) -> [WormholeIdentifierSummary] {
        rows.compactMap { row in
            guard let (identifier, count, bytes, last, date) = try? row.decode((String, Int64, Int64, Int64, Date?).self) else { return nil }
            return WormholeIdentifierSummary(identifier: identifier, messageCount: Int(count), byteCount: Int(bytes),
                                             lastSequence: UInt64(last), lastUpdate: date)
        }
    }

    /// How many listeners hold a claim on `identifier`'s unread messages (for tests).
    func claimCount(identifier: String) throws(WormholeError) -> Int {
        let rows = try session.query(
            "SELECT count(*) FROM wormhole.listeners WHERE container = \(container) AND identifier = \(identifier)",
            "count the listeners of '\(identifier)' in \(server)")
        return Int(rows.first.flatMap { try? $0.decode(Int64.self) } ?? 0)
    }

    /// A reader of the identifier's rows from `start`, with a listener claim that keeps
    /// them until it has read them.
    public func makeReader(identifier: String, startingFrom start: Wormhole.StartingPoint) throws(WormholeError) -> any WormholeTransitingReader {
        try Wormhole.validate(identifier: identifier)
        return try PostgresReader(transiting: self, identifier: identifier, start: start)
    }

    /// A reader that resumes after the last row the durable listener `name` handled; its
    /// position is kept in a table.
    public func makeReader(identifier: String, startingFrom start: Wormhole.StartingPoint, durableName name: String) throws(WormholeError) -> any WormholeTransitingReader {
        try Wormhole.validate(identifier: identifier)
        try Wormhole.validate(identifier: name, kind: "durable listener name")
        return try PostgresReader(transiting: self, identifier: identifier, start: start, durableName: name)
    }

    /// The running listeners and durable names of `identifier` (of every identifier when
    /// `nil`), from the claims table.
    public func listeners(identifier: String?) throws(WormholeError) -> [WormholeListenerStatus] {
        if let identifier { try Wormhole.validate(identifier: identifier) }
        var result: [WormholeListenerStatus] = []
        for row in try session.query(PostgresSchema.liveListeners(container: container, identifier: identifier), "list the listeners in \(server)") {
            guard let (id, position, last) = try? row.decode((String, Int64, Int64).self) else { continue }
            result.append(WormholeListenerStatus(identifier: id, durableName: nil, processID: nil, isRunning: true,
                                                 position: UInt64(position), behind: UInt64(max(0, last - position)), lastSeen: nil))
        }
        for row in try session.query(PostgresSchema.durables(container: container, identifier: identifier), "list the durable listeners in \(server)") {
            guard let (id, name, position, running, pid, seen, last) = try? row.decode((String, String, Int64, Bool, Int32, Date, Int64).self) else { continue }
            result.append(WormholeListenerStatus(identifier: id, durableName: name, processID: pid, isRunning: running,
                                                 position: UInt64(position), behind: UInt64(max(0, last - position)), lastSeen: seen))
        }
        return result
    }

    /// Removes the position of the durable listener `name`; refused while it runs.
    public func forgetDurableListener(named name: String, identifier: String?) throws(WormholeError) -> Int {
        try Wormhole.validate(identifier: name, kind: "durable listener name")
        if let identifier { try Wormhole.validate(identifier: identifier) }
        let rows = try session.query(PostgresSchema.forgetDurable(container: container, identifier: identifier, name: name),
                                     "forget the durable listener '\(name)' in \(server)")
        var gone: Int64 = 0
        var held: Int64 = 0
        if let row = rows.first, let counts = try? row.decode((Int64, Int64).self) { (gone, held) = counts }
        if held > 0 {
            throw WormholeError(.durableNameInUse, "the durable listener '\(name)' is running; stop it before forgetting its position")
        }
        return Int(gone)
    }

    // MARK: - Work queues

    /// A member of the work queue `name` of `identifier`, kept in the database's queue
    /// tables (Scaling.md, "The schema").
    public func joinWorkQueue(identifier: String, name: String, startingFrom start: WormholeStartingPoint) throws(WormholeError) -> any WormholeTransitingWorkQueue {
        try PostgresWorkQueue(transiting: self, identifier: identifier, name: name, start: start)
    }

    /// The work queues of `identifier` (of every identifier when `nil`): live members,
    /// pending and in-flight messages, and the counts of what became of the others.
    public func workQueues(identifier: String?) throws(WormholeError) -> [WormholeWorkQueueStatus] {
        if let identifier { try Wormhole.validate(identifier: identifier) }
        var members: [String: [WormholeWorkQueueStatus.Member]] = [:]
        for row in try session.query(PostgresSchema.queueMembers(container: container, identifier: identifier), "list the work queue members in \(server)") {
            guard let (id, name, processID, handling) = try? row.decode((String, String, Int32, Bool).self) else { continue }
            members[id + "/" + name, default: []].append(.init(processID: processID, pidNamespace: nil, isHandling: handling))
        }
        var result: [WormholeWorkQueueStatus] = []
        for row in try session.query(PostgresSchema.queues(container: container, identifier: identifier), "list the work queues in \(server)") {
            guard let (id, name, taken, acknowledged, deadLettered, expired, lost, last, entries, inFlight)
                    = try? row.decode((String, String, Int64, Int64, Int64, Int64, Int64, Int64, Int64, Int64).self) else { continue }
            result.append(WormholeWorkQueueStatus(
                identifier: id, name: name, members: members[id + "/" + name] ?? [],
                pending: UInt64(max(0, last - taken) + max(0, entries - inFlight)), inFlight: Int(inFlight),
                acknowledged: UInt64(acknowledged), deadLettered: UInt64(deadLettered), expired: UInt64(expired), lost: UInt64(lost)))
        }
        return result
    }

    /// Calls `handler` when the identifier's channel is notified (a `LISTEN` on this
    /// transiting's notification connection).
    public func observe(identifier: String, handler: @escaping @Sendable (WormholeTransitingEvent) -> Void) throws(WormholeError) -> any WormholeTransitingObservation {
        try Wormhole.validate(identifier: identifier)
        let id = try notifier.subscribe(identifier, handler: handler)
        return Observation(notifier: notifier, identifier: identifier, id: id)
    }

    private struct Observation: WormholeTransitingObservation {
        let notifier: PostgresNotifier
        let identifier: String
        let id: UInt64
        func cancel() { notifier.unsubscribe(identifier, id) }
    }

    /// The columns of a message (``PostgresSchema/recordColumns``): sequence, sent_at,
    /// sender_pid, kind, payload, role, correlation, expires_at.
    typealias MessageColumns = (Int64, Date, Int32, Int16, ByteBuffer, Int16, Int64, Date?)

    /// A row of ``PostgresSchema/recordColumns`` as a record, or the reason it is not one.
    func record(from row: PostgresRow, identifier: String) -> Result<WormholeRecord, WormholeError> {
        guard let columns = try? row.decode(MessageColumns.self) else {
            return .failure(WormholeError(.corruptRecord, "a row of '\(identifier)' in \(server) does not have the columns of a message"))
        }
        return record(columns, identifier: identifier)
    }

    func record(_ columns: MessageColumns, identifier: String) -> Result<WormholeRecord, WormholeError> {
        let (sequence, date, processID, kind, payload, role, correlation, expires) = columns
        guard let kind = UInt8(exactly: kind).flatMap(WormholePayloadKind.init(rawValue:)) else {
            return .failure(WormholeError(.corruptRecord, "message \(sequence) of '\(identifier)' in \(server) has the unknown kind \(kind)"))
        }
        guard let role = UInt8(exactly: role).flatMap(WormholeRecordRole.init(rawValue:)) else {
            return .failure(WormholeError(.corruptRecord, "message \(sequence) of '\(identifier)' in \(server) has the unknown role \(role)"))
        }
        return .success(WormholeRecord(identifier: identifier, sequence: UInt64(sequence), date: date, processID: processID,
                                       kind: kind, payload: Data(buffer: payload, byteTransferStrategy: .noCopy),
                                       role: role, correlation: UInt64(bitPattern: correlation), expires: expires))
    }
}
#endif
