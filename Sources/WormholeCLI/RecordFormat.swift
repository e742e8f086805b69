#if canImport(Glibc)
import Glibc
#endif
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
@_spi(Backend) import Wormhole

/// How `listen` and `read` print a message.
enum RecordFormat: Sendable {
    /// The payload, then a newline unless it already ends with one: one message a line.
    case lines(prefixIdentifier: Bool)
    /// The payload's bytes exactly, nothing added.
    case raw
    /// One JSON object a line: identifier, sequence, time, sending process and user, kind, payload.
    case json

    /// The bytes to write for `record`. For a terminal, `.lines` shows control
    /// characters escaped (as `ls` and `git` do): a message cannot set the window title,
    /// clear the screen, write the clipboard or overwrite a line. `.raw` and `.json` are
    /// never changed by where they go.
    func render(_ record: WormholeRecord, forTerminal: Bool = false) -> Data {
        switch self {
        case .raw:
            return record.payload
        case .lines(let prefix):
            var data = prefix ? Data("\(record.identifier): ".utf8) : Data()
            data.append(forTerminal ? Self.terminalSafe(record.payload) : record.payload)
            if data.last != UInt8(ascii: "\n") { data.append(UInt8(ascii: "\n")) }
            return data
        case .json:
            return Data((Self.jsonObject(record) + "\n").utf8)
        }
    }

    /// The record as one line of JSON, keys in a fixed order:
    /// `{"identifier":…,"sequence":…,"time":…,"pid":…,"uid":…,"kind":…,"payload":…}`;
    /// `uid` is the sender's effective user id, `null` when the record does not say
    /// (written before protocol version 3).
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
            payload = escapingC1(String(decoding: record.payload.filter { $0 != 0x0A && $0 != 0x0D }, as: UTF8.self))
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
            + "\"time\":\(quoted(timestamp(record.date))),\"pid\":\(record.processID),\"uid\":\(record.senderUID.map(String.init) ?? "null"),"
            + "\"kind\":\(quoted(kind.description)),\"payload\":\(payload)}"
    }

    /// Who passed `record`, as `listen --verbose` says it: `pid 4242, uid 1001 (alice)`;
    /// the uid is left out when the record does not carry it. Both are what the sender
    /// wrote: a member of a shared group can write others (Security.md).
    static func sender(_ record: WormholeRecord) -> String {
        guard let uid = record.senderUID else { return "pid \(record.processID)" }
        let name = getpwuid(uid_t(uid)).map { " (" + String(cString: $0.pointee.pw_name) + ")" } ?? ""
        return "pid \(record.processID), uid \(uid)\(name)"
    }

    /// Valid JSON with its DEL and C1 characters (possible only inside strings) written
    /// as escapes, so that a line of `--json` output is safe on a terminal too.
    static func escapingC1(_ json: String) -> String {
        guard json.unicodeScalars.contains(where: { (0x7F...0x9F).contains($0.value) }) else { return json }
        var result = ""
        for scalar in json.unicodeScalars {
            if (0x7F...0x9F).contains(scalar.value) {
                result += TextFormatting.jsonEscape(scalar.value)
            } else {
                result.unicodeScalars.append(scalar)
            }
        }
        return result
    }

    /// ISO 8601 in UTC with milliseconds: `2026-11-21T12:00:01.234Z`.
    static func timestamp(_ date: Date) -> String {
        date.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true))
    }

    /// Whether `data` is one JSON value (an object, array, string, number, true, false or null).
    static func isJSON(_ data: Data) -> Bool {
        StrictJSON.problem(in: data) == nil
    }

    /// `bytes` for a terminal: line breaks and tabs as they are; other C0 controls, DEL,
    /// C1 controls and bidirectional formatting characters as `\u{…}`; bytes that are
    /// not UTF-8 as `\xNN`. Everything else unchanged.
    static func terminalSafe(_ bytes: Data) -> Data {
        var result = ""
        var index = bytes.startIndex
        while index < bytes.endIndex {
            // Decode one scalar, or take one byte that does not start a valid one.
            var iterator = bytes[index...].makeIterator()
            var decoder = UTF8()
            switch decoder.decode(&iterator) {
            case .scalarValue(let scalar):
                let length = UTF8.width(scalar)
                let value = scalar.value
                if scalar == "\n" || scalar == "\t" {
                    result.unicodeScalars.append(scalar)
                } else if Identifier.isUnsafeToDisplay(scalar) {
                    result += "\\u{\(String(value, radix: 16))}"
                } else {
                    result.unicodeScalars.append(scalar)
                }
                index = bytes.index(index, offsetBy: length)
            case .error, .emptyInput:
                result += "\\x" + String(bytes[index], radix: 16, uppercase: true)
                index = bytes.index(after: index)
            }
        }
        return Data(result.utf8)
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
            case _ where scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) || scalar.value == 0x2028 || scalar.value == 0x2029:
                result += TextFormatting.jsonEscape(scalar.value)
            default:
                result.unicodeScalars.append(scalar)
            }
        }
        return result + "\""
    }
}
