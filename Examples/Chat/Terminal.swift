#if canImport(Glibc)
import Glibc
#endif
import Dispatch
import Foundation
import Synchronization

/// Output that reaches a pipe at once, and the end of a session (input ended, /quit,
/// or a signal).
enum Terminal {
    /// The line being typed, kept by the chat while it runs at a terminal.
    static let editor = LineEditor()

    /// Writes `line` at once; while someone types at the terminal, above what they typed.
    static func say(_ line: String) {
        if editor.isActive {
            editor.say(line)
        } else {
            try? FileHandle.standardOutput.write(contentsOf: Data((line + "\n").utf8))
        }
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
