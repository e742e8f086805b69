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

    init(transiting: PostgresTransiting, identifier: String, start: Wormhole.StartingPoint) throws(WormholeError) {
        self.transiting = transiting
        self.identifier = identifier
        self.claim = UUID().uuidString
        self.claimStep = UInt64(max(1, transiting.configuration.retainedMessageCount / 4))
        let container = transiting.container
        // Claim first (position 0: keep everything), then look: nothing can be pruned
        // away between looking and claiming.
        transiting.claims.insert(claim)
        do throws(WormholeError) {
            try transiting.session.query(PostgresSchema.claim(listener: claim, container: container, identifier: identifier),
                                         "register a listener of '\(identifier)' in \(transiting.server)")
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
        let moveClaim = delivered - claimed >= claimStep
        let rows = try transiting.session.query(
            PostgresSchema.read(listener: claim, container: transiting.container, identifier: identifier,
                                after: delivered, limit: maximumCount, claim: moveClaim),
            "read the messages of '\(identifier)' in \(transiting.server)")
        if moveClaim { claimed = delivered }
        var results: [Result<WormholeRecord, WormholeError>] = []
        results.reserveCapacity(rows.count)
        for row in rows {
            let result = transiting.record(from: row, identifier: identifier)
            if case .success(let record) = result { delivered = record.sequence }
            else if let sequence = try? row.makeRandomAccess()[0].decode(Int64.self) { delivered = UInt64(sequence) }
            results.append(result)
        }
        quietSince = rows.count < maximumCount ? generation : nil
        return results
    }

    func close() {
        guard !closed else { return }
        closed = true
        transiting.claims.remove(claim)
        transiting.session.send(PostgresSchema.release(listener: claim), "release a listener's claim")
    }
}
#endif
