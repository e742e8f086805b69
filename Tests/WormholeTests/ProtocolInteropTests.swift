import Foundation
import Testing
@_spi(Backend) @testable import Wormhole
@_spi(Backend) @testable import WormholeCore
@_spi(Backend) @testable import WormholeFiles
import WormholeTestSupport

/// `Docs/Protocol.md` is complete enough to interoperate: `Tests/Interop/wormhole_log.py`,
/// an independent implementation written from the document alone, reads
/// what this library writes and writes what it reads, through the same files, locks,
/// claims and inotify events, through compaction, torn tails and gaps.
@Suite("On-disk protocol interoperability with the Python implementation", .serialized)
struct ProtocolInteropTests {
    static let exampleLogID: UInt64 = 0x0123_4567_89AB_CDEF
    /// The thresholds of a new log with the default retention (Protocol.md §10.1):
    /// 128 + 2 x (16 MiB + 60 x 1000), and 2 x 1000.
    static let defaultByteThreshold: UInt64 = 33_674_560
    static let defaultRecordThreshold: UInt64 = 2000

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
        #expect([UInt8]().withUnsafeBytes { CRC32.update(0, $0) } == 0)

        let fields = LogFormat.RecordFields(nanoseconds: 1_735_689_600_000_000_000, processID: 4242, userID: 1000, kind: .text)
        let record = LogFormat.recordBytes(logID: Self.exampleLogID, sequence: 1, fields: fields, payload: Array("hello".utf8))
        #expect(record == (try Self.documentedBytes(after: "<!-- example-record -->")))
        #expect(record.count == 65)
        let parsed = record.withUnsafeBytes { LogFormat.parse($0, at: 0, logID: Self.exampleLogID, layout: .version3, maximumPayload: 1 << 20) }
        guard case .record(let frame, let length) = parsed else {
            Issue.record("the example record does not parse: \(parsed)")
            return
        }
        #expect(length == 65)
        #expect(frame.sequence == 1 && frame.fields == fields && frame.payloadLength == 5)
        // The checksum is seeded with the log's identity: in another log it is not a record.
        let elsewhere = record.withUnsafeBytes { LogFormat.parse($0, at: 0, logID: Self.exampleLogID ^ 1, layout: .version3, maximumPayload: 1 << 20) }
        if case .record = elsewhere { Issue.record("the example record is valid in a log with another identity") }

