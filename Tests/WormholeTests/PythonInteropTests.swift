#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
@_spi(Backend) @testable import Wormhole
@_spi(Backend) @testable import WormholeCore
@_spi(Backend) @testable import WormholeFiles
import WormholeTestSupport

/// The Swift library and the Python package (`Python/`, through its public API in
/// `Tests/Interop/python_peer.py`) in one container, as separate processes: payloads of
/// every kind byte for byte both ways, bursts from both languages at once heard in one
/// order by listeners of both, a durable name handed from one language to the other, and
/// compaction while listeners of both follow.
@Suite("The Swift library and the Python package", .serialized)
struct PythonInteropTests {
    static let peer = ProtocolInteropTests.repositoryRoot.appendingPathComponent("Tests/Interop/python_peer.py").path

    /// A `python_peer.py` process; its output goes to files.
    static func peer(_ arguments: [String], _ scratch: TemporaryDirectory, _ name: String) throws -> ProtocolInteropTests.PythonProcess {
        try ProtocolInteropTests.PythonProcess([peer] + arguments, scratch: scratch, name: name, executable: "python3")
    }

    /// What a `python_peer.py listen` wrote: one line per record or error.
    struct PeerLine: Equatable {
        var sequence: UInt64
        var kind: String
        var pid: Int32
        var uid: String
        var payload: Data
    }

