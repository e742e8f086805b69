#if canImport(Glibc)
import Glibc
#endif

/// The library's one timer service: runs work after a delay, on one thread of its own,
/// without a file descriptor.
///
/// Every delayed or repeated piece of work of the library runs on it: a listener's retry
/// when it could not read for want of a descriptor, a request's timeout sweep, a reply
/// router's idle check, a work queue member's redelivery timer, the PostgreSQL
/// notifier's pauses between attempts to listen again. None can be a Dispatch
/// timer: libdispatch creates its epoll instance on the first timer of the process, and
/// a process out of descriptors at that moment is stopped by it. This clock waits on a
/// condition variable instead (on the monotonic clock, so that a change of the wall
/// clock moves no timer). Its thread starts with the first work scheduled and, with
/// nothing to do, sleeps without waking. If the thread cannot be started, the work waits
/// for the next ``schedule(after:_:)``, which tries again.
///
/// The work runs on the clock's thread, outside its lock, one piece after another: work
/// that may take long (a back end's answer, a drain) hops to a queue of its own.
package final class RetryClock: @unchecked Sendable {
    package static let shared = RetryClock()

    /// Names work scheduled, for ``cancel(_:)``.
    package struct Scheduled: Hashable, Sendable {
        fileprivate let number: UInt64
    }

    private struct Item {
        /// Nanoseconds on CLOCK_MONOTONIC.
        let deadline: UInt64
        let number: UInt64
        let work: @Sendable () -> Void
    }

    // Guarded by `condition`'s mutex; the clock lives as long as the process.
    private let condition = MonotonicCondition()
    private var items: [Item] = []
    private var nextNumber: UInt64 = 0
    /// Whether the thread runs, or one thread is starting it.
    private var started = false

    private init() {}

    /// Runs `work` on the clock's thread once `delay` seconds have passed.
    @discardableResult
    package func schedule(after delay: Double, _ work: @escaping @Sendable () -> Void) -> Scheduled {
        condition.lock()
        nextNumber += 1
        let number = nextNumber
        items.append(Item(deadline: MonotonicCondition.deadline(after: delay), number: number, work: work))
        let start = !started
        started = true
        condition.signal()
        condition.unlock()
        // The thread is started outside the lock (decided under it: by one caller at a
        // time); one that cannot be started is tried again by the next call.
        if start, DetachedThread.start({ [self] in run() }) != 0 {
            condition.lock()
            started = false
            condition.unlock()
        }
        return Scheduled(number: number)
    }

    /// Drops work scheduled and not yet begun; work running or done is not affected.
    package func cancel(_ scheduled: Scheduled) {
        condition.lock()
        items.removeAll { $0.number == scheduled.number }
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
