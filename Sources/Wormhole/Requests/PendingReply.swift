#if canImport(Glibc)
import Glibc
#endif
@_spi(Backend) import WormholeCore
@_spi(Backend) import WormholeFiles

/// What a request ended with: the reply's record, or why there is none.
typealias ReplyOutcome = Result<WormholeRecord, WormholeError>

/// One request waiting for its reply: completed once, by the reply, its timeout or a
/// failure of the listener; waited for by a thread (``wait()``) or a task
/// (``value()``).
final class PendingReply: Sendable {
    let correlation: UInt64
    /// Seconds the requester waits, when it began and when that ends
    /// (``MonotonicCondition/now()``).
    let timeout: Double
    let began: UInt64
    let deadline: UInt64
    private struct State {
        var outcome: ReplyOutcome?
        var continuation: CheckedContinuation<ReplyOutcome, Never>?
        /// The thread blocked in ``ReplyRouter/wait(for:with:)`` and what wakes it.
        var waiter: (thread: UInt, wake: @Sendable () -> Void)?
    }
    private let state = Locked(State())
    private let done = MonotonicEvent()

    init(correlation: UInt64, timeout: Double) {
        self.correlation = correlation
        self.timeout = timeout
        self.began = MonotonicCondition.now()
        self.deadline = MonotonicCondition.deadline(after: timeout)
    }

    /// Completes the request; later calls do nothing. Returns whether this call did.
    @discardableResult
    func complete(_ outcome: ReplyOutcome) -> Bool {
        let (first, continuation, wake) = state.withLock { state -> (Bool, CheckedContinuation<ReplyOutcome, Never>?, (@Sendable () -> Void)?) in
            guard state.outcome == nil else { return (false, nil, nil) }
            state.outcome = outcome
            defer { state.continuation = nil }
            // The waiting thread completing its own request needs no wake-up.
            let wake = state.waiter.flatMap { $0.thread == UInt(pthread_self()) ? nil : $0.wake }
            return (true, state.continuation, wake)
        }
        guard first else { return false }
        // Resumed outside the lock.
        continuation?.resume(returning: outcome)
        wake?()
        done.signal()
        return true
    }

    /// The outcome, once complete.
    var outcome: ReplyOutcome? { state.withLock { $0.outcome } }

    /// Makes ``complete(_:)`` call `wake` (unless called on `thread`, the waiting one),
    /// until ``detach()``.
    func attach(thread: UInt, wake: @escaping @Sendable () -> Void) {
        state.withLock { $0.waiter = (thread, wake) }
    }

    func detach() {
        state.withLock { $0.waiter = nil }
    }

    /// Blocks the calling thread until the request is complete.
    func wait() -> ReplyOutcome {
        _ = done.wait(timeout: nil)
        return state.withLock { $0.outcome! }
    }

    /// Suspends until the request is complete.
    func value() async -> ReplyOutcome {
        await withCheckedContinuation { continuation in
            let ready = state.withLock { state -> ReplyOutcome? in
                if let outcome = state.outcome { return outcome }
                state.continuation = continuation
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }
}
