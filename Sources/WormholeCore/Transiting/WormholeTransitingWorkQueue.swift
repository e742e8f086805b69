#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// One member's handle on a work queue of a back end (``WormholeTransiting/joinWorkQueue(identifier:name:startingFrom:)``):
/// what ``WorkQueueMember`` takes messages from. The file back end keeps the queue in a
/// state file (Protocol.md §18), the PostgreSQL one in tables. Used by one thread at a
/// time.
///
/// Whatever the back end, each message goes to one live member at a time; a message
/// whose member ended (its process killed) without acknowledging it is handed out again,
/// with its count of deliveries; liveness is never decided by a process id.
@_spi(Backend) public protocol WormholeTransitingWorkQueue: AnyObject {
    /// Hands this member the oldest message nobody alive holds: first one whose member
    /// died (or gave it back), then the next one passed. A message handed out
    /// `maximumDeliveries` times already goes to `deadLetters` instead (a
    /// ``WormholeDeadLetter``); an expired one is counted and skipped; `report` receives
    /// what the queue lost (``WormholeError/Code/messagesLost``) and records it could not
    /// read. `nil` when there is nothing to take. A member calls it with nothing in hand
    /// (what it handled acknowledged first): the file back end hands out again, first, a
    /// message this member still holds (a take stored whose answer never reached it).
    func take(maximumDeliveries: UInt32, deadLetters: String, report: (WormholeError) -> Void) throws(WormholeError) -> WormholeWorkQueueDelivery?

    /// The message `sequence` (held by this member) was handled: it leaves the queue.
    func acknowledge(_ sequence: UInt64) throws(WormholeError)

    /// ``acknowledge(_:)``, then ``take(maximumDeliveries:deadLetters:report:)``: what a
    /// member that goes on taking calls. A back end that can stores both at once (the
    /// PostgreSQL one, in one statement); the default calls one, then the other.
    func acknowledge(_ sequence: UInt64, thenTakeWithMaximumDeliveries maximumDeliveries: UInt32, deadLetters: String,
                     report: (WormholeError) -> Void) throws(WormholeError) -> WormholeWorkQueueDelivery?

    /// The message `sequence` was not handled (its handler threw `reason`): it is handed
    /// out again, or, after `maximumDeliveries`, goes to `deadLetters`.
    func giveBack(_ sequence: UInt64, reason: String, maximumDeliveries: UInt32, deadLetters: String) throws(WormholeError)

    /// What holds the messages may have been replaced: look again at the next take.
    func invalidate()
    /// The back-off of messages that failed: a message given back (``giveBack(_:reason:maximumDeliveries:deadLetters:)``),
    /// or found held by a member that ended, after its `deliveries`-th delivery, is not
    /// handed out again before `delay(deliveries)` seconds; other messages are, meanwhile.
    /// The file back end stores it in the queue's state (Protocol.md §18.1, revision
    /// 3.1), the PostgreSQL one in its entries' `due_at`; a back end that has no delays
    /// ignores it (the default).
    func delayRedeliveries(_ delay: @escaping @Sendable (UInt32) -> Double)

    /// Leaves the queue: what this member still holds goes to the others.
    func close()
}

@_spi(Backend) extension WormholeTransitingWorkQueue {
    public func invalidate() {}
    public func delayRedeliveries(_ delay: @escaping @Sendable (UInt32) -> Double) {}

    public func acknowledge(_ sequence: UInt64, thenTakeWithMaximumDeliveries maximumDeliveries: UInt32, deadLetters: String,
                            report: (WormholeError) -> Void) throws(WormholeError) -> WormholeWorkQueueDelivery? {
        try acknowledge(sequence)
        return try take(maximumDeliveries: maximumDeliveries, deadLetters: deadLetters, report: report)
    }
}

/// A message handed to one member of a work queue.
@_spi(Backend) public struct WormholeWorkQueueDelivery: Sendable {
    /// The message.
    public let record: WormholeRecord
    /// How many times it has been handed out, this time included.
    public let deliveries: UInt32

    public init(record: WormholeRecord, deliveries: UInt32) {
        self.record = record
        self.deliveries = deliveries
    }
}

@_spi(Backend) extension WormholeDeadLetter {
    /// The dead letter of `record`, which the work queue `queue` gave up on after
    /// `deliveries` deliveries because of `reason`.
    public init(record: WormholeRecord, queue: String, deliveries: UInt32, reason: String) {
        self.init(identifier: record.identifier, queue: queue, sequence: record.sequence, deliveries: deliveries,
                  reason: reason, kind: record.kind.description, payload: record.payload, date: record.date)
    }

    /// The reason given when each member that held a message ended before acknowledging it.
    public static func membersEndedReason(deliveries: UInt32) -> String {
        "handed out \(deliveries) times; each time its member ended (killed or stopped) before acknowledging it"
    }

    /// The JSON passed to the dead-letter identifier (kind ``WormholePayloadKind/json``).
    public func encoded() throws(WormholeError) -> Data {
        do {
            return try WormholeJSONCoding.standardEncoder().encode(self)
        } catch {
            throw WormholeError(.encodingFailed, "cannot encode the dead letter of message \(sequence) of '\(identifier)': \(error)")
        }
    }

    /// The JSON passed to the dead-letter identifier by a writer whose largest message is
    /// `maximumMessageSize` bytes: the letter's, or, when that is larger (base64 makes the
    /// payload a third larger), the letter's ``withoutPayload()``, so that a dead letter is
    /// never refused for its size and left in its queue for ever. Every back end passes
    /// dead letters through this.
    public func encoded(fitting maximumMessageSize: Int) throws(WormholeError) -> Data {
        let whole = try encoded()
        return whole.count > maximumMessageSize ? try withoutPayload().encoded() : whole
    }
}

@_spi(Backend) extension WormholeError {
    /// What a work queue's members are told when it lost messages.
    public static func workQueueLost(_ count: UInt64, queue: String, identifier: String, because reason: String) -> WormholeError {
        WormholeError(.messagesLost, "the work queue '\(queue)' of '\(identifier)' lost \(count) message\(count == 1 ? "" : "s"): \(reason)",
                      missedMessageCount: count)
    }
}
