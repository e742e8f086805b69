#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
@_spi(Backend) import WormholeCore
@_spi(Backend) import WormholeFiles

extension WormholeRecord {
    /// The message as `Message`: `Data` gets the bytes as they are, `String` the UTF-8
    /// text, any other `Decodable` type is decoded from JSON by the standard decoder
    /// (``WormholeJSONCoding/standard``).
    ///
    /// - Throws: ``WormholeError/Code/decodingFailed`` when the bytes are not that type.
    public func decode<Message: Decodable>(as type: Message.Type = Message.self) throws(WormholeError) -> Message {
        try MessageCoding.decode(payload, as: type, identifier: identifier, sequence: sequence, using: MessageCoding.standard)
    }

    /// The message as `Message`, decoded from JSON by `coding`'s decoder when it is
    /// neither `Data` nor `String`: how to decode a record as the wormhole it came from
    /// does (``Wormhole/jsonCoding``).
    ///
    /// ```swift
    /// try wormhole.listenForRecords(withIdentifier: "note") { record in
    ///     let note = try? record.decode(as: Note.self, using: wormhole.jsonCoding)
    /// }
    /// ```
    ///
    /// - Throws: ``WormholeError/Code/decodingFailed`` when the bytes are not that type.
    public func decode<Message: Decodable>(as type: Message.Type = Message.self, using coding: WormholeJSONCoding) throws(WormholeError) -> Message {
        try MessageCoding.decode(payload, as: type, identifier: identifier, sequence: sequence, using: coding)
    }
}

/// Turns messages into bytes and back. Raw bytes and text pass through unchanged; other
/// types travel as JSON, in the form a ``WormholeJSONCoding`` chooses.
enum MessageCoding {
    /// The standard coding, made once for the records decoded without a wormhole's.
    static let standard = WormholeJSONCoding.standard

    static func encode<Message: Encodable>(_ message: Message, identifier: String, using coding: WormholeJSONCoding) throws(WormholeError) -> (WormholePayloadKind, Data) {
        if let data = message as? Data { return (.data, data) }
        if let text = message as? String { return (.text, Data(text.utf8)) }
        if coding.encodesStandardForm, let payload = StandardJSONEncoder.encode(message) { return (.json, payload) }
        do {
            return (.json, try coding.encoder.encode(message))
        } catch {
            throw WormholeError(.encodingFailed, "cannot encode the message for '\(identifier)' as JSON: \(error)")
        }
    }

    /// Refuses bytes that are not what `kind` says: text that is not UTF-8, JSON that is
    /// not one JSON value. Raw bytes are anything.
    static func check(_ payload: Data, is kind: WormholePayloadKind, identifier: String) throws(WormholeError) {
        switch kind {
        case .data:
            return
        case .text:
            if String(validating: payload, as: UTF8.self) == nil {
                throw WormholeError(.encodingFailed, "the text payload for '\(identifier)' is not UTF-8; pass it with kind .data")
            }
        case .json:
            if let problem = StrictJSON.problem(in: payload) {
                throw WormholeError(.encodingFailed, "the JSON payload for '\(identifier)' is not JSON (\(problem)); pass it with kind .text or .data")
            }
        }
    }

    static func decode<Message: Decodable>(_ payload: Data, as type: Message.Type, identifier: String, sequence: UInt64,
                                           using coding: WormholeJSONCoding) throws(WormholeError) -> Message {
        if Message.self == Data.self, let data = payload as? Message { return data }
        if Message.self == String.self {
            guard let text = String(data: payload, encoding: .utf8), let message = text as? Message else {
                throw WormholeError(.decodingFailed, "message \(sequence) of '\(identifier)' is not UTF-8 text")
            }
            return message
        }
        if coding.decodesStandardForm, let message = StandardJSONDecoder.decode(Message.self, from: payload) { return message }
        do {
            return try coding.decoder.decode(Message.self, from: payload)
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
