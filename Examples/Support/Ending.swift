import Dispatch
import Foundation
import Synchronization

/// A one-shot "we are done" that a signal, the end of input, a command or a count can
/// trigger: how the examples wait until they should stop.
public final class Ending: Sendable {
    public init() {}

    private let state = Mutex<(done: Bool, continuation: CheckedContinuation<Void, Never>?)>((false, nil))

    /// Ends the wait (once; later calls do nothing).
    public func end() {
        let continuation = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard !state.done else { return nil }
            state.done = true
            defer { state.continuation = nil }
            return state.continuation
        }
        continuation?.resume()
    }

    /// Waits for ``end()``, or for SIGINT or SIGTERM.
    public func wait() async {
        let sources = [SIGINT, SIGTERM].map { number in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { [weak self] in self?.end() }
            source.resume()
            return source
        }
        defer { sources.forEach { $0.cancel() } }
        await withCheckedContinuation { continuation in
            let done = state.withLock { state -> Bool in
                if state.done { return true }
                state.continuation = continuation
                return false
            }
            if done { continuation.resume() }
        }
    }
}
