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
/// Like `Mutex`, it may hold values that are not `Sendable`, with `Mutex`'s rules, which
/// the compiler checks: the value is handed over when the lock is made (`sending`: no
/// other reference to it remains), is only reached inside ``withLock(_:)``, and what a
/// body returns is handed over too (`sending`: never a reference into the protected
/// state). Decide under the lock, act after it: never call out of the library, resume a
/// continuation or block while holding it.
package final class Locked<Value>: @unchecked Sendable {
    /// The mutex and the value, in one allocation of their own. Reached through a
    /// pointer, an access to the value is not checked for exclusivity at run time (the
    /// mutex is what makes it exclusive); a stored property's was, at every `withLock`
    /// (`swift_beginAccess`: about 80 instructions, a dozen times on a round trip).
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let value: UnsafeMutablePointer<Value>

    package init(_ value: sending Value) {
        let offset = Self.valueOffset
        let memory = UnsafeMutableRawPointer.allocate(byteCount: offset + MemoryLayout<Value>.stride,
                                                      alignment: max(MemoryLayout<pthread_mutex_t>.alignment, MemoryLayout<Value>.alignment))
        mutex = memory.bindMemory(to: pthread_mutex_t.self, capacity: 1)
        pthread_mutex_init(mutex, nil)
        self.value = (memory + offset).initializeMemory(as: Value.self, to: value)
    }

    /// Where the value starts: past the mutex, at the value's alignment.
    private static var valueOffset: Int {
        let alignment = MemoryLayout<Value>.alignment
        return (MemoryLayout<pthread_mutex_t>.stride + alignment - 1) / alignment * alignment
    }

    deinit {
        value.deinitialize(count: 1)
        pthread_mutex_destroy(mutex)
        UnsafeMutableRawPointer(mutex).deallocate()
    }

    /// Runs `body` with exclusive access to the value.
    @inline(__always)
    package func withLock<Result, Failure: Error>(_ body: (inout sending Value) throws(Failure) -> sending Result) throws(Failure) -> sending Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value.pointee)
    }

    /// Runs `body` with exclusive access to the value if no other thread holds the lock;
    /// `nil` without running it otherwise. For work that may be skipped, taken while
    /// another lock is held (where waiting could deadlock).
    package func withLockIfAvailable<Result>(_ body: (inout sending Value) -> sending Result) -> sending Result? {
        guard pthread_mutex_trylock(mutex) == 0 else { return nil }
        defer { pthread_mutex_unlock(mutex) }
        return body(&value.pointee)
    }
}
