#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Writes to standard output and standard error without buffering, so that each message
/// reaches a pipeline the moment it is printed.
enum Output {
    /// Writes `data` to standard output at once. A reader that went away (a closed pipe)
    /// ends the process, as it does for `cat`.
    static func write(_ data: Data) {
        do {
            try FileDescriptor.standardOutput.writeAll(data)
        } catch {
            exit(WormholeExitCode.failure.rawValue)
        }
    }

    /// Writes `text` and a newline to standard output.
    static func line(_ text: String) {
        write(Data((text + "\n").utf8))
    }

    /// Writes `wormhole: <text>` as one line to standard error.
    static func error(_ text: String) {
        let single = TextFormatting.replacing("\n", with: " ", in: text)
        _ = try? FileDescriptor.standardError.writeAll(Data("wormhole: \(single)\n".utf8))
    }

    /// Writes `wormhole: <text>` to standard error with no newline: a question whose
    /// answer is typed on the same line.
    static func prompt(_ text: String) {
        _ = try? FileDescriptor.standardError.writeAll(Data("wormhole: \(text)".utf8))
    }

    /// Whether standard input is a terminal (someone typing) rather than a pipe or file.
    static var inputIsTerminal: Bool { isatty(STDIN_FILENO) == 1 }

    /// Whether standard error is a terminal (someone watching) rather than a pipe or file.
    static var errorIsTerminal: Bool { isatty(STDERR_FILENO) == 1 }

    /// Whether standard output is a terminal (someone reading) rather than a pipe or file.
    static var outputIsTerminal: Bool { isatty(STDOUT_FILENO) == 1 }
}
