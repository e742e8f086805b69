#if canImport(Glibc)
import Glibc
#endif
import Foundation
import ProcessSignals
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
            // Should no thread be left to start, the signals keep their default action.
            try? CaughtSignals.route(signals) { [weak self] number in self?.end(bySignal: number) }
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
