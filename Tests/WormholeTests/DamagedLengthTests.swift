import Foundation
import Testing
@_spi(Backend) @testable import Wormhole
@_spi(Backend) @testable import WormholeCore
@_spi(Backend) @testable import WormholeFiles
import WormholeTestSupport

/// A record whose length field is damaged so that it seems to run past the end of the
/// file (Protocol.md §9.3): it is damage, not a record being written, once a whole record
/// follows it. Readers, compaction, clearing and the conversion of a version 2 log skip
/// it, say which message it held, and keep every record after it whose checksum holds.
@Suite("A damaged length field")
struct DamagedLengthTests {
    static let payloads = (1...10).map { "m\($0)" }

    /// Offset of record `sequence` (from 1) of a log of `payloads`, each record being
    /// `overhead` bytes more than its payload.
    static func offset(of sequence: Int, overhead: Int = LogFormat.layout.overhead) -> Int {
        LogFormat.headerSize + payloads.prefix(sequence - 1).reduce(0) { $0 + overhead + $1.utf8.count }
    }

    /// Writes `length` into the length field of record `sequence` of the file at `path`.
    static func damageLength(_ path: String, of sequence: Int, to length: UInt32, overhead: Int = LogFormat.layout.overhead) throws {
        let handle = try #require(FileHandle(forUpdatingAtPath: path))
        defer { try? handle.close() }
        try handle.seek(toOffset: UInt64(offset(of: sequence, overhead: overhead) + 4))
        try handle.write(contentsOf: withUnsafeBytes(of: length.littleEndian) { Data($0) })
    }

    static func text(_ records: [WormholeRecord]) -> [String] {
        records.map { String(decoding: $0.payload, as: UTF8.self) }
    }

    /// m1...m10 passed in `directory`, the durable name "parked" having handled m1 and m2
    /// only, then record 3's length set to 1 MiB.
    static func passedWithAParkedDurableName(in directory: TemporaryDirectory) async throws -> Wormhole {
        let wormhole = try Wormhole(directory: directory.path)
        let parked = Collector<WormholeRecord>()
        let first = try wormhole.listenForRecords(withIdentifier: "log", durableName: "parked", startingFrom: .history) { parked.append($0) }
        for text in payloads.prefix(2) { _ = try await wormhole.passMessage(text, identifier: "log") }
        await parked.wait(for: 2)
        // Its position is stored once a message is handled, after the callback returns:
        // cancelled before that, it would get m2 (or m1) again, as the guarantee says.
        #expect(await eventually { try wormhole.listeners(identifier: "log").contains { $0.durableName == "parked" && $0.position == 2 } })
        first.cancel()
        for text in payloads.dropFirst(2) { _ = try await wormhole.passMessage(text, identifier: "log") }
        try damageLength(directory.file("log.wormhole"), of: 3, to: 1 << 20)
        return wormhole
    }

    /// What the durable name "parked" gets when it resumes, once it has 7 records.
    static func resumeParked(_ wormhole: Wormhole) async throws -> ([WormholeRecord], [WormholeError]) {
        let records = Collector<WormholeRecord>()
        let errors = Collector<WormholeError>()
        let token = try wormhole.listenForRecords(withIdentifier: "log", durableName: "parked", onError: { errors.append($0) }) { records.append($0) }
        await records.wait(for: 7)
        await settle(100)
        token.cancel()
        return (records.all, errors.all)
    }

    /// A history reader's records and errors, once it has `count` records.
    static func history(_ wormhole: Wormhole, _ identifier: String, count: Int) async throws -> ([WormholeRecord], [WormholeError]) {
        let records = Collector<WormholeRecord>()
        let errors = Collector<WormholeError>()
        let token = try wormhole.listenForRecords(withIdentifier: identifier, startingFrom: .history,
                                                  onError: { errors.append($0) }) { records.append($0) }
        await records.wait(for: count)
        await settle(100)
        token.cancel()
        return (records.all, errors.all)
    }

