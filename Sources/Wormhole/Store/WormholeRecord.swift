import Foundation

/// How a message's bytes are meant to be read. Stored in each record so that another
/// program (or the `wormhole` CLI) knows what it holds.
public enum WormholePayloadKind: UInt8, Sendable, Hashable, CustomStringConvertible {
    /// Raw bytes, passed as `Data`.
    case data = 0
    /// UTF-8 text, passed as `String`.
    case text = 1
    /// A JSON document, passed as any other `Encodable` type.
    case json = 2

    public var description: String {
        switch self {
        case .data: "data"
        case .text: "text"
        case .json: "json"
        }
    }
}

/// One message as the store keeps it: its bytes and what the store knows about it.
///
/// Listen for records (``Wormhole/listenForRecords(withIdentifier:startingFrom:queue:onError:listener:)``)
/// when you need the sequence number, the time or the sending process as well as the
/// message.
public struct WormholeRecord: Sendable, Hashable {
    /// The identifier the message was passed under.
    public let identifier: String
    /// Its position in the identifier's one order, from 1, agreed by every listener.
    public let sequence: UInt64
    /// When the sender passed it.
    public let date: Date
    /// The sending process.
    public let processID: Int32
    /// How its bytes are meant to be read.
    public let kind: WormholePayloadKind
    /// The message's bytes, exactly as passed.
    public let payload: Data

    public init(identifier: String, sequence: UInt64, date: Date, processID: Int32, kind: WormholePayloadKind, payload: Data) {
        self.identifier = identifier
        self.sequence = sequence
        self.date = date
        self.processID = processID
        self.kind = kind
        self.payload = payload
    }

    /// The message as `Message`: `Data` gets the bytes as they are, `String` the UTF-8
    /// text, any other `Decodable` type is decoded from JSON.
    ///
    /// - Throws: ``WormholeError/Code/decodingFailed`` when the bytes are not that type.
    public func decode<Message: Decodable>(as type: Message.Type = Message.self) throws(WormholeError) -> Message {
        try MessageCoding.decode(payload, as: type, identifier: identifier, sequence: sequence)
    }
}

/// Retained contents of one identifier, as ``WormholeTransiting/summaries()`` lists them.
public struct WormholeIdentifierSummary: Sendable, Hashable {
    /// The identifier.
    public let identifier: String
    /// How many messages are retained for it.
    public let messageCount: Int
    /// Their total payload size in bytes.
    public let byteCount: Int
    /// The sequence number of the latest message ever passed (0 if none).
    public let lastSequence: UInt64
    /// When the latest retained message was passed.
    public let lastUpdate: Date?

    public init(identifier: String, messageCount: Int, byteCount: Int, lastSequence: UInt64, lastUpdate: Date?) {
        self.identifier = identifier
        self.messageCount = messageCount
        self.byteCount = byteCount
        self.lastSequence = lastSequence
        self.lastUpdate = lastUpdate
    }
}

/// Turns messages into bytes and back. Raw bytes and text pass through unchanged; other
/// types travel as JSON.
enum MessageCoding {
    static func encode<Message: Encodable>(_ message: Message, identifier: String) throws(WormholeError) -> (WormholePayloadKind, Data) {
        if let data = message as? Data { return (.data, data) }
        if let text = message as? String { return (.text, Data(text.utf8)) }
        do {
            return (.json, try JSONEncoder().encode(message))
        } catch {
            throw WormholeError(.encodingFailed, "cannot encode the message for '\(identifier)' as JSON: \(error)")
        }
    }

    static func decode<Message: Decodable>(_ payload: Data, as type: Message.Type, identifier: String, sequence: UInt64) throws(WormholeError) -> Message {
        if Message.self == Data.self, let data = payload as? Message { return data }
        if Message.self == String.self {
            guard let text = String(data: payload, encoding: .utf8), let message = text as? Message else {
                throw WormholeError(.decodingFailed, "message \(sequence) of '\(identifier)' is not UTF-8 text")
            }
            return message
        }
        do {
            return try JSONDecoder().decode(Message.self, from: payload)
        } catch {
            throw WormholeError(.decodingFailed, "message \(sequence) of '\(identifier)' is not a JSON \(Message.self): \(describe(error))")
        }
    }

    private static func describe(_ error: any Error) -> String {
        switch error as? DecodingError {
        case .dataCorrupted(let context)?: return context.debugDescription
        case .keyNotFound(let key, _)?: return "no value for key '\(key.stringValue)'"
        case .typeMismatch(_, let context)?, .valueNotFound(_, let context)?:
            let path = context.codingPath.map(\.stringValue).joined(separator: ".")
            return path.isEmpty ? context.debugDescription : "\(path): \(context.debugDescription)"
        default: return "\(error)"
        }
    }
}
