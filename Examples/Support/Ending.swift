import Dispatch
import Foundation
import Synchronization

/// A one-shot "we are done" that a signal, the end of input, a command or a count can
/// trigger: how the examples wait until they should stop.
public final class Ending: Sendable {
    public init() {}

    private let state = Mutex<(signal: Int32?, done: Bool, continuation: CheckedContinuation<Int32?, Never>?)>((nil, false, nil))

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

    /// Waits for ``end()``, or for SIGINT or SIGTERM.
    /// - Returns: The signal that ended the wait, or `nil` when ``end()`` did.
    @discardableResult
    public func wait() async -> Int32? {
        let sources = [SIGINT, SIGTERM].map { number in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { [weak self] in self?.end(bySignal: number) }
            source.resume()
            return source
        }
        defer { sources.forEach { $0.cancel() } }
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
