import Foundation
import Testing
@_spi(Backend) @testable import Wormhole
@_spi(Backend) @testable import WormholeCore
@_spi(Backend) @testable import WormholeFiles
import WormholeTestSupport

/// The numbers, recipes and examples of `Docs/Protocol.md`, read from the document's own
/// text and checked against what this library does: a program written from the document
/// alone gets what the library writes. Each checked passage follows an HTML comment marker
/// (`<!-- crc-recipe -->`, ...) or is found under its section's heading.
@Suite("Docs/Protocol.md says what the library does")
struct ProtocolDocumentTests {
    static func document() throws -> String {
        try String(contentsOfFile: ProtocolInteropTests.protocolDocument, encoding: .utf8)
    }

    /// The paragraph that follows `marker`: its lines up to the first blank line.
    static func paragraph(after marker: String) throws -> String {
        let document = try document()
        let start = try #require(document.range(of: marker), "\(marker) is not in Protocol.md").upperBound
        let rest = document[start...].drop { $0 == "\n" }
        let end = rest.range(of: "\n\n")?.lowerBound ?? rest.endIndex
        return String(rest[..<end])
    }

    /// The text of the section whose heading starts with `heading` (such as `### 18.1`),
    /// up to the next heading.
    static func section(_ heading: String) throws -> String {
        let document = try document()
        let start = try #require(document.range(of: "\n" + heading + " "), "no section \(heading)").upperBound
        let end = document.range(of: "\n#", range: start..<document.endIndex)?.lowerBound ?? document.endIndex
        return String(document[start..<end])
    }

    /// The cells of each row of the tables in `text` (header and rule rows left out).
    static func tableRows(_ text: String) -> [[String]] {
        text.split(separator: "\n").filter { $0.hasPrefix("|") && !$0.hasPrefix("|--") && !$0.hasPrefix("|:") && !$0.hasPrefix("|-") }
            .map { line in line.split(separator: "|", omittingEmptySubsequences: false).dropFirst().dropLast()
                .map { $0.trimmingCharacters(in: .whitespaces) } }
    }

    /// The spans between backticks in `text`, line breaks read as spaces.
    static func codeSpans(_ text: String) -> [String] {
        text.replacingOccurrences(of: "\n", with: " ").split(separator: "`", omittingEmptySubsequences: false)
            .enumerated().filter { $0.offset % 2 == 1 }.map { String($0.element) }
    }

    /// The value of an arithmetic expression as the document writes one: decimal numbers
    /// whose digits may be grouped by spaces or commas, `+`, `×` and parentheses. `nil`
    /// for anything else (a name, say).
    static func evaluate(_ expression: String) -> UInt64? {
        let tokens: [Character] = expression.filter { $0 != " " && $0 != "," && $0 != "\u{202F}" }.map { $0 }
        var position = 0
        func number() -> UInt64? {
            if position < tokens.count, tokens[position] == "(" {
                position += 1
                guard let value = sum(), position < tokens.count, tokens[position] == ")" else { return nil }
                position += 1
                return value
            }
            var digits = ""
            while position < tokens.count, tokens[position].isASCII, tokens[position].isNumber {
                digits.append(tokens[position])
                position += 1
            }
            return UInt64(digits)
        }
        func product() -> UInt64? {
            guard var value = number() else { return nil }
            while position < tokens.count, tokens[position] == "×" || tokens[position] == "*" {
                position += 1
                guard let next = number() else { return nil }
                value *= next
            }
            return value
        }
        func sum() -> UInt64? {
            guard var value = product() else { return nil }
            while position < tokens.count, tokens[position] == "+" {
                position += 1
                guard let next = product() else { return nil }
                value += next
            }
            return value
        }
        guard !tokens.isEmpty, let value = sum(), position == tokens.count else { return nil }
        return value
    }

    /// The value a span such as `name = 128 + 2 × 16 = 160` gives: every part that is
    /// arithmetic must come to the same number.
    static func value(of span: String) throws -> UInt64 {
        let values = span.split(separator: "=").compactMap { evaluate(String($0)) }
        let value = try #require(values.first, "no number in `\(span)`")
        #expect(values.allSatisfy { $0 == value }, "`\(span)` does not add up: \(values)")
        return value
    }

