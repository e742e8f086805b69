#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The JSON encoder and decoder a wormhole uses for messages that are neither `Data` nor
/// `String` (``Wormhole/JSONCoding``).
///
/// The standard form is meant for readers in any language, who know nothing of Swift's
/// defaults: object keys sorted, so that one value is always the same bytes; dates as
/// ISO 8601 text in UTC, rounded to the millisecond (`"2026-11-25T12:27:40.034Z"`, as
/// JavaScript's `toISOString()` writes them and as the `wormhole` command prints times,
/// so a date read back is within half a millisecond of the one sent); slashes
/// unescaped; `Data` in base64. Python reads such a date with
/// `datetime.fromisoformat`, jq compares it as text.
///
/// ```swift
/// struct Note: Codable, Sendable { var text: String; var updated: Date }
/// try wormhole.passMessage(Note(text: "hi", updated: .now), identifier: "note")
/// // stored as {"text":"hi","updated":"2026-11-25T12:27:40.034Z"}
/// ```
///
/// The standard decoder reads a date written either way: ISO 8601 text (with or without
/// fractional seconds, `Z` or an offset such as `+02:00`), or a number of seconds since
/// 1 January 2001, the form `JSONEncoder` writes by default and that messages stored by
/// earlier versions of this library hold. Stored messages are never rewritten: an old
/// message keeps its numeric dates, which a reader in another language converts by
/// adding 978307200 to get seconds since 1970.
///
/// Give a wormhole your own encoder and decoder to choose another form, such as snake-case
/// keys; start from ``standardEncoder()`` and ``standardDecoder()`` to keep the rest:
///
/// ```swift
/// let encoder = Wormhole.JSONCoding.standardEncoder()
/// encoder.keyEncodingStrategy = .convertToSnakeCase
/// let decoder = Wormhole.JSONCoding.standardDecoder()
/// decoder.keyDecodingStrategy = .convertFromSnakeCase
/// let wormhole = try Wormhole(applicationGroupIdentifier: "group.com.example.notes",
///                             jsonCoding: .init(encoder: encoder, decoder: decoder))
/// ```
///
/// Every process that shares an identifier must read what the others write. A process
/// built with an earlier version of this library reads dates only as numbers: until it
/// is updated, the writers can keep the old form with `JSONCoding(encoder: JSONEncoder())`.
/// An encoder and decoder are classes: do not change their settings once a wormhole uses
/// them.
///
/// ## The standard form's own coder
///
/// A coding whose encoder or decoder was left out (``standard``, `JSONCoding()`,
/// `JSONCoding(decoder: mine)` for its encoder) writes and reads messages with the
/// library's own coder of the standard form rather than Foundation's generic
/// `JSONEncoder` and `JSONDecoder`: for a three-field struct, 0.4 × Foundation's
/// instructions to decode and 0.6 × to encode (Docs/Performance.md). It
/// writes the bytes Foundation's encoder with the standard settings writes (keys sorted
/// by their UTF-8 bytes, slashes unescaped, Foundation's escapes and number forms, the
/// dates above) and reads what Foundation's decoder reads, with the same values. What it
/// does not handle as Foundation does with certainty goes to ``encoder`` or ``decoder``,
/// so that the result, or the error, is Foundation's own: `Data`, `URL`, `Decimal`,
/// 128-bit integers, `superEncoder` and `superDecoder`, a key encoded twice, a number such
/// as `1.0` or `1e2` read as an integer, a number that overflows or rounds to zero, JSON
/// that is not strict RFC 8259 or names a member twice, and every failure. The bytes
/// stored are the same either way: the on-disk protocol does not change. A coding given
/// an encoder or decoder, even one made by `standardEncoder()` or
/// `standardDecoder()`, always uses Foundation's for that side; settings changed later
/// on a standard coding's ``encoder`` or ``decoder`` are not seen by its own coder.
public struct WormholeJSONCoding: Sendable {
    /// Encodes every message that is neither `Data` nor `String`.
    public let encoder: JSONEncoder
    /// Decodes every JSON message read as a type other than `Data` or `String`.
    public let decoder: JSONDecoder
    /// Whether ``encoder`` is the standard one this coding made: messages are then
    /// encoded by the library's own encoder of the standard form when it can.
    package let encodesStandardForm: Bool
    /// Whether ``decoder`` is the standard one this coding made: messages are then
    /// decoded by the library's own decoder of the standard form when it can.
    package let decodesStandardForm: Bool

    /// A coding with `encoder` and `decoder`; each one left out (or `nil`) is the standard
    /// one.
    ///
    /// - Parameters:
    ///   - encoder: Encodes messages passed with ``Wormhole/passMessage(_:identifier:timeToLive:)-6gmz7``.
    ///   - decoder: Decodes messages for ``Wormhole/message(withIdentifier:as:)-6yg5b``,
    ///     listeners and message sequences.
    public init(encoder: JSONEncoder? = nil, decoder: JSONDecoder? = nil) {
        self.encoder = encoder ?? Self.standardEncoder()
        self.decoder = decoder ?? Self.standardDecoder()
        encodesStandardForm = encoder == nil
        decodesStandardForm = decoder == nil
    }

    /// The standard form: sorted keys, ISO 8601 dates with milliseconds, numeric dates of
    /// earlier versions still read. Each use makes a new encoder and decoder.
    public static var standard: WormholeJSONCoding { WormholeJSONCoding() }

    /// A new encoder of the standard form: keys sorted, slashes unescaped, dates as
    /// ISO 8601 text in UTC, rounded to the millisecond.
    public static func standardEncoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(iso8601(date))
        }
        return encoder
    }

    /// A new decoder of the standard form: dates as ISO 8601 text, or as the number of
    /// seconds since 1 January 2001 that earlier versions wrote.
    public static func standardDecoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            if let seconds = try? container.decode(Double.self) {
                return Date(timeIntervalSinceReferenceDate: seconds)
            }
            let text = try container.decode(String.self)
            guard let date = try? dateStyle.parse(text) else {
                throw DecodingError.dataCorruptedError(
                    in: container,
                    debugDescription: "'\(text)' is not an ISO 8601 date and time such as 2026-11-25T12:27:40.034Z")
            }
            return date
        }
        return decoder
    }

    /// `date` as ISO 8601 text in UTC, rounded to the nearest millisecond:
    /// `2026-11-25T12:27:40.034Z`.
    ///
    /// Rounded here because the format style drops later digits, and a date made from
    /// a whole number of milliseconds is often a hair below it as a `Double` (40.034 is
    /// 40.0339999...): it would be written one millisecond early.
    package static func iso8601(_ date: Date) -> String {
        let milliseconds = (date.timeIntervalSinceReferenceDate * 1000).rounded()
        let seconds = (milliseconds / 1000).rounded(.down)
        let digits = String(Int(milliseconds - seconds * 1000))
        // The whole seconds end with "Z": the fraction goes before it.
        let whole = Date(timeIntervalSinceReferenceDate: seconds).formatted(Date.ISO8601FormatStyle())
        return whole.dropLast() + "." + String(repeating: "0", count: 3 - digits.count) + digits + "Z"
    }

    /// Parses ISO 8601 with or without fractional seconds (any number of digits), in UTC
    /// (`Z`) or with an offset from it.
    package static let dateStyle = Date.ISO8601FormatStyle(includingFractionalSeconds: true)
}
