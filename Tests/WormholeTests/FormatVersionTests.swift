import Foundation
import Testing
@_spi(Backend) @testable import Wormhole
@_spi(Backend) @testable import WormholeCore
@_spi(Backend) @testable import WormholeFiles
import WormholeTestSupport

/// Version 3 of the log (Protocol.md §2, §8.1, §8.6): records that carry the writer's
/// user, an expiry, a correlation and a role; version 2 logs read as they are and
/// converted, under the lock, before the next message is appended to them.
@Suite("Log format versions")
struct FormatVersionTests {
    static let logID: UInt64 = 0x5EED_0000_0000_0077
    static let date: Int64 = 1_735_689_600_000_000_000

    /// A version 2 log of `payloads` (sequence 1, 2, ...), with the record numbered
    /// `damaged` given a wrong checksum.
    static func version2Log(_ payloads: [String], damaged: UInt64? = nil) -> [UInt8] {
        var header = LogFormat.Header()
        header.version = 2
        header.logID = logID
        header.compactionByteThreshold = 1 << 20
        header.compactionRecordThreshold = 2000
        var bytes = header.encoded()
        for (index, payload) in payloads.enumerated() {
            let sequence = UInt64(index + 1)
            var record = LogFormat.version2RecordBytes(logID: logID, sequence: sequence, nanoseconds: date + Int64(index),
                                                       processID: 4242, kind: .text, payload: Array(payload.utf8))
            if sequence == damaged { record[32] ^= 0xFF }
            bytes += record
        }
        return bytes
    }

