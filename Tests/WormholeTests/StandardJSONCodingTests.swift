import Foundation
import Testing
@_spi(Backend) @testable import Wormhole
@_spi(Backend) @testable import WormholeCore
@_spi(Backend) @testable import WormholeFiles

/// The library's own coder of the standard JSON form against Foundation's `JSONEncoder` and
/// `JSONDecoder` with the standard settings: the same bytes written, the same values read,
/// the same errors for what is not the type asked for.
@Suite("Standard JSON form without Foundation's coders")
struct StandardJSONCodingTests {
    enum Color: String, Codable, Equatable { case red, green, blue, quoted = "a \"quoted\"/slashed name" }
    enum Level: Int, Codable, Equatable { case low = -1, middle = 0, high = 7 }
    enum Shape: Codable, Equatable {
        case circle(radius: Double)
        case rectangle(width: Int, height: Int)
        case point
        case labelled(String, Int8?)
    }

    struct Inner: Codable, Equatable {
        var name: String
        var count: Int
        var ratio: Double
        var flag: Bool
        var tags: [String]
        var maybe: Int8?
    }

    /// Every kind of member the fast path takes, and dictionaries with Int keys.
    struct Outer: Codable, Equatable {
        var id: UInt64
        var small: Int8
        var medium: Int16
        var int32: Int32
        var int64: Int64
        var int: Int
        var unsigned: UInt
        var unsigned8: UInt8
        var unsigned16: UInt16
        var unsigned32: UInt32
        var float: Float
        var double: Double
        var text: String
        var optionalText: String?
        var nested: Inner
        var nestedList: [Inner]
        var matrix: [[Int]]
        var color: Color
        var level: Level
        var shape: Shape
        var shapes: [Shape]
        var map: [String: Inner]
        var numbered: [Int: String]
        var date: Date
        var dates: [Date]?
        var optionalDate: Date?
        var nothing: Int?
        var optionalList: [Double?]
        var flags: Set<Bool>
    }

    /// Texts that test the escaping, the UTF-8 and the key order.
    static let texts: [String] = [
        "", "plain", "a/b", "quote \" backslash \\", "tab\there\nline\r\u{8}\u{C}", "\u{0}\u{1}\u{1F}\u{7F}",
        "é ü ñ 日本 🙂 \u{10FFFF}", "\u{FEFF}bom", "</script>", "Ωmega", "a\u{2028}b", "\\u0041",
    ]

    static let doubles: [Double] = [
        0, -0.0, 1, -1, 0.1, 1.5, 1e-7, 1e21, 1e22, 123_456_789.123, -2.5e-300, .leastNonzeroMagnitude,
        .greatestFiniteMagnitude, .leastNormalMagnitude, 9_007_199_254_740_993, 3.141592653589793, 1e100, 100,
    ]

    static let floats: [Float] = [0, 1, -1, 0.1, 1.5, 3.4028235e38, 1e-45, 16_777_217, 0.3, .leastNormalMagnitude]

    struct Generator {
        var random: SplitMix64

        mutating func integer<T: FixedWidthInteger>(_ type: T.Type = T.self) -> T {
            switch Int.random(in: 0..<4, using: &random) {
            case 0: return .min
            case 1: return .max
            case 2: return T.random(in: T(clamping: -10)...10, using: &random)
            default: return T.random(in: .min ... .max, using: &random)
            }
        }

        mutating func double() -> Double {
            switch Int.random(in: 0..<3, using: &random) {
            case 0: return StandardJSONCodingTests.doubles.randomElement(using: &random)!
            case 1: return Double(bitPattern: random.next() & ~(0x7FF << 52) | (UInt64.random(in: 1...0x7FE, using: &random) << 52))
            default: return Double(Int.random(in: -1_000_000...1_000_000, using: &random)) / 1000
            }
        }

        mutating func float() -> Float {
            Bool.random(using: &random)
                ? StandardJSONCodingTests.floats.randomElement(using: &random)!
                : Float(bitPattern: UInt32(truncatingIfNeeded: random.next()) & ~(0xFF << 23) | (UInt32.random(in: 1...0xFE, using: &random) << 23))
        }

