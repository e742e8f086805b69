import Foundation
import Synchronization

/// The measured part of every sender role: `count` sends, one per `interval`
/// nanoseconds (0: as fast as it can), each timed, then the RESULT line the harness
/// reads (first and last instant, pass time p50 and mean, CPU, resident memory).
///
/// With `hold` (`--hold`, when the harness counts system calls or instructions), it
/// prints `MEASURED` after the last send and waits for a line on standard input before
/// it sorts the times and reports, so that the counts stop at the last message.
func sendPaced(count: Int, interval: UInt64, hold: Bool = false, _ send: (Int) throws -> Void) rethrows {
    let before = ResourceUsage.current()
    var passTimes = [UInt64](repeating: 0, count: count)
    let start = Monotonic.now()
    for index in 0..<count {
        if interval > 0 { Monotonic.sleep(until: start + UInt64(index) * interval) }
        let begin = Monotonic.now()
        try send(index)
        passTimes[index] = Monotonic.now() - begin
    }
    let end = Monotonic.now()
    let after = ResourceUsage.current()
    if hold { holdUntilReport() }
    passTimes.sort()
    let mean = passTimes.reduce(0, +) / UInt64(max(1, count))
    emit("RESULT first=\(start) end=\(end) pass_p50_ns=\(passTimes.isEmpty ? 0 : passTimes[count / 2]) pass_mean_ns=\(mean) cpu_us=\(after.cpuMicroseconds - before.cpuMicroseconds) rss_kb=\(ResourceUsage.residentKiB())")
}

/// ``sendPaced(count:interval:hold:_:)`` as fast as it can from `threads` threads at
/// once: thread `t` sends the indices `i` with `i % threads == t`, in order. One RESULT
/// line for all of them, as from one sender.
func sendConcurrently(count: Int, threads: Int, _ send: @escaping @Sendable (Int) throws -> Void) throws {
    let before = ResourceUsage.current()
    let times = Mutex<[UInt64]>([])
    let failure = Mutex<(any Error)?>(nil)
    let start = Monotonic.now()
    let workers = (0..<threads).map { thread in
        let worker = Thread {
            var own: [UInt64] = []
            own.reserveCapacity(count / threads + 1)
            for index in stride(from: thread, to: count, by: threads) {
                let begin = Monotonic.now()
                do {
                    try send(index)
                } catch {
                    failure.withLock { $0 = $0 ?? error }
                    break
                }
                own.append(Monotonic.now() - begin)
            }
            times.withLock { $0 += own }
        }
        worker.start()
        return worker
    }
    while workers.contains(where: { !$0.isFinished }) { Monotonic.sleep(seconds: 0.0002) }
    let end = Monotonic.now()
    let after = ResourceUsage.current()
    if let error = failure.withLock({ $0 }) { throw error }
    let passTimes = times.withLock { $0 }.sorted()
    let mean = passTimes.reduce(0, +) / UInt64(max(1, passTimes.count))
    emit("RESULT first=\(start) end=\(end) pass_p50_ns=\(passTimes.isEmpty ? 0 : passTimes[passTimes.count / 2]) pass_mean_ns=\(mean) cpu_us=\(after.cpuMicroseconds - before.cpuMicroseconds) rss_kb=\(ResourceUsage.residentKiB())")
}

/// Prints `MEASURED` and waits for the harness's next line (`REPORT`) on standard input.
func holdUntilReport() {
    emit("MEASURED")
    _ = readLine()
}
