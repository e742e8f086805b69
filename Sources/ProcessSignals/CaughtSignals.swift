#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// Signals such as SIGINT turned into a call on a thread of their own: how the `wormhole`
/// command and the examples stop cleanly on Ctrl-C.
///
/// - The handler is in place when ``route(_:to:)`` returns. (A `DispatchSource` is
///   registered later, on another thread: a Ctrl-C typed just after it was made was lost
///   by 11 chats in 300 under load, which then waited for ever.)
/// - No file descriptor is needed, so a process at its descriptor limit still stops on
///   Ctrl-C (a `DispatchSource` needs a `signalfd` and an epoll registration, and fails
///   without a word when none is left), and an idle process is not woken.
/// - The signal handler stores the number and posts a semaphore (both
///   async-signal-safe); the waiting thread makes the call. That thread unblocks SIGINT,
///   SIGTERM, SIGHUP and SIGQUIT for itself, so that they reach the process even when
///   every other thread blocks them: Dispatch's and Swift concurrency's threads do, and
///   a process started from one of them (as by a test harness) inherits that mask. They
///   are caught while routed and have their default action otherwise.
public enum CaughtSignals {
    /// Why the signals could not be routed.
    public struct SetupFailure: Error, CustomStringConvertible {
        public let description: String
    }

    /// The signals that can be routed: those the waiting thread unblocks.
    public static let routable: Set<Int32> = [SIGINT, SIGTERM, SIGHUP, SIGQUIT]

    /// Calls `handler`, on a thread of its own, with each of `numbers` (from ``routable``)
    /// received from now until ``release(_:)`` (a later call replaces the handler). Throws
    /// when the thread cannot be started or a handler cannot be installed, so that a
    /// program that could not stop cleanly can say so before it starts its work.
    public static func route(_ numbers: [Int32], to handler: @escaping @Sendable (Int32) -> Void) throws(SetupFailure) {
        precondition(routable.isSuperset(of: numbers), "CaughtSignals routes only \(routable.sorted())")
        if let failure = waiter { throw failure }
        current.withLock { $0 = handler }
        for number in numbers {
            var action = sigaction()
            action.__sigaction_handler.sa_handler = { number in
                CaughtSignals.caught.store(number, ordering: .relaxed)
                sem_post(CaughtSignals.semaphore)
            }
            sigemptyset(&action.sa_mask)
            action.sa_flags = SA_RESTART
            guard sigaction(number, &action, nil) == 0 else {
                throw SetupFailure(description: "signal \(number): \(String(cString: strerror(errno)))")
            }
        }
    }

    /// Gives `numbers` their default action back and forgets the handler.
    public static func release(_ numbers: [Int32]) {
        for number in numbers { signal(number, SIG_DFL) }
        current.withLock { $0 = nil }
    }

    private static let current = Mutex<(@Sendable (Int32) -> Void)?>(nil)
    /// The last signal caught.
    private static let caught = Atomic<Int32>(0)
    private nonisolated(unsafe) static let semaphore: UnsafeMutablePointer<sem_t> = {
        let semaphore = UnsafeMutablePointer<sem_t>.allocate(capacity: 1)
        sem_init(semaphore, 0, 0)
        return semaphore
    }()

    /// Starts the waiting thread, once; the failure when it could not be started. Also
    /// makes what the signal handler uses, which must not initialise anything.
    private static let waiter: SetupFailure? = {
        _ = caught.load(ordering: .relaxed)
        _ = semaphore
        _ = routable
        var thread = pthread_t()
        let created = pthread_create(&thread, nil, { _ in
            var set = sigset_t()
            sigemptyset(&set)
            for number in CaughtSignals.routable { sigaddset(&set, number) }
            pthread_sigmask(SIG_UNBLOCK, &set, nil)
            while true {
                if sem_wait(CaughtSignals.semaphore) != 0 { continue }   // EINTR
                let number = CaughtSignals.caught.load(ordering: .relaxed)
                CaughtSignals.current.withLock { $0 }?(number)
            }
        }, nil)
        guard created == 0 else {
            return SetupFailure(description: "cannot start a thread: \(String(cString: strerror(created)))")
        }
        pthread_detach(thread)
        return nil
    }()
}
