import Foundation
import Synchronization

/// What one listener received: each message once, in order per identifier, with its
/// one-way latency (receive time minus the sender's stamp).
struct Tally: Sendable {
    /// Messages this listener should receive.
    let expected: Int
    /// Messages sent.
    let count: Int
    let identifiers: Int
    private(set) var received = 0
    /// Messages seen again (a re-read of the same file, or a repeat).
    private(set) var duplicates = 0
    /// Messages older than one already received for the same identifier.
    private(set) var outOfOrder = 0
    private(set) var firstReceipt: UInt64 = 0
    private(set) var lastReceipt: UInt64 = 0
    private(set) var highestIndex: Int = -1
    /// Nanoseconds, in the order received.
    private(set) var latencies: [UInt64] = []
    /// Warm-up messages this listener should receive, and those it did.
    let expectedWarmUps: Int
    private(set) var warmUps = 0
    private var seen: [Bool]
    private var usageAtFirst: ResourceUsage?
    private var lastIndexOfIdentifier: [Int]

    /// Counts messages `0..<count`, sent round-robin over `identifiers`, of which this
    /// listener hears those of identifiers `slice` (all by default).
    init(count: Int, identifiers: Int, slice: Range<Int>? = nil) {
        let slice = slice ?? 0..<max(1, identifiers)
        self.expectedWarmUps = (0..<Frame.warmUpCount(identifiers: identifiers)).reduce(0) { slice.contains($1 % max(1, identifiers)) ? $0 + 1 : $0 }
        self.expected = (0..<count).reduce(0) { slice.contains(identifierNumber(forMessage: $1, of: identifiers)) ? $0 + 1 : $0 }
        self.identifiers = max(1, identifiers)
        seen = [Bool](repeating: false, count: count)
        lastIndexOfIdentifier = [Int](repeating: -1, count: max(1, identifiers))
        latencies.reserveCapacity(expected)
        self.count = count
    }

    /// Counts message `index`, stamped `stamp` by its sender, received at `now`.
    mutating func record(index: UInt64, stamp: UInt64, at now: UInt64) {
        if index & Frame.warmUpBit != 0 {
            warmUps += 1
            return
        }
        guard index < UInt64(count) else { return }
        let index = Int(index)
        if seen[index] {
            duplicates += 1
            return
        }
        seen[index] = true
        let slot = identifierNumber(forMessage: index, of: identifiers)
        if lastIndexOfIdentifier[slot] > index { outOfOrder += 1 }
        lastIndexOfIdentifier[slot] = max(lastIndexOfIdentifier[slot], index)
        highestIndex = max(highestIndex, index)
        received += 1
        latencies.append(now >= stamp ? now - stamp : 0)
        if firstReceipt == 0 {
            firstReceipt = now
            // CPU is counted from the first measured message, not from the warm-up.
            usageAtFirst = ResourceUsage.current()
        }
        lastReceipt = now
    }

    var isComplete: Bool { received >= expected }

    /// The `RESULT` line and the `SAMPLES` line a listener prints for the harness.
    func report(since start: ResourceUsage) -> String {
        let usage = ResourceUsage.current()
        var text = "RESULT expected=\(expected) received=\(received) duplicates=\(duplicates) order=\(outOfOrder)"
        text += " first=\(firstReceipt) last=\(lastReceipt)"
        let from = usageAtFirst ?? start
        text += " cpu_us=\(usage.cpuMicroseconds - from.cpuMicroseconds) rss_kb=\(ResourceUsage.residentKiB())"
        text += " switches=\(usage.voluntarySwitches - from.voluntarySwitches)"
        let missing = seen.indices.lazy.filter { !self.seen[$0] }.prefix(5).map(String.init)
        text += " missing=" + (missing.isEmpty ? "none" : missing.joined(separator: ",")) + "\n"
        text += "SAMPLES " + latencies.map(String.init).joined(separator: ",") + "\n"
        return text
    }
}

/// A tally shared between the thread that receives and the one that waits for the end.
final class SharedTally: Sendable {
    private let state: Mutex<Tally>
    private let done = DispatchSemaphore(value: 0)
    init(_ tally: Tally) { state = Mutex(tally) }

    /// Counts one message (see ``Tally/record(index:stamp:at:)``); wakes ``waitForEnd``
    /// when it was the last one expected.
    func record(index: UInt64, stamp: UInt64, at now: UInt64) {
        let (completed, warmed) = state.withLock { tally -> (Bool, Bool) in
            let wasComplete = tally.isComplete
            let wasWarm = tally.warmUps >= tally.expectedWarmUps
            tally.record(index: index, stamp: stamp, at: now)
            return (!wasComplete && tally.isComplete, !wasWarm && tally.warmUps >= tally.expectedWarmUps)
        }
        // The harness starts the clock once every listener has read its warm-up.
        if warmed { emit("WARM") }
        if completed { done.signal() }
    }

    func read<T>(_ body: (Tally) -> T) -> T { state.withLock { body($0) } }

    /// Waits until every message arrived, or nothing arrived for `idle` seconds after the
    /// first, or nothing at all within `start` seconds. Wakes ten times a second at most
    /// while it waits, so that it does not disturb what is measured.
    func waitForEnd(idle: Double, start: Double) {
        if read({ $0.isComplete }) { return }
        let begin = Monotonic.now()
        while true {
            if done.wait(timeout: .now() + 0.1) == .success { return }
            let last = read { $0.lastReceipt }
            let now = Monotonic.now()
            if last == 0 && Double(now - begin) / 1e9 > start { return }
            if last != 0 && now > last && Double(now - last) / 1e9 > idle { return }
        }
    }
}

/// Prints `text` on standard output at once (the harness reads it through a pipe).
func emit(_ text: String) {
    var text = text
    if !text.hasSuffix("\n") { text += "\n" }
    text.withUTF8 { bytes in
        var offset = 0
        while offset < bytes.count {
            let count = write(1, bytes.baseAddress! + offset, bytes.count - offset)
            if count <= 0 { if errno == EINTR { continue } else { return } }
            offset += count
        }
    }
}
