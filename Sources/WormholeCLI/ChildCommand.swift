#if canImport(Glibc)
import Glibc
#endif
import Dispatch
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Runs a command with bytes on its standard input and collects its standard output and
/// error: what `wormhole respond` does for each request. No shell is involved: the
/// command and its arguments are passed as they are (`posix_spawnp`, the `PATH` search).
///
/// The command starts as a command started by a shell would: every signal at its default
/// action and none blocked. This process ignores SIGPIPE (a reader that went away must
/// not kill it) and runs the command from a Dispatch thread, which blocks signals; both
/// would otherwise pass to the command through `exec`, and a pipeline such as
/// `while :; do echo y; done | head -n1` would never end.
enum ChildCommand {
    struct Outcome {
        var status: Int32
        /// Standard output, up to the limit given to ``run(_:input:outputLimit:)``.
        var output: [UInt8]
        /// Whether the command wrote more than that limit: it was not read further (the
        /// command then gets EPIPE, or SIGPIPE, for what it writes after).
        var outputExceeded: Bool
        /// Standard error, its first ``errorLimit`` bytes.
        var error: [UInt8]
        /// "exited with status N" or "was killed by signal N".
        var ending: String
        var succeeded: Bool { status == 0 }
    }

    /// How much of a command's standard error is kept (for the error reply); the rest is
    /// read and dropped.
    static let errorLimit = 65_536

    /// Runs `arguments` with `input` on its standard input. Its standard output is read
    /// up to `outputLimit` bytes (what a reply may hold): a command that writes more is
    /// not read further, so that its output costs no more memory than a reply.
    static func run(_ arguments: [String], input: [UInt8], outputLimit: Int) -> Result<Outcome, CommandFailure> {
        var toChild: [Int32] = [0, 0], fromChild: [Int32] = [0, 0], errorsOf: [Int32] = [0, 0]
        guard pipe(&toChild) == 0, pipe(&fromChild) == 0, pipe(&errorsOf) == 0 else {
            return .failure(CommandFailure("cannot make pipes for '\(arguments[0])': \(String(cString: strerror(errno)))"))
        }
        // Not inherited by the command (its standard streams are dup2'd copies).
        for fd in toChild + fromChild + errorsOf { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, toChild[0], 0)
        posix_spawn_file_actions_adddup2(&actions, fromChild[1], 1)
        posix_spawn_file_actions_adddup2(&actions, errorsOf[1], 2)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        Self.startClean(&attributes)
        var pid: pid_t = 0
        let argv = arguments.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        let spawned = posix_spawnp(&pid, arguments[0], &actions, &attributes, argv, environ)
        for fd in [toChild[0], fromChild[1], errorsOf[1]] { close(fd) }
        guard spawned == 0 else {
            for fd in [toChild[1], fromChild[0], errorsOf[0]] { close(fd) }
            return .failure(CommandFailure("cannot run '\(arguments[0])': \(String(cString: strerror(spawned)))"))
        }
        let fed = feed(input, to: toChild[1])
        let (output, error, outputExceeded) = collect(output: fromChild[0], errors: errorsOf[0], outputLimit: outputLimit)
        fed.wait()
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let exited = status & 0x7f == 0
        let code = exited ? (status >> 8) & 0xff : status & 0x7f
        return .success(Outcome(status: exited ? code : 128 + code, output: output, outputExceeded: outputExceeded, error: error,
                                ending: exited ? "exited with status \(code)" : "was killed by signal \(code)"))
    }

    /// Writes `input` to `writer` and closes it, from a thread of its own, so that a
    /// command that writes much before reading all of it does not wait on us while we
    /// wait on it. The semaphore is signalled once it is done.
    private static func feed(_ input: [UInt8], to writer: Int32) -> DispatchSemaphore {
        let fed = DispatchSemaphore(value: 0)
        signal(SIGPIPE, SIG_IGN)
        DispatchQueue.global().async {
            defer { fed.signal() }
            var offset = 0
            while offset < input.count {
                let written = input.withUnsafeBytes { write(writer, $0.baseAddress! + offset, $0.count - offset) }
                if written < 0 && errno == EINTR { continue }
                if written <= 0 { break }
                offset += written
            }
            close(writer)
        }
        return fed
    }

    /// Reads the command's standard output (up to `outputLimit` bytes, then no more) and
    /// standard error (its first ``errorLimit`` bytes kept) until both end; closes both.
    private static func collect(output outputFD: Int32, errors errorsFD: Int32,
                                outputLimit: Int) -> (output: [UInt8], error: [UInt8], outputExceeded: Bool) {
        var output: [UInt8] = [], error: [UInt8] = [], outputExceeded = false
        var open = [outputFD, errorsFD]
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while !open.isEmpty {
            var fds = open.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            if poll(&fds, nfds_t(fds.count), -1) < 0 { if errno == EINTR { continue } else { break } }
            for entry in fds where entry.revents != 0 {
                let count = buffer.withUnsafeMutableBytes { read(entry.fd, $0.baseAddress, $0.count) }
                if count > 0 {
                    if entry.fd == outputFD {
                        output += buffer[0..<min(count, outputLimit + 1 - output.count)]
                        // One byte past the limit tells that it was exceeded; no more is read.
                        guard output.count > outputLimit else { continue }
                        output.removeLast(output.count - outputLimit)
                        outputExceeded = true
                    } else {
                        error += buffer[0..<min(count, max(0, errorLimit - error.count))]
                        continue
                    }
                } else if count < 0 && errno == EINTR {
                    continue
                }
                close(entry.fd)
                open.removeAll { $0 == entry.fd }
            }
        }
        return (output, error, outputExceeded)
    }

    /// Sets `attributes` so that the child starts with every signal at its default action
    /// (`POSIX_SPAWN_SETSIGDEF` with all signals: an ignored one, such as this process's
    /// SIGPIPE, would stay ignored across `exec`) and an empty signal mask
    /// (`POSIX_SPAWN_SETSIGMASK`: the spawning thread's mask is inherited otherwise).
    ///
    /// Every bit of the default set is set, glibc's own signals (32 and 33) included:
    /// `sigfillset` leaves them out, and glibc's `posix_spawn` then starts the child with
    /// them ignored.
    static func startClean(_ attributes: inout posix_spawnattr_t) {
        var all = sigset_t(), none = sigset_t()
        withUnsafeMutableBytes(of: &all) { $0.initializeMemory(as: UInt8.self, repeating: 0xff) }
        sigemptyset(&none)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))
    }
}
