#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A message that a work queue gave up on, as it is passed (JSON) to the queue's
/// dead-letter identifier: the message, where it came from, and why.
///
/// ```swift
/// for try await letter in wormhole.messages(withIdentifier: "jobs.dead-letters", as: WormholeDeadLetter.self,
///                                           startingFrom: .history) {
///     print("job \(letter.sequence) failed \(letter.deliveries) times: \(letter.reason)")
/// }
/// ```
public struct WormholeDeadLetter: Codable, Sendable, Hashable {
    /// The identifier the message was passed under.
    public let identifier: String
    /// The work queue that gave up on it.
    public let queue: String
    /// Its sequence number in ``identifier``'s order.
    public let sequence: UInt64
    /// How many times it was handed to a member.
    public let deliveries: UInt32
    /// Why it was moved aside: the error its last handler threw, or that each member
    /// holding it ended before acknowledging it.
    public let reason: String
    /// How its bytes are meant to be read (``WormholePayloadKind/description``: `data`,
    /// `text` or `json`).
    public let kind: String
    /// The message's bytes, as passed (base64 in the JSON).
    public let payload: Data
    /// When it was passed.
    public let date: Date

    public init(identifier: String, queue: String, sequence: UInt64, deliveries: UInt32, reason: String,
                kind: String, payload: Data, date: Date) {
        self.identifier = identifier
        self.queue = queue
        self.sequence = sequence
        self.deliveries = deliveries
        self.reason = reason
        self.kind = kind
        self.payload = payload
        self.date = date
    }
}
