// Why this coder exists: it encodes a small Codable message in 3.3 µs against 7.3 µs by Foundation's JSONEncoder, and decodes it
// in 0.94 µs against 3.0 µs by its JSONDecoder, the same bytes and values (Benchmarks/run --sections clever; Docs/Performance.md,
// "What the clever parts buy").
/// One JSON value parsed by ``StandardJSONValue/parse(_:)``, for ``StandardJSONDecoder``.
///
/// Numbers keep their text (a range of the parsed bytes): each type reads it by its own
/// rule when asked. Strings are decoded when parsed, since keys are compared as strings.
package enum StandardJSONValue {
    case null
    case bool(Bool)
    /// The number's text: `bytes[start..<end]` of the parsed bytes.
    case number(start: Int, end: Int)
    case string(String)
    case array([StandardJSONValue])
    /// The members in the order written; no name occurs twice (see ``parse(_:)``).
    case object([Member])

    /// An object's member. A struct rather than a tuple: arrays of it are copied and
    /// destroyed by specialized code, not the runtime's generic tuple witnesses.
    package struct Member {
        package let key: String
        package let value: StandardJSONValue
    }

    /// `bytes` as one JSON value, or `nil` when they are anything this parser does not take
    /// with certainty as Foundation's `JSONDecoder` does: not strict RFC 8259 JSON (a byte
    /// order mark, a trailing comma, a lone surrogate, bytes that are not UTF-8), an object
    /// naming a member twice (which one Foundation keeps is its own business), or nesting
    /// deeper than ``maximumDepth``. The caller then leaves the bytes to Foundation.
    package static func parse(_ bytes: [UInt8]) -> StandardJSONValue? {
        bytes.withUnsafeBufferPointer { buffer in
            var parser = Parser(bytes: buffer)
            parser.skipWhitespace()
            guard let value = parser.value(depth: 0) else { return nil }
            parser.skipWhitespace()
            return parser.position == buffer.count ? value : nil
        }
    }

    /// Nesting deeper than this is left to Foundation, whose limit is higher.
    package static let maximumDepth = 128

    private struct Parser {
        let bytes: UnsafeBufferPointer<UInt8>
        var position = 0
        /// Bytes of a string with escapes, reused from one string to the next.
        var scratch: [UInt8] = []

        init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

        var current: UInt8? { position < bytes.count ? bytes[position] : nil }

        mutating func skipWhitespace() {
            while position < bytes.count {
                switch bytes[position] {
                case 0x20, 0x09, 0x0A, 0x0D: position += 1
                default: return
                }
            }
        }

        mutating func value(depth: Int) -> StandardJSONValue? {
            guard depth < StandardJSONValue.maximumDepth, let byte = current else { return nil }
            switch byte {
            case UInt8(ascii: "{"): return object(depth: depth)
            case UInt8(ascii: "["): return array(depth: depth)
            case UInt8(ascii: "\""): return string().map { .string($0) }
            case UInt8(ascii: "t"): return literal("true") ? .bool(true) : nil
            case UInt8(ascii: "f"): return literal("false") ? .bool(false) : nil
            case UInt8(ascii: "n"): return literal("null") ? .null : nil
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return number()
            default: return nil
            }
        }

        mutating func literal(_ text: StaticString) -> Bool {
            let count = text.utf8CodeUnitCount
            guard position + count <= bytes.count else { return false }
            for offset in 0..<count where bytes[position + offset] != text.utf8Start[offset] { return false }
            position += count
            return true
        }

        mutating func object(depth: Int) -> StandardJSONValue? {
            position += 1
            skipWhitespace()
            var members: [Member] = []
            members.reserveCapacity(8)
            if current == UInt8(ascii: "}") { position += 1; return .object(members) }
            while true {
                guard current == UInt8(ascii: "\""), let key = string() else { return nil }
                skipWhitespace()
                guard current == UInt8(ascii: ":") else { return nil }
                position += 1
                skipWhitespace()
                guard let value = value(depth: depth + 1) else { return nil }
                members.append(Member(key: key, value: value))
                skipWhitespace()
                switch current {
                case UInt8(ascii: ","): position += 1; skipWhitespace()
                case UInt8(ascii: "}"):
                    position += 1
                    return Self.namesAreUnique(members) ? .object(members) : nil
                default: return nil
                }
            }
        }

        static func namesAreUnique(_ members: [Member]) -> Bool {
            if members.count <= 8 {
                for index in members.indices.dropFirst() {
                    for earlier in 0..<index where members[earlier].key == members[index].key { return false }
                }
                return true
            }
            return Set(members.lazy.map(\.key)).count == members.count
        }

        mutating func array(depth: Int) -> StandardJSONValue? {
            position += 1
            skipWhitespace()
            var elements: [StandardJSONValue] = []
            if current == UInt8(ascii: "]") { position += 1; return .array(elements) }
            while true {
                guard let element = value(depth: depth + 1) else { return nil }
                elements.append(element)
                skipWhitespace()
                switch current {
                case UInt8(ascii: ","): position += 1; skipWhitespace()
                case UInt8(ascii: "]"): position += 1; return .array(elements)
                default: return nil
                }
            }
        }

        /// The string that starts at the opening quote; `nil` for anything not strictly
        /// JSON or not UTF-8.
        mutating func string() -> String? {
            position += 1
            let start = position
            // The common case: no escape. The bytes are checked as UTF-8 as they are made
            // a String.
            while position < bytes.count {
                let byte = bytes[position]
                if byte == UInt8(ascii: "\"") {
                    defer { position += 1 }
                    return String(validating: UnsafeBufferPointer(rebasing: bytes[start..<position]), as: UTF8.self)
                }
                if byte == UInt8(ascii: "\\") { break }
                if byte < 0x20 { return nil }
                position += 1
            }
            guard position < bytes.count else { return nil }
            scratch.removeAll(keepingCapacity: true)
            scratch.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start..<position]))
            while position < bytes.count {
                let byte = bytes[position]
                switch byte {
                case UInt8(ascii: "\""):
                    position += 1
                    return String(validating: scratch, as: UTF8.self)
                case UInt8(ascii: "\\"):
                    position += 1
                    guard let escaped = current else { return nil }
                    position += 1
                    switch escaped {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): scratch.append(escaped)
                    case UInt8(ascii: "b"): scratch.append(0x08)
                    case UInt8(ascii: "f"): scratch.append(0x0C)
                    case UInt8(ascii: "n"): scratch.append(0x0A)
                    case UInt8(ascii: "r"): scratch.append(0x0D)
                    case UInt8(ascii: "t"): scratch.append(0x09)
                    case UInt8(ascii: "u"):
                        guard let unit = hexEscape() else { return nil }
                        var scalar: Unicode.Scalar?
                        if (0xD800...0xDBFF).contains(unit) {
                            guard current == UInt8(ascii: "\\"), position + 1 < bytes.count, bytes[position + 1] == UInt8(ascii: "u") else { return nil }
                            position += 2
                            guard let low = hexEscape(), (0xDC00...0xDFFF).contains(low) else { return nil }
                            scalar = Unicode.Scalar(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00))
                        } else {
                            scalar = Unicode.Scalar(unit)
                        }
                        guard let scalar else { return nil }
                        scratch.append(contentsOf: UTF8.encode(scalar)!)
                    default: return nil
                    }
                case 0x00..<0x20:
                    return nil
                default:
                    scratch.append(byte)
                    position += 1
                }
            }
            return nil
        }

        /// Four hexadecimal digits after `\u`: the code unit.
        mutating func hexEscape() -> UInt32? {
            guard position + 4 <= bytes.count else { return nil }
            var unit: UInt32 = 0
            for _ in 0..<4 {
                let byte = bytes[position]
                let digit: UInt32
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
                default: return nil
                }
                unit = unit << 4 | digit
                position += 1
            }
            return unit
        }

        mutating func number() -> StandardJSONValue? {
            let start = position
            if current == UInt8(ascii: "-") { position += 1 }
            guard let first = current, Self.isDigit(first) else { return nil }
            position += 1
            if first == UInt8(ascii: "0"), let next = current, Self.isDigit(next) { return nil }
            skipDigits()
            if current == UInt8(ascii: ".") {
                position += 1
                guard let digit = current, Self.isDigit(digit) else { return nil }
                skipDigits()
            }
            if current == UInt8(ascii: "e") || current == UInt8(ascii: "E") {
                position += 1
                if current == UInt8(ascii: "+") || current == UInt8(ascii: "-") { position += 1 }
                guard let digit = current, Self.isDigit(digit) else { return nil }
                skipDigits()
            }
            return .number(start: start, end: position)
        }

        static func isDigit(_ byte: UInt8) -> Bool { byte &- UInt8(ascii: "0") < 10 }

        mutating func skipDigits() {
            while let byte = current, Self.isDigit(byte) { position += 1 }
        }
    }
}
