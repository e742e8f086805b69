import ArgumentParser
@_spi(Backend) import Wormhole

/// The exit statuses of `wormhole`; `Docs/CLI.md` documents them for scripts.
enum WormholeExitCode {
    /// The command did what was asked.
    static let success = ExitCode.success
    /// Something failed at run time: the container is unsafe or unavailable, a file
    /// cannot be read, the input is not JSON, a system call failed.
    static let failure = ExitCode.failure
    /// Nothing to show: `listen` or `observe` timed out before the messages it waited
    /// for arrived, or `read` found no message.
    static let noMessage = ExitCode(2)
    /// The command line is wrong: an unknown option, a missing argument, an invalid
    /// identifier or name, options that conflict (EX_USAGE).
    static let usage = ExitCode.validationFailure

    /// The status for a library error: names that cannot be used are the command line's
    /// fault; everything else happened at run time.
    static func forError(_ error: WormholeError) -> ExitCode {
        switch error.code {
        case .invalidIdentifier, .invalidConfiguration: usage
        default: failure
        }
    }
}

/// A failure the CLI itself detects, with the line to print and the status to exit with.
struct CommandFailure: Error, CustomStringConvertible {
    let description: String
    let exitCode: ExitCode

    init(_ description: String, exitCode: ExitCode = WormholeExitCode.failure) {
        self.description = description
        self.exitCode = exitCode
    }
}

/// Runs a command's body and turns its errors into one line on standard error and an
/// exit status: `wormhole: <what went wrong and how to fix it>`.
enum Failures {
    static func reported<T>(_ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch {
            throw translate(error)
        }
    }

    /// Prints `error` and returns the ``ExitCode`` that ends the process quietly;
    /// argument-parser's own errors pass through so that it prints their usage help.
    static func translate(_ error: any Error) -> any Error {
        switch error {
        case let error as WormholeError:
            Output.error(error.description)
            return WormholeExitCode.forError(error)
        case let failure as CommandFailure:
            Output.error(failure.description)
            return failure.exitCode
        default:
            return error
        }
    }
}