    static func lines(_ path: String) throws -> (records: [PeerLine], errors: [String]) {
        var records: [PeerLine] = []
        var errors: [String] = []
        for line in try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: false).map(String.init)
            if fields.first == "error" { errors.append(line.description); continue }
            guard fields.count == 5, let sequence = UInt64(fields[0]), let pid = Int32(fields[2]),
                  let payload = Data(base64Encoded: fields[4]) else {
                errors.append("unreadable line: \(line)")
                continue
            }
            records.append(PeerLine(sequence: sequence, kind: fields[1], pid: pid, uid: fields[3], payload: payload))
        }
        return (records, errors)
    }

    static let text = "héllo ✓ from Swift\n\tand a tab"
    static let binary = Data((0...255).map { UInt8($0) } + [0, 0xFF, 0x0A, 0x0D])

    struct Reading: Codable, Sendable {
        var zone: String
        var level: Int
        var ratio: Double
        var updated: Date
    }

    @Test("text, JSON and binary payloads from the Swift library reach a Python listener byte for byte, and Python's reach a Swift listener",
          .timeLimit(.minutes(2)))
    func payloadsByteForByteBothWays() async throws {
        let container = TemporaryDirectory("python-interop")
        let scratch = TemporaryDirectory("python-interop-scratch")
        let wormhole = try Wormhole(directory: container.path)
        let out = scratch.file("listener.out")
        let listener = try Self.peer(["listen", container.path, "note", "3", out], scratch, "listener")
        #expect(await waitForFile(out + ".ready"))
        let reading = Reading(zone: "kitchen/north", level: 7, ratio: 6.5, updated: Date(timeIntervalSince1970: 1_795_000_000.034))
        try await wormhole.passMessage(Self.text, identifier: "note")
        try await wormhole.passMessage(reading, identifier: "note")
        try await wormhole.passMessage(Self.binary, identifier: "note")
        let finished = await listener.finish()
        #expect(finished.status == 0, "\(finished.errorOutput)")
        let heard = try Self.lines(out)
        #expect(heard.errors.isEmpty, "\(heard.errors)")
        let stored = try #require(try await wormhole.record(withIdentifier: "note")).sequence
        #expect(stored == 3)
        #expect(heard.records.map(\.kind) == ["text", "json", "data"])
        #expect(heard.records.map(\.payload) == [Data(Self.text.utf8),
                                                  Data(#"{"level":7,"ratio":6.5,"updated":"2026-11-18T11:06:40.034Z","zone":"kitchen/north"}"#.utf8),
                                                  Self.binary])
        #expect(heard.records.allSatisfy { $0.pid == getpid() && $0.uid == "\(geteuid())" })

        // The other way: the Python package passes, a Swift listener hears.
        let records = Collector<WormholeRecord>()
        let errors = Collector<WormholeError>()
        let token = try wormhole.listenForRecords(withIdentifier: "back", onError: { errors.append($0) }) { records.append($0) }
        defer { token.cancel() }
        let json = Data(#"{"a":[1,2.5,null],"é":"✓"}"#.utf8)
        for (kind, payload) in [("text", Data(Self.text.utf8)), ("json", json), ("data", Self.binary)] {
            let sent = await (try Self.peer(["send", container.path, "back", kind, payload.base64EncodedString()], scratch, "send-\(kind)")).finish()
            #expect(sent.status == 0, "\(sent.errorOutput)")
        }
        let got = await records.wait(for: 3)
        #expect(got.map(\.payload) == [Data(Self.text.utf8), json, Self.binary])
        #expect(got.map(\.kind) == [.text, .json, .data])
        #expect(got.map(\.sequence) == [1, 2, 3])
        #expect(errors.all.isEmpty, "\(errors.all)")
        #expect(try await wormhole.message(withIdentifier: "back", as: Data.self) == Self.binary)

        // The same value is the same bytes from either language (Protocol.md 8.2).
        let value = #"{"zone":"kitchen/north","level":7,"ratio":6.5,"updated":"2026-11-18T11:06:40.034Z"}"#
        let passed = await (try Self.peer(["message", container.path, "same", value], scratch, "message")).finish()
        #expect(passed.status == 0, "\(passed.errorOutput)")
        let python = try #require(try await wormhole.record(withIdentifier: "same"))
        #expect(python.payload == heard.records[1].payload, "Python's JSON of the value is Swift's, byte for byte")
        let decoded = try python.decode(as: Reading.self)
        #expect(abs(decoded.updated.timeIntervalSince(reading.updated)) < 0.001 && decoded.zone == reading.zone)
    }

    @Test("bursts from two Swift and two Python processes at once: a Swift listener, a Swift listener process and a Python listener process agree on one order",
          .timeLimit(.minutes(5)))
    func burstsFromBothLanguagesInOneOrder() async throws {
        let container = TemporaryDirectory("python-interop")
        let scratch = TemporaryDirectory("python-interop-scratch")
        let wormhole = try Wormhole(directory: container.path)
        let perWriter = scaled(1500), total = 4 * perWriter
        let inProcess = Collector<WormholeRecord>()
        let token = try wormhole.listenForRecords(withIdentifier: "burst") { inProcess.append($0) }
        defer { token.cancel() }
        let pythonOut = scratch.file("python.out")
        let pythonListener = try Self.peer(["listen", container.path, "burst", "\(total)", pythonOut], scratch, "listener")
        let swiftOut = scratch.file("swift.out")
        let swiftListener = try Agent.start(["listen", container.path, "burst", "\(total)", swiftOut])
        #expect(await waitForFile(pythonOut + ".ready"))
        #expect(await waitForFile(swiftOut + ".ready"))
        let started = ContinuousClock.now
        let swiftWriters = try (0..<2).map { try Agent.start(["write", container.path, "burst", "\(perWriter)", "s\($0)"]) }
        let pythonWriters = try (0..<2).map { index in
            try Self.peer(["send", container.path, "burst", "text", Data("p\(index):{i}".utf8).base64EncodedString(), "\(perWriter)"],
                          scratch, "writer\(index)")
        }
        for writer in swiftWriters { #expect(await waitForExit(writer) == 0) }
        for writer in pythonWriters {
            let finished = await writer.finish()
            #expect(finished.status == 0, "\(finished.errorOutput)")
        }
        #expect(await waitForExit(swiftListener) == 0)
        let pythonFinished = await pythonListener.finish()
        #expect(pythonFinished.status == 0, "\(pythonFinished.errorOutput)")
        let elapsed = (ContinuousClock.now - started).inSeconds

        let python = try Self.lines(pythonOut)
        #expect(python.errors.isEmpty, "\(python.errors.prefix(3))")
        let swift = try listenerLines(swiftOut)
        let local = await inProcess.wait(for: total, seconds: 60)
        let order = local.map { String(decoding: $0.payload, as: UTF8.self) }
        #expect(local.map(\.sequence) == Array(1...UInt64(total)))
        #expect(python.records.map(\.sequence) == Array(1...UInt64(total)))
        #expect(swift.map(\.sequence) == Array(1...UInt64(total)))
        #expect(python.records.map { String(decoding: $0.payload, as: UTF8.self) } == order, "the Python listener's order is the Swift listener's")
        #expect(swift.map(\.payload) == order, "the Swift listener process's order is the in-process listener's")
        #expect(Set(order).count == total, "every message exactly once")
        for writer in ["p0", "p1"] {
            let indices = order.compactMap { $0.hasPrefix(writer + ":") ? Int($0.dropFirst(writer.count + 1)) : nil }
            #expect(indices == Array(1...perWriter), "\(writer)'s messages in its own order")
        }
        for writer in ["s0", "s1"] {
            let indices = order.compactMap { line -> Int? in
                let parts = line.split(separator: ":")
                return parts.first.map(String.init) == writer ? Int(parts[1]) : nil
            }
            #expect(indices == Array(1...perWriter), "\(writer)'s messages in its own order")
        }
        print("python interop burst: \(total) messages from 2 Swift and 2 Python writer processes, heard by 3 listeners (Swift in-process, Swift process, Python process) in one order in \(String(format: "%.2f", elapsed)) s")
    }

    @Test("a durable name handled by a Swift process is resumed by a Python process, and back", .timeLimit(.minutes(3)))
    func aDurableNameResumedByTheOtherLanguage() async throws {
        let container = TemporaryDirectory("python-interop")
        let scratch = TemporaryDirectory("python-interop-scratch")
        let wormhole = try Wormhole(directory: container.path)
        for index in 1...5 { try await wormhole.passMessage("job \(index)", identifier: "jobs") }
        try await wormhole.passMessage("stop", identifier: "jobs")                                   // 6

        // Swift handles 1...6 as "worker", then stops.
        let swiftOut = scratch.file("swift1.out")
        let swift = try Agent.start(["durable", container.path, "jobs", "worker", swiftOut])
        #expect(await waitForExit(swift) == 0)
        #expect(try listenerLines(swiftOut).map(\.sequence) == Array(1...6))

        // Passed while no one runs as "worker": Python, resuming the name, gets those alone.
        for index in 6...8 { try await wormhole.passMessage("job \(index)", identifier: "jobs") }   // 7...9
        try await wormhole.passMessage("stop", identifier: "jobs")                                   // 10
        let pythonOut = scratch.file("python.out")
        let python = await (try Self.peer(["listen", container.path, "jobs", "100", pythonOut, "--durable", "worker",
                                           "--start", "history", "--stop", "stop"], scratch, "python")).finish()
        #expect(python.status == 0, "\(python.errorOutput)")
        let resumed = try Self.lines(pythonOut)
        #expect(resumed.errors.isEmpty, "\(resumed.errors)")
        #expect(resumed.records.map(\.sequence) == [7, 8, 9, 10])
        #expect(resumed.records.map { String(decoding: $0.payload, as: UTF8.self) } == ["job 6", "job 7", "job 8", "stop"])
        let status = try wormhole.listeners(identifier: "jobs").first { $0.durableName == "worker" }
        #expect(status?.position == 10 && status?.isRunning == false)

        // And back: Swift resumes after what Python handled.
        try await wormhole.passMessage("job 9", identifier: "jobs")                                  // 11
        try await wormhole.passMessage("stop", identifier: "jobs")                                   // 12
        let againOut = scratch.file("swift2.out")
        let again = try Agent.start(["durable", container.path, "jobs", "worker", againOut])
        #expect(await waitForExit(again) == 0)
        #expect(try listenerLines(againOut).map(\.sequence) == [11, 12])
    }

    @Test("compaction by writers of both languages while a Swift and a Python listener follow: every message once, in order",
          .timeLimit(.minutes(5)))
    func compactionWhileBothFollow() async throws {
        let container = TemporaryDirectory("python-interop")
        let scratch = TemporaryDirectory("python-interop-scratch")
        var configuration = Wormhole.Configuration()
        configuration.retainedMessageCount = 8
        let wormhole = try Wormhole(directory: container.path, configuration: configuration)
        let perWriter = scaled(1000), total = 2 * perWriter
        let records = Collector<WormholeRecord>()
        let errors = Collector<WormholeError>()
        let token = try wormhole.listenForRecords(withIdentifier: "log", onError: { errors.append($0) }) { records.append($0) }
        defer { token.cancel() }
        let pythonOut = scratch.file("python.out")
        let listener = try Self.peer(["listen", container.path, "log", "\(total)", pythonOut], scratch, "listener")
        #expect(await waitForFile(pythonOut + ".ready"))
        let python = try Self.peer(["send", container.path, "log", "text", Data("p:{i}".utf8).base64EncodedString(), "\(perWriter)",
                                    "--retain", "8"], scratch, "writer")
        for index in 1...perWriter { try await wormhole.passMessage("s:\(index)", identifier: "log") }
        let written = await python.finish()
        #expect(written.status == 0, "\(written.errorOutput)")
        let finished = await listener.finish()
        #expect(finished.status == 0, "\(finished.errorOutput)")
        let heard = try Self.lines(pythonOut)
        let local = await records.wait(for: total, seconds: 60)
        #expect(heard.errors.isEmpty, "\(heard.errors.prefix(3))")
        #expect(errors.all.isEmpty, "\(errors.all.prefix(3))")
        #expect(local.map(\.sequence) == Array(1...UInt64(total)))
        #expect(heard.records.map(\.payload) == local.map(\.payload))
        let header = try #require(try ProtocolInteropTests.header(container.file("log.wormhole")))
        // Compacted while both followed: more than one retention window is gone. (How far
        // depends on how closely the listeners kept up, which instrumented builds slow.)
        #expect(header.baseSequence > UInt64(configuration.retainedMessageCount) + 1,
                "the log was compacted while both followed (base \(header.baseSequence))")
    }
}
