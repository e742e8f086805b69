import Synchronization

/// A one-slot wake-up for an async consumer: ``signal()`` from any thread, ``wait()``
/// from one task. Signals that arrive while nobody waits collapse into one pending wake,
/// so a consumer that looks again after every wake never misses the last change.
package final class WakeSignal: Sendable {
    private struct State {
        var pending = false
        var finished = false
        var failure: WormholeError?
        var waiter: CheckedContinuation<Void, Never>?
    }

    private let state = Locked(State())

    package init() {}

    /// Wakes the waiter, or leaves a pending wake for the next ``wait()``.
    package func signal() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard !state.finished else { return nil }
            if let waiter = state.waiter {
                state.waiter = nil
                return waiter
            }
            state.pending = true
            return nil
        }
        waiter?.resume()
    }

    /// Ends waiting for good: the current and every later ``wait()`` return `false`, or
    /// throw `failure` when one is given.
    package func finish(throwing failure: WormholeError? = nil) {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            if !state.finished {
                state.finished = true
                state.failure = failure
            }
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    /// Returns `true` after a wake (at once if one is pending), `false` once finished or
    /// when the task is cancelled.
    package func wait() async throws(WormholeError) -> Bool {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { state -> Bool in
                    if state.pending || state.finished || Task.isCancelled {
                        state.pending = false
                        return true
                    }
                    state.waiter = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
                defer { state.waiter = nil }
                return state.waiter
            }
            waiter?.resume()
        }
        let (finished, failure) = state.withLock { ($0.finished, $0.failure) }
        if let failure { throw failure }
        return !finished && !Task.isCancelled
    }
}
