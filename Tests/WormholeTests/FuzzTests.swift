import Foundation
import PropertyBased
import Testing
@testable import Wormhole

/// Generated inputs for the two places where bytes from outside the process are
/// interpreted: the record reader and identifier validation. Each property runs a million
/// inputs (`WORMHOLE_FUZZ_ITERATIONS` changes that); a failure prints the seed that
/// replays it.
@Suite("Fuzzing")
struct FuzzTests {
    static let iterations = Int(ProcessInfo.processInfo.environment["WORMHOLE_FUZZ_ITERATIONS"] ?? "") ?? 1_000_000

    /// A valid log: a header and records of every kind and several sizes.
    static let validLog: [UInt8] = {
        var header = LogFormat.Header()
        header.logID = 7
        var records: [UInt8] = []
        let payloads: [(WormholePayloadKind, String)] = [
            (.text, "hi"), (.json, #"{"text":"x"}"#), (.data, ""), (.text, String(repeating: "y", count: 90)), (.data, "WHR1"),
        ]
        for (index, (kind, text)) in payloads.enumerated() {
            LogFormat.appendRecord(to: &records, sequence: UInt64(index + 1), date: Date(timeIntervalSince1970: 1),
                                   processID: 1, kind: kind, payload: Data(text.utf8))
        }
        header.committedEnd = UInt64(LogFormat.headerSize + records.count)
        header.lastSequence = UInt64(payloads.count)
        header.recordCount = UInt32(payloads.count)
        return header.encoded() + records
    }()

    /// One damage to a valid log: overwrite a byte, cut the file short, overwrite a
    /// 32-bit field (such as a record length) or insert junk.
    static func mutate(_ kind: Int, _ position: Int, _ byte: UInt8, _ word: UInt32) -> [UInt8] {
        var bytes = validLog
        let at = min(position, bytes.count)
        switch kind {
        case 0: if at < bytes.count { bytes[at] = byte }
        case 1: bytes.removeSubrange(at...)
        case 2:
            let start = min(at, bytes.count - 4)
            withUnsafeBytes(of: word.littleEndian) { bytes.replaceSubrange(start..<start + 4, with: $0) }
        case 3: bytes.insert(contentsOf: [UInt8](repeating: byte, count: Int(word % 64)), at: at)
        default: bytes.insert(contentsOf: LogFormat.recordMagic + [byte, byte, 0, 0], at: at)
        }
        return bytes
    }

    @Test("a million damaged logs: no crash, no hang, every rejection a typed error", .timeLimit(.minutes(10)))
    func recordReaderSurvivesDamagedLogs() async {
        await propertyCheck(count: Self.iterations,
                            input: Gen.int(in: 0...4), Gen.int(in: 0...Self.validLog.count), Gen.uint8(in: 0...255), Gen.uint32(in: 0...UInt32.max)) {
            kind, position, byte, word in
            let bytes = Self.mutate(kind, position, byte, word)
            let outcome = bytes.withUnsafeBytes { buffer -> String? in
                let header: LogFormat.Header?
                do throws(WormholeError) {
                    header = try LogFormat.Header.decode(UnsafeRawBufferPointer(rebasing: buffer.prefix(LogFormat.headerSize)), path: "fuzz")
                } catch {
                    return error.code == .unsupportedFormat ? nil : "header: unexpected \(error.code)"
                }
                guard let header else {
                    // Only an empty file is a log being created.
                    return buffer.isEmpty ? nil : "header: a non-empty file decoded as 'being created'"
                }
                let end = min(buffer.count, Int(clamping: header.committedEnd))
                guard end >= LogFormat.headerSize else { return nil }
                let records = LogFormat.scan(UnsafeRawBufferPointer(rebasing: buffer[LogFormat.headerSize..<end]), identifier: "fuzz", path: "fuzz")
                let markers = (LogFormat.headerSize..<max(LogFormat.headerSize, end - 3)).filter {
                    buffer[$0..<$0 + 4].elementsEqual(LogFormat.recordMagic)
                }.count
                for result in records {
                    if case .failure(let error) = result, error.code != .corruptRecord { return "scan: unexpected \(error.code)" }
                }
                // A valid record starts with a marker; a failure starts at the beginning, at
                // a marker, or right after a valid record. So the scan always moves on.
                let valid = records.filter { (try? $0.get()) != nil }.count
                let failed = records.count - valid
                if valid > markers { return "scan: \(valid) records from \(markers) markers" }
                return failed <= markers + valid + 1 ? nil : "scan: \(failed) failures from \(markers) markers"
            }
            if let outcome { Issue.record("\(outcome) (mutation \(kind) at \(position), \(byte), \(word))") }
        }
    }

    @Test("damaged log files read through a real reader: every record or a typed error, and the reader finishes",
          .timeLimit(.minutes(5)))
    func fileReaderSurvivesDamagedFiles() async throws {
        let directory = TemporaryDirectory()
        let transiting = try FileTransiting(directory: directory.path)
        await propertyCheck(count: min(Self.iterations, 3_000),
                            input: Gen.int(in: 0...4), Gen.int(in: 0...Self.validLog.count), Gen.uint8(in: 0...255), Gen.uint32(in: 0...UInt32.max)) {
            kind, position, byte, word in
            let bytes = Self.mutate(kind, position, byte, word)
            FileManager.default.createFile(atPath: directory.file("fuzz.wormhole"), contents: Data(bytes))
            do throws(WormholeError) {
                let reader = try transiting.makeReader(identifier: "fuzz", startingFrom: .history)
                defer { reader.close() }
                var rounds = 0
                while try !reader.read(maximumCount: 64).isEmpty {
                    rounds += 1
                    if rounds > 100 {
                        Issue.record("the reader did not finish (mutation \(kind) at \(position))")
                        break
                    }
                }
            } catch {
                if ![.unsupportedFormat, .corruptRecord].contains(error.code) {
                    Issue.record("unexpected \(error.code): \(error)")
                }
            }
        }
    }

    /// Characters that matter to paths, plus ordinary and multi-byte ones.
    static let pieces: [Character] = ["/", ".", "\u{0}", "\n", "\t", "\u{7F}", "\\", " ", "-", "_", "a", "Z", "9", "é", "日", "🙂", "\u{202E}"]

    /// The rules, stated independently of the implementation.
    static func isValid(_ identifier: String) -> Bool {
        !identifier.isEmpty && identifier.utf8.count <= 200 && identifier != "." && identifier != ".."
            && !identifier.hasPrefix(".") && !identifier.contains("/")
            && !identifier.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F }
    }

