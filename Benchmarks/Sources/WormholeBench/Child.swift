#if canImport(Glibc)
import Glibc
#endif

/// A child process of the harness: this executable in another role, or another program.
///
/// Its standard output is a pipe the harness reads line by line (`READY`, then
/// `RESULT ...`); its standard error is the harness's. One extra descriptor can be handed
/// down as descriptor 3 (the pipe or socket of the baselines).
final class Child {
    let pid: pid_t
    private let output: Int32
    /// The write end of the child's standard input, when it was given one.
    private var input: Int32 = -1
    private var pending: [UInt8] = []
    private var exited = false

    /// This executable, for re-executing it in another role.
    static let selfPath: String = {
        var buffer = [CChar](repeating: 0, count: 4096)
        let count = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        return count > 0 ? String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self) : CommandLine.arguments[0]
    }()

    /// Starts `path` with `arguments` (not counting the program name).
    /// The corresponding C function is `posix_spawn`.
    init(path: String = Child.selfPath, _ arguments: [String], passing descriptor: Int32? = nil, quiet: Bool = false, withInput: Bool = false) throws(BenchError) {
        var ends: [Int32] = [0, 0]
        guard makePipe(&ends) else { throw BenchError("pipe: \(String(cString: strerror(errno)))") }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, ends[1], 1)
        if quiet { posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0) }
        var inputEnds: [Int32] = [-1, -1]
        if withInput {
            guard makePipe(&inputEnds) else { throw BenchError("pipe: \(String(cString: strerror(errno)))") }
            posix_spawn_file_actions_adddup2(&actions, inputEnds[0], 0)
        }
        var passed: Int32 = -1
        if let descriptor {
            // A copy above 3, so that dup2 always makes a new, inheritable descriptor 3.
            passed = fcntl(descriptor, F_DUPFD_CLOEXEC, 64)
            posix_spawn_file_actions_adddup2(&actions, passed, 3)
        }
        let argv: [UnsafeMutablePointer<CChar>?] = ([path] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var pid: pid_t = 0
        let status = posix_spawn(&pid, path, &actions, nil, argv, environ)
        close(ends[1])
        if passed >= 0 { close(passed) }
        if withInput { close(inputEnds[0]) }
        guard status == 0 else {
            close(ends[0])
            throw BenchError("cannot start \(path): \(String(cString: strerror(status)))")
        }
        self.pid = pid
        self.output = ends[0]
        self.input = inputEnds[1]
    }

    /// Writes a line to the child's standard input.
    func send(_ line: String) {
        guard input >= 0 else { return }
        let text = line + "\n"
        text.utf8CString.withUnsafeBufferPointer { _ = write(input, $0.baseAddress, $0.count - 1) }
    }

    deinit {
        if !exited { terminate() }
        close(output)
        if input >= 0 { close(input) }
    }

    /// The next line the child prints, or `nil` at end of file or after `timeout` seconds.
    func readLine(timeout: Double) -> String? {
        let deadline = Monotonic.now() + UInt64(timeout * 1e9)
        while true {
            if let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                let line = String(decoding: pending[..<newline], as: UTF8.self)
                pending.removeSubrange(...newline)
                return line
            }
            let now = Monotonic.now()
            guard now < deadline else { return nil }
            var descriptor = pollfd(fd: output, events: Int16(POLLIN), revents: 0)
            let ready = poll(&descriptor, 1, Int32(min(1000, (deadline - now) / 1_000_000 + 1)))
            if ready < 0 && errno != EINTR { return nil }
            if ready <= 0 { continue }
            var chunk = [UInt8](repeating: 0, count: 65536)
            let count = chunk.withUnsafeMutableBytes { read(output, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { return nil }
            pending.append(contentsOf: chunk[0..<count])
        }
    }

    /// Waits for a line starting with `prefix`; other lines are passed through to the
    /// harness's standard error.
    func expect(_ prefix: String, timeout: Double) throws(BenchError) -> String {
        let deadline = Monotonic.now() + UInt64(timeout * 1e9)
        while Monotonic.now() < deadline {
            guard let line = readLine(timeout: Double(deadline - min(deadline, Monotonic.now())) / 1e9) else { break }
            if line.hasPrefix(prefix) { return line }
            printError("  [child \(pid)] \(line)")
        }
        throw BenchError("child \(pid) did not print \(prefix) within \(timeout) s")
    }

    /// Waits for the child to exit; returns its exit status (128 + signal when killed).
    @discardableResult
    func wait() -> Int32 {
        guard !exited else { return 0 }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        exited = true
        let signal = status & 0x7f
        return signal == 0 ? (status >> 8) & 0xff : 128 + signal
    }

    /// Ends the child with SIGKILL and reaps it.
    func terminate() {
        guard !exited else { return }
        kill(pid, SIGKILL)
        wait()
    }
}

/// A failure of the harness itself, with a message that says what went wrong.
struct BenchError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// `key=value` pairs of a `RESULT` line.
func fields(of line: String) -> [String: String] {
    var result: [String: String] = [:]
    for part in line.split(separator: " ").dropFirst() {
        guard let equals = part.firstIndex(of: "=") else { continue }
        result[String(part[..<equals])] = String(part[part.index(after: equals)...])
    }
    return result
}

/// A pipe whose two ends are closed on exec (children get only what they are handed).
func makePipe(_ ends: inout [Int32]) -> Bool {
    guard pipe(&ends) == 0 else { return false }
    for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
    return true
}

/// Writes a line to standard error.
func printError(_ text: String) {
    let line = text + "\n"
    line.utf8CString.withUnsafeBufferPointer { _ = write(2, $0.baseAddress, $0.count - 1) }
}