        mutating func text() -> String {
            if Bool.random(using: &random) { return StandardJSONCodingTests.texts.randomElement(using: &random)! }
            let scalars = (0..<Int.random(in: 0...12, using: &random)).map { _ -> Character in
                let ranges: [ClosedRange<UInt32>] = [0...0x7F, 0x80...0x7FF, 0x800...0xD7FF, 0xE000...0xFFFF, 0x10000...0x10FFFF]
                let range = ranges.randomElement(using: &random)!
                return Character(Unicode.Scalar(UInt32.random(in: range, using: &random))!)
            }
            return String(scalars)
        }

        mutating func date() -> Date {
            // Whole milliseconds: the standard form writes milliseconds, so these read back equal.
            Date(timeIntervalSinceReferenceDate: Double(Int64.random(in: -60_000_000_000_000...60_000_000_000_000, using: &random)) / 1000)
        }

        mutating func maybe<T>(_ make: (inout Generator) -> T) -> T? {
            Bool.random(using: &random) ? make(&self) : nil
        }

        mutating func list<T>(_ maximum: Int = 4, _ make: (inout Generator) -> T) -> [T] {
            (0..<Int.random(in: 0...maximum, using: &random)).map { _ in make(&self) }
        }

        mutating func inner() -> Inner {
            Inner(name: text(), count: integer(), ratio: double(), flag: .random(using: &random), tags: list { $0.text() },
                  maybe: maybe { $0.integer() })
        }

        mutating func shape() -> Shape {
            switch Int.random(in: 0..<4, using: &random) {
            case 0: return .circle(radius: double())
            case 1: return .rectangle(width: integer(), height: integer())
            case 2: return .point
            default: return .labelled(text(), maybe { $0.integer() })
            }
        }

        mutating func outer() -> Outer {
            Outer(id: integer(), small: integer(), medium: integer(), int32: integer(), int64: integer(), int: integer(),
                  unsigned: integer(), unsigned8: integer(), unsigned16: integer(), unsigned32: integer(),
                  float: float(), double: double(), text: text(), optionalText: maybe { $0.text() },
                  nested: inner(), nestedList: list { $0.inner() }, matrix: list { $0.list { $0.integer() } },
                  color: [.red, .green, .blue, .quoted].randomElement(using: &random)!,
                  level: [.low, .middle, .high].randomElement(using: &random)!,
                  shape: shape(), shapes: list { $0.shape() },
                  map: Dictionary(list(20) { ($0.text(), $0.inner()) }, uniquingKeysWith: { first, _ in first }),
                  numbered: Dictionary(list(20) { ($0.integer(Int.self), $0.text()) }, uniquingKeysWith: { first, _ in first }),
                  date: date(), dates: maybe { $0.list { $0.date() } }, optionalDate: maybe { $0.date() },
                  nothing: nil, optionalList: list { $0.maybe { $0.double() } }, flags: Set(list { Bool.random(using: &$0.random) }))
        }
    }

    static let foundationEncoder = WormholeJSONCoding.standardEncoder()
    static let foundationDecoder = WormholeJSONCoding.standardDecoder()
    /// The standard settings given as a user's own coders: everything goes through Foundation.
    static let foundationOnly = WormholeJSONCoding(encoder: foundationEncoder, decoder: foundationDecoder)

    /// What the library gives for `payload` read as `T`: the value, or the error's text.
    static func read<T: Decodable>(_ payload: Data, as type: T.Type, using coding: WormholeJSONCoding) -> Result<T, WormholeError> {
        Result { () throws(WormholeError) -> T in try MessageCoding.decode(payload, as: T.self, identifier: "x", sequence: 1, using: coding) }
    }