    @Test("a million generated identifiers: accepted exactly when the rules allow, and never outside the container",
          .timeLimit(.minutes(10)))
    func identifierValidationIsExactAndConfined() async {
        let directory = "/container/dir"
        let generator = Gen.oneOf(
            Gen.element(of: Self.pieces).map { $0 ?? "a" }.string(of: 0...12),
            Gen.element(of: Self.pieces).map { $0 ?? "a" }.string(of: 40...80),
            Gen.letterOrNumber.string(of: 195...205)
        )
        await propertyCheck(count: Self.iterations, input: generator) { identifier in
            let expected = Self.isValid(identifier)
            do throws(WormholeError) {
                try Identifier.validate(identifier)
                if !expected { Issue.record("accepted '\(Identifier.printable(identifier))'") }
                let path = URL(fileURLWithPath: directory + "/" + identifier + LogFormat.fileSuffix).standardizedFileURL
                if path.deletingLastPathComponent().path != directory {
                    Issue.record("'\(Identifier.printable(identifier))' names \(path.path), outside the container")
                }
            } catch {
                if expected { Issue.record("refused '\(Identifier.printable(identifier))': \(error)") }
                if error.code != .invalidIdentifier || error.message.isEmpty { Issue.record("untyped refusal: \(error)") }
            }
        }
    }
}
