#if Postgres
import Foundation
import PostgresNIO
@_spi(Backend) import Wormhole

/// A listener's position in one identifier's messages, with its claim in
/// `wormhole.listeners`: pruning keeps every message after the claim's position while
/// the session that made the claim is connected.
final class PostgresReader: WormholeTransitingReader {
    private let transiting: PostgresTransiting
    private let identifier: String
    private let claim: String
    /// The sequence number of the last record delivered (or skipped by the start).
    private var delivered: UInt64 = 0
    /// The position the claim in the table holds: at most `delivered`.
    private var claimed: UInt64 = 0
    /// How far the claim may lag behind `delivered`. A claim that lags only keeps a few
    /// more messages from pruning; moving it on every read would make every read a
    /// write, with a commit (and a WAL flush) of its own.
    private let claimStep: UInt64
    /// The notifier's count when the last read found fewer rows than asked for: until
    /// it moves, a read would find nothing new. A listener reads until a read comes back
    /// short or empty; this saves the empty one, a statement per wake-up.
    private var quietSince: UInt64?
    private var closed = false
    /// A durable listener's name: its position in `wormhole.durable` moves as each
    /// message is acknowledged.
    private let durableName: String?
    private var holdsDurable = false
    /// Whether the durable name had been used before (it resumes after its position).
    private var resumed = false
    /// Whether a jump past `delivered` is reported as missed messages: for a position
    /// that may be older than what is kept (a durable one, or `.after(sequence:)`).
    private var reportsGaps = false

    /// The reader before it has claimed or looked at anything.
    private init(transiting: PostgresTransiting, identifier: String, durableName: String?) {
        self.transiting = transiting
        self.identifier = identifier
        self.durableName = durableName
        self.claim = UUID().uuidString
        self.claimStep = UInt64(max(1, transiting.configuration.retainedMessageCount / 4))
    }

    /// A reader that starts at `start` (or where the durable name stopped), blocking the
    /// calling thread for its statements.
    convenience init(transiting: PostgresTransiting, identifier: String, start: Wormhole.StartingPoint, durableName: String? = nil) throws(WormholeError) {
        self.init(transiting: transiting, identifier: identifier, durableName: durableName)
        let session = transiting.session
        do throws(WormholeError) {
            var start = start
            if let durableName {
                let taken = try session.query(takeQuery(durableName), takeDoing(durableName))
                guard let resumed = try taking(taken, start) else {
                    throw inUse(durableName, holder: try? session.query(holderQuery(durableName), ""))
                }
                start = resumed
            } else {
                try session.query(claimQuery, claimDoing)
            }
            if let store = try starting(at: start, state: try session.query(stateQuery, stateDoing)) {
                try session.query(store, storeDoing)
            }
        } catch {
            close()
            throw error
        }
    }

    // MARK: - Starting: the statements, and what their rows decide

    private func takeQuery(_ name: String) -> PostgresQuery {
        PostgresSchema.takeDurable(container: transiting.container, identifier: identifier, name: name, processID: getpid())
    }
    private func takeDoing(_ name: String) -> String { "take the durable listener '\(name)' of '\(identifier)' in \(transiting.server)" }
    private func holderQuery(_ name: String) -> PostgresQuery {
        PostgresSchema.durableHolder(container: transiting.container, identifier: identifier, name: name)
    }
    private var claimQuery: PostgresQuery { PostgresSchema.claim(listener: claim, container: transiting.container, identifier: identifier) }
    private var claimDoing: String { "register a listener of '\(identifier)' in \(transiting.server)" }
    private var stateQuery: PostgresQuery { PostgresSchema.state(container: transiting.container, identifier: identifier) }
    private var stateDoing: String { "read the state of '\(identifier)' in \(transiting.server)" }
    private var storeDoing: String { "store the position of '\(durableName ?? "")' in \(transiting.server)" }

    /// After taking the durable name: where to start (after its position when it was
    /// used before); `nil` when another session holds it.
    private func taking(_ rows: [PostgresRow], _ start: Wormhole.StartingPoint) throws(WormholeError) -> Wormhole.StartingPoint? {
        guard let (position, created) = rows.first.flatMap({ try? $0.decode((Int64, Bool).self) }) else { return nil }
        holdsDurable = true
        if created { return start }
        resumed = true
        return .after(sequence: UInt64(max(0, position)))
    }

    private func inUse(_ name: String, holder: [PostgresRow]?) -> WormholeError {
        let pid = holder?.first.flatMap { try? $0.decode(Int32.self) }.map { " (process \($0))" } ?? ""
        return WormholeError(.durableNameInUse,
            "the durable listener '\(name)' of '\(identifier)' is already running\(pid); one process at a time uses a durable name: stop the other, or choose another name")
    }

