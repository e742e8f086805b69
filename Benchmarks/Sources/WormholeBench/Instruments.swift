#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// A process an ``Instrument`` counts: its role in the measurement, its process id, and
/// for strace the tracer attached to it and the file it writes its summary to.
struct Tracee {
    var role: String
    var pid: pid_t
    var tracer: Child?
    var file: String
}

extension Runner {
    /// valgrind's options for a process of `role`: callgrind, quiet, one output file per
    /// process in `directory` (`role.PID`; `callgrind_control --dump` adds `role.PID.1`).
    static func callgrindArguments(_ directory: String, _ role: String) -> [String] {
        ["--tool=callgrind", "-q", "--callgrind-out-file=\(directory)/\(role).%p"]
    }

    /// Starts counting in every target: attaches `strace -c -f` to it and waits until
    /// every thread is traced, or zeroes callgrind's counters.
    static func begin(_ instrument: Instrument, _ targets: [(String, pid_t)]) throws(BenchError) -> [Tracee] {
        switch instrument {
        case .strace(let tool, let directory):
            var tracees: [Tracee] = []
            for (role, pid) in targets {
                let file = "\(directory)/\(role).\(pid).strace"
                // -U name,calls: the summary's columns, so that it parses the same way
                // whatever strace's version; -f with -p: every thread, and new ones.
                let tracer = try Child(path: tool, ["-c", "-f", "-U", "name,calls", "-o", file, "-p", String(pid)], quiet: true)
                tracees.append(Tracee(role: role, pid: pid, tracer: tracer, file: file))
            }
            for tracee in tracees { try waitUntilTraced(tracee.pid, timeout: 30) }
            return tracees
        case .callgrind(_, let control, let directory, _):
            var tracees: [Tracee] = []
            for (role, pid) in targets {
                let status = try Child(path: control, ["--zero", String(pid)], quiet: true).wait()
                guard status == 0 else { throw BenchError("callgrind_control --zero \(pid) (\(role)) exited with \(status)") }
                tracees.append(Tracee(role: role, pid: pid, tracer: nil, file: "\(directory)/\(role).\(pid).1"))
            }
            return tracees
        }
    }

    /// Stops counting and reads the counts: strace is detached (SIGINT: it writes its
    /// summary and leaves the process running), callgrind dumps its counters.
    static func end(_ instrument: Instrument, _ tracees: [Tracee]) throws(BenchError) -> [ProcessCounts] {
        var counts: [ProcessCounts] = []
        switch instrument {
        case .strace:
            for tracee in tracees { if let tracer = tracee.tracer { kill(tracer.pid, SIGINT) } }
            for tracee in tracees {
                tracee.tracer?.wait()
                guard let text = readText(tracee.file) else { throw BenchError("strace wrote no summary to \(tracee.file)") }
                counts.append(ProcessCounts(role: tracee.role, systemCalls: Self.straceSummary(text)))
            }
        case .callgrind(_, let control, _, _):
            for tracee in tracees {
                let status = try Child(path: control, ["--dump", String(tracee.pid)], quiet: true).wait()
                guard status == 0 else { throw BenchError("callgrind_control --dump \(tracee.pid) (\(tracee.role)) exited with \(status)") }
                guard let text = readText(tracee.file), let total = Self.callgrindTotal(text) else {
                    throw BenchError("callgrind wrote no totals to \(tracee.file)")
                }
                counts.append(ProcessCounts(role: tracee.role, instructions: total))
            }
        }
        return counts
    }

    /// Waits until every thread of `pid` has a tracer (`TracerPid` in its status).
    static func waitUntilTraced(_ pid: pid_t, timeout: Double) throws(BenchError) {
        let deadline = Monotonic.now() + UInt64(timeout * 1e9)
        while Monotonic.now() < deadline {
            let tasks = directoryEntries("/proc/\(pid)/task")
            let traced = tasks.allSatisfy { task in
                (readText("/proc/\(pid)/task/\(task)/status") ?? "").split(separator: "\n")
                    .first { $0.hasPrefix("TracerPid:") }
                    .map { $0.dropFirst("TracerPid:".count).trimmingSpaces != "0" } ?? false
            }
            if !tasks.isEmpty && traced { return }
            Monotonic.sleep(seconds: 0.02)
        }
        throw BenchError("strace did not attach to process \(pid) within \(timeout) s (is ptrace allowed here?)")
    }

    /// System calls by name from a summary of `strace -c -U name,calls`:
    ///
    ///     syscall            calls
    ///     ---------------- ---------
    ///     flock              40000
    ///     ...
    ///     total              80000
    static func straceSummary(_ text: String) -> [String: Int] {
        var calls: [String: Int] = [:]
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: " ", omittingEmptySubsequences: true)
            guard parts.count == 2, let count = Int(parts[1]), parts[0] != "total" else { continue }
            calls[String(parts[0]), default: 0] += count
        }
        return calls
    }

    /// The instructions (Ir) of a callgrind output file: its `totals:` line (`summary:`
    /// in files without one).
    static func callgrindTotal(_ text: String) -> UInt64? {
        var summary: UInt64?
        for line in text.split(separator: "\n") {
            if line.hasPrefix("totals:") { return UInt64(line.dropFirst("totals:".count).trimmingSpaces.split(separator: " ").first ?? "") }
            if line.hasPrefix("summary:") { summary = UInt64(line.dropFirst("summary:".count).trimmingSpaces.split(separator: " ").first ?? "") }
        }
        return summary
    }
}

/// The full path of `name` on `$PATH`, if it is there and executable.
func executableOnPath(_ name: String) -> String? {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
    for directory in path.split(separator: ":") {
        let candidate = "\(directory)/\(name)"
        if access(candidate, X_OK) == 0 { return candidate }
    }
    return nil
}
