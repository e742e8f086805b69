import Testing
@testable import WormholeCLI

/// The text operations the command does without Foundation give what Foundation's gave.
@Suite("Text formatting without Foundation")
struct TextFormattingTests {
    @Test("decimals are rounded to the nearest, as %.2f writes them",
          arguments: [(1.234, "1.23"), (1.235001, "1.24"), (0.0, "0.00"), (12.5, "12.50"), (0.999, "1.00"), (-2.5, "-2.50"), (1020.04, "1020.04")])
    func decimals(value: Double, shown: String) {
        #expect(TextFormatting.decimal(value, places: 2) == shown)
    }

    @Test("a JSON escape has four lowercase hexadecimal digits", arguments: [(0x7F, #"\u007f"#), (0x85, #"\u0085"#), (0x2028, #"\u2028"#), (0x1, #"\u0001"#)])
    func jsonEscapes(value: UInt32, escaped: String) {
        #expect(TextFormatting.jsonEscape(value) == escaped)
    }

    @Test("a quote followed by a combining mark is still quoted for the shell")
    func quotesAreFoundScalarByScalar() {
        #expect(ContainerOptions.shellQuoted("it's") == #"'it'\''s'"#)
        // "'" + U+0301 is one Character: a Character comparison would not find the quote.
        #expect(ContainerOptions.shellQuoted("a'\u{301}b") == "'a'\\''\u{301}b'")
        #expect(ContainerOptions.shellQuoted("plain-word_1.txt") == "plain-word_1.txt")
        #expect(ContainerOptions.shellQuoted("é") == "'é'")
        #expect(TextFormatting.replacing("\n", with: " ", in: "one\r\ntwo\nthree") == "one\r two three")
    }

    @Test("a URL's password is masked, and nothing else")
    func passwordsAreMasked() {
        #expect(ContainerOptions.maskingPassword("postgres://notes:secret@db.example.com:5432/notes") == "postgres://notes:***@db.example.com:5432/notes")
        #expect(ContainerOptions.maskingPassword("postgres://notes@db.example.com/notes") == "postgres://notes@db.example.com/notes")
        #expect(ContainerOptions.maskingPassword("postgres://db.example.com:5432/notes") == "postgres://db.example.com:5432/notes")
        #expect(ContainerOptions.maskingPassword("not a url") == "not a url")
    }
}
