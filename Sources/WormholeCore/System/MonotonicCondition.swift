#if canImport(Glibc)
import Glibc
#endif

/// A mutex and a condition variable whose timed waits count on `CLOCK_MONOTONIC`.
///
/// Every timeout of the library and the command waits on one of these. A wait with a
/// deadline on the wall clock (`sem_timedwait`, which `DispatchSemaphore.wait(timeout:)`
/// uses on Linux, or a `Date`) moves when the clock is stepped: an NTP correction or a
/// resume from suspend made `wormhole listen --timeout 2` wait an hour, or return at
/// once. The monotonic clock is never stepped.
package final class MonotonicCondition: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    package init() {
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    package func lock(file: StaticString = #fileID, line: UInt = #line) {
        #if DEBUG
        LockDiscipline.willLock(.leaf, file, line)
        #endif
        pthread_mutex_lock(mutex)
    }

    package func unlock() {
        pthread_mutex_unlock(mutex)
        #if DEBUG
        LockDiscipline.didUnlock()
        #endif
    }
    /// Wakes one waiter; call it with the mutex held.
    package func signal() { pthread_cond_signal(condition) }
    /// Wakes every waiter; call it with the mutex held.
    package func broadcast() { pthread_cond_broadcast(condition) }

    /// Waits (the mutex held) until signalled, or spuriously.
    package func wait() { pthread_cond_wait(condition, mutex) }

    /// Waits (the mutex held) until signalled, spuriously, or until the monotonic clock
    /// reaches `deadline` (nanoseconds, ``now()``).
    package func wait(until deadline: UInt64) {
        var until = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
        _ = pthread_cond_timedwait(condition, mutex, &until)
    }

    /// Nanoseconds on `CLOCK_MONOTONIC`.
    package static func now() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }

    /// The monotonic deadline `seconds` from now (at least now, at most far away).
    package static func deadline(after seconds: Double) -> UInt64 {
        let span = seconds.isFinite ? UInt64(clamping: Int64(max(0, min(seconds, 1e9)) * 1e9)) : UInt64(1e18)
        return now() &+ span
    }
}

/// A one-shot event that a thread waits for with a timeout on the monotonic clock: the
/// `wormhole` command's `listen --timeout`, `observe --timeout` and `doctor`.
///
/// ```swift
/// let done = MonotonicEvent()
/// // elsewhere: done.signal()
/// if !done.wait(timeout: 2) { print("timed out") }
/// ```
package final class MonotonicEvent: Sendable {
    private let condition = MonotonicCondition()
    private nonisolated(unsafe) var signalled = false

    package init() {}

    /// Marks the event as happened and wakes the waiters; later calls do nothing.
    package func signal() {
        condition.lock()
        signalled = true
        condition.broadcast()
        condition.unlock()
    }

    /// Waits until the event happened, or until `timeout` seconds have passed on the
    /// monotonic clock (`nil`: no limit). Returns whether it happened.
    package func wait(timeout: Double?) -> Bool {
        let deadline = timeout.map(MonotonicCondition.deadline(after:))
        condition.lock()
        defer { condition.unlock() }
        while !signalled {
            guard let deadline else {
                condition.wait()
                continue
            }
            if MonotonicCondition.now() >= deadline { return false }
            condition.wait(until: deadline)
        }
        return true
    }
}
