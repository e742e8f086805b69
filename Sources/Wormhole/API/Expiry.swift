#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import WormholeCore
import WormholeFiles

/// Messages with a time to live: after it, a message is not delivered to listeners that
/// start later, resume (durable names) or take from a work queue, nor to one that reads
/// it only then; they receive a ``WormholeError/Code/messagesExpired`` report with the
/// count in its place, and a work queue counts it (``WormholeWorkQueueStatus/expired``).
/// The expiry is a wall-clock date in the record (Protocol.md §8.1 `expires`).
extension Wormhole {
    /// ``passMessage(_:identifier:)-2w6mt`` for a message that is stale after `timeToLive`
    /// seconds: a position, a "come now" to whoever is listening, a job that must start
    /// soon or not at all.
    ///
    /// ```swift
    /// try wormhole.passMessage(Ping(), identifier: "presence", timeToLive: 10)
    /// ```
    @discardableResult
    public func passMessage<Message: Encodable & Sendable>(_ message: Message, identifier: String, timeToLive: Double) throws(WormholeError) -> UInt64 {
        try Identifier.validate(identifier)
        let (kind, payload) = try MessageCoding.encode(message, identifier: identifier, using: jsonCoding)
        return try transiting.append(payload, kind: kind, identifier: identifier, attributes: try Self.expiring(after: timeToLive)).sequence
    }

    /// ``passMessage(_:identifier:timeToLive:)-3yey7`` from an asynchronous context.
    @discardableResult
    public func passMessage<Message: Encodable & Sendable>(_ message: Message, identifier: String, timeToLive: Double) async throws(WormholeError) -> UInt64 {
        try Identifier.validate(identifier)
        let (kind, payload) = try MessageCoding.encode(message, identifier: identifier, using: jsonCoding)
        return try await transiting.append(payload, kind: kind, identifier: identifier, attributes: try Self.expiring(after: timeToLive)).sequence
    }

    /// ``passPayload(_:kind:identifier:)-5tjp6`` with a time to live in seconds.
    @discardableResult
    public func passPayload(_ payload: Data, kind: WormholePayloadKind, identifier: String, timeToLive: Double) throws(WormholeError) -> UInt64 {
        try Identifier.validate(identifier)
        try MessageCoding.check(payload, is: kind, identifier: identifier)
        return try transiting.append(payload, kind: kind, identifier: identifier, attributes: try Self.expiring(after: timeToLive)).sequence
    }

    static func expiring(after timeToLive: Double) throws(WormholeError) -> WormholeRecordAttributes {
        guard timeToLive > 0, timeToLive.isFinite, timeToLive < 1e9 else {
            throw WormholeError(.invalidConfiguration, "a time to live must be a positive number of seconds, not \(timeToLive)")
        }
        return WormholeRecordAttributes(expires: Date().addingTimeInterval(timeToLive))
    }
}