    /// `payload` read as `T` both ways: the same value, or the same error.
    static func expectSameReading<T: Decodable & Equatable>(_ payload: Data, as type: T.Type, sourceLocation: SourceLocation = #_sourceLocation) {
        let fast = read(payload, as: T.self, using: .standard)
        let foundation = read(payload, as: T.self, using: foundationOnly)
        switch (fast, foundation) {
        case (.success(let fast), .success(let foundation)):
            #expect(fast == foundation, "\(String(decoding: payload, as: UTF8.self)) as \(T.self)", sourceLocation: sourceLocation)
        case (.failure(let fast), .failure(let foundation)):
            #expect(fast.message == foundation.message, sourceLocation: sourceLocation)
        default:
            Issue.record("\(String(decoding: payload, as: UTF8.self)) as \(T.self): \(fast) against Foundation's \(foundation)", sourceLocation: sourceLocation)
        }
    }

    @Test func generatedValuesAreWrittenAndReadAsFoundationDoes() throws {
        var generator = Generator(random: SplitMix64(seed: 0x5EED_0021))
        for _ in 0..<scaled(400) {
            let value = generator.outer()
            let foundation = try Self.foundationEncoder.encode(value)
            let fast = try #require(StandardJSONEncoder.encode(value), "the fast encoder gave up on \(value)")
            #expect(fast == foundation, "\(String(decoding: fast, as: UTF8.self))\n\(String(decoding: foundation, as: UTF8.self))")
            let read = try #require(StandardJSONDecoder.decode(Outer.self, from: foundation), "the fast decoder gave up on \(String(decoding: foundation, as: UTF8.self))")
            #expect(read == (try Self.foundationDecoder.decode(Outer.self, from: foundation)))
            #expect(read == value)
        }
    }

    @Test func theBenchmarkMessageTakesTheFastPathBothWays() throws {
        struct BenchMessage: Codable, Equatable { var stamp: UInt64; var index: UInt64; var text: String }
        let message = BenchMessage(stamp: 123_456_789_012, index: 42, text: "hello")
        let payload = try #require(StandardJSONEncoder.encode(message))
        #expect(String(decoding: payload, as: UTF8.self) == #"{"index":42,"stamp":123456789012,"text":"hello"}"#)
        #expect(StandardJSONDecoder.decode(BenchMessage.self, from: payload) == message)
    }

    @Test func topLevelValuesOfEachKindAreWrittenAsFoundationWritesThem() throws {
        func same<T: Encodable>(_ value: T) throws {
            let fast = try #require(StandardJSONEncoder.encode(value), "gave up on \(value)")
            #expect(fast == (try Self.foundationEncoder.encode(value)), "\(value)")
        }
        for double in Self.doubles { try same(double); try same([double]) }
        for float in Self.floats { try same(float); try same(["f": float]) }
        for text in Self.texts { try same(text); try same([text: text]) }
        try same(Int8.min); try same(UInt64.max); try same(Int64.min); try same(true); try same([Int?.none, 1])
        try same(Date(timeIntervalSinceReferenceDate: 0.25)); try same(Date(timeIntervalSince1970: -1.0004))
        try same([String: Int]()); try same([Int]()); try same(["b": 1, "a": 2, "B": 3, "é": 4, "aa": 5, "": 6])
    }

    @Test func whatTheFastEncoderDoesNotWriteWithCertaintyIsLeftToFoundation() throws {
        struct Nothing: Encodable { func encode(to encoder: any Encoder) throws {} }
        struct Twice: Encodable {
            enum Key: CodingKey { case a }
            func encode(to encoder: any Encoder) throws {
                var container = encoder.container(keyedBy: Key.self)
                try container.encode(1, forKey: .a)
                try container.encode(2, forKey: .a)
            }
        }
        #expect(StandardJSONEncoder.encode(Data([1, 2, 3])) == nil)
        #expect(StandardJSONEncoder.encode(["u": URL(string: "https://example.com/a")!]) == nil)
        #expect(StandardJSONEncoder.encode([Decimal(string: "1.25")!]) == nil)
        #expect(StandardJSONEncoder.encode(Double.nan) == nil)
        #expect(StandardJSONEncoder.encode([Float.infinity]) == nil)
        #expect(StandardJSONEncoder.encode(Nothing()) == nil)
        #expect(StandardJSONEncoder.encode(Twice()) == nil)
        #expect(StandardJSONEncoder.encode(Int128(5)) == nil)
        // Through the library the result is Foundation's.
        let withData = ["d": Data([1, 2, 3])]
        let (_, dataPayload) = try MessageCoding.encode(withData, identifier: "x", using: .standard)
        #expect(dataPayload == (try Self.foundationEncoder.encode(withData)))
        let (_, twice) = try MessageCoding.encode(Twice(), identifier: "x", using: .standard)
        #expect(twice == (try Self.foundationEncoder.encode(Twice())))
    }

