#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Synchronization

/// The line being typed at a terminal, kept by the chat rather than by the terminal, so
/// that a message arriving in the middle of it is shown above it instead of breaking it:
/// the typed text is erased, the message printed, and the typed text drawn again below,
/// as chat programs do.
///
/// While it runs, the terminal is in non-canonical mode without echo: each key reaches
/// the chat at once and the chat shows it. Signals stay with the terminal (Ctrl-C still
/// sends SIGINT). Keys: Enter says the line; Backspace erases a character, Ctrl-U the
/// line, Ctrl-W a word; Ctrl-D on an empty line ends the input; other control keys and
/// escape sequences (arrows, function keys) are ignored.
final class LineEditor: Sendable {
    private struct State {
        /// The terminal's settings before ``start(line:end:)``, put back by ``stop()``.
        var saved: termios?
        /// What has been typed on the current line.
        var typed: [Character] = []
        /// The bytes of a character not yet complete (UTF-8 arrives a byte at a time).
        var pending: [UInt8] = []
        /// Inside an escape sequence (`ESC [ ... final`), whose bytes are skipped.
        var escape: Escape = .none
    }

    private enum Escape { case none, started, sequence }

    private let state = Mutex(State())

    /// Whether the editor is drawing the line (between ``start(line:end:)`` and ``stop()``).
    var isActive: Bool { state.withLock { $0.saved != nil } }

    /// Takes the terminal on standard input out of canonical mode and echo, and reads keys
    /// on a thread of its own: `line` gets each line entered, until it returns false or
    /// Ctrl-D ends the input; then `end` is called. Returns false (and changes nothing)
    /// when standard input is not a terminal.
    func start(line: @escaping @Sendable (String) -> Bool, end: @escaping @Sendable () -> Void) -> Bool {
        var settings = termios()
        guard tcgetattr(STDIN_FILENO, &settings) == 0 else { return false }
        let saved = settings
        settings.c_lflag &= ~tcflag_t(ICANON | ECHO)
        withUnsafeMutableBytes(of: &settings.c_cc) { characters in
            characters[Int(VMIN)] = 1
            characters[Int(VTIME)] = 0
        }
        guard tcsetattr(STDIN_FILENO, TCSANOW, &settings) == 0 else { return false }
        state.withLock { $0.saved = saved }
        let thread = Thread { [self] in
            var byte: UInt8 = 0
            while true {
                let count = read(STDIN_FILENO, &byte, 1)
                if count < 0 && errno == EINTR { continue }
                guard count == 1, let entered = key(byte) else { break }
                if case .line(let text) = entered, !line(text) { break }
            }
            end()
        }
        thread.name = "keys"
        thread.start()
        return true
    }

    /// Puts the terminal's settings back.
    func stop() {
        guard var saved = state.withLock({ state in defer { state.saved = nil }; return state.saved }) else { return }
        tcsetattr(STDIN_FILENO, TCSANOW, &saved)
    }

    /// Shows `line` above the text being typed, which is drawn again below it.
    func say(_ line: String) {
        state.withLock { state in
            Self.write(Self.erasing(state.typed) + line + "\n" + String(state.typed))
        }
    }

    /// After Ctrl-C: the terminal no longer echoes `^C`, so the editor shows it, as the
    /// terminal would, and ends the line; what was typed is dropped.
    func interrupted() {
        state.withLock { state in
            state.typed = []
            Self.write("^C\n")
        }
    }

    private enum Entered { case editing, line(String) }

    /// Takes one byte typed; returns a whole line on Enter, `nil` at the end of input.
    private func key(_ byte: UInt8) -> Entered? {
        state.withLock { state -> Entered? in
            switch (state.escape, byte) {
            case (.started, UInt8(ascii: "[")), (.started, UInt8(ascii: "O")):
                state.escape = .sequence
                return .editing
            case (.started, _):
                state.escape = .none
                return .editing
            case (.sequence, 0x40...0x7E):
                state.escape = .none
                return .editing
            case (.sequence, _):
                return .editing
            case (.none, _):
                break
            }
            switch byte {
            case UInt8(ascii: "\n"), UInt8(ascii: "\r"):
                let text = String(state.typed)
                state.typed = []
                state.pending = []
                Self.write("\n")
                return .line(text)
            case 0x04:  // Ctrl-D: the end of input on an empty line, as the terminal has it.
                return state.typed.isEmpty ? nil : .editing
            case 0x7F, 0x08:  // Backspace
                if !state.typed.isEmpty {
                    Self.write(Self.erasing(state.typed))
                    state.typed.removeLast()
                    Self.write(String(state.typed))
                }
                return .editing
            case 0x15:  // Ctrl-U
                Self.write(Self.erasing(state.typed))
                state.typed = []
                return .editing
            case 0x17:  // Ctrl-W: the word before the cursor, and the spaces after it.
                Self.write(Self.erasing(state.typed))
                while state.typed.last?.isWhitespace == true { state.typed.removeLast() }
                while let last = state.typed.last, !last.isWhitespace { state.typed.removeLast() }
                Self.write(String(state.typed))
                return .editing
            case 0x1B:
                state.escape = .started
                return .editing
            case 0x00..<0x20:
                return .editing
            default:
                state.pending.append(byte)
                guard let text = String(validating: state.pending, as: UTF8.self) else {
                    // Not complete yet, or never will be: at most 4 bytes make a character.
                    if state.pending.count >= 4 { state.pending = [] }
                    return .editing
                }
                state.pending = []
                state.typed.append(contentsOf: text)
                Self.write(text)
                return .editing
            }
        }
    }

    /// What moves the cursor back to the start of the typed text, on however many rows of
    /// the terminal it takes, and clears from there to the end of the screen; nothing
    /// when nothing is typed (the cursor is at the start of an empty line).
    private static func erasing(_ typed: [Character]) -> String {
        guard !typed.isEmpty else { return "" }
        let rows = (typed.count - 1) / columns()
        return (rows > 0 ? "\u{1B}[\(rows)A" : "") + "\r\u{1B}[J"
    }

    /// The terminal's width, 80 when it does not say.
    private static func columns() -> Int {
        var size = winsize()
        guard ioctl(STDOUT_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 else { return 80 }
        return Int(size.ws_col)
    }

    private static func write(_ text: String) {
        try? FileHandle.standardOutput.write(contentsOf: Data(text.utf8))
    }
}
