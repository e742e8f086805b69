#if Postgres
import Foundation
import NIOCore
import PostgresNIO
@_spi(Backend) import Wormhole

/// One member of a work queue kept in the database (see ``PostgresSchema`` and
/// `Docs/Scaling.md`, "Work queues and requests").
///
/// A member is live while the database session of its wormhole's statement connection
/// is connected: a member whose process is killed loses its connection, the server ends
/// the session, and the next take of any member hands out again what it held, with its
/// count of deliveries. That is the rule the listeners' claims already follow; no
/// process id (another machine's, another PID namespace's), lease or heartbeat decides
/// it. When the connection is lost while the process lives, the next statement connects
/// again and moves the membership to the new session; what it held meanwhile may have
/// been handed to another member (handled twice, never lost).
///
/// Each call waits for its statements (the member's handler runs on a dispatch queue of
/// its own, never on the cooperative pool or an event loop).
final class PostgresWorkQueue: WormholeTransitingWorkQueue {
    private let transiting: PostgresTransiting
    private let identifier: String
    private let name: String
    /// This member's number: its row in `wormhole.queue_members`, and its mark on the
    /// entries it holds.
    private let member: Int64
    private var closed = false
    /// The message handed out last and not yet acknowledged or given back.
    private var held: WormholeWorkQueueDelivery?
    /// How many messages a fill takes into the queue's entries at most.
    static let fillLimit = 256
    /// The back-off of messages that failed (``delayRedeliveries(_:)``); none until set.
    private var delay: @Sendable (UInt32) -> Double = { _ in 0 }

    init(transiting: PostgresTransiting, identifier: String, name: String, start: WormholeStartingPoint) throws(WormholeError) {
        try Wormhole.validate(identifier: identifier)
        try Wormhole.validate(identifier: name, kind: "work queue name")
        self.transiting = transiting
        self.identifier = identifier
        self.name = name
        self.member = Int64.random(in: 1...Int64.max)
        // Known before the row exists: a connection made meanwhile adopts it.
        transiting.members.insert(member)
        do throws(WormholeError) {
            try transiting.session.query(
                PostgresSchema.joinQueue(container: transiting.container, identifier: identifier, name: name, member: member,
                                         processID: ProcessInfo.processInfo.processIdentifier, start: start),
                "join the work queue '\(name)' of '\(identifier)' in \(transiting.server)")
        } catch {
            transiting.members.remove(member)
            closed = true
            throw error
        }
    }

    deinit { close() }

    private var doing: String { "the work queue '\(name)' of '\(identifier)' in \(transiting.server)" }

    func take(maximumDeliveries: UInt32, deadLetters: String, report: (WormholeError) -> Void) throws(WormholeError) -> WormholeWorkQueueDelivery? {
        try take(acknowledging: nil, maximumDeliveries: maximumDeliveries, deadLetters: deadLetters, report: report)
    }

