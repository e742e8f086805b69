import Foundation
import Wormhole

/// How `listen` and `read` print a message.
enum RecordFormat: Sendable {
    /// The payload, then a newline unless it already ends with one: one message a line.
    case lines(prefixIdentifier: Bool)
    /// The payload's bytes exactly, nothing added.
    case raw
    /// One JSON object a line: identifier, sequence, time, sending process, kind, payload.
    case json

    /// The bytes to write for `record`.
    func render(_ record: WormholeRecord) -> Data {
        switch self {
        case .raw:
            return record.payload
        case .lines(let prefix):
            var data = prefix ? Data("\(record.identifier): ".utf8) : Data()
            data.append(record.payload)
            if data.last != UInt8(ascii: "\n") { data.append(UInt8(ascii: "\n")) }
            return data
        case .json:
            return Data((Self.jsonObject(record) + "\n").utf8)
        }
    }

    /// The record as one line of JSON, keys in a fixed order:
    /// `{"identifier":…,"sequence":…,"time":…,"pid":…,"kind":…,"payload":…}`.
    ///
    /// The payload is a string for text, the JSON value itself for JSON, and base64 for
    /// raw bytes (and for text or JSON that is not valid, with `"kind":"data"`).
    static func jsonObject(_ record: WormholeRecord) -> String {
        var kind = record.kind
        var payload: String
        switch record.kind {
        case .json where isJSON(record.payload):
            // Outside strings, line breaks in JSON are only whitespace: dropping them
            // keeps the value and the object on one line.
            payload = String(decoding: record.payload.filter { $0 != 0x0A && $0 != 0x0D }, as: UTF8.self)
        case .text, .json:
            if let text = String(data: record.payload, encoding: .utf8) {
                kind = .text
                payload = quoted(text)
            } else {
                kind = .data
                payload = quoted(record.payload.base64EncodedString())
            }
        case .data:
            payload = quoted(record.payload.base64EncodedString())
        }
        return "{\"identifier\":\(quoted(record.identifier)),\"sequence\":\(record.sequence),"
            + "\"time\":\(quoted(timestamp(record.date))),\"pid\":\(record.processID),"
            + "\"kind\":\(quoted(kind.description)),\"payload\":\(payload)}"
    }

    /// ISO 8601 in UTC with milliseconds: `2026-11-21T12:00:01.234Z`.
    static func timestamp(_ date: Date) -> String {
        date.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true))
    }

    /// Whether `data` is one JSON value (an object, array, string, number, true, false or null).
    static func isJSON(_ data: Data) -> Bool {
        StrictJSON.problem(in: data) == nil
    }

    /// `text` as a JSON string literal.
    static func quoted(_ text: String) -> String {
        var result = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": result += "\\\""
            case "\\": result += "\\\\"
            case "\n": result += "\\n"
            case "\r": result += "\\r"
            case "\t": result += "\\t"
            case _ where scalar.value < 0x20 || scalar.value == 0x7F || scalar.value == 0x2028 || scalar.value == 0x2029:
                result += String(format: "\\u%04x", scalar.value)
            default:
                result.unicodeScalars.append(scalar)
            }
        }
        return result + "\""
    }
}
