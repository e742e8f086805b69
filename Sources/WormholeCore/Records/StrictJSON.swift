/// A checker of exactly RFC 8259 JSON: what a record of kind ``WormholePayloadKind/json``
/// holds. ``Wormhole/passPayload(_:kind:identifier:)-5tjp6`` refuses anything else, and the
/// `wormhole` CLI uses it for `send --json` and to embed JSON payloads in `listen --json`.
/// Foundation's parser is lenient (a trailing comma, a byte order mark) and names no
/// position; documents built from what it accepts can be rejected by `jq`. This one says
/// where and what is wrong.
package struct StrictJSON {
    /// What is wrong, and where: a byte offset, and a line and column for people.
    package struct Problem: Error, CustomStringConvertible, Sendable {
        /// What is wrong, such as "a comma before '}'".
        package let reason: String
        /// The byte offset of the problem, from 0.
        package let offset: Int
        /// Its line, from 1.
        package let line: Int
        /// Its column, from 1.
        package let column: Int
        package var description: String { "\(reason) at line \(line), column \(column) (byte \(offset))" }
    }

    private let bytes: [UInt8]
    private var position = 0
    /// Nesting deeper than this is refused rather than recursed into.
    package static let maximumDepth = 512

    private init(_ bytes: [UInt8]) { self.bytes = bytes }

    /// `nil` when `bytes` are one JSON value (any type, surrounded by whitespace at most),
    /// else the first problem.
    package static func problem(in bytes: some Collection<UInt8>) -> Problem? {
        var checker = StrictJSON(Array(bytes))
        do {
            if checker.bytes.starts(with: [0xEF, 0xBB, 0xBF]) { throw checker.fail("a byte order mark (U+FEFF) before the value") }
            checker.skipWhitespace()
            try checker.value(depth: 0)
            checker.skipWhitespace()
            if checker.position < checker.bytes.count { throw checker.fail("more after the end of the value") }
            return nil
        } catch {
            return error as? Problem
        }
    }

    private func fail(_ reason: String) -> Problem {
        var line = 1
        var column = 1
        for byte in bytes[..<min(position, bytes.count)] {
            if byte == 0x0A { line += 1; column = 1 } else if byte & 0xC0 != 0x80 { column += 1 }
        }
        return Problem(reason: reason, offset: position, line: line, column: column)
    }

    private var current: UInt8? { position < bytes.count ? bytes[position] : nil }

    private mutating func skipWhitespace() {
        while let byte = current, byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D { position += 1 }
    }

    private mutating func expect(_ literal: String) throws(Problem) {
        for byte in literal.utf8 {
            guard current == byte else { throw fail("expected '\(literal)'") }
            position += 1
        }
    }

    private mutating func value(depth: Int) throws(Problem) {
        guard depth < Self.maximumDepth else { throw fail("nested more than \(Self.maximumDepth) deep") }
        guard let byte = current else { throw fail("the value ends early") }
        switch byte {
        case UInt8(ascii: "{"): try object(depth: depth)
        case UInt8(ascii: "["): try array(depth: depth)
        case UInt8(ascii: "\""): try string()
        case UInt8(ascii: "t"): try expect("true")
        case UInt8(ascii: "f"): try expect("false")
        case UInt8(ascii: "n"): try expect("null")
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): try number()
        default: throw fail("'\(Self.describe(byte))' cannot start a value")
        }
    }

    private mutating func object(depth: Int) throws(Problem) {
        position += 1
        skipWhitespace()
        if current == UInt8(ascii: "}") { position += 1; return }
        while true {
            guard current == UInt8(ascii: "\"") else {
                throw fail(current == UInt8(ascii: "}") ? "a comma before '}'" : "expected a member name in double quotes")
            }
            try string()
            skipWhitespace()
            guard current == UInt8(ascii: ":") else { throw fail("expected ':' after the member name") }
            position += 1
            skipWhitespace()
            try value(depth: depth + 1)
            skipWhitespace()
            switch current {
            case UInt8(ascii: ","): position += 1; skipWhitespace()
            case UInt8(ascii: "}"): position += 1; return
            default: throw fail("expected ',' or '}'")
            }
        }
    }

    private mutating func array(depth: Int) throws(Problem) {
        position += 1
        skipWhitespace()
        if current == UInt8(ascii: "]") { position += 1; return }
        while true {
            if current == UInt8(ascii: "]") { throw fail("a comma before ']'") }
            try value(depth: depth + 1)
            skipWhitespace()
            switch current {
            case UInt8(ascii: ","): position += 1; skipWhitespace()
            case UInt8(ascii: "]"): position += 1; return
            default: throw fail("expected ',' or ']'")
            }
        }
    }

    private mutating func string() throws(Problem) {
        position += 1
        while true {
            guard let byte = current else { throw fail("a string is not closed") }
            switch byte {
            case UInt8(ascii: "\""):
                position += 1
                return
            case UInt8(ascii: "\\"):
                position += 1
                guard let escaped = current else { throw fail("a string is not closed") }
                switch escaped {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"),
                     UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
                    position += 1
                case UInt8(ascii: "u"):
                    let start = position - 1
                    let unit = try hexEscape()
                    if (0xD800...0xDBFF).contains(unit) {
                        guard current == UInt8(ascii: "\\"), position + 1 < bytes.count, bytes[position + 1] == UInt8(ascii: "u") else {
                            position = start
                            throw fail("a lone surrogate \\u\(String(unit, radix: 16)) (not a Unicode character)")
                        }
                        position += 1
                        let low = try hexEscape()
                        guard (0xDC00...0xDFFF).contains(low) else {
                            position = start
                            throw fail("a lone surrogate \\u\(String(unit, radix: 16)) (not a Unicode character)")
                        }
                    } else if (0xDC00...0xDFFF).contains(unit) {
                        position = start
                        throw fail("a lone surrogate \\u\(String(unit, radix: 16)) (not a Unicode character)")
                    }
                default:
                    throw fail("'\\\(Self.describe(escaped))' is not an escape of JSON")
                }
            case 0x00..<0x20:
                throw fail("control character \(Self.describe(byte)) inside a string (write it as an escape)")
            case 0x80...:
                try utf8Sequence()
            default:
                position += 1
            }
        }
    }

    /// `uXXXX` after a backslash: the code unit.
    private mutating func hexEscape() throws(Problem) -> UInt32 {
        position += 1
        guard position + 4 <= bytes.count else { throw fail("'\\u' needs four hexadecimal digits") }
        var unit: UInt32 = 0
        for _ in 0..<4 {
            guard let digit = Self.hexValue(bytes[position]) else { throw fail("'\\u' needs four hexadecimal digits") }
            unit = unit << 4 | digit
            position += 1
        }
        return unit
    }

    private static func hexValue(_ byte: UInt8) -> UInt32? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): UInt32(byte - UInt8(ascii: "0"))
        case UInt8(ascii: "a")...UInt8(ascii: "f"): UInt32(byte - UInt8(ascii: "a") + 10)
        case UInt8(ascii: "A")...UInt8(ascii: "F"): UInt32(byte - UInt8(ascii: "A") + 10)
        default: nil
        }
    }

    /// One UTF-8 encoded character of two to four bytes, checked.
    private mutating func utf8Sequence() throws(Problem) {
        let first = bytes[position]
        let length = first >= 0xF0 ? 4 : first >= 0xE0 ? 3 : first >= 0xC2 ? 2 : 0
        guard length > 0, first <= 0xF4, position + length <= bytes.count,
              String(validating: bytes[position..<position + length], as: UTF8.self) != nil else {
            throw fail("bytes that are not UTF-8")
        }
        position += length
    }

    private mutating func number() throws(Problem) {
        if current == UInt8(ascii: "-") { position += 1 }
        guard let first = current, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(first) else { throw fail("a number needs a digit") }
        position += 1
        if first == UInt8(ascii: "0"), let next = current, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(next) {
            throw fail("a number may not start with 0")
        }
        skipDigits()
        if current == UInt8(ascii: ".") {
            position += 1
            guard let digit = current, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(digit) else { throw fail("a digit must follow '.'") }
            skipDigits()
        }
        if current == UInt8(ascii: "e") || current == UInt8(ascii: "E") {
            position += 1
            if current == UInt8(ascii: "+") || current == UInt8(ascii: "-") { position += 1 }
            guard let digit = current, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(digit) else { throw fail("a digit must follow the exponent") }
            skipDigits()
        }
    }

    private mutating func skipDigits() {
        while let byte = current, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) { position += 1 }
    }

    private static func describe(_ byte: UInt8) -> String {
        byte >= 0x20 && byte < 0x7F ? String(UnicodeScalar(byte)) : "0x" + String(byte, radix: 16, uppercase: true)
    }
}
