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
    /// The message's bytes, as passed (base64 in the JSON); empty when they were left out
    /// (``omittedPayloadSize``).
    public let payload: Data
    /// When it was passed.
    public let date: Date
    /// The size in bytes of the message's payload when the letter leaves it out: with it,
    /// the letter would be larger than the writer's maximum message size (base64 is a third
    /// larger than the bytes), and a letter that cannot be passed stays in the queue for
    /// ever. The message is still in ``identifier`` at ``sequence`` while its log keeps
    /// it. `nil` (no key in the JSON) when ``payload`` is the message's.
    public let omittedPayloadSize: Int?

    @_spi(Backend) public init(identifier: String, queue: String, sequence: UInt64, deliveries: UInt32, reason: String,
                kind: String, payload: Data, date: Date, omittedPayloadSize: Int? = nil) {
        self.identifier = identifier
        self.queue = queue
        self.sequence = sequence
        self.deliveries = deliveries
        self.reason = reason
        self.kind = kind
        self.payload = payload
        self.date = date
        self.omittedPayloadSize = omittedPayloadSize
    }

    /// This letter without its payload, saying its size (``omittedPayloadSize``).
    @_spi(Backend) public func withoutPayload() -> WormholeDeadLetter {
        WormholeDeadLetter(identifier: identifier, queue: queue, sequence: sequence, deliveries: deliveries, reason: reason,
                           kind: kind, payload: Data(), date: date, omittedPayloadSize: omittedPayloadSize ?? payload.count)
    }
}