    /// Sets the position from the identifier's state; returns the statement that stores
    /// a new durable name's first position, when there is one to store.
    private func starting(at start: Wormhole.StartingPoint, state rows: [PostgresRow]) throws(WormholeError) -> PostgresQuery? {
        let state = rows.first.flatMap { try? $0.decode((Int64, Int64).self) }
        let last = UInt64(state?.0 ?? 0)
        let cleared = UInt64(state?.1 ?? 0)
        switch start {
        case .now:
            delivered = last
        case .latest:
            delivered = max(cleared, last == 0 ? 0 : last - 1)
        case .history:
            let retained = UInt64(transiting.configuration.retainedMessageCount)
            delivered = max(cleared, last > retained ? last - retained : 0)
        case .after(let sequence):
            delivered = max(sequence, cleared)
            reportsGaps = true
        }
        guard let durableName, !resumed else { return nil }
        return PostgresSchema.storeDurable(container: transiting.container, identifier: identifier, name: durableName, position: delivered)
    }

    deinit { close() }

    // MARK: - Reading

    func read(maximumCount: Int) throws(WormholeError) -> [Result<WormholeRecord, WormholeError>] {
        guard let plan = plan(maximumCount) else { return [] }
        let rows = try transiting.session.query(plan.query, plan.doing)
        let state = firstBeyondGap(rows) == nil ? nil : try? transiting.session.query(stateQuery, "")
        return finish(rows, plan, state: state)
    }

    /// One read's statement, or `nil` when nothing new can have come.
    private struct Plan {
        let query: PostgresQuery
        let doing: String
        let generation: UInt64?
        let moveClaim: Bool
        let maximumCount: Int
    }

    private func plan(_ maximumCount: Int) -> Plan? {
        guard !closed, maximumCount > 0 else { return nil }
        // Taken before the query: a message committed after the query's snapshot is
        // notified after it, and moves the count.
        let generation = transiting.notifier.generation
        if let quietSince, quietSince == generation { return nil }
        let moveClaim = durableName == nil && delivered - claimed >= claimStep
        return Plan(query: PostgresSchema.read(listener: claim, container: transiting.container, identifier: identifier,
                                               after: delivered, limit: maximumCount, claim: moveClaim),
                    doing: "read the messages of '\(identifier)' in \(transiting.server)",
                    generation: generation, moveClaim: moveClaim, maximumCount: maximumCount)
    }

    /// The first row's sequence when it is past the next one expected and a gap may have
    /// to be reported (which needs the cleared count).
    private func firstBeyondGap(_ rows: [PostgresRow]) -> UInt64? {
        guard reportsGaps || durableName != nil, let first = rows.first.flatMap({ try? $0.makeRandomAccess()[0].decode(Int64.self) }),
              UInt64(first) > delivered + 1 else { return nil }
        return UInt64(first)
    }

    private func finish(_ rows: [PostgresRow], _ plan: Plan, state: [PostgresRow]?) -> [Result<WormholeRecord, WormholeError>] {
        if plan.moveClaim { claimed = delivered }
        var results: [Result<WormholeRecord, WormholeError>] = []
        results.reserveCapacity(rows.count + 1)
        if let first = firstBeyondGap(rows) {
            // Older than what is kept (a durable listener stopped past the backlog cap, or
            // a start after a sequence number no longer kept): say how many, unless they
            // were cleared.
            var cleared: UInt64 = 0
            if let row = state?.first, let counters = try? row.decode((Int64, Int64).self) { cleared = UInt64(max(0, counters.1)) }
            let from = max(delivered, cleared)
            if first > from + 1 {
                let missed = first - from - 1
                results.append(.failure(WormholeError(.messagesLost,
                    "\(missed) message\(missed == 1 ? "" : "s") of '\(identifier)' (\(from + 1)...\(first - 1)) were dropped before this listener read them: it started before the oldest message kept, or was stopped longer than the backlog cap keeps (Wormhole.Configuration.maximumBacklogMessageCount, maximumBacklogByteCount)",
                    missedMessageCount: missed)))
            }
        }
        for row in rows {
            let result = transiting.record(from: row, identifier: identifier)
            if case .success(let record) = result { delivered = record.sequence }
            else if let sequence = try? row.makeRandomAccess()[0].decode(Int64.self) { delivered = UInt64(sequence) }
            results.append(result)
        }
        quietSince = rows.count < plan.maximumCount ? plan.generation : nil
        return WormholeRecord.withoutExpired(results, identifier: identifier)
    }

    // MARK: - Acknowledging

    func acknowledge(_ sequence: UInt64) throws(WormholeError) {
        guard let store = storeQuery(sequence) else { return }
        try transiting.session.query(store, storeDoing)
    }

    private func storeQuery(_ sequence: UInt64) -> PostgresQuery? {
        guard let durableName, !closed else { return nil }
        return PostgresSchema.storeDurable(container: transiting.container, identifier: identifier, name: durableName, position: sequence)
    }

    func close() {
        guard !closed else { return }
        closed = true
        if durableName == nil {
            transiting.claims.remove(claim)
            transiting.session.send(PostgresSchema.release(listener: claim), "release a listener's claim")
        }
        if let durableName, holdsDurable {
            transiting.session.send(PostgresSchema.releaseDurable(container: transiting.container, identifier: identifier, name: durableName),
                                    "release the durable listener '\(durableName)'")
        }
    }
}
#endif
