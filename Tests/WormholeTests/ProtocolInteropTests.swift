import Foundation
import Testing
@testable import Wormhole

/// `Docs/Protocol.md` is complete enough to interoperate: `Tests/Interop/wormhole_log.py`,
/// an independent implementation written from the document alone, reads what this
/// library writes and writes what it reads, through the same files, locks and inotify
/// posts.
@Suite("On-disk protocol interoperability with the Python implementation", .serialized)
struct ProtocolInteropTests {
    // MARK: - The document's examples

    @Test("CRC-32 of every length from 0 to 600 bytes, whole or in two pieces, is the bitwise definition's")
    func checksumMatchesTheBitwiseDefinition() {
        func reference(_ bytes: [UInt8]) -> UInt32 {
            var crc: UInt32 = 0xFFFF_FFFF
            for byte in bytes {
                crc ^= UInt32(byte)
                for _ in 0..<8 { crc = (crc & 1) != 0 ? (crc >> 1) ^ 0xEDB8_8320 : crc >> 1 }
            }
            return ~crc
        }
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<600).map { _ in UInt8.random(in: 0...255, using: &generator) }
        for length in 0...600 {
            let slice = Array(bytes[0..<length])
            let expected = reference(slice)
            #expect(slice.withUnsafeBytes { CRC32.update(0, $0) } == expected, "length \(length)")
            let cut = length / 3
            let pieces = slice.withUnsafeBytes { buffer in
                CRC32.update(CRC32.update(0, UnsafeRawBufferPointer(rebasing: buffer[..<cut])), UnsafeRawBufferPointer(rebasing: buffer[cut...]))
            }
            #expect(pieces == expected, "length \(length) cut at \(cut)")
        }
    }

    @Test func documentedChecksumAndExamplesAreWhatTheLibraryWrites() throws {
        #expect(Array("123456789".utf8).withUnsafeBytes { CRC32.update(0, $0) } == 0xCBF4_3926)

        var record: [UInt8] = []
        LogFormat.appendRecord(to: &record, sequence: 1, date: Date(timeIntervalSince1970: 1_735_689_600),
                               processID: 4242, kind: .text, payload: Data("hello".utf8))
        #expect(record == (try Self.documentedBytes(after: "<!-- example-record -->")))
        guard case .record(let parsed, let length) = record.withUnsafeBytes({ LogFormat.parseRecord($0, at: 0, identifier: "x") }) else {
            Issue.record("the example record does not parse")
            return
        }
        #expect(length == 41)
        #expect(parsed.payload == Data("hello".utf8))

        var header = LogFormat.Header()
        header.committedEnd = 169
        header.lastSequence = 1
        header.logID = 0x0123_4567_89AB_CDEF
        header.recordCount = 1
        header.compactionRecordThreshold = 2000
        header.compactionByteThreshold = 33_554_560
        header.lastRecordOffset = 128
        #expect(header.encoded() == (try Self.documentedBytes(after: "<!-- example-header -->")))
    }

    @Test func aNewLogHasTheDocumentedDefaultHeader() throws {
        let container = TemporaryDirectory("interop")
        let wormhole = try Wormhole(directory: container.path)
        try wormhole.passMessage("hello", identifier: "note")
        let file = try [UInt8](Data(contentsOf: URL(fileURLWithPath: container.file("note.wormhole"))))
        try #require(file.count == 128 + 36 + 5)
        let logID = file[40..<48].reversed().reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        #expect(logID != 0)
        var expected = LogFormat.Header()
        expected.committedEnd = 169
        expected.lastSequence = 1
        expected.logID = logID
        expected.recordCount = 1
        expected.compactionRecordThreshold = 2000
        expected.compactionByteThreshold = 33_554_560
        expected.lastRecordOffset = 128
        #expect(Array(file[0..<128]) == expected.encoded())
        #expect(Array(file[128..<132]) == Array("WHR1".utf8))
        #expect(FileManager.default.fileExists(atPath: container.file("note.notification")))
    }

    @Test(.timeLimit(.minutes(2)))
    func thePythonEncoderReproducesTheDocumentedExamples() async throws {
        let result = try await Self.python(["selftest", Self.protocolDocument])
        #expect(result.status == 0, "\(result.errorOutput)")
        #expect(result.output.contains("selftest passed"))
    }

    // MARK: - Python writes, Swift reads

    @Test(.timeLimit(.minutes(2)))
    func messagesWrittenByPythonReachSwiftListenersAndReaders() async throws {
        let container = TemporaryDirectory("interop")
        let wormhole = try Wormhole(directory: container.path)
        let live = Collector<WormholeRecord>()
        let token = try wormhole.listenForRecords(withIdentifier: "note") { live.append($0) }
        defer { token.cancel() }

        let text = "héllo from Python ✓\n"
        let bytes = Data((0...255).map { UInt8($0) } + [0, 0xFF, 0x0A])
        let json = #"{"text":"from Python"}"#
        for (kind, argument) in [("text", text), ("data", bytes.base64EncodedString()), ("json", json)] {
            let result = try await Self.python(["write", container.path, "note", kind, argument])
            #expect(result.status == 0, "\(result.errorOutput)")
        }

        // Woken by the Python side's post: nothing else touches note.notification.
        let received = await live.wait(for: 3)
        #expect(received.map(\.sequence) == [1, 2, 3])
        #expect(received.map(\.kind) == [.text, .data, .json])
        #expect(received.map(\.payload) == [Data(text.utf8), bytes, Data(json.utf8)])
        #expect(received.allSatisfy { $0.processID != getpid() && $0.processID > 0 })
        #expect(received.allSatisfy { abs($0.date.timeIntervalSinceNow) < 120 })

        var history: [WormholeRecord] = []
        for try await record in wormhole.records(withIdentifier: "note", startingFrom: .history) {
            history.append(record)
            if history.count == 3 { break }
        }
        #expect(history == received)
        #expect(try wormhole.message(withIdentifier: "note", as: Note.self) == Note(text: "from Python"))
        #expect(try wormhole.record(withIdentifier: "note")?.sequence == 3)
        await settle()
        #expect(live.count == 3)
    }

    @Test(.timeLimit(.minutes(2)))
    func aTouchFromTheShellIsAPost() async throws {
        let container = TemporaryDirectory("interop")
        let wormhole = try Wormhole(directory: container.path)
        let live = Collector<String>()
        let token = try wormhole.listenForMessage(withIdentifier: "note", as: String.self) { live.append($0) }
        defer { token.cancel() }
        // Once this arrived and the drains it caused are over, only a post wakes the listener.
        try wormhole.passMessage("warm-up", identifier: "note")
        await live.wait(for: 1)
        await settle()

        // Committed but not posted: listeners are not woken.
        let write = try await Self.python(["write", container.path, "note", "text", "quiet", "--no-notify"])
        #expect(write.status == 0, "\(write.errorOutput)")
        await settle(300)
        #expect(live.all == ["warm-up"])
        #expect(try wormhole.message(withIdentifier: "note", as: String.self) == "quiet")

        // `touch <dir>/<id>.notification`, as Protocol.md says, wakes them.
        let touch = try await Self.command(["touch", container.file("note.notification")])
        #expect(touch.status == 0, "\(touch.errorOutput)")
        let woken = await live.wait(for: 2)
        #expect(woken == ["warm-up", "quiet"])
    }

    // MARK: - Swift writes, Python reads

    @Test(.timeLimit(.minutes(2)))
    func messagesPassedBySwiftAreReadByPython() async throws {
        let container = TemporaryDirectory("interop")
        let wormhole = try Wormhole(directory: container.path)
        let text = "grüße from Swift\n"
        let bytes = Data((0...255).map { UInt8($0) })
        let note = Note(text: "from Swift")
        // Longer than the Swift reader's 1 MiB chunk.
        let large = Data((0..<1_500_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 11) })
        #expect(try wormhole.passMessage(text, identifier: "note") == 1)
        #expect(try wormhole.passMessage(bytes, identifier: "note") == 2)
        #expect(try wormhole.passMessage(note, identifier: "note") == 3)
        #expect(try wormhole.passMessage(large, identifier: "note") == 4)

        let all = try await Self.pythonRecords(["read", container.path, "note"])
        #expect(all.map(\.sequence) == [1, 2, 3, 4])
        #expect(all.map(\.kind) == ["text", "data", "json", "data"])
        #expect(all.map(\.bytes) == [Data(text.utf8), bytes, try JSONEncoder().encode(note), large])
        #expect(all.allSatisfy { $0.pid == getpid() })
        let history = try await Self.swiftHistory(wormhole, "note", count: 4)
        #expect(zip(all, history).allSatisfy { python, swift in
            abs(Double(python.dateNanoseconds ?? 0) / 1e9 - swift.date.timeIntervalSince1970) < 1e-5
        })

        let latest = try await Self.pythonRecords(["read", container.path, "note", "--latest"])
        #expect(latest.map(\.sequence) == [4])
        #expect(latest.first?.bytes == large)

        // Clearing (clearedThrough) hides them from Python too; numbering goes on.
        try wormhole.clearMessageContents(forIdentifier: "note")
        let cleared = try await Self.pythonRecords(["read", container.path, "note"])
        #expect(cleared.isEmpty)
        let clearedLatest = try await Self.pythonRecords(["read", container.path, "note", "--latest"])
        #expect(clearedLatest.isEmpty)
        try wormhole.passMessage("after clearing", identifier: "note")
        let after = try await Self.pythonRecords(["read", container.path, "note"])
        #expect(after.map(\.sequence) == [5])
        #expect(after.first?.payload == "after clearing")
    }

    @Test(.timeLimit(.minutes(2)))
    func bothImplementationsSkipADamagedRecordAndReadOn() async throws {
        let container = TemporaryDirectory("interop")
        let wormhole = try Wormhole(directory: container.path)
        for text in ["first", "second", "third"] { try wormhole.passMessage(text, identifier: "note") }
        // Flip one payload byte of "second": its CRC no longer matches.
        let path = container.file("note.wormhole")
        var file = try Data(contentsOf: URL(fileURLWithPath: path))
        let secondPayload = 128 + 36 + 5 + 36
        #expect(file[secondPayload] == UInt8(ascii: "s"))
        file[secondPayload] ^= 0x20
        try file.write(to: URL(fileURLWithPath: path))

        let errors = Collector<WormholeError>()
        var swift: [WormholeRecord] = []
        for try await record in wormhole.records(withIdentifier: "note", startingFrom: .history, onError: { errors.append($0) }) {
            swift.append(record)
            if swift.count == 2 { break }
        }
        #expect(swift.map(\.sequence) == [1, 3])
        #expect(errors.all.map(\.code) == [.corruptRecord])

        let result = try await Self.python(["read", container.path, "note"])
        let lines = try Self.decode(result.output)
        #expect(lines.compactMap(\.sequence) == [1, 3])
        #expect(lines.compactMap(\.payload) == ["first", "third"])
        #expect(lines.compactMap(\.error).count == 1)
    }

    // MARK: - Both write

    @Test(.timeLimit(.minutes(2)))
    func alternatingSwiftAndPythonWritersShareOneGapFreeSequence() async throws {
        let container = TemporaryDirectory("interop")
        let wormhole = try Wormhole(directory: container.path)
        var expected: [String] = []
        for round in 1...8 {
            // Python creates the log in the first round, Swift appends to it.
            let result = try await Self.python(["write", container.path, "turns", "text", "python \(round)"])
            #expect(result.status == 0, "\(result.errorOutput)")
            try wormhole.passMessage("swift \(round)", identifier: "turns")
            expected += ["python \(round)", "swift \(round)"]
        }
        let fromPython = try await Self.pythonRecords(["read", container.path, "turns"])
        #expect(fromPython.map(\.sequence) == Array(1...16))
        #expect(fromPython.map(\.payload) == expected)
        let fromSwift = try await Self.swiftHistory(wormhole, "turns", count: 16)
        #expect(fromSwift.map(\.sequence) == Array(1...16))
        #expect(fromSwift.map { String(decoding: $0.payload, as: UTF8.self) } == expected)
    }

    @Test(.timeLimit(.minutes(2)))
    func concurrentSwiftAndPythonWritersThroughCompactionLoseNothing() async throws {
        let container = TemporaryDirectory("interop")
        let scratch = TemporaryDirectory("interop-scratch")
        var configuration = Wormhole.Configuration()
        configuration.retainedMessageCount = 16
        let wormhole = try Wormhole(directory: container.path, configuration: configuration)
        let live = Collector<WormholeRecord>()
        let token = try wormhole.listenForRecords(withIdentifier: "burst") { live.append($0) }
        defer { token.cancel() }
        // Swift creates the log, so its header carries Swift's small compaction thresholds.
        try wormhole.passMessage("start", identifier: "burst")

        let count = 1000
        let total = 1 + 2 * count
        let ready = scratch.file("follower.ready")
        let follower = try PythonProcess(
            ["read", container.path, "burst", "--follow", "\(total)", "--start", "history", "--timeout", "90", "--ready", ready],
            scratch: scratch, name: "follower")
        let deadline = Date().addingTimeInterval(30)
        while !FileManager.default.fileExists(atPath: ready) && Date() < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        try #require(FileManager.default.fileExists(atPath: ready))

        let writer = try PythonProcess(["write", container.path, "burst", "text", "python {i}", "--count", "\(count)"],
                                       scratch: scratch, name: "writer")
        // Start once Python is appending, so that the two writers contend for the lock.
        while try Self.lastSequence(container.file("burst.wormhole")) < 2 && Date() < deadline {
            try await Task.sleep(for: .milliseconds(1))
        }
        for index in 1...count { try wormhole.passMessage("swift \(index)", identifier: "burst") }
        let written = await writer.finish()
        #expect(written.status == 0, "\(written.errorOutput)")

        let received = await live.wait(for: total, seconds: 60)
        #expect(received.map(\.sequence) == (1...total).map { UInt64($0) })
        let payloads = received.map { String(decoding: $0.payload, as: UTF8.self) }
        #expect(payloads.filter { $0.hasPrefix("python ") } == (1...count).map { "python \($0)" })
        #expect(payloads.filter { $0.hasPrefix("swift ") } == (1...count).map { "swift \($0)" })
        let turns = zip(payloads.dropFirst(), payloads.dropFirst(2)).filter { $0.prefix(5) != $1.prefix(5) }.count
        #expect(turns >= 2, "the writers did not interleave")

        let followed = await follower.finish()
        #expect(followed.status == 0, "\(followed.errorOutput)")
        let lines = try Self.decode(followed.output)
        #expect(lines.allSatisfy { $0.error == nil })
        #expect(lines.map(\.sequence) == received.map(\.sequence))
        #expect(lines.map(\.payload) == payloads)

        // The log was compacted under both writers (Python itself never compacts).
        let snapshot = try #require(try LogSnapshot(path: container.file("burst.wormhole"), identifier: "burst", wholeLog: true))
        #expect(snapshot.header.lastSequence == UInt64(total))
        #expect(snapshot.records.count < total)
        #expect(snapshot.records.last?.sequence == UInt64(total))
    }

    @Test(.timeLimit(.minutes(2)))
    func bothImplementationsAcceptAndRejectTheSameIdentifiers() async throws {
        let container = TemporaryDirectory("interop")
        let wormhole = try Wormhole(directory: container.path)
        let rejected = ["", ".", "..", ".hidden", "a/b", "../escape", "tab\there", "del\u{7F}", String(repeating: "x", count: 201)]
        let accepted = ["note", "com.example.state", "héllo wörld", "with space", String(repeating: "é", count: 100)]
        for identifier in rejected + accepted {
            let swiftAccepts = (try? wormhole.passMessage("x", identifier: identifier)) != nil
            let python = try await Self.python(["write", container.path, identifier, "text", "x"])
            #expect(swiftAccepts == accepted.contains(identifier), "Swift on '\(identifier)'")
            #expect((python.status == 0) == accepted.contains(identifier), "Python on '\(identifier)': \(python.errorOutput)")
        }
        // Nothing escaped the container, and every accepted identifier has its log.
        let names = try FileManager.default.contentsOfDirectory(atPath: container.path)
        #expect(Set(names.filter { $0.hasSuffix(".wormhole") }) == Set(accepted.map { $0 + ".wormhole" }))
        for identifier in accepted {
            let records = try await Self.pythonRecords(["read", container.path, identifier])
            #expect(records.map(\.sequence) == [1, 2])
        }
    }

    // MARK: - Running the Python implementation

    static let repositoryRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let script = repositoryRoot.appendingPathComponent("Tests/Interop/wormhole_log.py").path
    static let protocolDocument = repositoryRoot.appendingPathComponent("Docs/Protocol.md").path

    /// The bytes of the hex block that follows `marker` in Protocol.md: each line's
    /// hexadecimal pairs before its `|`.
    static func documentedBytes(after marker: String) throws -> [UInt8] {
        let document = try String(contentsOfFile: protocolDocument, encoding: .utf8)
        let afterMarker = try #require(document.range(of: marker)).upperBound
        let open = try #require(document.range(of: "```", range: afterMarker..<document.endIndex)).upperBound
        let close = try #require(document.range(of: "```", range: open..<document.endIndex)).lowerBound
        var bytes: [UInt8] = []
        for line in document[open..<close].split(separator: "\n") {
            let hex = line.split(separator: "|", maxSplits: 1).first ?? ""
            for pair in hex.split(separator: " ") {
                bytes.append(try #require(UInt8(pair, radix: 16), "'\(pair)' in \(marker)"))
            }
        }
        return bytes
    }

    struct Finished {
        let status: Int32
        let output: String
        let errorOutput: String
    }

    /// A child process whose output goes to files (no pipe to fill up and block it).
    final class PythonProcess {
        private let process = Process()
        private let outputPath: String
        private let errorPath: String

        init(_ arguments: [String], scratch: TemporaryDirectory, name: String, executable: String? = nil) throws {
            outputPath = scratch.file("\(name).out")
            errorPath = scratch.file("\(name).err")
            _ = FileManager.default.createFile(atPath: outputPath, contents: nil)
            _ = FileManager.default.createFile(atPath: errorPath, contents: nil)
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = executable.map { [$0] + arguments } ?? ["python3", ProtocolInteropTests.script] + arguments
            process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: outputPath))
            process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: errorPath))
            process.standardInput = FileHandle.nullDevice
            try process.run()
        }

        func finish() async -> Finished {
            while process.isRunning { try? await Task.sleep(for: .milliseconds(10)) }
            let output = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
            let errorOutput = (try? String(contentsOfFile: errorPath, encoding: .utf8)) ?? ""
            return Finished(status: process.terminationStatus, output: output, errorOutput: errorOutput)
        }
    }

    static func python(_ arguments: [String]) async throws -> Finished {
        let scratch = TemporaryDirectory("interop-scratch")
        return try await PythonProcess(arguments, scratch: scratch, name: "python").finish()
    }

    /// Runs another program found on `PATH`.
    static func command(_ arguments: [String]) async throws -> Finished {
        let scratch = TemporaryDirectory("interop-scratch")
        return try await PythonProcess(Array(arguments.dropFirst()), scratch: scratch, name: "command", executable: arguments[0]).finish()
    }

    /// One JSON line of `wormhole_log.py read`.
    struct PythonRecord: Decodable {
        let sequence: UInt64?
        let kind: String?
        let pid: Int32?
        let dateNanoseconds: Int64?
        let encoding: String?
        let payload: String?
        let error: String?

        enum CodingKeys: String, CodingKey {
            case sequence, kind, pid, encoding, payload, error
            case dateNanoseconds = "date_ns"
        }

        var bytes: Data? {
            guard let payload else { return nil }
            return encoding == "base64" ? Data(base64Encoded: payload) : Data(payload.utf8)
        }
    }

    static func decode(_ output: String) throws -> [PythonRecord] {
        try output.split(separator: "\n").map { line in
            try JSONDecoder().decode(PythonRecord.self, from: Data(line.utf8))
        }
    }

    /// Runs a `read` and returns its records, failing on any error line.
    static func pythonRecords(_ arguments: [String]) async throws -> [PythonRecord] {
        let result = try await python(arguments)
        try #require(result.status == 0, "\(result.errorOutput)")
        let lines = try decode(result.output)
        for line in lines where line.error != nil { Issue.record("Python read reported: \(line.error!)") }
        return lines.filter { $0.error == nil }
    }

    static func lastSequence(_ path: String) throws -> UInt64 {
        try LogSnapshot(path: path, identifier: "x", wholeLog: false)?.header.lastSequence ?? 0
    }

    static func swiftHistory(_ wormhole: Wormhole, _ identifier: String, count: Int) async throws -> [WormholeRecord] {
        var records: [WormholeRecord] = []
        for try await record in wormhole.records(withIdentifier: identifier, startingFrom: .history) {
            records.append(record)
            if records.count == count { break }
        }
        return records
    }
}
