import Foundation
import Synchronization
@_spi(Backend) import Wormhole

/// The memory measurement's two processes: a sender that passes C messages in batches
/// and a listener that counts them, each printing its resident size every N messages.
/// Neither keeps anything per message (the latency roles keep a sample each), so what
/// grows is the library's.
enum MemoryRoles {
    /// `memory-listen --dir D --count C --every N`: prints `READY`, then `RSS <n> <KiB>`
    /// every N messages, then `RESULT received=… order=…` once C arrived (or 10 s passed
    /// without one).
    static func listen(_ options: Options) throws -> Int32 {
        let count = try options.int("count", default: 1_000_000)
        let every = try options.int("every", default: 1_000_000)
        let wormhole = try Wormhole(directory: options.string("dir", default: "/dev/shm/wormhole-bench"))
        let received = Atomic<Int>(0)
        let outOfOrder = Atomic<Int>(0)
        let last = Mutex<UInt64>(0)
        let token = try wormhole.listenForRecords(withIdentifier: "memory") { record in
            last.withLock { previous in
                if record.sequence <= previous { outOfOrder.add(1, ordering: .relaxed) }
                previous = record.sequence
            }
            let total = received.add(1, ordering: .relaxed).newValue
            if total % every == 0 { emit("RSS \(total) \(ResourceUsage.residentKiB())") }
        }
        emit("READY")
        var quiet = 0.0
        var seen = 0
        while received.load(ordering: .relaxed) < count && quiet < 10 {
            Monotonic.sleep(seconds: 0.05)
            let now = received.load(ordering: .relaxed)
            quiet = now == seen ? quiet + 0.05 : 0
            seen = now
        }
        token.cancel()
        emit("RESULT received=\(received.load(ordering: .relaxed)) order=\(outOfOrder.load(ordering: .relaxed)) rss_kb=\(ResourceUsage.residentKiB())")
        return 0
    }

    /// `memory-send --dir D --count C --every N [--batch B] [--size S]`: passes C
    /// messages of S bytes (64) in batches of B (64), printing `RSS <n> <KiB>` every N.
    static func send(_ options: Options) throws -> Int32 {
        let count = try options.int("count", default: 1_000_000)
        let every = try options.int("every", default: 1_000_000)
        let batchSize = max(1, try options.int("batch", default: 64))
        let size = try options.int("size", default: 64)
        let wormhole = try Wormhole(directory: options.string("dir", default: "/dev/shm/wormhole-bench"))
        let batch = [(payload: Data, kind: WormholePayloadKind)](repeating: (Data(count: size), .data), count: batchSize)
        var sent = 0
        let started = Monotonic.now()
        while sent < count {
            let now = min(batchSize, count - sent)
            try wormhole.passPayloads(now == batchSize ? batch : Array(batch.prefix(now)), identifier: "memory")
            let before = sent
            sent += now
            if sent / every > before / every { emit("RSS \(sent / every * every) \(ResourceUsage.residentKiB())") }
        }
        emit("RESULT sent=\(sent) seconds=\(Double(Monotonic.now() - started) / 1e9) rss_kb=\(ResourceUsage.residentKiB())")
        return 0
    }
}
