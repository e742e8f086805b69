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
/// continuation, block, or take another lock while holding it (Architecture.md, "Lock
/// order"). Debug builds check the last: ``LockDiscipline`` records every lock taken
/// while the same thread holds one.
@_spi(Backend) public final class Locked<Value>: @unchecked Sendable {
    /// The mutex and the value, in one allocation of their own. Reached through a
    /// pointer, an access to the value is not checked for exclusivity at run time (the
    /// mutex is what makes it exclusive); a stored property's was, at every `withLock`
    /// (`swift_beginAccess`: about 80 instructions, a dozen times on a round trip).
    @usableFromInline let mutex: UnsafeMutablePointer<pthread_mutex_t>
    @usableFromInline let value: UnsafeMutablePointer<Value>
    /// Which locks may be taken while this one is held: only those of a lower rank.
    public let rank: LockRank

    public init(_ value: sending Value, rank: LockRank = .leaf) {
        self.rank = rank
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

    /// Runs `body` with exclusive access to the value. `file` and `line` name the call
    /// in what a debug build's ``LockDiscipline`` records.
    ///
    /// Inlinable, as ``withLockIfAvailable(_:file:line:)`` is, and public under the
    /// `Backend` SPI: the back end and the API are other modules. While it was `package`,
    /// their calls were not specialized: each went through a reabstraction thunk and a
    /// closure context, about 1,100 instructions more a message passed (callgrind, when
    /// the library became three targets); public and inlinable, they are.
    @inlinable @inline(__always)
    public func withLock<Result, Failure: Error>(_ body: (inout sending Value) throws(Failure) -> sending Result,
                                          file: StaticString = #fileID, line: UInt = #line) throws(Failure) -> sending Result {
        #if DEBUG
        LockDiscipline.willLock(rank, file, line)
        defer { LockDiscipline.didUnlock() }
        #endif
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value.pointee)
    }

    /// Runs `body` with exclusive access to the value if no other thread holds the lock;
    /// `nil` without running it otherwise. For work that may be skipped, taken while
    /// another lock is held (where waiting could deadlock).
    @inlinable
    public func withLockIfAvailable<Result>(_ body: (inout sending Value) -> sending Result,
                                     file: StaticString = #fileID, line: UInt = #line) -> sending Result? {
        guard pthread_mutex_trylock(mutex) == 0 else { return nil }
        #if DEBUG
        // A try never waits, so it cannot close a cycle: it is not recorded, but a lock
        // taken under it is.
        LockDiscipline.willLock(rank, file, line, trying: true)
        defer { LockDiscipline.didUnlock() }
        #endif
        defer { pthread_mutex_unlock(mutex) }
        return body(&value.pointee)
    }
}

/// The library's lock order (Architecture.md, "Lock order"): a lock may be taken while
/// the same thread holds others only if its rank is lower than each of theirs. Nearly
/// every lock is a ``leaf``: nothing is taken under it.
@_spi(Backend) public enum LockRank: Int, Comparable, Sendable {
    /// Nothing is taken under it: decide under the lock, act after it.
    case leaf = 0
    /// The inotify engine's watch table: the kernel's watches are added and removed
    /// under it (`inotify_add_watch` and `inotify_rm_watch` never block), so that the
    /// table and the kernel agree; the system-call fault table, a leaf, is read there.
    case inotifyTable = 1
    /// `OnDemandObservation`'s holds: its observation is made and given up under it, so
    /// that they happen in the order of the holds; that takes the inotify engine's lock.
    case observationHolds = 2
    /// A log writer's: held across the append to its log (the file's `flock`, `pwritev`),
    /// which is what it serializes between the process's threads; the container's and
    /// the fault table's leaves, and the engine's table, are taken under it.
    case logWriter = 3

    public static func < (lhs: LockRank, rhs: LockRank) -> Bool { lhs.rawValue < rhs.rawValue }
}

#if DEBUG
/// Debug builds only: the locks each thread holds, and every lock taken against the
/// lock order (``LockRank``): while its thread held one of the same or a lower rank
/// (a ``Locked`` or a ``MonotonicCondition``, which is a leaf).
///
/// So no two threads can wait for each other's lock, and no lock is held for longer than
/// its own short decision. A lock taken out of order is recorded, not trapped, so that a
/// test names every one (``violations``) rather than only the first.
@_spi(Backend) public enum LockDiscipline {
    /// One thread's held locks, outermost first.
    private final class Held {
        var sites: [(file: StaticString, line: UInt, rank: LockRank)] = []
    }

    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key) { Unmanaged<Held>.fromOpaque($0!).release() }
        return key
    }()

    nonisolated(unsafe) private static let recorded: UnsafeMutablePointer<pthread_mutex_t> = {
        let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
        return mutex
    }()
    nonisolated(unsafe) private static var found: [String] = []

    private static var held: Held {
        if let current = pthread_getspecific(key) { return Unmanaged<Held>.fromOpaque(current).takeUnretainedValue() }
        let made = Held()
        pthread_setspecific(key, Unmanaged.passRetained(made).toOpaque())
        return made
    }

    /// The calling thread is about to take the lock at `file`:`line`.
    public static func willLock(_ rank: LockRank, _ file: StaticString, _ line: UInt, trying: Bool = false) {
        let held = held
        // Formatted only when recorded: a lock taken in order costs no string.
        if !trying, let outer = held.sites.last(where: { $0.rank <= rank }) {
            pthread_mutex_lock(recorded)
            let nesting = "\(file):\(line) taken while holding \(outer.file):\(outer.line)"
            if found.count < 1_000, !found.contains(nesting) { found.append(nesting) }
            pthread_mutex_unlock(recorded)
        }
        held.sites.append((file, line, rank))
    }

    /// The calling thread released the lock it took last.
    public static func didUnlock() {
        _ = held.sites.popLast()
    }

    /// Every nesting seen in this process so far, each once: "inner taken while holding
    /// outer", each a `file:line`.
    package static var violations: [String] {
        pthread_mutex_lock(recorded)
        defer { pthread_mutex_unlock(recorded) }
        return found
    }
}
#endif