        let header = LogFormat.Header(logID: Self.exampleLogID, baseSequence: 0, clearedThrough: 0,
                                      compactionByteThreshold: Self.defaultByteThreshold,
                                      compactionRecordThreshold: Self.defaultRecordThreshold)
        let documented = try Self.documentedBytes(after: "<!-- example-header -->")
        #expect(header.encoded() == documented)
        let decoded = try documented.withUnsafeBytes { try LogFormat.Header.decode($0, path: "example") }
        #expect(decoded == header)
    }

    @Test func aNewLogHasTheDocumentedDefaultHeaderAndNoNotificationFile() throws {
        let container = TemporaryDirectory("interop")
        let wormhole = try Wormhole(directory: container.path)
        try wormhole.passMessage("hello", identifier: "note")
        let file = try Self.bytes(container.file("note.wormhole"))
        try #require(file.count == 128 + 65)
        let logID = file[16..<24].reversed().reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        #expect(logID != 0)
        let expected = LogFormat.Header(logID: logID, baseSequence: 0, clearedThrough: 0,
                                        compactionByteThreshold: Self.defaultByteThreshold,
                                        compactionRecordThreshold: Self.defaultRecordThreshold)
        #expect(Array(file[0..<128]) == expected.encoded())
        let nanoseconds = file[144..<152].reversed().reduce(Int64(0)) { $0 << 8 | Int64($1) }
        let record = LogFormat.recordBytes(logID: logID, sequence: 1, nanoseconds: nanoseconds, processID: getpid(),
                                           kind: .text, payload: Array("hello".utf8))
        #expect(Array(file[128...]) == record)
        // Version 2: a pass touches no notification file.
        #expect(!FileManager.default.fileExists(atPath: container.file("note.notification")))
        #expect(try Self.mode(container.file("note.wormhole")) == 0o600)
        #expect(try Self.mode(container.path) == 0o700)
    }

    @Test(.timeLimit(.minutes(2)))
    func thePythonImplementationReproducesTheDocumentedExamplesAndPassesItsSelfTest() async throws {
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
        let errors = Collector<WormholeError>()
        let token = try wormhole.listenForRecords(withIdentifier: "note", onError: { errors.append($0) }) { live.append($0) }
        defer { token.cancel() }

        let text = "héllo from Python ✓\n"
        let bytes = Data((0...255).map { UInt8($0) } + [0, 0xFF, 0x0A])
        let json = #"{"text":"from Python"}"#
        for (kind, argument) in [("text", text), ("data", bytes.base64EncodedString()), ("json", json)] {
            let result = try await Self.python(["write", container.path, "note", kind, argument])
            #expect(result.status == 0, "\(result.errorOutput)")
        }

        // Woken by the appends' own IN_MODIFY: there is no notification file.
        let received = await live.wait(for: 3)
        #expect(received.map(\.sequence) == [1, 2, 3])
        #expect(received.map(\.kind) == [.text, .data, .json])
        #expect(received.map(\.payload) == [Data(text.utf8), bytes, Data(json.utf8)])
        #expect(received.allSatisfy { $0.processID != getpid() && $0.processID > 0 })
        #expect(received.allSatisfy { abs($0.date.timeIntervalSinceNow) < 120 })
        #expect(!FileManager.default.fileExists(atPath: container.file("note.notification")))

        let history = try await Self.swiftHistory(wormhole, "note", count: 3)
        #expect(history.map(\.sequence) == [1, 2, 3])
        #expect(history.map(\.payload) == received.map(\.payload))
        await #expect(try wormhole.message(withIdentifier: "note", as: Note.self) == Note(text: "from Python"))
        await #expect(try wormhole.record(withIdentifier: "note")?.sequence == 3)
        let summary = try await #require(try wormhole.summaries().first { $0.identifier == "note" })
        #expect(summary.messageCount == 3 && summary.lastSequence == 3)
        #expect(summary.byteCount == text.utf8.count + bytes.count + json.utf8.count)
        await settle()
        #expect(live.count == 3)
        #expect(errors.all.isEmpty, "\(errors.all)")
    }

    @Test(.timeLimit(.minutes(2)))
    func aSwiftListenerStartsWhereAskedInALogPythonWrote() async throws {
        let container = TemporaryDirectory("interop")
        let wormhole = try Wormhole(directory: container.path)
        let write = try await Self.python(["write", container.path, "start", "text", "m{i}", "--count", "5"])
        #expect(write.status == 0, "\(write.errorOutput)")

        let latest = Collector<UInt64>()
        let after = Collector<UInt64>()
        let now = Collector<UInt64>()
        let tokens = [
            try wormhole.listenForRecords(withIdentifier: "start", startingFrom: .latest) { latest.append($0.sequence) },
            try wormhole.listenForRecords(withIdentifier: "start", startingFrom: .after(sequence: 2)) { after.append($0.sequence) },
            try wormhole.listenForRecords(withIdentifier: "start", startingFrom: .now) { now.append($0.sequence) },
        ]
        defer { tokens.forEach { $0.cancel() } }
        let more = try await Self.python(["write", container.path, "start", "text", "n{i}", "--count", "2"])
        #expect(more.status == 0, "\(more.errorOutput)")
        #expect(await latest.wait(for: 3) == [5, 6, 7])
        #expect(await after.wait(for: 5) == [3, 4, 5, 6, 7])
        #expect(await now.wait(for: 2) == [6, 7])
        await settle()
        #expect(latest.count == 3 && after.count == 5 && now.count == 2)
    }

    // MARK: - Swift writes, Python reads

    @Test(.timeLimit(.minutes(2)))
    func messagesPassedBySwiftAreReadByPython() async throws {
        let container = TemporaryDirectory("interop")
        let wormhole = try Wormhole(directory: container.path)
        let text = "grüße from Swift\n"
        let bytes = Data((0...255).map { UInt8($0) })
        let note = Note(text: "from Swift")
        // Larger than one read of either implementation's walk.
        let large = Data((0..<1_500_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 11) })
        await #expect(try wormhole.passMessage(text, identifier: "note") == 1)
        await #expect(try wormhole.passMessage(bytes, identifier: "note") == 2)
        await #expect(try wormhole.passMessage(note, identifier: "note") == 3)
        await #expect(try wormhole.passMessage(large, identifier: "note") == 4)

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

        // A reader whose maximum message size is smaller skips the large one and says so.
        let small = try await Self.python(["read", container.path, "note", "--max-size", "1000"])
        let lines = try Self.decode(small.output)
        #expect(lines.compactMap(\.sequence) == [1, 2, 3])
        #expect(lines.compactMap(\.code) == ["messageTooLarge"])

        // Clearing (a compaction with clearedThrough) hides them from Python too; numbering goes on.
        try await wormhole.clearMessageContents(forIdentifier: "note")
        #expect(try await Self.pythonRecords(["read", container.path, "note"]).isEmpty)
        #expect(try await Self.pythonRecords(["read", container.path, "note", "--latest"]).isEmpty)
        try await wormhole.passMessage("after clearing", identifier: "note")
        let after = try await Self.pythonRecords(["read", container.path, "note"])
        #expect(after.map(\.sequence) == [5])
        #expect(after.first?.payload == "after clearing")
        let header = try #require(try Self.header(container.file("note.wormhole")))
        #expect(header.clearedThrough == 4 && header.baseSequence == 4)
    }

    @Test(.timeLimit(.minutes(2)))
    func aPythonListenerStartsWhereAskedInALogSwiftWrote() async throws {
        let container = TemporaryDirectory("interop")
        let scratch = TemporaryDirectory("interop-scratch")
        let wormhole = try Wormhole(directory: container.path)
        for index in 1...5 { try await wormhole.passMessage("m\(index)", identifier: "start") }

        let ready = scratch.file("latest.ready")
        let latest = try PythonProcess(["read", container.path, "start", "--follow", "3", "--start", "latest",
                                        "--timeout", "60", "--ready", ready], scratch: scratch, name: "latest")
        #expect(await waitForFile(ready))
        try await wormhole.passMessage("m6", identifier: "start")
        try await wormhole.passMessage("m7", identifier: "start")
        let followed = await latest.finish()
        #expect(followed.status == 0, "\(followed.errorOutput)")
        let lines = try Self.decode(followed.output)
        #expect(lines.compactMap(\.sequence) == [5, 6, 7])
        #expect(lines.compactMap(\.payload) == ["m5", "m6", "m7"])

        let after = try await Self.pythonRecords(["read", container.path, "start", "--follow", "5", "--start", "after:2", "--timeout", "30"])
        #expect(after.map(\.sequence) == [3, 4, 5, 6, 7])
        let history = try await Self.pythonRecords(["read", container.path, "start", "--follow", "3", "--start", "history",
                                                    "--retain-count", "3", "--timeout", "30"])
        #expect(history.map(\.sequence) == [5, 6, 7])
    }

    @Test(.timeLimit(.minutes(2)))
    func bothImplementationsSkipADamagedRecordAndReadOn() async throws {
        let container = TemporaryDirectory("interop")
        let wormhole = try Wormhole(directory: container.path)
        for text in ["first", "second", "third"] { try await wormhole.passMessage(text, identifier: "note") }
        // Flip one payload byte of "second": its checksum no longer matches.
        let path = container.file("note.wormhole")
        var file = try Data(contentsOf: URL(fileURLWithPath: path))
        let secondPayload = 128 + 65 + 56
        #expect(file[secondPayload] == UInt8(ascii: "s"))
        file[secondPayload] ^= 0x20
        try file.write(to: URL(fileURLWithPath: path))

        let errors = Collector<WormholeError>()
        let records = Collector<WormholeRecord>()
        let token = try wormhole.listenForRecords(withIdentifier: "note", startingFrom: .history, onError: { errors.append($0) }) {
            records.append($0)
        }
        defer { token.cancel() }
        #expect(await records.wait(for: 2).map(\.sequence) == [1, 3])
        await settle()
        // One error for the damage, and no gap reported for the record after it.
        #expect(errors.all.map(\.code) == [.corruptRecord])

        let result = try await Self.python(["read", container.path, "note"])
        let lines = try Self.decode(result.output)
        #expect(lines.compactMap(\.sequence) == [1, 3])
        #expect(lines.compactMap(\.payload) == ["first", "third"])
        #expect(lines.compactMap(\.code) == ["corruptRecord"])
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
            try await wormhole.passMessage("swift \(round)", identifier: "turns")
            expected += ["python \(round)", "swift \(round)"]
        }
        let fromPython = try await Self.pythonRecords(["read", container.path, "turns"])
        #expect(fromPython.map(\.sequence) == Array(1...16))
        #expect(fromPython.map(\.payload) == expected)
        let fromSwift = try await Self.swiftHistory(wormhole, "turns", count: 16)
        #expect(fromSwift.map(\.sequence) == Array(1...16))
        #expect(fromSwift.map { String(decoding: $0.payload, as: UTF8.self) } == expected)
    }

    @Test(.timeLimit(.minutes(3)))
    func concurrentSwiftAndPythonWritersThroughCompactionLoseNothing() async throws {
        let container = TemporaryDirectory("interop")
        let scratch = TemporaryDirectory("interop-scratch")
        var configuration = Wormhole.Configuration()
        configuration.retainedMessageCount = 16
        let wormhole = try Wormhole(directory: container.path, configuration: configuration)
        let live = Collector<WormholeRecord>()
        let errors = Collector<WormholeError>()
        let token = try wormhole.listenForRecords(withIdentifier: "burst", onError: { errors.append($0) }) { live.append($0) }
        defer { token.cancel() }
        // Swift creates the log, so its header carries the small thresholds.
        try await wormhole.passMessage("start", identifier: "burst")

        let count = 1000
        let total = 1 + 2 * count
        let ready = scratch.file("follower.ready")
        let follower = try PythonProcess(
            ["read", container.path, "burst", "--follow", "\(total)", "--start", "history", "--timeout", "120", "--ready", ready],
            scratch: scratch, name: "follower")
        try #require(await waitForFile(ready))

        // Both writers compact: Python with the same retention. It waits after its first
        // half until Swift has written once, so that the writers take turns whatever the
        // machine's load (Python alone could be done before Swift begins).
        let resume = scratch.file("writer.resume")
        let writer = try PythonProcess(["write", container.path, "burst", "text", "python {i}", "--count", "\(count)", "--retain-count", "16",
                                        "--pause-at", "\(count / 2)", "--resume-on", resume],
                                       scratch: scratch, name: "writer")
        // Start once Python is appending, so that the two writers contend for the lock.
        await eventually(seconds: 30) { try wormhole.record(withIdentifier: "burst")?.sequence ?? 0 >= 3 }
        // Every 25 of its messages, Swift lets both listeners catch up. Compaction keeps
        // what a live listener has not read (§10.2 C4) and then waits for twice what it
        // kept (§10.1): listeners left far behind on a busy machine would leave this log
        // uncompacted, and the test would not test what it says.
        for index in 1...count {
            try await wormhole.passMessage("swift \(index)", identifier: "burst")
            if index == 1 { _ = FileManager.default.createFile(atPath: resume, contents: nil) }
            if index % 25 == 0 {
                let latest = try await wormhole.record(withIdentifier: "burst")?.sequence ?? 0
                #expect(await eventually(seconds: 60) { UInt64(live.count) >= latest && UInt64(follower.linesSoFar) >= latest },
                        "the listeners did not catch up with message \(latest)")
            }
        }
        let written = await writer.finish()
        #expect(written.status == 0, "\(written.errorOutput)")

        let received = await live.wait(for: total, seconds: 60)
        #expect(received.map(\.sequence) == (1...total).map { UInt64($0) })
        let payloads = received.map { String(decoding: $0.payload, as: UTF8.self) }
        #expect(payloads.filter { $0.hasPrefix("python ") } == (1...count).map { "python \($0)" })
        #expect(payloads.filter { $0.hasPrefix("swift ") } == (1...count).map { "swift \($0)" })
        let turns = zip(payloads.dropFirst(), payloads.dropFirst(2)).filter { $0.prefix(5) != $1.prefix(5) }.count
        #expect(turns >= 2, "the writers did not interleave")
        #expect(errors.all.isEmpty, "\(errors.all)")

        let followed = await follower.finish()
        #expect(followed.status == 0, "\(followed.errorOutput)")
        let lines = try Self.decode(followed.output)
        #expect(lines.allSatisfy { $0.error == nil })
        #expect(lines.map(\.sequence) == received.map(\.sequence))
        #expect(lines.map(\.payload) == payloads)

        // The log was compacted: it keeps far fewer than it was given, the latest last.
        let header = try #require(try Self.header(container.file("burst.wormhole")))
        #expect(header.baseSequence > 0)
        let summary = try await #require(try wormhole.summaries().first { $0.identifier == "burst" })
        #expect(summary.lastSequence == UInt64(total))
        #expect(summary.messageCount < total)
        await #expect(try wormhole.record(withIdentifier: "burst")?.sequence == UInt64(total))
    }

    // MARK: - Claims, the backlog cap and gaps across implementations

    @Test(.timeLimit(.minutes(2)))
    func aStoppedPythonListenerKeepsItsMessagesThroughSwiftCompaction() async throws {
        let container = TemporaryDirectory("interop")
        let scratch = TemporaryDirectory("interop-scratch")
        var configuration = Wormhole.Configuration()
        configuration.retainedMessageCount = 16
        let wormhole = try Wormhole(directory: container.path, configuration: configuration)
        for index in 1...20 { try await wormhole.passMessage("m\(index)", identifier: "claims") }

        let ready = scratch.file("stalled.ready")
        let listener = try PythonProcess(["read", container.path, "claims", "--follow", "300", "--timeout", "90", "--ready", ready],
                                         scratch: scratch, name: "stalled")
        try #require(await waitForFile(ready))
        kill(listener.pid, SIGSTOP)
        for index in 21...320 { try await wormhole.passMessage("m\(index)", identifier: "claims") }
        // Compacted many times over, each time down to what the stopped listener claims
        // (it had read up to 20 when it started).
        let header = try #require(try Self.header(container.file("claims.wormhole")))
        #expect(header.baseSequence == 20)
        kill(listener.pid, SIGCONT)

        let followed = await listener.finish()
        #expect(followed.status == 0, "\(followed.errorOutput)")
        let lines = try Self.decode(followed.output)
        #expect(lines.compactMap(\.error).isEmpty, "\(lines.compactMap(\.error))")
        #expect(lines.compactMap(\.sequence) == Array(21...320))
        #expect(lines.last?.payload == "m320")
        // It withdrew its claim when it stopped.
        #expect(try FileManager.default.contentsOfDirectory(atPath: container.file(".listeners/claims")).isEmpty)
    }

    @Test(.timeLimit(.minutes(2)))
    func aStoppedSwiftListenerKeepsItsMessagesThroughPythonCompaction() async throws {
        let container = TemporaryDirectory("interop")
        let write = try await Self.python(["write", container.path, "claims", "text", "m{i}", "--count", "20", "--retain-count", "16"])
        #expect(write.status == 0, "\(write.errorOutput)")

        let output = container.file("agent.txt")
        let agent = try Agent.start(["listen", container.path, "claims", "300", output])
        #expect(await waitForFile(output + ".ready"))
        kill(agent.processIdentifier, SIGSTOP)
        let more = try await Self.python(["write", container.path, "claims", "text", "n{i}", "--count", "300", "--retain-count", "16"])
        #expect(more.status == 0, "\(more.errorOutput)")
        let header = try #require(try Self.header(container.file("claims.wormhole")))
        #expect(header.baseSequence == 20, "Python's compaction did not keep what the stopped Swift listener claims")
        kill(agent.processIdentifier, SIGCONT)

        #expect(await waitForExit(agent, seconds: 90) == 0)
        let lines = try listenerLines(output)
        #expect(lines.map(\.sequence) == Array(21...320))
        #expect(lines.map(\.payload) == (1...300).map { "n\($0)" })
    }

    @Test(.timeLimit(.minutes(2)))
    func aListenerPastTheBacklogCapIsToldHowManyItLost() async throws {
        let container = TemporaryDirectory("interop")
        let scratch = TemporaryDirectory("interop-scratch")
        var configuration = Wormhole.Configuration()
        configuration.retainedMessageCount = 10
        configuration.maximumBacklogMessageCount = 50
        let wormhole = try Wormhole(directory: container.path, configuration: configuration)
        try await wormhole.passMessage("m1", identifier: "capped")

        let ready = scratch.file("capped.ready")
        let listener = try PythonProcess(["read", container.path, "capped", "--until", "301", "--timeout", "90", "--ready", ready],
                                         scratch: scratch, name: "capped")
        try #require(await waitForFile(ready))
        kill(listener.pid, SIGSTOP)
        for index in 2...301 { try await wormhole.passMessage("m\(index)", identifier: "capped") }
        kill(listener.pid, SIGCONT)

        let followed = await listener.finish()
        #expect(followed.status == 0, "\(followed.errorOutput)")
        let lines = try Self.decode(followed.output)
        let gaps = lines.filter { $0.code == "messagesLost" }
        try #require(gaps.count == 1, "\(followed.output)")
        #expect(lines.filter { $0.error != nil }.count == 1)
        let lost = try #require(gaps[0].lost)
        let sequences = lines.compactMap(\.sequence)
        #expect(lost > 0 && Int(lost) + sequences.count == 300)
        #expect(sequences.last == 301)
        #expect(sequences == sequences.sorted() && Set(sequences).count == sequences.count)
        // In its place: the record after the report is the first one after the lost ones.
        let index = try #require(lines.firstIndex { $0.code == "messagesLost" })
        let before = lines[..<index].compactMap(\.sequence).last ?? 1
        #expect(lines.dropFirst(index + 1).first?.sequence == before + lost + 1)
        // At most the cap (plus what arrived since the last compaction) was waiting.
        #expect(sequences.count < 300)
    }

    @Test(.timeLimit(.minutes(2)), arguments: ["swift", "python"])
    func bothImplementationsReportTheSameGapForAStartBeforeTheOldestKeptMessage(writer: String) async throws {
        let container = TemporaryDirectory("interop")
        var configuration = Wormhole.Configuration()
        configuration.retainedMessageCount = 10
        let wormhole = try Wormhole(directory: container.path, configuration: configuration)
        if writer == "swift" {
            for index in 1...100 { try await wormhole.passMessage("m\(index)", identifier: "gap") }
        } else {
            let write = try await Self.python(["write", container.path, "gap", "text", "m{i}", "--count", "100", "--retain-count", "10"])
            #expect(write.status == 0, "\(write.errorOutput)")
        }
        let header = try #require(try Self.header(container.file("gap.wormhole")))
        let base = header.baseSequence
        try #require(base > 5 && base < 100, "the \(writer) writer did not compact (base \(base))")

        // Swift: after 5, the messages up to `base` are gone: one report, then the rest.
        let events = Collector<String>()
        let token = try wormhole.listenForRecords(withIdentifier: "gap", startingFrom: .after(sequence: 5), onError: { error in
            events.append("\(error.code) \(error.missedMessageCount.map(String.init) ?? "-")")
        }) { events.append("\($0.sequence)") }
        defer { token.cancel() }
        let expected = ["messagesLost \(base - 5)"] + (base + 1...100).map { "\($0)" }
        #expect(await events.wait(for: expected.count) == expected)

        // Python, on the same file: the same report, the same records.
        let result = try await Self.python(["read", container.path, "gap", "--follow", "\(100 - base)", "--start", "after:5", "--timeout", "30"])
        #expect(result.status == 0, "\(result.errorOutput)")
        let lines = try Self.decode(result.output)
        #expect(lines.first?.code == "messagesLost" && lines.first?.lost == base - 5)
        #expect(lines.compactMap(\.sequence) == Array(base + 1...100))
        #expect(lines.filter { $0.error != nil }.count == 1)

        // History is the last 10, with no report in either.
        let history = Collector<String>()
        let historyToken = try wormhole.listenForRecords(withIdentifier: "gap", startingFrom: .history, onError: { error in
            history.append("\(error.code)")
        }) { history.append("\($0.sequence)") }
        defer { historyToken.cancel() }
        #expect(await history.wait(for: 10) == (91...100).map { "\($0)" })
        let pythonHistory = try await Self.pythonRecords(["read", container.path, "gap", "--follow", "10", "--start", "history",
                                                          "--retain-count", "10", "--timeout", "30"])
        #expect(pythonHistory.map(\.sequence) == Array(91...100))
        await settle()
        #expect(history.count == 10)
    }

    // MARK: - Torn tails

    @Test(.timeLimit(.minutes(2)))
    func aTornTailLeftByPythonIsInvisibleAndTheNextSwiftWriterCutsIt() async throws {
        let container = TemporaryDirectory("interop")
        let wormhole = try Wormhole(directory: container.path)
        let records = Collector<UInt64>()
        let errors = Collector<WormholeError>()
        let token = try wormhole.listenForRecords(withIdentifier: "torn", onError: { errors.append($0) }) { records.append($0.sequence) }
        defer { token.cancel() }
        let write = try await Self.python(["write", container.path, "torn", "text", "m{i}", "--count", "2"])
        #expect(write.status == 0, "\(write.errorOutput)")
        // Python writes 20 bytes of the record of message 3, as a writer killed mid-append.
        let torn = try await Self.python(["write", container.path, "torn", "text", "never whole", "--torn", "20"])
        #expect(torn.status == 0, "\(torn.errorOutput)")
        #expect(torn.output.contains(#""torn": 3"#))
        let path = container.file("torn.wormhole")
        #expect(try Self.bytes(path).count == 128 + 2 * 62 + 20)

        #expect(await records.wait(for: 2) == [1, 2])
        await #expect(try wormhole.record(withIdentifier: "torn")?.payload == Data("m2".utf8))
        await settle()
        #expect(records.all == [1, 2] && errors.all.isEmpty, "the torn record was seen: \(records.all) \(errors.all)")

        // The next writer cuts the torn bytes and takes their sequence number.
        await #expect(try wormhole.passMessage("m3", identifier: "torn") == 3)
        #expect(try Self.bytes(path).count == 128 + 3 * 62)
        #expect(await records.wait(for: 3) == [1, 2, 3])
        let fromPython = try await Self.pythonRecords(["read", container.path, "torn"])
        #expect(fromPython.map(\.sequence) == [1, 2, 3])
        #expect(fromPython.map(\.payload) == ["m1", "m2", "m3"])
        await settle()
        #expect(errors.all.isEmpty, "\(errors.all)")
    }

    @Test(.timeLimit(.minutes(2)))
    func aTornTailInALogSwiftWroteIsInvisibleToPythonAndItsWriterCutsIt() async throws {
        let container = TemporaryDirectory("interop")
        let wormhole = try Wormhole(directory: container.path)
        try await wormhole.passMessage("m1", identifier: "torn")
        try await wormhole.passMessage("m2", identifier: "torn")
        let path = container.file("torn.wormhole")
        let file = try Self.bytes(path)
        let logID = file[16..<24].reversed().reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        // The first 30 bytes of a well-formed record 3 of this log, as a killed writer leaves them.
        let record = LogFormat.recordBytes(logID: logID, sequence: 3, nanoseconds: 0, processID: getpid(), kind: .text,
                                           payload: Array("never whole".utf8))
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        try handle.seekToEnd()
        try handle.write(contentsOf: Data(record.prefix(30)))
        try handle.close()

        let read = try await Self.python(["read", container.path, "torn"])
        #expect(read.status == 0, "\(read.errorOutput)")
        let lines = try Self.decode(read.output)
        #expect(lines.compactMap(\.sequence) == [1, 2])
        #expect(lines.allSatisfy { $0.error == nil }, "an incomplete record is not an error: \(read.output)")
        #expect(try await Self.pythonRecords(["read", container.path, "torn", "--latest"]).map(\.sequence) == [2])

        let write = try await Self.python(["write", container.path, "torn", "text", "m3"])
        #expect(write.status == 0, "\(write.errorOutput)")
        #expect(write.output.contains(#""sequence": 3"#))
        #expect(try Self.bytes(path).count == 128 + 3 * 62)
        let history = try await Self.swiftHistory(wormhole, "torn", count: 3)
        #expect(history.map(\.sequence) == [1, 2, 3])
        #expect(history.map { String(decoding: $0.payload, as: UTF8.self) } == ["m1", "m2", "m3"])
    }

    // MARK: - Version 1

    @Test(.timeLimit(.minutes(2)))
    func aVersion1LogIsRefusedByBothAndLeftAsItIs() async throws {
        let container = TemporaryDirectory("interop")
        let wormhole = try Wormhole(directory: container.path)
        // A version 1 log holding one message: its 128-byte header (magic, version 1,
        // header size, committed end 169, last sequence 1, ...) and a 41-byte WHR1 record.
        var v1 = Array("WORMHOLE".utf8) + [1, 0, 0, 0, 128, 0, 0, 0, 169, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0]
        v1 += [UInt8](repeating: 0, count: 128 - v1.count)
        v1 += Array("WHR1".utf8) + [5, 0, 0, 0, 1] + [UInt8](repeating: 0, count: 27) + Array("hello".utf8)
        let path = container.file("old.wormhole")
        try Data(v1).write(to: URL(fileURLWithPath: path))

        for attempt in ["pass", "latest"] {
            do throws(WormholeError) {
                if attempt == "pass" { try await wormhole.passMessage("new", identifier: "old") } else { _ = try await wormhole.record(withIdentifier: "old") }
                Issue.record("Swift's \(attempt) did not refuse a version 1 log")
            } catch {
                #expect(error.code == .unsupportedFormat)
                #expect(error.message.contains("earlier Wormhole"), "\(error.message)")
                #expect(error.message.contains("delete"), "\(error.message)")
            }
        }
        let python = try await Self.python(["write", container.path, "old", "text", "new"])
        #expect(python.status == 1)
        #expect(python.errorOutput.contains("earlier Wormhole"), "\(python.errorOutput)")
        let pythonRead = try await Self.python(["read", container.path, "old"])
        #expect(pythonRead.status == 1 && pythonRead.output.isEmpty)
        #expect(try Self.bytes(path) == v1, "a version 1 log was modified")

        // Once it is deleted, the next message starts a version 2 log.
        try FileManager.default.removeItem(atPath: path)
        await #expect(try wormhole.passMessage("new", identifier: "old") == 1)
        #expect(try Self.header(path)?.baseSequence == 0)
    }

    // MARK: - Identifiers

    @Test(.timeLimit(.minutes(2)))
    func bothImplementationsAcceptAndRejectTheSameIdentifiers() async throws {
        let container = TemporaryDirectory("interop")
        let wormhole = try Wormhole(directory: container.path)
        let rejected = ["", ".", "..", ".hidden", "a/b", "../escape", "tab\there", "del\u{7F}", String(repeating: "x", count: 201),
                        "cafe\u{301}", "next\u{85}line", "evil\u{202E}txt.exe", "mark\u{200F}", "isolate\u{2066}x"]
        let accepted = ["note", "com.example.state", "héllo wörld", "with space", String(repeating: "é", count: 100), "日本語", "a..b"]
        for identifier in rejected + accepted {
            let expectAccepted = accepted.contains { Array($0.utf8) == Array(identifier.utf8) }
            let swiftAccepts = await (try? wormhole.passMessage("x", identifier: identifier)) != nil
            let python = try await Self.python(["write", container.path, identifier, "text", "x"])
            #expect(swiftAccepts == expectAccepted, "Swift on '\(Self.escaped(identifier))'")
            #expect((python.status == 0) == expectAccepted, "Python on '\(Self.escaped(identifier))': \(python.errorOutput)")
        }
        // The non-NFC identifier is refused naming its composed form.
        do throws(WormholeError) {
            try await wormhole.passMessage("x", identifier: "cafe\u{301}")
            Issue.record("a non-NFC identifier was accepted")
        } catch {
            #expect(error.code == .invalidIdentifier)
            #expect(error.message.unicodeScalars.contains("\u{E9}"), "the error does not name the composed form: \(error.message)")
        }
        // Nothing escaped the container, and every accepted identifier has its log.
        let names = try FileManager.default.contentsOfDirectory(atPath: container.path)
        let logs = names.filter { $0.hasSuffix(".wormhole") }.map { Self.escaped($0) }.sorted()
        #expect(logs == accepted.map { Self.escaped($0 + ".wormhole") }.sorted())
        for identifier in accepted {
            let records = try await Self.pythonRecords(["read", container.path, identifier])
            #expect(records.map(\.sequence) == [1, 2])
        }
    }

    @Test("a clear by Python on a full filesystem empties the log in place (Protocol.md 10.3 K2'): Swift's numbering goes on after it, and a Swift listener that had read everything is told of no loss",
          .enabled(if: geteuid() == 0, "mounting a small tmpfs needs root"), .timeLimit(.minutes(1)))
    func pythonClearsOnAFullFilesystemInPlace() async throws {
        let parent = TemporaryDirectory()
        let mountPoint = parent.file("tiny")
        mkdir(mountPoint, 0o700)
        try #require(mount("tmpfs", mountPoint, "tmpfs", 0, "size=256k,mode=0700") == 0, "mount: \(String(cString: strerror(errno)))")
        defer { umount2(mountPoint, Int32(MNT_DETACH)) }
        let container = mountPoint + "/c"
        let wormhole = try Wormhole(directory: container)
        let received = Collector<String>()
        let errors = Collector<WormholeError>()
        let token = try wormhole.listenForMessage(withIdentifier: "full", as: String.self, onError: { errors.append($0) }) { received.append($0) }
        for index in 1...3 { try await wormhole.passMessage("m\(index)", identifier: "full") }
        #expect(await received.wait(for: 3).count == 3)
        // No block left for a cleared copy.
        let filler = mountPoint + "/filler"
        try #require(FileManager.default.createFile(atPath: filler, contents: nil))
        let handle = try #require(FileHandle(forWritingAtPath: filler))
        while (try? handle.write(contentsOf: Data(count: 4096))) != nil {}
        try? handle.close()
        let cleared = try await Self.python(["clear", container, "full"])
        #expect(cleared.status == 0, "\(cleared.errorOutput)")
        await #expect(try wormhole.message(withIdentifier: "full", as: String.self) == nil)
        try FileManager.default.removeItem(atPath: filler)
        await #expect(try wormhole.passMessage("after", identifier: "full") == 4, "numbering goes on after the clear")
        #expect(await received.wait(for: 4) == ["m1", "m2", "m3", "after"])
        #expect(errors.all.isEmpty, "\(errors.all)")
        token.cancel()
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

    /// `value` with every scalar outside printable ASCII written `\u{...}`: canonically
    /// equivalent strings stay apart, and invisible characters show.
    static func escaped(_ value: String) -> String {
        value.unicodeScalars.map { (0x20..<0x7F).contains($0.value) ? String($0) : "\\u{\(String($0.value, radix: 16))}" }.joined()
    }

    static func bytes(_ path: String) throws -> [UInt8] {
        try [UInt8](Data(contentsOf: URL(fileURLWithPath: path)))
    }

    /// The header of the log at `path`, as the library decodes it.
    static func header(_ path: String) throws -> LogFormat.Header? {
        let bytes = try Array(bytes(path).prefix(LogFormat.headerSize))
        return try bytes.withUnsafeBytes { try LogFormat.Header.decode($0, path: path) }
    }

    static func mode(_ path: String) throws -> Int {
        let attributes = try FileManager.default.attributesOfItem(atPath: path)
        return (attributes[.posixPermissions] as? Int ?? -1) & 0o777
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

        var pid: Int32 { process.processIdentifier }

        /// How many lines it has written so far (`read --follow` writes one per item, flushed).
        var linesSoFar: Int {
            ((try? Data(contentsOf: URL(fileURLWithPath: outputPath))) ?? Data()).reduce(0) { $1 == UInt8(ascii: "\n") ? $0 + 1 : $0 }
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

    /// One JSON line of `wormhole_log.py read`.
    struct PythonRecord: Decodable {
        let sequence: UInt64?
        let kind: String?
        let pid: Int32?
        let dateNanoseconds: Int64?
        let encoding: String?
        let payload: String?
        let error: String?
        let code: String?
        let lost: UInt64?

        enum CodingKeys: String, CodingKey {
            case sequence, kind, pid, encoding, payload, error, code, lost
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

    /// The first `count` records of a listener that starts from history.
    static func swiftHistory(_ wormhole: Wormhole, _ identifier: String, count: Int) async throws -> [WormholeRecord] {
        let records = Collector<WormholeRecord>()
        let errors = Collector<WormholeError>()
        let token = try wormhole.listenForRecords(withIdentifier: identifier, startingFrom: .history, onError: { errors.append($0) }) {
            records.append($0)
        }
        defer { token.cancel() }
        let received = await records.wait(for: count)
        for error in errors.all { Issue.record("Swift history reported: \(error)") }
        return Array(received.prefix(count))
    }
}
