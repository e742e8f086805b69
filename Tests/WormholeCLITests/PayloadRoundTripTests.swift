import Foundation
import Testing

@Suite("Payloads round-trip byte for byte", .timeLimit(.minutes(10)))
struct PayloadRoundTripTests {
    /// Every byte value, then a stretch of pseudo-random bytes: not text, not JSON.
    static let binary: Data = {
        var bytes = (0...255).map(UInt8.init)
        var state: UInt32 = 0x2545F491
        for _ in 0..<200_000 {
            state = state &* 1_664_525 &+ 1_013_904_223
            bytes.append(UInt8(truncatingIfNeeded: state >> 24))
        }
        return Data(bytes)
    }()

    /// Whether two payloads are equal, without printing 200 KB of bytes when they differ.
    func same(_ actual: Data, _ expected: Data) -> Bool {
        if actual == expected { return true }
        let common = zip(actual, expected).prefix { $0 == $1 }.count
        Issue.record("payloads differ: \(actual.count) bytes received, \(expected.count) expected, first difference at byte \(common)")
        return false
    }

    @Test("standard input is stored exactly as read", arguments: [
        "hi", "hi\n", "two\nlines\n", "  spaced  ", "", "é ✓ 🚀\r\n",
    ])
    func standardInputRoundTrips(text: String) async throws {
        let sandbox = Sandbox()
        let send = try await sandbox.run(["send", "chat"], input: Data(text.utf8))
        #expect(send.status == 0, "\(send.stderr)")
        let read = try await sandbox.run(["read", "--raw", "chat"])
        #expect(read.status == 0)
        #expect(read.stdout == Data(text.utf8))
    }

    @Test func aDashReadsStandardInputToo() async throws {
        let sandbox = Sandbox()
        _ = try await sandbox.run(["send", "chat", "-"], input: Data("from stdin".utf8))
        #expect(try await sandbox.run(["read", "--raw", "chat"]).stdout == Data("from stdin".utf8))
    }

    @Test func aBinaryFileRoundTripsThroughReadAndListen() async throws {
        let sandbox = Sandbox()
        let file = sandbox.root.file("blob.bin")
        try Self.binary.write(to: URL(fileURLWithPath: file))
        let send = try await sandbox.run(["send", "--file", file, "blob"])
        #expect(send.status == 0, "\(send.stderr)")

        let read = try await sandbox.run(["read", "--raw", "blob"])
        #expect(read.status == 0)
        #expect(same(read.stdout, Self.binary))
        // A plain read to a pipe adds nothing to raw bytes either.
        let plain = try await sandbox.run(["read", "blob"])
        #expect(plain.status == 0)
        #expect(same(plain.stdout, Self.binary))
        let short = sandbox.root.file("short.bin")
        try Data("abc".utf8).write(to: URL(fileURLWithPath: short))
        _ = try await sandbox.run(["send", "--file", short, "short"])
        #expect(try await sandbox.run(["read", "short"]).stdout == Data("abc".utf8), "no newline added to bytes sent with --file")

        let listen = try await sandbox.run(["listen", "--latest", "--raw", "--count", "1", "blob"])
        #expect(listen.status == 0)
        #expect(same(listen.stdout, Self.binary))

        let json = try await sandbox.run(["listen", "--latest", "--json", "--count", "1", "blob"])
        let object = try #require(try JSONSerialization.jsonObject(with: json.stdout) as? [String: Any])
        #expect(object["kind"] as? String == "data")
        #expect(same((object["payload"] as? String).flatMap { Data(base64Encoded: $0) } ?? Data(), Self.binary))
    }

    @Test func binaryStandardInputIsStoredAsData() async throws {
        let sandbox = Sandbox()
        let bytes = Data([0xFF, 0xFE, 0x00, 0x01, 0x0A])
        _ = try await sandbox.run(["send", "raw"], input: bytes)
        #expect(try await sandbox.run(["read", "--raw", "raw"]).stdout == bytes)
        let json = try await sandbox.run(["read", "--json", "raw"])
        let object = try #require(try JSONSerialization.jsonObject(with: json.stdout) as? [String: Any])
        #expect(object["kind"] as? String == "data")
    }

