#if Postgres
import Synchronization
import Wormhole

/// One attempt at a time at making what takes a wait for the server (a connection): the
/// first caller makes it, holding no lock; the callers that come meanwhile wait for its
/// outcome, holding none either.
///
/// A lock held across the connect (as before) made every other caller wait on the lock
/// itself for as long as the server did not answer, even after the back end was closed;
/// ``abandon(_:)`` ends their wait.
final class SingleAttempt<Value: Sendable>: Sendable {
    private final class Attempt: Sendable {
        let done = MonotonicEvent()
        let outcome = Mutex<Result<Value, WormholeError>?>(nil)

        /// Sets the outcome unless one was set; wakes the waiters.
        func finish(_ result: Result<Value, WormholeError>) {
            outcome.withLock { if $0 == nil { $0 = result } }
            done.signal()
        }
    }

    private let current = Mutex<Attempt?>(nil)

    init() {}

    /// Runs `make` unless an attempt is running: then waits for that attempt's outcome.
    func run(_ make: () throws(WormholeError) -> Value) throws(WormholeError) -> Value {
        // Decided under the lock: who makes it.
        let (attempt, mine) = current.withLock { current -> (Attempt, Bool) in
            if let current { return (current, false) }
            let made = Attempt()
            current = made
            return (made, true)
        }
        if !mine {
            _ = attempt.done.wait(timeout: nil)
            return try attempt.outcome.withLock { $0! }.get()
        }
        let result: Result<Value, WormholeError>
        do throws(WormholeError) { result = .success(try make()) } catch { result = .failure(error) }
        current.withLock { if $0 === attempt { $0 = nil } }
        attempt.finish(result)
        return try result.get()
    }

    /// Ends the wait of the callers waiting for the attempt running, with `error`; its
    /// maker goes on and sees its own outcome.
    func abandon(_ error: WormholeError) {
        let attempt = current.withLock { current -> Attempt? in
            defer { current = nil }
            return current
        }
        attempt?.finish(.failure(error))
    }
}
#endif