    private func take(acknowledging acknowledged: UInt64?, maximumDeliveries: UInt32, deadLetters: String,
                      report: (WormholeError) -> Void) throws(WormholeError) -> WormholeWorkQueueDelivery? {
        var acknowledging = acknowledged
        guard !closed else { throw WormholeError(.invalidConfiguration, "the work queue '\(name)' of '\(identifier)' was left") }
        let container = transiting.container
        while true {
            let rows = try transiting.session.query(
                PostgresSchema.takeFromQueue(container: container, identifier: identifier, name: name, member: member,
                                             acknowledging: acknowledging, maximumDeliveries: maximumDeliveries,
                                             retryDelay: delay(1), maximumRetryDelay: delay(64)),
                "take a message from \(doing)")
            // Stored with the take (the statement is one transaction).
            acknowledging = nil
            guard let row = rows.first else {
                // Nothing to hand out: take the next messages passed, if any.
                let filled = try transiting.session.query(
                    PostgresSchema.fillQueue(container: container, identifier: identifier, name: name, limit: Self.fillLimit),
                    "take the new messages into \(doing)")
                var added: Int64 = 0, lost: Int64 = 0
                if let row = filled.first, let counts = try? row.decode((Int64, Int64).self) { (added, lost) = counts }
                if lost > 0 {
                    report(.workQueueLost(UInt64(lost), queue: name, identifier: identifier,
                                          because: "they were cleared, or pruned past the backlog cap, before the queue took them"))
                }
                if added == 0 { return nil }
                continue
            }
            guard let columns = try? row.decode((Int64, Date?, Int32?, Int16?, ByteBuffer?, Int16?, Int64?, Date?, Int32).self) else {
                throw WormholeError(.databaseError, "taking a message from \(doing) returned an unexpected row")
            }
            let sequence = UInt64(columns.0), deliveries = UInt32(max(1, columns.8))
            guard let date = columns.1, let processID = columns.2, let kind = columns.3, let payload = columns.4,
                  let role = columns.5, let correlation = columns.6 else {
                try finish(sequence, .lost)
                report(.workQueueLost(1, queue: name, identifier: identifier, because: "it was cleared or pruned before it was handled"))
                continue
            }
            let record: WormholeRecord
            switch transiting.record((columns.0, date, processID, kind, payload, role, correlation, columns.7), identifier: identifier) {
            case .success(let found): record = found
            case .failure(let error):
                try finish(sequence, .lost)
                report(error)
                continue
            }
            if deliveries - 1 >= maximumDeliveries {
                try deadLetter(record, deliveries: deliveries - 1, to: deadLetters,
                               reason: WormholeDeadLetter.membersEndedReason(deliveries: deliveries - 1))
                try finish(sequence, .deadLettered)
                continue
            }
            if let expires = record.expires, expires <= Date() {
                try finish(sequence, .expired)
                continue
            }
            let delivery = WormholeWorkQueueDelivery(record: record, deliveries: deliveries)
            held = delivery
            return delivery
        }
    }

    /// Kept in the entries' `due_at` (a message given back) and applied by the take to
    /// the entries of members that ended (from when they were handed out).
    func delayRedeliveries(_ delay: @escaping @Sendable (UInt32) -> Double) {
        self.delay = delay
    }

    func acknowledge(_ sequence: UInt64) throws(WormholeError) {
        if held?.record.sequence == sequence { held = nil }
        try finish(sequence, .acknowledged)
    }

    /// The acknowledgement and the next take in one statement (one transaction): one
    /// statement per message while the queue has messages for this member.
    func acknowledge(_ sequence: UInt64, thenTakeWithMaximumDeliveries maximumDeliveries: UInt32, deadLetters: String,
                     report: (WormholeError) -> Void) throws(WormholeError) -> WormholeWorkQueueDelivery? {
        if held?.record.sequence == sequence { held = nil }
        return try take(acknowledging: sequence, maximumDeliveries: maximumDeliveries, deadLetters: deadLetters, report: report)
    }

    func giveBack(_ sequence: UInt64, reason: String, maximumDeliveries: UInt32, deadLetters: String) throws(WormholeError) {
        guard let delivery = held, delivery.record.sequence == sequence else { return }
        held = nil
        guard delivery.deliveries >= maximumDeliveries else {
            try transiting.session.query(
                PostgresSchema.giveBackEntry(container: transiting.container, identifier: identifier, name: name, member: member, sequence: sequence,
                                             delay: delay(delivery.deliveries)),
                "give a message back to \(doing)")
            return
        }
        try deadLetter(delivery.record, deliveries: delivery.deliveries, to: deadLetters, reason: reason)
        try finish(sequence, .deadLettered)
    }

    func close() {
        guard !closed else { return }
        closed = true
        transiting.members.remove(member)
        transiting.session.send(PostgresSchema.leaveQueue(container: transiting.container, identifier: identifier, name: name, member: member),
                                "leave \(doing)")
    }

    private func finish(_ sequence: UInt64, _ outcome: PostgresSchema.QueueOutcome) throws(WormholeError) {
        try transiting.session.query(
            PostgresSchema.finishEntry(container: transiting.container, identifier: identifier, name: name, member: member,
                                       sequence: sequence, outcome: outcome),
            "store what became of message \(sequence) of \(doing)")
    }

    private func deadLetter(_ record: WormholeRecord, deliveries: UInt32, to deadLetters: String, reason: String) throws(WormholeError) {
        let letter = WormholeDeadLetter(record: record, queue: name, deliveries: deliveries, reason: reason)
        _ = try transiting.append(try letter.encoded(fitting: transiting.configuration.maximumMessageSize),
                                  kind: .json, identifier: deadLetters)
    }
}
#endif
