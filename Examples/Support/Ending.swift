#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Synchronization

/// A one-shot "we are done" that a signal, the end of input, a command or a count can
/// trigger: how the examples wait until they should stop.
///
/// The signals are caught from the moment the `Ending` is made, so make it before the
/// program shows it is ready (a Ctrl-C typed as soon as the prompt appears must end the
/// wait, not kill the process or go unnoticed); after ``wait()`` returns they have their
/// default action again. Make one `Ending` with signals at a time.
public final class Ending: Sendable {
    private let state = Mutex<(signal: Int32?, done: Bool, continuation: CheckedContinuation<Int32?, Never>?)>((nil, false, nil))
    private let signals: [Int32]

    /// - Parameter signals: The signals that end the wait (none for an ending that only
    ///   ``end()`` triggers).
    public init(signals: [Int32] = [SIGINT, SIGTERM]) {
        self.signals = signals
        if !signals.isEmpty {
            CaughtSignals.route(signals) { [weak self] number in self?.end(bySignal: number) }
        }
    }

    /// Ends the wait (once; later calls do nothing).
    public func end() { end(bySignal: nil) }

    private func end(bySignal number: Int32?) {
        let (continuation, signal) = state.withLock { state -> (CheckedContinuation<Int32?, Never>?, Int32?) in
            guard !state.done else { return (nil, nil) }
            state.done = true
            state.signal = number
            defer { state.continuation = nil }
            return (state.continuation, number)
        }
        continuation?.resume(returning: signal)
    }

    /// Waits for ``end()`` or one of the signals given to ``init(signals:)``.
    /// - Returns: The signal that ended the wait, or `nil` when ``end()`` did.
    @discardableResult
    public func wait() async -> Int32? {
        defer { if !signals.isEmpty { CaughtSignals.release(signals) } }
        return await withCheckedContinuation { continuation in
            let done = state.withLock { state -> (Bool, Int32?) in
                if state.done { return (true, state.signal) }
                state.continuation = continuation
                return (false, nil)
            }
            if done.0 { continuation.resume(returning: done.1) }
        }
    }
}

/// Signals turned into a call on a thread of their own.
///
/// Not a `DispatchSource`: Dispatch registers a signal source later, on a thread of its
/// own, so a Ctrl-C typed just after the source was made could be lost (about 1 time in
/// 30 under load, with the chat waiting for ever). Here the handler is in place when
/// ``route(_:to:)`` returns. The handler stores the number and posts a semaphore (both
/// async-signal-safe); the waiting thread unblocks SIGINT, SIGTERM, SIGHUP and SIGQUIT
/// for itself, so that they reach the process even when every other thread blocks them
/// (as Dispatch's and Swift concurrency's threads do): caught while routed, with their
/// default action otherwise.
enum CaughtSignals {
    /// Calls `handler` with each of `numbers` received from now until ``release(_:)``.
    static func route(_ numbers: [Int32], to handler: @escaping @Sendable (Int32) -> Void) {
        _ = waiter   // started, and the handler's state made, before a handler can run
        current.withLock { $0 = handler }
        for number in numbers {
            var action = sigaction()
            action.__sigaction_handler.sa_handler = { number in
                CaughtSignals.caught.store(number, ordering: .relaxed)
                sem_post(CaughtSignals.semaphore)
            }
            sigemptyset(&action.sa_mask)
            action.sa_flags = SA_RESTART
            sigaction(number, &action, nil)
        }
    }

    /// Gives `numbers` their default action back.
    static func release(_ numbers: [Int32]) {
        for number in numbers { signal(number, SIG_DFL) }
        current.withLock { $0 = nil }
    }

    private static let current = Mutex<(@Sendable (Int32) -> Void)?>(nil)
    private static let caught = Atomic<Int32>(0)
    private nonisolated(unsafe) static let semaphore: UnsafeMutablePointer<sem_t> = {
        let semaphore = UnsafeMutablePointer<sem_t>.allocate(capacity: 1)
        sem_init(semaphore, 0, 0)
        return semaphore
    }()

    /// Started once, on first use.
    private static let waiter: Bool = {
        _ = caught.load(ordering: .relaxed)
        _ = semaphore
        let thread = Thread {
            var all = sigset_t()
            sigemptyset(&all)
            for number in [SIGINT, SIGTERM, SIGHUP, SIGQUIT] { sigaddset(&all, number) }
            pthread_sigmask(SIG_UNBLOCK, &all, nil)
            while true {
                if sem_wait(CaughtSignals.semaphore) != 0 { continue }   // EINTR
                let number = caught.load(ordering: .relaxed)
                current.withLock { $0 }?(number)
            }
        }
        thread.name = "signals"
        thread.start()
        return true
    }()
}
