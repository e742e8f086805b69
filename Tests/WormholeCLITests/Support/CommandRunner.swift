#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Synchronization
import WormholeTestSupport

/// The programs this package builds, found next to the test bundle.
enum Products {
    /// The directory the build put its products in: where the test bundle is.
    static let directory: String = {
        var candidates: [URL] = []
        if let executable = Bundle.main.executableURL { candidates.append(executable.deletingLastPathComponent()) }
        candidates.append(URL(fileURLWithPath: Bundle.main.bundlePath).deletingLastPathComponent())
        candidates.append(URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent())
        if let resolved = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            candidates.append(URL(fileURLWithPath: resolved).deletingLastPathComponent())
        }
        for directory in candidates {
            var url = directory
            for _ in 0..<3 {
                if FileManager.default.isExecutableFile(atPath: url.appendingPathComponent("wormhole").path) {
                    return url.path
                }
                url = url.deletingLastPathComponent()
            }
        }
        return candidates.first?.path ?? "."
    }()

    /// The path of the product `name` (such as `wormhole`); an absolute path is kept.
    static func path(_ name: String) -> String { name.hasPrefix("/") ? name : directory + "/" + name }

    /// The product `name` copied where every user may run it, for tests that run it as
    /// another Unix user: a clone in a private directory (0700, as /root and many home
    /// directories are) keeps other users from the build's own products. One directory
    /// of this test process's under /tmp (0755), removed when the process exits.
    static func runnableByAnyone(_ name: String) -> String {
        copies.withLock { copied -> String in
            let copy = sharedDirectory + "/" + name
            if copied.insert(name).inserted {
                try? FileManager.default.removeItem(atPath: copy)
                try? FileManager.default.copyItem(atPath: path(name), toPath: copy)
                chmod(copy, 0o755)
            }
            return copy
        }
    }

    private static let copies = Mutex<Set<String>>([])

    private static let sharedDirectory: String = {
        var template = Array("/tmp/wormhole-test-products-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { buffer in
            buffer.baseAddress.flatMap { mkdtemp($0) }.map { String(cString: $0) }
        }
        guard let made else { return directory }
        chmod(made, 0o755)
        atexit { try? FileManager.default.removeItem(atPath: Products.sharedDirectory) }
        return made
    }()
}

/// Time to wait, counted only while this task runs: when other tests keep every thread
/// of the cooperative pool busy, a pause that should take 10 ms may take seconds, and
/// that starvation is not the command's fault.
struct Budget {
    private var remaining: Double

    private let interval: Duration

    /// How often a wait looks, unless told.
    static let usualInterval: Duration = .milliseconds(10)

    init(seconds: Double, interval: Duration = usualInterval) {
        remaining = seconds
        self.interval = interval
    }

    var isSpent: Bool { remaining <= 0 }

    /// Sleeps about `interval` (10 ms unless told) and charges at most 50 ms of it to the
    /// budget.
    mutating func pause() async {
        let start = ContinuousClock.now
        try? await Task.sleep(for: interval)
        let elapsed = ContinuousClock.now - start
        remaining -= min(Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18, 0.05)
    }
}

/// What a finished command did.
struct CommandResult: Sendable {
    /// The exit status, or the signal number when ``signaled``.
    let status: Int32
    /// Whether a signal ended the process.
    let signaled: Bool
    let stdout: Data
    let stderr: String

    var output: String { String(decoding: stdout, as: UTF8.self) }
    var lines: [String] { output.split(separator: "\n", omittingEmptySubsequences: false).dropLast().map(String.init) }
    var stderrLines: [String] { stderr.split(separator: "\n").map(String.init) }
}

/// A program of this package, run as a real separate process with its output in files.
final class RunningCommand: @unchecked Sendable {
    let process = Process()
    /// Standard input, when the command was started with one to write to.
    private let inputPipe: Pipe?
    private let outputPath: String
    private let errorPath: String
    /// The files given to the process as its standard streams, closed once it has exited
    /// (``finish(seconds:)``): left to Foundation, they stayed open in this process, three
    /// per command, and a full run passed 1,024 descriptors, past which Foundation's
    /// `Process` aborts ("bit out of range 0 - FD_SETSIZE on fd_set").
    private let streams: [FileHandle]

