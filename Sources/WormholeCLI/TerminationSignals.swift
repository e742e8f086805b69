#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// SIGINT, SIGTERM and SIGHUP turned into a call, without a file descriptor, so that the
/// set-up cannot fail for want of one (a process at its descriptor limit still stops on
/// Ctrl-C) and an idle process is not woken by it.
///
/// The signal handler stores the signal's number and posts a semaphore (both
/// async-signal-safe); a thread of its own waits on the semaphore and makes the call.
/// A `DispatchSource` would need a `signalfd` and an epoll registration, and fails
/// without a word when the process is out of descriptors.
enum TerminationSignals {
    static let numbers: [Int32] = [SIGINT, SIGTERM, SIGHUP]

    /// Starts calling `handler` (on a thread of its own) with each termination signal
    /// received from now on. Throws when the thread or the handlers cannot be set up,
    /// so that a command that could not be stopped cleanly does not start.
    ///
    /// Call it on the thread that waits for the command's end (the main thread): it
    /// unblocks the signals there. A process inherits its parent's mask of blocked
    /// signals, and one started from a thread that blocks them (a Dispatch or Swift
    /// concurrency thread, as in a test harness) would otherwise never receive them.
    static func catchAll(_ handler: @escaping @Sendable (Int32) -> Void) throws(CommandFailure) {
        // Both are made before the handler can run: it must not initialise anything.
        let semaphore = Self.semaphore
        _ = caught.load(ordering: .relaxed)
        let box = Unmanaged.passRetained(Waiter(semaphore: semaphore, handler: handler))
        var thread = pthread_t()
        let created = pthread_create(&thread, nil, { context in
            Unmanaged<Waiter>.fromOpaque(context!).takeRetainedValue().run()
        }, box.toOpaque())
        guard created == 0 else {
            box.release()
            throw CommandFailure("cannot set up the handling of Ctrl-C and termination signals: cannot start a thread: \(String(cString: strerror(created)))")
        }
        pthread_detach(thread)
        for number in numbers {
            var action = sigaction()
            action.__sigaction_handler.sa_handler = { number in
                TerminationSignals.caught.store(number, ordering: .relaxed)
                sem_post(TerminationSignals.semaphore)
            }
            sigemptyset(&action.sa_mask)
            action.sa_flags = SA_RESTART
            guard sigaction(number, &action, nil) == 0 else {
                throw CommandFailure("cannot set up the handling of signal \(number): \(String(cString: strerror(errno)))")
            }
        }
        var set = sigset_t()
        sigemptyset(&set)
        for number in numbers { sigaddset(&set, number) }
        pthread_sigmask(SIG_UNBLOCK, &set, nil)
    }

    /// The last signal caught.
    private static let caught = Atomic<Int32>(0)

    private nonisolated(unsafe) static let semaphore: UnsafeMutablePointer<sem_t> = {
        let semaphore = UnsafeMutablePointer<sem_t>.allocate(capacity: 1)
        sem_init(semaphore, 0, 0)
        return semaphore
    }()

    private final class Waiter {
        let semaphore: UnsafeMutablePointer<sem_t>
        let handler: @Sendable (Int32) -> Void

        init(semaphore: UnsafeMutablePointer<sem_t>, handler: @escaping @Sendable (Int32) -> Void) {
            self.semaphore = semaphore
            self.handler = handler
        }

        func run() -> UnsafeMutableRawPointer? {
            while true {
                if sem_wait(semaphore) != 0 { continue }   // EINTR
                handler(TerminationSignals.caught.load(ordering: .relaxed))
            }
        }
    }
}
