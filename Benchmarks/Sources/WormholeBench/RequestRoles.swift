#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Synchronization
@_spi(Backend) import Wormhole

/// The child processes of the requests and queues sections: request/reply round trips
/// (Wormhole's, and a Unix socket's as the floor; D-Bus's are Benchmarks/C/dbus_peer's
/// `serve` and `call`) and work-queue workers (Wormhole's; Redis's are
/// Benchmarks/C/redis_peer's).
///
/// Callers print `RESULT count=N failed=F cpu_us=U` and `SAMPLES` (each round trip in
/// nanoseconds), as `call_round_trips` of Benchmarks/C/peer.h does; servers print `READY`
/// and serve until they are killed or their socket closes; workers print `READY`, wait for
/// `GO` on standard input and print `RESULT handled=H sum=S last=NS cpu_us=U`, as
/// `redis_peer work` does.
enum RequestRoles {
    /// The identifier the round trips use, and the one whose work queue the workers share.
    static let requestIdentifier = "bench.rr"
    static let jobsIdentifier = "bench.jobs"
    static let queueName = "workers"

    /// `rr-serve --mechanism wormhole --dir D`: a responder that replies with the
    /// request's bytes (`respondToRecords`). `rr-serve --mechanism socket`: reads frames of
    /// `--size` bytes from descriptor 3 (a Unix socket) and writes each back.
    static func serve(_ options: Options) throws -> Int32 {
        switch options.string("mechanism", default: "wormhole") {
        case "socket":
            let size = max(Frame.minimumSize, try options.int("size", default: 16))
            let buffer = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 8)
            defer { buffer.deallocate() }
            emit("READY")
            while try transfer({ read(3, $0, $1) }, buffer, size), try transfer({ write(3, $0, $1) }, buffer, size) {}
            return 0
        default:
            let wormhole = try Wormhole(directory: try options.string("dir"))
            let responder = try wormhole.respondToRecords(withIdentifier: requestIdentifier) { record in
                (record.payload, record.kind)
            }
            emit("READY")
            // Serves until the harness kills it.
            while !responder.isCancelled { Monotonic.sleep(seconds: 1) }
            return 0
        }
    }

    /// `rr-call --mechanism wormhole|socket --count C [--size S] [--dir D]
    /// [--reply-spin-time SECONDS] [--pause-us P] [--work-us W]`: 20 warm-up round trips,
    /// then C back to back, or each after a sleep of P or W microseconds of busy work
    /// (neither timed), each timed from before the request is passed to after its reply
    /// (checked: the request's bytes) is in hand.
    /// `--reply-spin-time` sets `WormholeConfiguration.replySpinTime`.
    static func call(_ options: Options) throws -> Int32 {
        let count = try options.int("count", default: 2000)
        let size = max(Frame.minimumSize, try options.int("size", default: 16))
        let pause = UInt64(max(0, try options.int("pause-us", default: 0))) * 1000
        let work = UInt64(max(0, try options.int("work-us", default: 0))) * 1000
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 8)
        defer { buffer.deallocate() }
        memset(buffer, 0x2e, size)
        let roundTrip: (UInt64) throws -> Bool
        switch options.string("mechanism", default: "wormhole") {
        case "socket":
            let reply = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 8)
            defer { reply.deallocate() }
            roundTrip = { index in
                Frame.write(stamp: Monotonic.now(), index: index, into: buffer)
                guard try transfer({ write(3, $0, $1) }, buffer, size), try transfer({ read(3, $0, $1) }, reply, size) else { return false }
                return memcmp(buffer, reply, size) == 0
            }
            return try timeRoundTrips(count: count, pause: pause, work: work, roundTrip)
        default:
            var configuration = Wormhole.Configuration()
            configuration.replySpinTime = try options.double("reply-spin-time", default: configuration.replySpinTime)
            let wormhole = try Wormhole(directory: try options.string("dir"), configuration: configuration)
            roundTrip = { index in
                Frame.write(stamp: Monotonic.now(), index: index, into: buffer)
                let request = Data(bytes: buffer, count: size)
                let reply = try wormhole.requestRecord(payload: request, kind: .data, identifier: requestIdentifier, timeout: 5)
                return reply.payload == request
            }
            return try timeRoundTrips(count: count, pause: pause, work: work, roundTrip)
        }
    }

    /// The measured part of a caller (Benchmarks/C/peer.h's `call_round_trips`).
    private static func timeRoundTrips(count: Int, pause: UInt64, work: UInt64, _ roundTrip: (UInt64) throws -> Bool) throws -> Int32 {
        for number in 0..<20 { _ = try roundTrip(Frame.warmUpBit | UInt64(number)) }
        var times: [UInt64] = []
        times.reserveCapacity(count)
        var failed = 0
        let before = ResourceUsage.current()
        for index in 0..<count {
            if pause > 0 { Monotonic.sleep(until: Monotonic.now() + pause) }
            if work > 0 { let end = Monotonic.now() + work; while Monotonic.now() < end {} }
            let begin = Monotonic.now()
            let matched: Bool
            do { matched = try roundTrip(UInt64(index)) } catch {
                printError("rr-call: round trip \(index): \(error)")
                matched = false
            }
            if matched { times.append(Monotonic.now() - begin) } else { failed += 1 }
        }
        let cpu = ResourceUsage.current().cpuMicroseconds - before.cpuMicroseconds
        emit("RESULT count=\(times.count) failed=\(failed) cpu_us=\(cpu)")
        emit("SAMPLES " + times.map(String.init).joined(separator: ","))
        return 0
    }

    /// Reads or writes (`call`) exactly `size` bytes of descriptor 3; `false` at end of file.
    private static func transfer(_ call: (UnsafeMutableRawPointer, Int) -> Int, _ buffer: UnsafeMutableRawPointer, _ size: Int) throws -> Bool {
        var offset = 0
        while offset < size {
            let done = call(buffer + offset, size - offset)
            if done < 0 && errno == EINTR { continue }
            if done < 0 { throw BenchError("socket: \(String(cString: strerror(errno)))") }
            if done == 0 { return false }
            offset += done
        }
        return true
    }

    /// What a worker handled, from its member's queue to the main thread.
    private struct Handled {
        var count = 0
        var sum: UInt64 = 0
        var last: UInt64 = 0
    }

    /// `queue-work --dir D`: prints READY, waits for GO, then joins the work queue
    /// `workers` of `bench.jobs` (one member: one message at a time, acknowledged when the
    /// handler returns) and handles what it is handed (the payload's index, summed) until
    /// the queue has had nothing for it for 0.5 s.
    static func work(_ options: Options) throws -> Int32 {
        let wormhole = try Wormhole(directory: try options.string("dir"))
        emit("READY")
        _ = readLine()
        let before = ResourceUsage.current()
        let started = Monotonic.now()
        let handled = Mutex(Handled())
        let member = try wormhole.listenForRecords(withIdentifier: jobsIdentifier, workQueue: queueName) { record, _ in
            let index = record.payload.withUnsafeBytes { UInt64(littleEndian: $0.loadUnaligned(as: UInt64.self)) }
            let now = Monotonic.now()
            handled.withLock { $0.count += 1; $0.sum &+= index; $0.last = now }
        }
        while true {
            Monotonic.sleep(seconds: 0.02)
            let last = handled.withLock { $0.last }
            if Monotonic.now() - max(last, started) > 500_000_000 { break }
        }
        member.cancel()
        let result = handled.withLock { $0 }
        let cpu = ResourceUsage.current().cpuMicroseconds - before.cpuMicroseconds
        emit("RESULT handled=\(result.count) sum=\(result.sum) last=\(result.last) cpu_us=\(cpu)")
        return 0
    }

    /// Passes `count` jobs of `size` bytes (the index, then padding) to `bench.jobs` in
    /// `dir`, in batches of 1,000: the queue is full before the workers start. The queue
    /// is made first (a member joins and leaves), so that it keeps the jobs from
    /// compaction (a queue made later starts with what the log retains).
    static func fill(directory: String, count: Int, size: Int) throws {
        let wormhole = try Wormhole(directory: directory)
        try wormhole.listenForRecords(withIdentifier: jobsIdentifier, workQueue: queueName) { _, _ in }.cancel()
        let padding = Data(repeating: 0x2e, count: max(0, size - 8))
        var start = 0
        while start < count {
            let end = min(count, start + 1000)
            let batch = (start..<end).map { index -> (payload: Data, kind: WormholePayloadKind) in
                var little = UInt64(index).littleEndian
                return (Data(bytes: &little, count: 8) + padding, .data)
            }
            _ = try wormhole.passPayloads(batch, identifier: jobsIdentifier)
            start = end
        }
    }
}
