#if canImport(Glibc)
import Glibc
#endif

/// Runs work after a delay, on one thread of its own, without a file descriptor.
///
/// A listener that could not read for want of a descriptor tries again later; that
/// "later" cannot be a Dispatch timer: libdispatch creates its epoll instance on the
/// first timer of the process, and a process out of descriptors at that moment is
/// stopped by it. This clock waits on a condition variable instead (on the monotonic
/// clock, so that a change of the wall clock moves no retry). Its thread starts with the
/// first retry and, with nothing to do, sleeps without waking. If the thread cannot be
/// started, the work waits for the next ``schedule(after:_:)``, which tries again.
package final class RetryClock: @unchecked Sendable {
    package static let shared = RetryClock()

    private struct Item {
        /// Nanoseconds on CLOCK_MONOTONIC.
        let deadline: UInt64
        let work: @Sendable () -> Void
    }

    // Guarded by `condition`'s mutex; the clock lives as long as the process.
    private let condition = MonotonicCondition()
    private var items: [Item] = []
    private var started = false

    private init() {}

    /// Runs `work` on the clock's thread once `delay` seconds have passed.
    package func schedule(after delay: Double, _ work: @escaping @Sendable () -> Void) {
        condition.lock()
        items.append(Item(deadline: MonotonicCondition.deadline(after: delay), work: work))
        if !started, DetachedThread.start({ [self] in run() }) == 0 {
            started = true
        }
        condition.signal()
        condition.unlock()
    }

    private func run() {
        condition.lock()
        while true {
            guard let next = items.indices.min(by: { items[$0].deadline < items[$1].deadline }) else {
                condition.wait()
                continue
            }
            let deadline = items[next].deadline
            if deadline > MonotonicCondition.now() {
                condition.wait(until: deadline)
                continue
            }
            let item = items.remove(at: next)
            condition.unlock()
            item.work()
            condition.lock()
        }
    }
}