    /// The fields of the hex block after `marker`: each line's offset and name (after its
    /// `|`) and its bytes.
    static func documentedFields(after marker: String) throws -> [(offset: Int, name: String, bytes: [UInt8])] {
        let document = try document()
        let afterMarker = try #require(document.range(of: marker)).upperBound
        let open = try #require(document.range(of: "```", range: afterMarker..<document.endIndex)).upperBound
        let close = try #require(document.range(of: "```", range: open..<document.endIndex)).lowerBound
        return try document[open..<close].split(separator: "\n").map { line in
            let parts = line.split(separator: "|", maxSplits: 1)
            let bytes = try parts[0].split(separator: " ").map { try #require(UInt8($0, radix: 16)) }
            let words = parts.count > 1 ? parts[1].split(separator: " ") : []
            return (try #require(Int(words.first ?? "")), words.dropFirst().first.map(String.init) ?? "", bytes)
        }
    }

    static func littleEndian(_ bytes: some Collection<UInt8>) -> UInt64 {
        bytes.reversed().reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
    }

    /// The header of a log that a wormhole with the default configuration creates.
    static func newLogHeader() async throws -> [UInt8] {
        let container = TemporaryDirectory("document")
        let wormhole = try Wormhole(directory: container.path)
        try await wormhole.passMessage("hello", identifier: "note")
        return Array(try ProtocolInteropTests.bytes(container.file("note.wormhole")).prefix(LogFormat.headerSize))
    }
}

// MARK: - §8.4: the CRC recipe

extension ProtocolDocumentTests {
    @Test("8.4's CRC recipe, in Python and in C, followed as written, gives 8.5's example record the checksum it stores")
    func checksumRecipeGivesTheExampleRecordItsChecksum() throws {
        let recipe = try Self.paragraph(after: "<!-- crc-recipe -->")
        let python = try #require(try Regex(#"record\[0:([0-9]+)\]"#).firstMatch(in: recipe), "no record[0:N] in \(recipe)")
        let c = try #require(try Regex(#"record, ([0-9]+)\)"#).firstMatch(in: recipe), "no `record, N)` in \(recipe)")
        let covered = try #require(python.output[1].substring.flatMap { Int($0) })
        #expect(c.output[1].substring.flatMap { Int($0) } == covered, "the Python and C recipes cover different bytes: \(recipe)")

        let record = try Self.documentedFields(after: "<!-- example-record -->")
        let header = try Self.documentedFields(after: "<!-- example-header -->")
        let bytes = record.flatMap(\.bytes)
        let logID = Self.littleEndian(try #require(header.first { $0.name == "logID" }).bytes)
        let stored = try #require(record.first { $0.name == "crc" })
        let payload = try #require(record.first { $0.name == "payload" }).bytes
        let identity = withUnsafeBytes(of: logID.littleEndian, Array.init)
        var crc = identity.withUnsafeBytes { CRC32.update(0, $0) }
        crc = bytes[0..<covered].withUnsafeBytes { CRC32.update(crc, $0) }
        crc = payload.withUnsafeBytes { CRC32.update(crc, $0) }
        #expect(UInt64(crc) == Self.littleEndian(stored.bytes),
                "the recipe gives \(String(crc, radix: 16)), the example stores \(String(Self.littleEndian(stored.bytes), radix: 16))")
        // The recipe covers the record's header up to its checksum, as §8.1 and V5 say.
        #expect(covered == stored.offset)
        #expect(covered == LogFormat.layout.checksumOffset)
    }
}

// MARK: - §17: the quick reference's checks

extension ProtocolDocumentTests {
    @Test("17's checks of a header and of a record cover the bytes 8.4 and 8.5 do, and accept 8.5's example header and record")
    func quickReferenceChecksAreTheDocumented() throws {
        let rows = Self.tableRows(try Self.section("## 17."))
        let header = try #require(rows.first { $0.first == "check a header" }?.last)
        let record = try #require(rows.first { $0.first == "check a record at `p`" }?.last)
        /// The numbers the groups of `pattern` capture in `text`; none when it does not match.
        func integers(_ pattern: String, in text: String) throws -> [Int] {
            guard let match = try Regex(pattern).firstMatch(in: text) else { return [] }
            return (1..<match.output.count).compactMap { match.output[$0].substring.flatMap { Int($0) } }
        }
        let exampleHeader = try Self.documentedFields(after: "<!-- example-header -->").flatMap(\.bytes)
        let exampleRecord = try Self.documentedFields(after: "<!-- example-record -->")
        let crcField = try #require(exampleRecord.first { $0.name == "crc" })

        // A header: the version it names, and its checksum over h[0:N], stored at u32(h[N:N+4]).
        #expect(try integers(#"u32\(h\[8:12\]\) == ([0-9]+)"#, in: header) == [Int(LogFormat.version)], "\(header)")
        let headerCRC = try integers(#"crc32\(h\[0:([0-9]+)\]\) == u32\(h\[([0-9]+):([0-9]+)\]\)"#, in: header)
        try #require(headerCRC.count == 3, "\(header)")
        let computed = exampleHeader[0..<headerCRC[0]].withUnsafeBytes { CRC32.update(0, $0) }
        #expect(UInt64(computed) == Self.littleEndian(exampleHeader[headerCRC[1]..<headerCRC[2]]))
        // A record: its checksum over rec[0:N], stored at u32(p+N), where 8.5's example has it.
        let recordCRC = try integers(#"rec\[0:([0-9]+)\].*== u32\(p\+([0-9]+)\)"#, in: record)
        #expect(recordCRC == [crcField.offset, crcField.offset], "\(record)")
    }
}

// MARK: - §10.1 and §8.5: the thresholds of a new log

extension ProtocolDocumentTests {
    @Test("10.1's and 8.5's thresholds of a new log add up and are what a new log's header holds with the default configuration",
          .timeLimit(.minutes(1)))
    func newLogThresholdsAreTheDocumented() async throws {
        let header = try await Self.newLogHeader()
        let bytes = Self.littleEndian(header[40..<48])
        let records = Self.littleEndian(header[48..<56])
        for marker in ["<!-- default-thresholds -->", "<!-- example-thresholds -->"] {
            let spans = Self.codeSpans(try Self.paragraph(after: marker))
            try #require(spans.count >= 2, "\(marker): \(spans)")
            #expect(try Self.value(of: spans[0]) == bytes, "\(marker): `\(spans[0])`, a new log has \(bytes)")
            #expect(try Self.value(of: spans[1]) == records, "\(marker): `\(spans[1])`, a new log has \(records)")
        }
    }
}

// MARK: - §7.1: the header table

extension ProtocolDocumentTests {
    @Test("every value 7.1's header table gives a field is what a new log's header holds there",
          .timeLimit(.minutes(1)))
    func headerTableValuesAreWhatANewLogHolds() async throws {
        let header = try await Self.newLogHeader()
        var checked: [String] = []
        for row in Self.tableRows(try Self.section("### 7.1")) where row.count == 5 {
            guard let offset = Int(row[0]), let size = Int(row[1]) else { continue }
            let field = row[3]
            let spans = Self.codeSpans(row[4])
            guard let first = spans.first else { continue }
            let stored = Array(header[offset..<offset + size])
            if row[4].hasPrefix("`"), let number = UInt64(first) {
                #expect(Self.littleEndian(stored) == number, "7.1 gives \(field) as \(number); a new log holds \(Self.littleEndian(stored))")
            } else if row[4].hasPrefix("ASCII `") {
                #expect(stored == Array(first.utf8), "7.1 gives \(field) as \(first)")
            } else {
                continue
            }
            checked.append(field)
        }
        #expect(checked == ["magic", "version", "headerSize"])
    }
}

// MARK: - §18.1: the size of a work queue's state

extension ProtocolDocumentTests {
    @Test("18.1's largest state, its entry count and its layout are the library's")
    func queueStateSizeIsTheLibrarys() throws {
        let section = try Self.section("### 18.1")
        let size = try #require(try Regex(#"at most ([0-9][0-9, ]*) bytes"#).firstMatch(in: section), "18.1 gives no size")
        let documented = try #require(size.output[1].substring.flatMap { Self.evaluate(String($0)) })
        #expect(documented == UInt64(WorkQueueState.maximumSize), "18.1 says at most \(documented) bytes")
        let rows = Self.tableRows(section)
        let count = try #require(rows.first { $0.count > 4 && $0[3] == "count" })
        let entries = try #require(try Regex(#"at most ([0-9]+)"#).firstMatch(in: count[4]))
        #expect(entries.output[1].substring.flatMap { Int($0) } == WorkQueueState.maximumEntries)
        // The CRC's offset with the most entries, plus its 4 bytes, is that size too.
        let crc = try #require(rows.first { $0.count > 4 && $0[3] == "crc" })
        let offset = try #require(Self.evaluate(crc[0].replacingOccurrences(of: "count", with: String(WorkQueueState.maximumEntries))))
        #expect(offset + 4 == documented)
    }
}

// MARK: - §2: the conversion of a version 2 log

extension ProtocolDocumentTests {
    @Test("§2's example conversion of a version 2 log, done by the next pass with the default configuration, gives the header and records it shows",
          .timeLimit(.minutes(1)))
    func versionTwoConversionIsTheDocumented() async throws {
        let rows = Self.tableRows(try Self.paragraph(after: "<!-- example-conversion -->"))
        func numbers(_ cell: String) -> [UInt64] {
            cell.replacingOccurrences(of: "`", with: "").split { $0 == " " || $0 == "–" || $0 == ":" }
                .compactMap { $0.hasPrefix("0x") ? UInt64($0.dropFirst(2), radix: 16) : UInt64($0) }
        }
        func field(_ name: String) throws -> (before: [UInt64], after: [UInt64]) {
            let row = try #require(rows.first { $0.first?.replacingOccurrences(of: "`", with: "") == name }, "no \(name) row")
            return (numbers(row[1]), numbers(row[2]))
        }
        let logID = try field("logID"), base = try field("baseSequence"), cleared = try field("clearedThrough")
        let byteThreshold = try field("compactionByteThreshold"), recordThreshold = try field("compactionRecordThreshold")
        let records = try field("records")

        var old = LogFormat.Header()
        old.version = 2
        old.logID = try #require(logID.before.first)
        old.baseSequence = try #require(base.before.first)
        old.clearedThrough = try #require(cleared.before.first)
        old.compactionByteThreshold = try #require(byteThreshold.before.first)
        old.compactionRecordThreshold = try #require(recordThreshold.before.first)
        let first = try #require(records.before.first)
        let last = try #require(records.before.dropFirst().first)
        var bytes = old.encoded()
        for sequence in first...last {
            bytes += LogFormat.version2RecordBytes(logID: old.logID, sequence: sequence, nanoseconds: 1_735_689_600_000_000_000,
                                                   processID: 4242, kind: .text, payload: Array("m\(sequence)".utf8))
        }
        let container = TemporaryDirectory("document")
        let wormhole = try Wormhole(directory: container.path)
        _ = try await wormhole.summaries()
        try Data(bytes).write(to: URL(fileURLWithPath: container.file("old.wormhole")))

        #expect(try await wormhole.passMessage("next", identifier: "old") == last + 1)
        let header = try #require(try ProtocolInteropTests.header(container.file("old.wormhole")))
        #expect(header.version == LogFormat.version)
        #expect([header.logID] == logID.after)
        #expect([header.baseSequence] == base.after)
        #expect([header.clearedThrough] == cleared.after)
        #expect([header.compactionByteThreshold] == byteThreshold.after)
        #expect([header.compactionRecordThreshold] == recordThreshold.after)
        let kept = try #require(records.after.first)
        let keptLast = try #require(records.after.dropFirst().first)
        // The file's records, each a whole version 3 record.
        let file = try ProtocolInteropTests.bytes(container.file("old.wormhole"))
        var sequences: [UInt64] = []
        var offset = LogFormat.headerSize
        while offset < file.count {
            let parsed = file.withUnsafeBytes { LogFormat.parse($0, at: offset, logID: header.logID, layout: .version3, maximumPayload: 1 << 20) }
            guard case .record(let frame, let length) = parsed else {
                Issue.record("no version 3 record at \(offset): \(parsed)")
                break
            }
            sequences.append(frame.sequence)
            offset += length
        }
        #expect(sequences.first == kept && sequences.count == Int(keptLast - kept) + 2, "records \(sequences.first ?? 0)–\(sequences.last ?? 0)")
        #expect(sequences == Array(kept...keptLast) + [last + 1])
    }
}

// MARK: - §12.2, §12.4, §18.1: a claim, a durable position and a work queue's state

extension ProtocolDocumentTests {
    /// The hex block after `marker`, field by field, with the value its note gives (the
    /// word after the field's name: decimal or `0x` hexadecimal; `nil` for other words).
    static func documentedValues(after marker: String) throws -> [(offset: Int, name: String, bytes: [UInt8], value: UInt64?)] {
        let document = try document()
        let afterMarker = try #require(document.range(of: marker)).upperBound
        let open = try #require(document.range(of: "```", range: afterMarker..<document.endIndex)).upperBound
        let close = try #require(document.range(of: "```", range: open..<document.endIndex)).lowerBound
        return try document[open..<close].split(separator: "\n").map { line in
            let parts = line.split(separator: "|", maxSplits: 1)
            let bytes = try parts[0].split(separator: " ").map { try #require(UInt8($0, radix: 16)) }
            let words = parts.count > 1 ? parts[1].split(separator: " ").map(String.init) : []
            let value = words.count > 2 ? (words[2].hasPrefix("0x") ? UInt64(words[2].dropFirst(2), radix: 16) : UInt64(words[2])) : nil
            return (try #require(Int(words.first ?? "")), words.count > 1 ? words[1] : "", bytes, value)
        }
    }

    /// The documented fields after `marker` as a name → value table, each field's bytes
    /// checked against its value (little-endian) and its offset against the bytes before it.
    static func checkedValues(after marker: String) throws -> (bytes: [UInt8], values: [String: UInt64]) {
        var all: [UInt8] = []
        var values: [String: UInt64] = [:]
        for field in try documentedValues(after: marker) {
            #expect(field.offset == all.count, "\(marker) \(field.name) at \(field.offset), after \(all.count) bytes")
            if let value = field.value {
                #expect(littleEndian(field.bytes) == value, "\(marker) \(field.name): its bytes are not \(value)")
                values[field.name] = value
            }
            all += field.bytes
        }
        return (all, values)
    }

    /// The offsets of the layout table of the section `heading`, by field name.
    static func layoutOffsets(_ heading: String) throws -> [String: Int] {
        var offsets: [String: Int] = [:]
        for row in tableRows(try section(heading)) where row.count > 4 {
            if let offset = Int(row[0]) { offsets[row[3]] = offset }
        }
        return offsets
    }

    @Test("§12.2's example claim is what the library reads from a claim file")
    func exampleClaimIsTheLibrarys() throws {
        let (bytes, values) = try Self.checkedValues(after: "<!-- example-claim -->")
        #expect(bytes.count == ListenerCursor.claimSize)
        let directory = TemporaryDirectory()
        try Data(bytes).write(to: URL(fileURLWithPath: directory.file("claim")))
        let container = try ContainerDirectory(path: directory.path, create: false)
        let (fd, _) = try #require(try container.openFile("claim", .readOnly))
        defer { try? fd.close() }
        let claim = ListenerCursor.readClaim(fd)
        #expect(claim.sequence == values["delivered"] && claim.logID == values["logID"] && claim.pidNamespace == values["pidns"])
    }

    @Test("§12.4's example durable position is what the library writes, and reads back; its offsets are the table's")
    func exampleDurablePositionIsTheLibrarys() throws {
        let (bytes, values) = try Self.checkedValues(after: "<!-- example-durable -->")
        let value = DurablePosition.Value(position: try #require(values["position"]), logID: try #require(values["logID"]),
                                          processID: UInt32(try #require(values["pid"])), pidNamespace: try #require(values["pidns"]))
        #expect(DurablePosition.encode(value) == bytes)
        #expect(bytes.withUnsafeBytes { DurablePosition.decode($0) } == value)
        let offsets = try Self.layoutOffsets("### 12.4")
        for field in try Self.documentedValues(after: "<!-- example-durable -->") where field.name != "crc" {
            #expect(offsets[field.name] == field.offset, "12.4's table puts \(field.name) at \(String(describing: offsets[field.name]))")
        }
    }

    @Test("§18.1's example state is what the library writes, and reads back; its header offsets are the table's")
    func exampleQueueStateIsTheLibrarys() throws {
        let (bytes, values) = try Self.checkedValues(after: "<!-- example-queue-state -->")
        func value(_ name: String) throws -> UInt64 { try #require(values[name], "no \(name) in 18.1's example") }
        let state = WorkQueueState(
            taken: try value("taken"), acknowledged: try value("acknowledged"), deadLettered: try value("deadLettered"),
            expired: try value("expired"), lost: try value("lost"), logID: try value("logID"),
            entries: [.init(sequence: try value("sequence"), member: try value("member"), deliveries: UInt32(try value("deliveries")),
                            delivered: Int64(try value("delivered")))])
        #expect(try value("count") == 1)
        #expect(Array(bytes.prefix(4)) == Array("WHQ1".utf8))
        #expect(state.encoded() == bytes)
        #expect(bytes.withUnsafeBytes { WorkQueueState.decode($0) } == state)
        let offsets = try Self.layoutOffsets("### 18.1")
        for field in try Self.documentedValues(after: "<!-- example-queue-state -->") where field.offset < WorkQueueState.headerSize {
            #expect(offsets[field.name] == field.offset, "18.1's table puts \(field.name) at \(String(describing: offsets[field.name]))")
        }
    }
}

// MARK: - §8.2: the JSON form of Swift values

extension ProtocolDocumentTests {
    struct Reading: Codable {
        var zone: String
        var updated: Date
        var level: Int
        var ratio: Double
        var raw: Data
    }

    @Test("8.2's examples of the JSON form are what the library writes: sorted keys, ISO 8601 dates to the millisecond, base64 bytes, '/' not escaped")
    func jsonFormExamplesAreTheLibrarys() throws {
        let rows = Self.tableRows(try Self.section("#### The JSON form"))
        func example(_ what: String) throws -> String {
            let row = try #require(rows.first { $0.first?.hasPrefix(what) == true }, "no row for \(what)")
            return try #require(Self.codeSpans(row[2]).first)
        }
        let date = try example("dates")
        let text = date.trimmingCharacters(in: CharacterSet(charactersIn: "\""))
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        let instant = try #require(formatter.date(from: text))
        let bytes = try #require(Data(base64Encoded: try example("bytes").trimmingCharacters(in: CharacterSet(charactersIn: "\""))))
        let zone = try example("`/` in strings").trimmingCharacters(in: CharacterSet(charactersIn: "\""))
        let number = try #require(Double(try example("numbers")))
        // A few microseconds more: rounded to the millisecond, as the table says.
        let value = Reading(zone: zone, updated: instant.addingTimeInterval(0.000_2), level: 7, ratio: number, raw: bytes)
        let written = String(decoding: try WormholeJSONCoding.standard.encoder.encode(value), as: UTF8.self)
        // The keys' example, its date being the dates' example: declared in another order.
        struct Keys: Encodable { var zone: String; var updated: Date; var level: Int }
        let keys = try example("object keys").replacingOccurrences(of: "...", with: date)
        let zoneOnly = try #require(try Regex(#""zone":"([^"]*)""#).firstMatch(in: keys)?.output[1].substring.map(String.init))
        let sorted = try WormholeJSONCoding.standard.encoder.encode(Keys(zone: zoneOnly, updated: instant, level: 7))
        #expect(String(decoding: sorted, as: UTF8.self) == keys)
        for expected in [date, try example("bytes"), "\"\(zone)\"", try example("numbers")] {
            #expect(written.contains(expected), "\(written) holds no \(expected)")
        }
        #expect(written == #"{"level":7,"ratio":\#(try example("numbers")),"raw":\#(try example("bytes")),"updated":\#(date),"zone":"\#(zone)"}"#)
    }
}
