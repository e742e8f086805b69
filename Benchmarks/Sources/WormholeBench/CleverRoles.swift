#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Wormhole

/// The child processes of the clever section (``Suite/clever(_:_:)``): each measures one
/// of the library's less obvious parts with it and without it (a public setting, or an
/// environment variable the library reads once for this benchmark alone), and prints
/// `RESULT ...` (and `SAMPLES`, in nanoseconds, where there are samples).
enum CleverRoles {
    /// The Codable message of the coding role: the latency section's, with a text of a
    /// typical length.
    static let codingMessage = BenchMessage(stamp: 1_795_000_000_123_456_789, index: 4217, text: "temperature changed: 21.5 C in the kitchen")

    /// `clever-coding --dir D --count N --coder own|foundation`: N batches of 100
    /// ``codingMessage`` with `passMessages`, N batches of its bytes with `passPayloads`
    /// (kind `.data`: no coding), and N decodes of the record read back, with the
    /// standard coding (the library's own coder of the standard form) or with a coding
    /// given Foundation's standard encoder and decoder (the same bytes, by Foundation's
    /// `JSONEncoder` and `JSONDecoder`). Prints `RESULT pass_ns=P raw_ns=R decode_ns=D
    /// bytes=B` (nanoseconds per message, the medians of 5 blocks).
    static func coding(_ options: Options) throws -> Int32 {
        let count = try options.int("count", default: 20000)
        let own = options.string("coder", default: "own") == "own"
        let coding: WormholeJSONCoding = own ? .standard
            : WormholeJSONCoding(encoder: WormholeJSONCoding.standardEncoder(), decoder: WormholeJSONCoding.standardDecoder())
        let wormhole = try Wormhole(directory: try options.string("dir"), jsonCoding: coding)
        let identifier = "bench.coding"
        for _ in 0..<200 { _ = try wormhole.passMessage(codingMessage, identifier: identifier) }
        guard let record = try wormhole.record(withIdentifier: identifier) else { throw BenchError("no record read back") }
        let bytes = record.payload
        func timed(_ body: () throws -> Void) rethrows -> Double {
            var blocks: [Double] = []
            for _ in 0..<5 {
                let begin = Monotonic.now()
                for _ in 0..<(count / 5) { try body() }
                blocks.append(Double(Monotonic.now() - begin) / Double(count / 5))
            }
            return median(blocks)
        }
        // In batches of 100 (one write each), so that the write is a small part of a
        // message's time and the coding most of it. Alternated: the log grows alike under
        // both.
        let batch = 100
        let messages = [BenchMessage](repeating: codingMessage, count: batch)
        let payloads = [(payload: Data, kind: WormholePayloadKind)](repeating: (bytes, .data), count: batch)
        var passNanoseconds = 0.0, rawNanoseconds = 0.0
        for _ in 0..<2 {
            passNanoseconds += try timed { _ = try wormhole.passMessages(messages, identifier: identifier) } / Double(2 * batch)
            rawNanoseconds += try timed { _ = try wormhole.passPayloads(payloads, identifier: identifier) } / Double(2 * batch)
        }
        var check: UInt64 = 0
        let decodeNanoseconds = try timed { check &+= try record.decode(as: BenchMessage.self, using: coding).index }
        guard check > 0 else { throw BenchError("nothing decoded") }
        emit(String(format: "RESULT pass_ns=%.0f raw_ns=%.0f decode_ns=%.0f bytes=%d", passNanoseconds, rawNanoseconds, decodeNanoseconds, bytes.count))
        return 0
    }

    /// Identifiers that are not ASCII, the ones whose validation composes them (NFC): an
    /// ASCII identifier never does.
    static let unicodeIdentifiers = [
        "küche.temperatur", "café.orders", "straße.lampe", "日本語.チャンネル", "ελληνικά.μήνυμα",
        "e\u{301}clair.decomposed", "한국어.알림", "weather/ünits".replacingOccurrences(of: "/", with: "-"),
    ]

    /// `clever-nfc --method stdlib|foundation --count N`: the NFC form of each of
    /// ``unicodeIdentifiers``, N times over, by the standard library's normalization (the
    /// SPI `_nfcCodeUnits`, what `Identifier.composed` uses) or by Foundation's
    /// `precomposedStringWithCanonicalMapping` (ICU). Prints `RESULT ns=T` per identifier
    /// (the median of 5 blocks) and whether both agree.
    static func nfc(_ options: Options) throws -> Int32 {
        let count = try options.int("count", default: 20000)
        let stdlib = options.string("method", default: "stdlib") == "stdlib"
        let compose: (String) -> String = stdlib
            ? { String(decoding: $0._nfcCodeUnits, as: UTF8.self) }
            : { $0.precomposedStringWithCanonicalMapping }
        let agree = unicodeIdentifiers.allSatisfy {
            String(decoding: $0._nfcCodeUnits, as: UTF8.self).unicodeScalars.elementsEqual($0.precomposedStringWithCanonicalMapping.unicodeScalars)
        }
        var blocks: [Double] = []
        var total = 0
        for _ in 0..<5 {
            let begin = Monotonic.now()
            for _ in 0..<(count / 5) {
                for identifier in unicodeIdentifiers { total &+= compose(identifier).utf8.count }
            }
            blocks.append(Double(Monotonic.now() - begin) / Double(count / 5 * unicodeIdentifiers.count))
        }
        guard total > 0 else { throw BenchError("nothing composed") }
        emit(String(format: "RESULT ns=%.1f agree=%@", median(blocks), agree ? "yes" : "no"))
        return 0
    }