    /// Number texts at the edges of each type: what Foundation takes must be taken with the
    /// same value, what it refuses refused with its message.
    static let numberTexts: [String] = [
        "0", "-0", "1", "-1", "1.0", "1.5", "-1.5", "1e2", "1E2", "1e+2", "1e-2", "1e100", "-1e100", "1e400", "1e-400", "0.0",
        "127", "128", "-128", "-129", "255", "256", "32767", "32768", "-32769", "65535", "65536", "2147483647", "2147483648",
        "-2147483649", "4294967295", "4294967296", "9223372036854775807", "9223372036854775808", "-9223372036854775808",
        "-9223372036854775809", "18446744073709551615", "18446744073709551616", "123456789012345678901234567890",
        "0.1", "3.4028235e38", "3.4028236e38", "3.5e38", "1e-45", "1.4e-45", "7e-46", "16777217", "0.30000001192092896",
        "4.9e-324", "2.2250738585072014e-308", "1.7976931348623157e308", "1.7976931348623159e308", "9007199254740993",
        "0.1000000000000000055511151231257827021181583404541015625", "100000000000000000000000", "1e23", "0e5", "0E0", "-0.0",
        "0.000", "1e-320", "2e-324", "1e-46", "7e-46", "1.0000000596046447753906250001", "1.00000005960464477539062499",
    ]

    @Test func numbersAreReadAsFoundationReadsThemForEveryType() {
        var generator = Generator(random: SplitMix64(seed: 21))
        var texts = Self.numberTexts
        for _ in 0..<scaled(300) { texts.append("\(generator.double())") }
        for _ in 0..<scaled(100) { texts.append("\(generator.float())") }
        for _ in 0..<scaled(100) {
            let digits = String((0..<Int.random(in: 1...25, using: &generator.random)).map { _ in "0123456789".randomElement(using: &generator.random)! })
            texts.append((Bool.random(using: &generator.random) ? "-" : "") + (digits.hasPrefix("0") ? "1" + digits : digits))
        }
        for text in texts {
            for payload in [text, "[\(text)]", #"{"value":\#(text)}"#].map({ Data($0.utf8) }) {
                Self.expectSameReading(payload, as: Int.self); Self.expectSameReading(payload, as: [Int].self)
                Self.expectSameReading(payload, as: Int8.self); Self.expectSameReading(payload, as: [Int8].self)
                Self.expectSameReading(payload, as: Int16.self); Self.expectSameReading(payload, as: Int32.self)
                Self.expectSameReading(payload, as: Int64.self); Self.expectSameReading(payload, as: [Int64].self)
                Self.expectSameReading(payload, as: UInt.self); Self.expectSameReading(payload, as: UInt8.self)
                Self.expectSameReading(payload, as: UInt16.self); Self.expectSameReading(payload, as: UInt32.self)
                Self.expectSameReading(payload, as: UInt64.self); Self.expectSameReading(payload, as: [UInt64].self)
                Self.expectSameReading(payload, as: Double.self); Self.expectSameReading(payload, as: [Double].self)
                Self.expectSameReading(payload, as: Float.self); Self.expectSameReading(payload, as: [Float].self)
                Self.expectSameReading(payload, as: Date.self); Self.expectSameReading(payload, as: [Date].self)
                Self.expectSameReading(payload, as: [String: Double].self); Self.expectSameReading(payload, as: [String: Int8].self)
                Self.expectSameReading(payload, as: Bool.self); Self.expectSameReading(payload, as: String.self)
            }
        }
    }

