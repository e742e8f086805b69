#if canImport(Glibc)
import Glibc
#endif
import Dispatch
import Foundation
import Synchronization

/// Output that reaches a pipe at once, and the end of a session (input ended, /quit,
/// or a signal).
enum Terminal {
    static func say(_ line: String) {
        try? FileHandle.standardOutput.write(contentsOf: Data((line + "\n").utf8))
    }

    static var inputIsTerminal: Bool { isatty(STDIN_FILENO) == 1 }

    /// Reads standard input line by line on a thread of its own (a blocking read has no
    /// place on Swift's cooperative threads) and calls `line` for each until it returns
    /// false or the input ends, then `end`.
    static func readLines(_ line: @escaping @Sendable (String) -> Bool, end: @escaping @Sendable () -> Void) {
        let thread = Thread {
            while let text = readLine(strippingNewline: true), line(text) {}
            end()
        }
        thread.name = "stdin"
        thread.start()
    }
}

/// A one-shot "we are done" that a signal, the end of input or a command can trigger.
final class Ending: Sendable {
    private let state = Mutex<(done: Bool, continuation: CheckedContinuation<Void, Never>?)>((false, nil))

    func end() {
        let continuation = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard !state.done else { return nil }
            state.done = true
            defer { state.continuation = nil }
            return state.continuation
        }
        continuation?.resume()
    }

    /// Waits for ``end()``, or for SIGINT or SIGTERM.
    func wait() async {
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