    init(_ product: String, _ arguments: [String], environment: [String: String], input: Data?, interactive: Bool = false, in directory: TemporaryDirectory) throws {
        let id = UUID().uuidString
        outputPath = directory.file(".out-\(id)")
        errorPath = directory.file(".err-\(id)")
        _ = FileManager.default.createFile(atPath: outputPath, contents: nil)
        _ = FileManager.default.createFile(atPath: errorPath, contents: nil)
        process.executableURL = URL(fileURLWithPath: Products.path(product))
        process.arguments = arguments
        process.environment = environment
        var streams = [FileHandle(forWritingAtPath: outputPath), FileHandle(forWritingAtPath: errorPath)]
        process.standardOutput = streams[0]
        process.standardError = streams[1]
        inputPipe = interactive ? Pipe() : nil
        if let inputPipe {
            process.standardInput = inputPipe
        } else if let input {
            let inputPath = directory.file(".in-\(id)")
            _ = FileManager.default.createFile(atPath: inputPath, contents: input)
            streams.append(FileHandle(forReadingAtPath: inputPath))
            process.standardInput = streams.last!
        } else {
            streams.append(FileHandle(forReadingAtPath: "/dev/null"))
            process.standardInput = streams.last!
        }
        self.streams = streams.compactMap { $0 }
        try process.run()
    }

    var pid: Int32 { process.processIdentifier }

    /// A command the test no longer holds is killed: a failed expectation must not leave
    /// a listener running after the test (it would keep `swift test` waiting on its output).
    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        closeStreams()
    }

    /// Closes this process's copies of the command's standard streams (the command has its
    /// own); its output stays readable by path.
    private func closeStreams() {
        for stream in streams { try? stream.close() }
    }

    /// Writes `text` to the standard input of a command started with `interactive`.
    func type(_ text: String) throws {
        try inputPipe?.fileHandleForWriting.write(contentsOf: Data(text.utf8))
    }

    /// Ends the standard input of a command started with `interactive`.
    func closeInput() throws {
        try inputPipe?.fileHandleForWriting.close()
    }
    var stdout: Data { FileManager.default.contents(atPath: outputPath) ?? Data() }
    var stderr: String { String(decoding: FileManager.default.contents(atPath: errorPath) ?? Data(), as: UTF8.self) }

    /// Waits until standard error contains `text` (true), or the process exits or
    /// `seconds` pass (false).
    func waitForStandardError(containing text: String, seconds: Double = 60) async -> Bool {
        await waitUntil(seconds: seconds) { self.stderr.contains(text) }
    }

    /// Waits until standard output contains `text`.
    /// `interval`: how often to look (10 ms unless told; shorter to act as soon as the
    /// text shows).
    func waitForStandardOutput(containing text: String, seconds: Double = 60, interval: Duration = Budget.usualInterval) async -> Bool {
        await waitUntil(seconds: seconds, interval: interval) { String(decoding: self.stdout, as: UTF8.self).contains(text) }
    }

    private func waitUntil(seconds: Double, interval: Duration = Budget.usualInterval, _ condition: () -> Bool) async -> Bool {
        var budget = Budget(seconds: seconds, interval: interval)
        while !budget.isSpent {
            if condition() { return true }
            if !process.isRunning { return condition() }
            await budget.pause()
        }
        return condition()
    }

    /// Sends `signal` to the process.
    func send(_ signal: Int32) { kill(process.processIdentifier, signal) }

    /// Waits for the process to exit (killing it after `seconds`) and returns what it did.
    func finish(seconds: Double = 60) async -> CommandResult {
        var budget = Budget(seconds: seconds)
        while process.isRunning && !budget.isSpent {
            await budget.pause()
        }
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        closeStreams()
        return CommandResult(
            status: process.terminationStatus,
            signaled: process.terminationReason == .uncaughtSignal,
            stdout: stdout, stderr: stderr)
    }
}

/// Runs this package's programs against one private temporary container root.
final class Sandbox: Sendable {
    let root = TemporaryDirectory()
    /// The environment every command gets: the containers moved into ``root``.
    let environment: [String: String]

    init(extra: [String: String] = [:]) {
        var environment = ProcessInfo.processInfo.environment
        // SHELL too, so that what `script` runs is the same here as where it is unset (CI).
        for name in ["WORMHOLE_DIRECTORY", "WORMHOLE_GROUP", "WORMHOLE_APP_GROUPS_DIRECTORY", "WORMHOLE_POSTGRES_URL", "SHELL"] {
            environment.removeValue(forKey: name)
        }
        environment["WORMHOLE_APP_GROUPS_DIRECTORY"] = root.file("app-groups")
        environment.merge(extra) { $1 }
        self.environment = environment
    }

    /// The default container's directory, as the CLI resolves it here.
    var defaultContainer: String { root.file("app-groups") + "/group.wormhole.default" }

    /// Starts `wormhole` (or another product) with `arguments`.
    func start(_ arguments: [String], product: String = "wormhole", input: Data? = nil, interactive: Bool = false,
               environment extra: [String: String] = [:]) throws -> RunningCommand {
        try RunningCommand(product, arguments, environment: environment.merging(extra) { $1 }, input: input,
                           interactive: interactive, in: root)
    }

