import Foundation
import PropertyBased
import Testing
@_spi(Backend) @testable import Wormhole
@_spi(Backend) @testable import WormholeCore
@_spi(Backend) @testable import WormholeFiles
import WormholeTestSupport

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
            (.text, "hi"), (.json, #"{"text":"x"}"#), (.data, ""), (.text, String(repeating: "y", count: 90)), (.data, "WHR3"),
        ]
        for (index, (kind, text)) in payloads.enumerated() {
            records += LogFormat.recordBytes(logID: 7, sequence: UInt64(index + 1), nanoseconds: 1_000_000_000,
                                             processID: 1, kind: kind, payload: Array(text.utf8))
        }
        return header.encoded() + records
    }()

    static let marker: [UInt8] = Array("WHR3".utf8)

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
        default: bytes.insert(contentsOf: Self.marker + [byte, byte, 0, 0], at: at)
        }
        return bytes
    }

    @Test("a million damaged logs: no crash, no hang, every record valid or reported", .timeLimit(.minutes(10)))
    func recordParserSurvivesDamagedLogs() async {
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
                    return buffer.isEmpty ? nil : "header: a non-empty file decoded as 'being created'"
                }
                // The walk of a reader, in memory: every step moves forward.
                var offset = LogFormat.headerSize
                var steps = 0
                var sequences: [UInt64] = []
                while offset < buffer.count {
                    steps += 1
                    if steps > buffer.count { return "parse: no progress at \(offset)" }
                    switch LogFormat.parse(buffer, at: offset, logID: header.logID, layout: header.layout, maximumPayload: 1 << 20) {
                    case .record(let frame, let length):
                        sequences.append(frame.sequence)
                        offset += length
                    case .incomplete, .tooLarge:
                        offset = buffer.count
                    case .corrupt(_, let length):
                        if let length, offset + length < buffer.count, LogFormat.peek(buffer, at: offset + length, layout: header.layout) != nil {
                            offset += length
                        } else {
                            offset = LogFormat.nextMarker(in: buffer, after: offset, layout: header.layout) ?? buffer.count
                        }
                    }
                }
                // Damage never makes up a record: every valid one is one of the log's.
                for sequence in sequences where !(1...5).contains(sequence) { return "parse: invented record \(sequence)" }
                return nil
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
            _ = FileManager.default.createFile(atPath: directory.file("fuzz.wormhole"), contents: Data(bytes))
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
                if ![.unsupportedFormat, .corruptRecord, .messageTooLarge].contains(error.code) {
                    Issue.record("unexpected \(error.code): \(error)")
                }
            }
        }
    }

    /// Characters that matter to paths, plus ordinary and multi-byte ones.
    static let pieces: [Character] = ["/", ".", "\u{0}", "\n", "\t", "\u{7F}", "\\", " ", "-", "_", "a", "Z", "9", "é", "日", "🙂", "\u{202E}", "\u{2067}", "\u{85}", "\u{301}", "e"]

    /// The components of the absolute `path` once the kernel has resolved it, without
    /// symbolic links: empty and `.` components dropped, `..` taking one off, as
    /// `URL.standardized` does for such a path, and far more cheaply.
    static func resolved(_ path: String) -> [[UInt8]] {
        // Byte-wise: "/" followed by a combining mark is one Character.
        var components: [[UInt8]] = []
        for component in Array(path.utf8).split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: true) {
            if component.elementsEqual([UInt8(ascii: ".")]) { continue }
            if component.elementsEqual([UInt8(ascii: "."), UInt8(ascii: ".")]) { _ = components.popLast(); continue }
            components.append(Array(component))
        }
        return components
    }

    /// The rules, stated independently of the implementation.
    static func isValid(_ identifier: String) -> Bool {
        // Byte-wise, not by Character: "." followed by a combining mark is one Character.
        !identifier.isEmpty && identifier.utf8.count <= 200
            && identifier.utf8.first != UInt8(ascii: ".") && !identifier.utf8.contains(UInt8(ascii: "/"))
            && !identifier.unicodeScalars.contains { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) }
            && !identifier.unicodeScalars.contains { bidiFormatting.contains($0.value) }
            // (Text of ASCII alone is in NFC: Foundation's normalization is asked only of the rest.)
            && (identifier.utf8.allSatisfy { $0 < 0x80 }
                || Array(identifier.precomposedStringWithCanonicalMapping.unicodeScalars) == Array(identifier.unicodeScalars))
    }

    /// Bidirectional formatting characters, as the rules list them.
    static let bidiFormatting: Set<UInt32> = [0x061C, 0x200E, 0x200F, 0x202A, 0x202B, 0x202C, 0x202D, 0x202E, 0x2066, 0x2067, 0x2068, 0x2069]

    /// Identifiers of three shapes, a third each: up to 12 of ``pieces`` (short names,
    /// `..`, `a/b`, combining marks after `.` or `/`), 40 to 80 of them, and 195 to 205
    /// letters and digits (around the 200-byte limit). A loop of its own over a seeded
    /// generator: PropertyBased's combinators, unoptimized in a debug build, took four
    /// fifths of this test's minute and a half. A failure names the identifier, the seed
    /// and the iteration (`WORMHOLE_FUZZ_SEED` replays a run).
    static func identifier(_ random: inout SplitMix64) -> String {
        func piece() -> Character { pieces[Int(random.next() % UInt64(pieces.count))] }
        switch random.next() % 3 {
        case 0: return String((0..<Int(random.next() % 13)).map { _ in piece() })
        case 1: return String((0..<(40 + Int(random.next() % 41))).map { _ in piece() })
        default:
            let alphanumerics = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
            return String((0..<(195 + Int(random.next() % 11))).map { _ in alphanumerics[Int(random.next() % 62)] })
        }
    }

    @Test("a million generated identifiers: accepted exactly when the rules allow, and never outside the container",
          .timeLimit(.minutes(10)))
    func identifierValidationIsExactAndConfined() {
        let directory = "/container/dir"
        let seed = UInt64(ProcessInfo.processInfo.environment["WORMHOLE_FUZZ_SEED"] ?? "") ?? UInt64.random(in: 0...UInt64.max)
        var random = SplitMix64(seed: seed)
        var failures = 0
        for iteration in 0..<Self.iterations where failures < 10 {
            let identifier = Self.identifier(&random)
            let problem = Self.problem(with: identifier, in: directory)
            if let problem {
                failures += 1
                Issue.record("\(problem) (WORMHOLE_FUZZ_SEED=\(seed), iteration \(iteration))")
            }
        }
    }

    /// What is wrong with how `identifier` was judged, or `nil`.
    static func problem(with identifier: String, in directory: String) -> String? {
        let expected = isValid(identifier)
        do throws(WormholeError) {
            try Identifier.validate(identifier)
            if !expected { return "accepted '\(Identifier.printable(identifier))'" }
            let path = resolved(directory + "/" + identifier + LogFormat.fileSuffix)
            if Array(path.dropLast()) != resolved(directory) {
                return "'\(Identifier.printable(identifier))' names /\(path.map { String(decoding: $0, as: UTF8.self) }.joined(separator: "/")), outside the container"
            }
        } catch {
            if expected { return "refused '\(Identifier.printable(identifier))': \(error)" }
            if error.code != .invalidIdentifier || error.message.isEmpty { return "untyped refusal: \(error)" }
        }
        return nil
    }
}

/// A small, fast, seedable generator (SplitMix64): the same seed gives the same inputs.
struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