    static func header(of path: String) throws -> LogFormat.Header? {
        let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: path)).prefix(LogFormat.headerSize))
        return try bytes.withUnsafeBytes { try LogFormat.Header.decode($0, path: path) }
    }

    static func history(_ wormhole: Wormhole, _ identifier: String, count: Int) async throws -> [WormholeRecord] {
        var records: [WormholeRecord] = []
        for try await record in wormhole.records(withIdentifier: identifier, startingFrom: .history) {
            records.append(record)
            if records.count == count { break }
        }
        return records
    }

    @Test("a version 2 log is read as it is; the next pass converts it, keeping its identity, numbers, dates and a running listener's place",
          .timeLimit(.minutes(1)))
    func version2LogIsReadThenConverted() async throws {
        let directory = TemporaryDirectory()
        let log = directory.file("old.wormhole")
        let wormhole = try Wormhole(directory: directory.path)
        _ = try await wormhole.summaries()
        try Data(Self.version2Log(["one", "two", "three", "four"])).write(to: URL(fileURLWithPath: log))

        // Read as version 2: no user, a message, never expiring.
        let latest = try #require(try await wormhole.record(withIdentifier: "old"))
        #expect(latest.sequence == 4 && latest.processID == 4242 && latest.senderUID == nil)
        #expect(latest.role == .message && latest.correlation == 0 && latest.expires == nil)
        #expect(String(decoding: latest.payload, as: UTF8.self) == "four")
        let before = try await Self.history(wormhole, "old", count: 4)
        #expect(before.map(\.sequence) == [1, 2, 3, 4])

        // A listener following the version 2 file when it is converted.
        let received = Collector<WormholeRecord>()
        let token = try wormhole.listenForRecords(withIdentifier: "old", startingFrom: .now) { received.append($0) }
        #expect(try await wormhole.passMessage("five", identifier: "old") == 5)
        let got = await received.wait(for: 1, seconds: 5)
        await settle()
        #expect(received.all.map(\.sequence) == [5], "\(got.map(\.sequence))")
        #expect(got.first?.senderUID == geteuid())
        token.cancel()

        let header = try #require(try Self.header(of: log))
        #expect(header.version == 3 && header.logID == Self.logID)
        let after = try await Self.history(wormhole, "old", count: 5)
        #expect(after.map(\.sequence) == [1, 2, 3, 4, 5])
        #expect(after.prefix(4).map(\.payload) == before.map(\.payload))
        #expect(after.prefix(4).map(\.date) == before.map(\.date))
        #expect(after.prefix(4).allSatisfy { $0.senderUID == nil && $0.processID == 4242 })
        #expect(after.last?.senderUID == geteuid())
        // Every record is now a version 3 record: 128 + 4 × (60 + 3 or 4 or 5) + the new one.
        let size = try FileManager.default.attributesOfItem(atPath: log)[.size] as? Int
        #expect(size == 128 + 4 * 60 + "onetwothreefour".utf8.count + 60 + 4)
    }

    @Test("a damaged record of a version 2 log is reported, dropped by the conversion, and its number not given again",
          .timeLimit(.minutes(1)))
    func damagedVersion2RecordIsDroppedByTheConversion() async throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.path)
        _ = try await wormhole.summaries()
        try Data(Self.version2Log(["one", "two", "three"], damaged: 2)).write(to: URL(fileURLWithPath: directory.file("old.wormhole")))
        let errors = Collector<WormholeError>()
        var seen: [UInt64] = []
        for try await record in wormhole.records(withIdentifier: "old", startingFrom: .history, onError: { errors.append($0) }) {
            seen.append(record.sequence)
            if seen.count == 2 { break }
        }
        #expect(seen == [1, 3])
        #expect(errors.all.contains { $0.code == .corruptRecord })
        #expect(try await wormhole.passMessage("four", identifier: "old") == 4)
        let after = try await Self.history(wormhole, "old", count: 3)
        #expect(after.map(\.sequence) == [1, 3, 4])
    }

    @Test("a clear of a version 2 log converts it too, and numbering goes on")
    func clearConvertsAVersion2Log() async throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.path)
        _ = try await wormhole.summaries()
        let log = directory.file("old.wormhole")
        try Data(Self.version2Log(["one", "two"])).write(to: URL(fileURLWithPath: log))
        try await wormhole.clearMessageContents(forIdentifier: "old")
        #expect(try await wormhole.record(withIdentifier: "old") == nil)
        #expect(try Self.header(of: log)?.version == 3)
        #expect(try await wormhole.passMessage("three", identifier: "old") == 3)
    }

    @Test("a log of a later version is refused, named and left unchanged")
    func laterVersionIsRefused() throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.path)
        _ = try wormhole.summaries()
        var bytes = Self.version2Log([])
        bytes[8] = 4
        let log = directory.file("new.wormhole")
        try Data(bytes).write(to: URL(fileURLWithPath: log))
        let error = #expect(throws: WormholeError.self) { try wormhole.passMessage("x", identifier: "new") }
        #expect(error?.code == .unsupportedFormat)
        #expect(error?.description.contains("version 4") == true, "\(String(describing: error))")
        #expect(try Data(contentsOf: URL(fileURLWithPath: log)) == Data(bytes))
    }

    @Test("a version 3 record keeps its role, correlation, expiry and user; an unknown role is damage")
    func recordFieldsRoundTrip() throws {
        let fields = LogFormat.RecordFields(nanoseconds: Self.date, processID: 7, userID: 1234, kind: .json,
                                            expires: Self.date + 5_000_000_000, correlation: 0xABCD, role: .errorReply)
        var record = LogFormat.recordBytes(logID: Self.logID, sequence: 9, fields: fields, payload: Array("{}".utf8))
        let parsed = record.withUnsafeBytes { LogFormat.parse($0, at: 0, logID: Self.logID, layout: .version3, maximumPayload: 1 << 20) }
        guard case .record(let frame, let length) = parsed else {
            Issue.record("not parsed: \(parsed)")
            return
        }
        #expect(length == 62 && frame.fields == fields)
        let value = WormholeRecord(identifier: "x", sequence: 9, fields: frame.fields, payload: Data("{}".utf8))
        #expect(value.senderUID == 1234 && value.role == .errorReply && value.correlation == 0xABCD)
        #expect(value.expires?.timeIntervalSince1970 == 1_735_689_605)
        // Role 4 with a matching checksum is still not a record.
        record[49] = 4
        let crc = record.withUnsafeBytes { bytes in
            LogFormat.checksum(logID: Self.logID, header: bytes, layout: .version3,
                               payload: UnsafeRawBufferPointer(rebasing: bytes[56..<58]))
        }
        withUnsafeBytes(of: crc.littleEndian) { record.replaceSubrange(52..<56, with: $0) }
        let unknown = record.withUnsafeBytes { LogFormat.parse($0, at: 0, logID: Self.logID, layout: .version3, maximumPayload: 1 << 20) }
        guard case .corrupt(let detail, _) = unknown else {
            Issue.record("role 4 was accepted: \(unknown)")
            return
        }
        #expect(detail.contains("unknown role 4"))
    }
}