    /// Starts `wormhole` (or another product) on a pseudo-terminal of its own, through
    /// util-linux's `script`, as a person at a terminal would run it: its standard input,
    /// output and error are the terminal. What it writes, and the terminal's echo of what
    /// is typed (Ctrl-C shows as `^C`), comes back as standard output, lines ending in
    /// "\r\n"; ``RunningCommand/type(_:)`` types at the terminal.
    ///
    /// `script` runs the command through a shell, which `exec`s it: the command's own
    /// status is `script`'s. (Without `exec`, dash, `script`'s shell when `SHELL` is
    /// unset, waits for it in the terminal's foreground group, and Ctrl-C kills dash:
    /// status 130 though the command ended normally.)
    func startOnTerminal(_ arguments: [String], product: String = "wormhole") throws -> RunningCommand {
        let words = [Products.path(product)] + arguments
        let command = "exec " + words.map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }.joined(separator: " ")
        return try RunningCommand("/usr/bin/script", ["-qfec", command, "/dev/null"], environment: environment, input: nil,
                                  interactive: true, in: root)
    }

    /// Starts `wormhole` (or another product) with SIGINT, SIGTERM and SIGHUP blocked, as
    /// a process started from a Dispatch or Swift concurrency thread is: a process
    /// inherits its parent's blocked signals (python3 blocks them, then execs it, so the
    /// process keeps its pid).
    func startWithSignalsBlocked(_ arguments: [String], product: String = "wormhole", interactive: Bool = false) throws -> RunningCommand {
        let blockThenRun = """
            import os, signal, sys
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
            os.execv(sys.argv[1], sys.argv[1:])
            """
        return try start(["python3", "-c", blockThenRun, Products.path(product)] + arguments, product: "/usr/bin/env", interactive: interactive)
    }

    /// Runs `wormhole` (or another product) to completion.
    func run(_ arguments: [String], product: String = "wormhole", input: Data? = nil, environment extra: [String: String] = [:], seconds: Double = 60) async throws -> CommandResult {
        try await start(arguments, product: product, input: input, environment: extra).finish(seconds: seconds)
    }
}

/// Runs `wormhole` as a user who is not root, for tests of what such a user may not do
/// (root may enter any directory and read any file, so the test would prove nothing as
/// root). When the test process is not root, that is its own user; as root (CI), a Unix
/// user made for the test with `useradd`, as whom `runuser` runs the product (copied
/// where every user may run it: ``Products/runnableByAnyone(_:)``), removed when the
/// runner is dropped. The sandbox's root is given to that user, as a directory of the
/// user's own.
final class UnprivilegedRunner: Sendable {
    /// Whether commands can run as a user who is not root here.
    static var isAvailable: Bool {
        geteuid() != 0 || (FileManager.default.isExecutableFile(atPath: "/usr/sbin/useradd")
                           && FileManager.default.isExecutableFile(atPath: "/usr/sbin/runuser"))
    }

    let sandbox: Sandbox
    /// The user made for the test; `nil` when commands run as the test process's own user.
    let user: String?
    let uid: uid_t
    let gid: gid_t

    init(_ sandbox: Sandbox) throws {
        self.sandbox = sandbox
        guard geteuid() == 0 else {
            user = nil
            uid = geteuid()
            gid = getegid()
            return
        }
        let name = "whuser" + String(UInt32.random(in: 0...UInt32.max), radix: 36)
        guard try Self.system(["/usr/sbin/useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name]) == 0,
              let entry = getpwnam(name) else {
            throw POSIXError(.EPERM)
        }
        user = name
        uid = entry.pointee.pw_uid
        gid = entry.pointee.pw_gid
        own(sandbox.root.path)
    }

    deinit {
        if let user { _ = try? Self.system(["/usr/sbin/userdel", user]) }
    }

    /// Gives `path`, made by the test, to the user, as if the user had made it.
    func own(_ path: String) {
        if user != nil { chown(path, uid, gid) }
    }

    /// Runs `wormhole` with `arguments` as the user, in the sandbox's environment.
    func run(_ arguments: [String]) async throws -> CommandResult {
        guard let user else { return try await sandbox.run(arguments) }
        let environment = ["PATH=/usr/bin:/bin", "LANG=C.UTF-8",
                           "WORMHOLE_APP_GROUPS_DIRECTORY=" + (sandbox.environment["WORMHOLE_APP_GROUPS_DIRECTORY"] ?? "")]
        return try await sandbox.start(["-u", user, "--", "/usr/bin/env", "-i"] + environment + [Products.runnableByAnyone("wormhole")] + arguments,
                                       product: "/usr/sbin/runuser").finish()
    }

    /// Runs a program to its end, its output discarded; returns its exit status.
    private static func system(_ arguments: [String]) throws -> Int32 {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: arguments[0])
        process.arguments = Array(arguments.dropFirst())
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        return process.terminationStatus
    }
}