    @Test("readers, a durable name parked before it, the summary and the next pass keep every intact record after it",
          .timeLimit(.minutes(1)))
    func intactRecordsAfterADamagedLengthAreRead() async throws {
        let directory = TemporaryDirectory()
        let wormhole = try await Self.passedWithAParkedDurableName(in: directory)

        let (records, errors) = try await Self.history(wormhole, "log", count: 9)
        #expect(Self.text(records) == ["m1", "m2", "m4", "m5", "m6", "m7", "m8", "m9", "m10"])
        #expect(errors.map(\.code) == [.corruptRecord])
        let report = try #require(errors.first)
        #expect(report.missedMessageCount == 1 && report.sequence == 3)
        #expect(report.description.contains("1048576 bytes") && report.description.contains("message 3 of 'log'"),
                "\(report.description)")
        // Protocol.md §11.4 quotes this report, word for word.
        let document = try ProtocolDocumentTests.document()
        let quoted = try #require(try Regex(#"```\n(corrupt record in '<dir>/log\.wormhole'[^\n]*)\n```"#).firstMatch(in: document),
                                  "§11.4 quotes no such report")
        let path = try #require(wormhole.directory)
        #expect(report.message.replacingOccurrences(of: path, with: "<dir>") == String(quoted.output[1].substring ?? ""))
        print("the report: \(report.description)")

        let summary = try #require(try await wormhole.summaries().first { $0.identifier == "log" })
        #expect(summary.messageCount == 9 && summary.lastSequence == 10)

        // The durable name resumes after m2: m4...m10, with the same report.
        let (resumed, resumedErrors) = try await Self.resumeParked(wormhole)
        #expect(Self.text(resumed) == Array(Self.payloads.dropFirst(3)))
        #expect(resumedErrors.map(\.code) == [.corruptRecord])
        #expect(resumedErrors.first?.missedMessageCount == 1)

        // The next pass is numbered after m10 and cuts nothing.
        #expect(try await wormhole.passMessage("m11", identifier: "log") == 11)
        let (after, _) = try await Self.history(wormhole, "log", count: 10)
        #expect(Self.text(after) == ["m1", "m2", "m4", "m5", "m6", "m7", "m8", "m9", "m10", "m11"])
    }

    @Test("compaction and clearing keep the intact records a durable name has not read; it is told the damaged one is missing, not that it fell behind",
          .timeLimit(.minutes(1)))
    func compactionAndClearingKeepIntactRecords() async throws {
        let directory = TemporaryDirectory()
        let wormhole = try await Self.passedWithAParkedDurableName(in: directory)

        // Clearing is a compaction that keeps what live claims (the durable name) need.
        try await wormhole.clearMessageContents(forIdentifier: "log")
        let header = try #require(try FormatVersionTests.header(of: directory.file("log.wormhole")))
        #expect(header.clearedThrough == 10)

        let (resumed, errors) = try await Self.resumeParked(wormhole)
        #expect(Self.text(resumed) == Array(Self.payloads.dropFirst(3)))
        #expect(errors.map(\.code) == [.messagesLost])
        let report = try #require(errors.first)
        #expect(report.missedMessageCount == 1)
        #expect(report.description.contains("(3...3)") && !report.description.contains("backlog cap"), "\(report.description)")
        #expect(try await wormhole.passMessage("m11", identifier: "log") == 11)
    }

    @Test("a version 2 log with a damaged length is converted with every intact record", .timeLimit(.minutes(1)))
    func version2ConversionKeepsIntactRecords() async throws {
        let directory = TemporaryDirectory()
        let path = directory.file("old.wormhole")
        let wormhole = try Wormhole(directory: directory.path)
        _ = try await wormhole.summaries()
        var bytes = FormatVersionTests.version2Log(Self.payloads)
        let at = Self.offset(of: 3, overhead: LogFormat.RecordLayout.version2.overhead) + 4
        bytes.replaceSubrange(at..<at + 4, with: withUnsafeBytes(of: UInt32(1 << 20).littleEndian, Array.init))
        try Data(bytes).write(to: URL(fileURLWithPath: path))

        #expect(try await wormhole.passMessage("m11", identifier: "old") == 11)
        #expect(try FormatVersionTests.header(of: path)?.version == 3)
        let (records, errors) = try await Self.history(wormhole, "old", count: 10)
        #expect(records.map(\.sequence) == [1, 2, 4, 5, 6, 7, 8, 9, 10, 11])
        #expect(Self.text(records).last == "m11")
        // Converted without the damaged record: the gap says the number is missing.
        #expect(errors.map(\.code) == [.messagesLost])
        #expect(errors.first?.missedMessageCount == 1)
    }

    @Test("a record still being written at the end of the file is waited on, not skipped", .timeLimit(.minutes(1)))
    func aRecordRunningPastTheEndWithNothingAfterItIsWaitedOn() async throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.path)
        for text in Self.payloads.prefix(3) { _ = try await wormhole.passMessage(text, identifier: "log") }
        // The last record's length made larger: as a record whose payload is not all
        // written yet looks.
        try Self.damageLength(directory.file("log.wormhole"), of: 3, to: 1 << 20)
        let (records, errors) = try await Self.history(wormhole, "log", count: 2)
        #expect(Self.text(records) == ["m1", "m2"])
        #expect(errors.isEmpty, "\(errors)")
        // A writer that did not write it takes it for a torn tail (§9.1 W5): it cuts it
        // and numbers its message 3.
        #expect(try await Wormhole(directory: directory.path).passMessage("again", identifier: "log") == 3)
    }
}