    /// `clever-send-once --dir D`: what `wormhole send` does as a process: opens the
    /// container, passes one message of 16 bytes, ends. Timed from spawn to exit by the
    /// harness, with the container's watch made at the second pass (the library's way) or
    /// at the first (`WORMHOLE_BENCH_CONTAINER_WATCH_AT_FIRST_PASS`).
    /// `--passes 2` passes two (both then make the watch).
    static func sendOnce(_ options: Options) throws -> Int32 {
        let wormhole = try Wormhole(directory: try options.string("dir"))
        let payload = Data(repeating: 0x2e, count: 16)
        for _ in 0..<(try options.int("passes", default: 1)) { _ = try wormhole.passPayload(payload, kind: .data, identifier: "bench.once") }
        return 0
    }

    /// `clever-nested --dir D --count N [--local] [--timeout S]`: blocking requests made
    /// by a listener without a queue, on the process's reader thread (a listener that
    /// asks another service), each timed from before the request to its reply in hand.
    /// The responder is `rr-serve` in another process, or (`--local`) a responder without
    /// a queue in this one, which the reader thread must serve while the request waits.
    /// With `WORMHOLE_BENCH_NO_NESTED_SERVING` the request waits as any other thread does.
    /// Prints `RESULT count failed cpu_us` and `SAMPLES`, as `rr-call` does.
    static func nested(_ options: Options) throws -> Int32 {
        let count = try options.int("count", default: 1000)
        let timeout = try options.double("timeout", default: 5)
        let directory = try options.string("dir")
        let wormhole = try Wormhole(directory: directory)
        var inner: WorkQueueMember?
        if options.flag("local") {
            inner = try wormhole.respondToRecords(withIdentifier: RequestRoles.requestIdentifier) { record in (record.payload, record.kind) }
        }
        defer { inner?.cancel() }
        let done = DispatchSemaphore(value: 0)
        let outcome = Locked<(times: [UInt64], failed: Int)>(([], 0))
        let listener = try wormhole.listenForRecords(withIdentifier: "bench.ask") { record in
            let index = record.payload.withUnsafeBytes { UInt64(littleEndian: $0.loadUnaligned(fromByteOffset: 8, as: UInt64.self)) }
            let begin = Monotonic.now()
            let reply = try? wormhole.requestRecord(payload: record.payload, kind: .data, identifier: RequestRoles.requestIdentifier, timeout: timeout)
            let took = Monotonic.now() - begin
            if index & Frame.warmUpBit == 0 {
                outcome.withLock { if reply?.payload == record.payload { $0.times.append(took) } else { $0.failed += 1 } }
            }
            done.signal()
        }
        defer { listener.cancel() }
        let asker = try Wormhole(directory: directory)
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: 16, alignment: 8)
        defer { buffer.deallocate() }
        let warmUp = options.flag("local") ? 2 : 20
        let before = ResourceUsage.current()
        for number in 0..<(warmUp + count) {
            let index = number < warmUp ? Frame.warmUpBit | UInt64(number) : UInt64(number - warmUp)
            Frame.write(stamp: Monotonic.now(), index: index, into: buffer)
            _ = try asker.passPayload(Data(bytes: buffer, count: 16), kind: .data, identifier: "bench.ask")
            guard done.wait(timeout: .now() + timeout + 5) == .success else { throw BenchError("the listener did not finish request \(number)") }
        }
        let cpu = ResourceUsage.current().cpuMicroseconds - before.cpuMicroseconds
        let result = outcome.withLock { $0 }
        emit("RESULT count=\(result.times.count) failed=\(result.failed) cpu_us=\(cpu)")
        emit("SAMPLES " + result.times.map(String.init).joined(separator: ","))
        return 0
    }
}

/// A value behind a lock, for the few handlers here that report to the main thread.
final class Locked<Value>: @unchecked Sendable {
    private var value: Value
    private let lock = NSLock()
    init(_ value: Value) { self.value = value }
    func withLock<T>(_ body: (inout Value) throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
