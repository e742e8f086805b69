#if Postgres
import Foundation
import PostgresNIO
import Wormhole

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
    /// Whether a jump past `delivered` is reported as missed messages: for a position
    /// that may be older than what is kept (a durable one, or `.after(sequence:)`).
    private var reportsGaps = false

    init(transiting: PostgresTransiting, identifier: String, start: Wormhole.StartingPoint, durableName: String? = nil) throws(WormholeError) {
        self.transiting = transiting
        self.identifier = identifier
        self.durableName = durableName
        self.claim = UUID().uuidString
        self.claimStep = UInt64(max(1, transiting.configuration.retainedMessageCount / 4))
        let container = transiting.container
        // Claim first (position 0: keep everything), then look: nothing can be pruned
        // away between looking and claiming. A durable listener's position is its claim
        // (taken at 0 when new).
        if durableName == nil { transiting.claims.insert(claim) }
        do throws(WormholeError) {
            var start = start
            var resumed = false
            if let durableName {
                let taken = try transiting.session.query(
                    PostgresSchema.takeDurable(container: container, identifier: identifier, name: durableName, processID: getpid()),
                    "take the durable listener '\(durableName)' of '\(identifier)' in \(transiting.server)")
                guard let (position, created) = taken.first.flatMap({ try? $0.decode((Int64, Bool).self) }) else {
                    let holder = try? transiting.session.query(PostgresSchema.durableHolder(container: container, identifier: identifier, name: durableName), "")
                    let pid = holder?.first.flatMap { try? $0.decode(Int32.self) }.map { " (process \($0))" } ?? ""
                    throw WormholeError(.durableNameInUse,
                        "the durable listener '\(durableName)' of '\(identifier)' is already running\(pid); one process at a time uses a durable name: stop the other, or choose another name")
                }
                holdsDurable = true
                if !created {
                    start = .after(sequence: UInt64(max(0, position)))
                    resumed = true
                }
            }
            if durableName == nil {
                try transiting.session.query(PostgresSchema.claim(listener: claim, container: container, identifier: identifier),
                                             "register a listener of '\(identifier)' in \(transiting.server)")
            }
            let rows = try transiting.session.query(PostgresSchema.state(container: container, identifier: identifier),
                                                    "read the state of '\(identifier)' in \(transiting.server)")
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
            if let durableName, !resumed {
                try transiting.session.query(PostgresSchema.storeDurable(container: container, identifier: identifier, name: durableName, position: delivered),
                                             "store the position of '\(durableName)' in \(transiting.server)")
            }
        } catch {
            close()
            throw error
        }
    }

    deinit { close() }

    func read(maximumCount: Int) throws(WormholeError) -> [Result<WormholeRecord, WormholeError>] {
        guard !closed, maximumCount > 0 else { return [] }
        // Taken before the query: a message committed after the query's snapshot is
        // notified after it, and moves the count.
        let generation = transiting.notifier.generation
        if let quietSince, quietSince == generation { return [] }
        let moveClaim = durableName == nil && delivered - claimed >= claimStep
        let rows = try transiting.session.query(
            PostgresSchema.read(listener: claim, container: transiting.container, identifier: identifier,
                                after: delivered, limit: maximumCount, claim: moveClaim),
            "read the messages of '\(identifier)' in \(transiting.server)")
        if moveClaim { claimed = delivered }
        var results: [Result<WormholeRecord, WormholeError>] = []
        results.reserveCapacity(rows.count + 1)
        if reportsGaps || durableName != nil, let first = rows.first.flatMap({ try? $0.makeRandomAccess()[0].decode(Int64.self) }),
           UInt64(first) > delivered + 1 {
            // Older than what is kept (a durable listener stopped past the backlog cap, or
            // a start after a sequence number no longer kept): say how many, unless they
            // were cleared.
            let state = try? transiting.session.query(PostgresSchema.state(container: transiting.container, identifier: identifier), "")
            var cleared: UInt64 = 0
            if let row = state?.first, let counters = try? row.decode((Int64, Int64).self) { cleared = UInt64(max(0, counters.1)) }
            let from = max(delivered, cleared)
            if UInt64(first) > from + 1 {
                let missed = UInt64(first) - from - 1
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
        quietSince = rows.count < maximumCount ? generation : nil
        return results
    }

    func acknowledge(_ sequence: UInt64) throws(WormholeError) {
        guard let durableName, !closed else { return }
        try transiting.session.query(PostgresSchema.storeDurable(container: transiting.container, identifier: identifier, name: durableName, position: sequence),
                                     "store the position of '\(durableName)' in \(transiting.server)")
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