    @Test func aBinaryMessageCrossesToAListenerInAnotherProcess() async throws {
        let sandbox = Sandbox()
        let file = sandbox.root.file("blob.bin")
        try Self.binary.write(to: URL(fileURLWithPath: file))
        let listener = try sandbox.start(["listen", "--verbose", "--raw", "--count", "1", "blob"])
        #expect(await listener.waitForStandardError(containing: "listening to"))
        _ = try await sandbox.run(["send", "--file", file, "blob"])
        let result = await listener.finish()
        #expect(result.status == 0)
        #expect(same(result.stdout, Self.binary))
    }

    @Test func jsonInputIsCheckedAndStoredAsAJSONMessage() async throws {
        let sandbox = Sandbox()
        let document = "{\"battery\": 87, \"charging\": true}"
        let send = try await sandbox.run(["send", "--json", "status", document])
        #expect(send.status == 0, "\(send.stderr)")
        #expect(try await sandbox.run(["read", "--raw", "status"]).stdout == Data(document.utf8))
        let json = try await sandbox.run(["read", "--json", "status"])
        let object = try #require(try JSONSerialization.jsonObject(with: json.stdout) as? [String: Any])
        #expect(object["kind"] as? String == "json")
        let payload = try #require(object["payload"] as? [String: Any])
        #expect(payload["battery"] as? Int == 87)
        #expect(payload["charging"] as? Bool == true)
    }

    @Test func jsonFromStandardInputIsAcceptedAndTheSequenceCanBePrinted() async throws {
        let sandbox = Sandbox()
        let first = try await sandbox.run(["send", "--json", "--print-sequence", "n"], input: Data("[1, 2, 3]\n".utf8))
        #expect(first.status == 0, "\(first.stderr)")
        #expect(first.output == "1\n")
        let second = try await sandbox.run(["send", "--json", "--print-sequence", "n", "42"])
        #expect(second.output == "2\n")
    }

    /// Runs `wormhole` with `arguments` on a pseudo-terminal (util-linux `script`): its
    /// standard output is a terminal, as when a person runs it.
    private func onTerminal(_ sandbox: Sandbox, _ arguments: [String]) async throws -> String {
        let result = try await sandbox.startOnTerminal(arguments).finish()
        #expect(!result.signaled && result.status == 0, "wormhole \(arguments): status \(result.status)")
        return result.output
    }

    @Test("on a terminal, read and listen show control characters escaped; to a pipe the bytes are exact",
          .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/script")))
    func controlCharactersAreEscapedOnATerminal() async throws {
        let sandbox = Sandbox()
        let hostile = "\u{1B}]0;pwned\u{07}\rok\u{9B}2J\u{202E}txt"
        #expect(try await sandbox.run(["send", "x", hostile]).status == 0)
        let shown = try await onTerminal(sandbox, ["read", "x"])
        #expect(shown.contains(#"\u{1b}]0;pwned\u{7}\u{d}ok\u{9b}2J\u{202e}txt"#), "\(shown.debugDescription)")
        #expect(!shown.unicodeScalars.contains { $0.value == 0x1B || $0.value == 0x9B || $0.value == 0x07 || $0.value == 0x202E })
        let listened = try await onTerminal(sandbox, ["listen", "--latest", "--count", "1", "x"])
        #expect(listened.contains(#"\u{1b}]0;pwned"#), "\(listened.debugDescription)")
        #expect(!listened.unicodeScalars.contains { $0.value == 0x1B })
        // Redirected, the bytes are exact.
        #expect(try await sandbox.run(["read", "x"]).output == hostile + "\n")
        #expect(try await sandbox.run(["read", "--raw", "x"]).stdout == Data(hostile.utf8))
    }

    @Test("--json escapes C1 controls and DEL, in text and inside JSON messages")
    func jsonOutputEscapesC1() async throws {
        let sandbox = Sandbox()
        #expect(try await sandbox.run(["send", "t", "a\u{9B}b\u{7F}"]).status == 0)
        #expect(try await sandbox.run(["send", "--json", "j", "{\"k\":\"a\u{9B}b\"}"]).status == 0)
        for identifier in ["t", "j"] {
            let line = try await sandbox.run(["read", "--json", identifier]).output
            #expect(line.contains(#"\u009b"#), "\(line.debugDescription)")
            #expect(!line.unicodeScalars.contains { (0x7F...0x9F).contains($0.value) }, "\(line.debugDescription)")
            #expect((try? JSONSerialization.jsonObject(with: Data(line.utf8))) != nil, "still JSON: \(line)")
        }
    }
}