    @Test func integersWrittenAsDigitsTakeTheFastPath() throws {
        #expect(StandardJSONDecoder.decode([Int8].self, from: Data("[-128,127,0]".utf8)) == [-128, 127, 0])
        #expect(StandardJSONDecoder.decode(UInt64.self, from: Data("18446744073709551615".utf8)) == .max)
        #expect(StandardJSONDecoder.decode(Int64.self, from: Data("-9223372036854775808".utf8)) == .min)
        #expect(StandardJSONDecoder.decode([Double].self, from: Data("[0.1,1e2,-0]".utf8)) == [0.1, 100, 0])
        // Left to Foundation, which decides: a fraction or exponent for an integer, -0,
        // overflow, an inexact Float.
        for text in ["1.0", "1e2", "-0", "256", "-1"] { #expect(StandardJSONDecoder.decode(UInt8.self, from: Data(text.utf8)) == nil) }
        #expect(StandardJSONDecoder.decode(Float.self, from: Data("0.1".utf8)) == 0.1)
        for text in ["1e-400", "0e5", "1e-46"] { #expect(StandardJSONDecoder.decode(Float.self, from: Data(text.utf8)) == nil) }
    }

    @Test func datesAreReadAsTheStandardDecoderReadsThem() throws {
        let texts = [#""2026-11-25T12:27:40.034Z""#, #""2026-11-25T14:27:40+02:00""#, #""2026-11-25T12:27:40.5Z""#, "817302460.25",
                     #""25/11/2026""#, #""2026-11-25""#, "null", "true", #""""#, "-1e300", "1e400", #"{"a":1}"#]
        for text in texts {
            Self.expectSameReading(Data(text.utf8), as: Date.self)
            Self.expectSameReading(Data("[\(text)]".utf8), as: [Date?].self)
            Self.expectSameReading(Data(#"{"d":\#(text)}"#.utf8), as: [String: Date].self)
        }
        #expect(StandardJSONDecoder.decode(Date.self, from: Data(#""2026-11-25T12:27:40.250Z""#.utf8)) == JSONCodingTests.date)
    }

    @Test func stringsWithEscapesAndUnicodeAreReadAsFoundationReadsThem() {
        let texts = [#""a\/b""#, #""\u00e9\u0000\uD83D\uDE42""#, #""\ud83d\ude42""#, #""\uD800""#, #""\uDC00x""#, #""\uD800\u0041""#,
                     #""\x""#, "\"tab\there\"", #""\b\f\n\r\t\"\\""#, "\"é日🙂\"", "\"\u{7F}\"", #""\u12""#, #""\uZZZZ""#]
        for text in texts {
            Self.expectSameReading(Data(text.utf8), as: String.self)
            Self.expectSameReading(Data(#"{"\#(text.dropFirst().dropLast())":1}"#.utf8), as: [String: Int].self)
        }
        Self.expectSameReading(Data([0x22, 0xFF, 0x22]), as: String.self)
        Self.expectSameReading(Data([0x22, 0xC3, 0x28, 0x22]), as: String.self)
        Self.expectSameReading(Data([0x22, 0xED, 0xA0, 0x80, 0x22]), as: String.self)
    }

    /// Input that is not JSON, or not the type asked for: refused with Foundation's message.
    @Test func malformedInputFailsExactlyAsFoundationFails() throws {
        let texts = [
            "", " ", "{", "}", "[", "{\"a\":1,}", "[1,]", "\u{FEFF}{}", "{\"a\" 1}", "nul", "tru", "01", "1.", ".5", "+1", "--1",
            "{\"a\":1}{}", "[1 2]", "{\"a\":1,\"a\":2}", "NaN", "Infinity", "'a'", "{a:1}", "[1]]", "/* */1", "1 // x",
            String(repeating: "[", count: 600) + String(repeating: "]", count: 600), "\"a\nb\"", "\t\n\r 1 \t\n\r",
        ]
        for text in texts {
            let payload = Data(text.utf8)
            Self.expectSameReading(payload, as: Int.self)
            Self.expectSameReading(payload, as: [Int].self)
            Self.expectSameReading(payload, as: [String: Int].self)
            Self.expectSameReading(payload, as: Inner.self)
        }
        // Wrong types, missing keys, null where a value is needed, extra keys.
        let wrong = [
            #"{"name":"a","count":1,"ratio":1,"flag":true,"tags":[]}"#, #"{"name":"a","count":1,"ratio":1,"flag":true}"#,
            #"{"name":"a","count":"1","ratio":1,"flag":true,"tags":[]}"#, #"{"name":null,"count":1,"ratio":1,"flag":true,"tags":[]}"#,
            #"{"name":"a","count":1,"ratio":1,"flag":1,"tags":[]}"#, #"{"name":"a","count":1,"ratio":1,"flag":true,"tags":[1]}"#,
            #"{"name":"a","count":1,"ratio":1,"flag":true,"tags":[],"maybe":300}"#, #"{"name":"a","count":1,"ratio":1,"flag":true,"tags":[],"maybe":null,"x":[{}]}"#,
            #"[{"name":"a","count":1,"ratio":1,"flag":true,"tags":[]}]"#, "null", "[]", "{}",
        ]
        for text in wrong {
            Self.expectSameReading(Data(text.utf8), as: Inner.self)
            Self.expectSameReading(Data(text.utf8), as: [Inner].self)
            Self.expectSameReading(Data(text.utf8), as: Inner?.self)
        }
        for text in [#"{"circle":{"radius":1}}"#, #"{"point":{}}"#, #"{"circle":{}}"#, #"{"circle":{"radius":1},"point":{}}"#,
                     #"{"labelled":{"_0":"a","_1":null}}"#, #"{"labelled":{"_0":"a"}}"#, #"{"square":{}}"#, #""red""#, "7", "2"] {
            Self.expectSameReading(Data(text.utf8), as: Shape.self)
            Self.expectSameReading(Data(text.utf8), as: Color.self)
            Self.expectSameReading(Data(text.utf8), as: Level.self)
        }
    }

    /// Every prefix and many one-byte changes of written messages: the same value or the
    /// same error both ways.
    @Test func damagedMessagesFailExactlyAsFoundationFails() throws {
        var generator = Generator(random: SplitMix64(seed: 0xDA_4A6E))
        let replacements = Array(#"{}[]",:0123456789.eE+-"\ntruefalsenull"#.utf8) + [0x00, 0x80, 0xFF, 0x20]
        for _ in 0..<scaled(40) {
            let payload = try Self.foundationEncoder.encode(generator.inner())
            for length in stride(from: 0, to: payload.count, by: max(1, payload.count / 30)) {
                Self.expectSameReading(payload.prefix(length), as: Inner.self)
            }
            for _ in 0..<30 {
                var damaged = payload
                let index = Int.random(in: 0..<damaged.count, using: &generator.random)
                damaged[index] = replacements.randomElement(using: &generator.random)!
                Self.expectSameReading(damaged, as: Inner.self)
            }
        }
    }

    @Test func aUsersOwnCodersAreNotReplaced() throws {
        let encoder = WormholeJSONCoding.standardEncoder()
        encoder.outputFormatting = []
        let mine = WormholeJSONCoding(encoder: encoder)
        #expect(!mine.encodesStandardForm && mine.decodesStandardForm)
        #expect(WormholeJSONCoding.standard.encodesStandardForm && WormholeJSONCoding().decodesStandardForm)
        #expect(!WormholeJSONCoding(decoder: JSONDecoder()).decodesStandardForm)
        // Written by the user's encoder: without sorted keys there is one key only to compare.
        let (_, payload) = try MessageCoding.encode(["only": 1], identifier: "x", using: mine)
        #expect(payload == (try encoder.encode(["only": 1])))
    }
}
