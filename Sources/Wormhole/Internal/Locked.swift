#if canImport(Glibc)
import Glibc
#endif

/// A value behind a `pthread_mutex_t`: the library's lock for short, synchronous state.
///
/// Used instead of `Synchronization.Mutex` because ThreadSanitizer on Linux does not see
/// `Mutex`'s futex-based locking and reports every access it guards as a race (a
/// two-thread counter under `Mutex` shows it), which would hide real races in the
/// sanitizer runs. `pthread_mutex_lock` is intercepted by the sanitizers, so the same
/// code is checked for real.
///
/// Like `Mutex`, it may hold values that are not `Sendable`: they are only reached
/// inside ``withLock(_:)``. Decide under the lock, act after it: never call out of the
/// library, resume a continuation or block while holding it.
final class Locked<Value>: @unchecked Sendable {
    private var value: Value
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>

    init(_ value: Value) {
        self.value = value
        mutex = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    /// Runs `body` with exclusive access to the value.
    @inline(__always)
    func withLock<Result, Failure: Error>(_ body: (inout Value) throws(Failure) -> Result) throws(Failure) -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }

    /// Runs `body` with exclusive access to the value if no other thread holds the lock;
    /// `nil` without running it otherwise. For work that may be skipped, taken while
    /// another lock is held (where waiting could deadlock).
    func withLockIfAvailable<Result>(_ body: (inout Value) -> Result) -> Result? {
        guard pthread_mutex_trylock(mutex) == 0 else { return nil }
        defer { pthread_mutex_unlock(mutex) }
        return body(&value)
    }
}
