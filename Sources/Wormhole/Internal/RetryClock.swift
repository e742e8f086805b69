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
final class RetryClock: @unchecked Sendable {
    static let shared = RetryClock()

    private struct Item {
        /// Nanoseconds on CLOCK_MONOTONIC.
        let deadline: UInt64
        let work: @Sendable () -> Void
    }

    // Guarded by `mutex`; the clock lives as long as the process, so these are never freed.
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var items: [Item] = []
    private var started = false

    private init() {
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    /// Runs `work` on the clock's thread once `delay` seconds have passed.
    func schedule(after delay: Double, _ work: @escaping @Sendable () -> Void) {
        pthread_mutex_lock(mutex)
        items.append(Item(deadline: Self.now() + UInt64(max(0, delay) * 1e9), work: work))
        if !started, DetachedThread.start({ [self] in run() }) == 0 {
            started = true
        }
        pthread_cond_signal(condition)
        pthread_mutex_unlock(mutex)
    }

    private func run() {
        pthread_mutex_lock(mutex)
        while true {
            guard let next = items.indices.min(by: { items[$0].deadline < items[$1].deadline }) else {
                pthread_cond_wait(condition, mutex)
                continue
            }
            let deadline = items[next].deadline
            if deadline > Self.now() {
                var until = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
                _ = pthread_cond_timedwait(condition, mutex, &until)
                continue
            }
            let item = items.remove(at: next)
            pthread_mutex_unlock(mutex)
            item.work()
            pthread_mutex_lock(mutex)
        }
    }

    private static func now() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }
}
