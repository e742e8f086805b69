import Foundation
import Testing
@_spi(Backend) @testable import Wormhole
@_spi(Backend) @testable import WormholeCore
@_spi(Backend) @testable import WormholeFiles
import WormholeTestSupport

/// Collects values from any thread; waits for a count with a deadline.
final class Collector<Value: Sendable>: Sendable {
    private let values = Locked<[Value]>([])

    func append(_ value: Value) { values.withLock { $0.append(value) } }
    var all: [Value] { values.withLock { $0 } }
    var count: Int { values.withLock { $0.count } }

    /// Waits until at least `count` values arrived, or `seconds` passed.
    @discardableResult
    func wait(for count: Int, seconds: Double = 10) async -> [Value] {
        await eventually(seconds: seconds) { self.count >= count }
        return all
    }
}

/// A listener of `identifier` (`Int` messages) that stalls on the first one until `gate`
/// is signalled, then collects every message in `received`. On a queue of its own: a
/// listener without one runs on the process's reader thread, and stalling that would
/// stall every other listener of the process.
struct StalledListener {
    let token: ListenerToken
    let gate = DispatchSemaphore(value: 0)
    let received = Collector<Int>()

    init(_ wormhole: Wormhole, identifier: String) throws {
        let gate = self.gate, received = self.received
        token = try wormhole.listenForMessage(withIdentifier: identifier, as: Int.self, queue: DispatchQueue(label: "stalled")) { value in
            if value == 1 { gate.wait() }
            received.append(value)
        }
    }
}

/// Waits until `condition` holds (an error counts as not yet), or `seconds` passed;
/// returns whether it held.
@discardableResult
func eventually(seconds: Double = 10, _ condition: () throws -> Bool) async -> Bool {
    // On the monotonic clock, as the library's own timeouts: a step of the wall clock
    // would end the wait early or make it longer.
    let deadline = ContinuousClock.now + .seconds(seconds)
    while !((try? condition()) ?? false) {
        if ContinuousClock.now > deadline { return false }
        try? await Task.sleep(for: .milliseconds(5))
    }
    return true
}

/// Waits briefly so that nothing that should not arrive can arrive unseen.
func settle(_ milliseconds: Int = 200) async {
    try? await Task.sleep(for: .milliseconds(milliseconds))
}

struct Note: Codable, Sendable, Equatable {
    var text: String
}

/// The test agent: a separate program the integration tests run as real processes.
enum Agent {
    /// Whether `payload` is a whole message as the agent passes them:
    /// "TAG:i:<length>:" and then that many bytes.
    static func isWhole(_ payload: Data) -> Bool {
        let parts = String(decoding: payload, as: UTF8.self).split(separator: ":", maxSplits: 3, omittingEmptySubsequences: false)
        return parts.count == 4 && Int(parts[2]) == parts[3].utf8.count
    }

    /// The agent executable, built next to the test bundle.
    static let path: String = {
        var candidates: [URL] = []
        if let executable = Bundle.main.executableURL { candidates.append(executable.deletingLastPathComponent()) }
        candidates.append(URL(fileURLWithPath: Bundle.main.bundlePath).deletingLastPathComponent())
        candidates.append(URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent())
        for directory in candidates {
            var url = directory
            for _ in 0..<3 {
                let agent = url.appendingPathComponent("WormholeTestAgent").path
                if FileManager.default.isExecutableFile(atPath: agent) { return agent }
                url = url.deletingLastPathComponent()
            }
        }
        return "WormholeTestAgent"
    }()

    /// Starts the agent with `arguments`; its standard output goes to `output` if given.
    /// `directory` and `environment`: its current directory, and variables added to its
    /// environment. (Tests never change the test process's own: every test running
    /// beside them shares those.)
    static func start(_ arguments: [String], output: FileHandle? = nil, in directory: String? = nil,
                      environment: [String: String] = [:]) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        if let output { process.standardOutput = output }
        if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
        if !environment.isEmpty { process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 } }
        try process.run()
        return process
    }

    /// Runs the agent to completion; returns its exit status and standard output.
    static func run(_ arguments: [String], in directory: String? = nil, environment: [String: String] = [:]) throws -> (status: Int32, output: String) {
        let pipe = Pipe()
        let process = try start(arguments, output: pipe.fileHandleForWriting, in: directory, environment: environment)
        try? pipe.fileHandleForWriting.close()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }
}

/// Reads `handle` to its end on a thread of its own. A blocking read on one of Swift
/// concurrency's pool threads (as many as there are cores) holds up every other test
/// of the process for as long as the writer runs: the fault walk's agents did, and tests
/// of other suites then went past their time limits.
func readToEnd(_ handle: FileHandle) async -> Data {
    await withCheckedContinuation { continuation in
        Thread.detachNewThread { continuation.resume(returning: handle.readDataToEndOfFile()) }
    }
}

/// Waits until `path` exists, or `seconds` passed.
@discardableResult
func waitForFile(_ path: String, seconds: Double = 30) async -> Bool {
    await eventually(seconds: seconds) { FileManager.default.fileExists(atPath: path) }
}

/// Waits until `process` exits, or `seconds` passed (then kills it).
func waitForExit(_ process: Process, seconds: Double = 120) async -> Int32? {
    guard await eventually(seconds: seconds, { !process.isRunning }) else {
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        return nil
    }
    return process.terminationStatus
}

/// The lines "sequence payload" a listening agent wrote.
func listenerLines(_ path: String) throws -> [(sequence: UInt64, payload: String)] {
    try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n").map { line in
        let space = line.firstIndex(of: " ") ?? line.endIndex
        return (UInt64(line[..<space]) ?? 0, String(line[line.index(after: space)...]))
    }
}

/// A small tmpfs mounted for one test (root only), unmounted when the test lets go of it:
/// a file system that a test can fill.
final class SmallFilesystem {
    let path: String
    private let parent = TemporaryDirectory()

    init(size: String = "256k") throws {
        path = parent.file("small")
        mkdir(path, 0o700)
        guard mount("tmpfs", path, "tmpfs", 0, "size=\(size),mode=0700") == 0 else {
            throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
        }
    }

    deinit { umount2(path, Int32(MNT_DETACH)) }

    /// Takes every block with the file `filler` (inodes are left: an empty file can still
    /// be made); returns its path, to remove when space is to come back. It writes until
    /// the file system says it is full (`ENOSPC`), a page at a time, then a byte at a time:
    /// any other failure (`EINTR`, or `ENOMEM` on a machine short of memory) is tried
    /// again, not taken for a full disk that is not.
    @discardableResult
    func fill() throws -> String {
        let filler = path + "/filler"
        let fd = open(filler, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        defer { close(fd) }
        let page = [UInt8](repeating: 0, count: 4096)
        for size in [page.count, 1] {
            var retries = 0
            while true {
                if page.withUnsafeBytes({ write(fd, $0.baseAddress, size) }) >= 0 { continue }
                if errno == ENOSPC { break }
                retries += 1
                guard retries < 1000 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
            }
        }
        return filler
    }
}

/// Scales the heaviest process tests: `WORMHOLE_TEST_SCALE=0.25` runs a quarter of the
/// messages and kill cycles (the sanitizer runs use it; instrumented code is ~10x slower).
func scaled(_ count: Int) -> Int {
    let scale = Double(ProcessInfo.processInfo.environment["WORMHOLE_TEST_SCALE"] ?? "") ?? 1
    return max(1, Int((Double(count) * scale).rounded()))
}

/// Where a test's container lives: in a directory only its owner may change, or in one
/// where everyone may create files, with the sticky bit, as `/tmp` and `/dev/shm`
/// (the engine watches the two kinds of parent differently).
enum ContainerParent: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case `private`
    case shared

    var testDescription: String { "in a \(rawValue) directory" }

    /// A directory of this kind in `directory`, for containers to be made in.
    func directory(in directory: TemporaryDirectory) -> String {
        guard self == .shared else { return directory.path }
        let path = directory.file("shared")
        mkdir(path, 0o700)
        chmod(path, 0o1777)
        return path
    }
}

/// What the process looks like when a listener of `identifier` in `directory` heard
/// nothing it should have: for the failure's message, so that a rare failure in a
/// loaded run says where the message stopped. The log's size; the listener claims
/// (their positions say whether a drain read the message); the reader thread's wake-ups
/// so far; the process's threads; and whether a new listener of another identifier in
/// the same container hears a pass within 5 s (the reader thread and its watch work).
func silentListenerReport(_ wormhole: Wormhole, directory: String, identifier: String) async -> String {
    var facts: [String] = []
    var status = stat()
    let log = directory + "/" + identifier + ".wormhole"
    facts.append(lstat(log, &status) == 0 ? "log \(status.st_size) bytes" : "no log")
    facts.append("claims " + (((try? wormhole.listeners(identifier: identifier)) ?? []).map { "\($0.position)/\($0.behind) behind" }.joined(separator: ", ")))
    facts.append("reader wake-ups \(ReaderThreadWakeUps.count)")
    let threads = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8))?
        .split(separator: "\n").first { $0.hasPrefix("Threads:") }.map(String.init) ?? "Threads: ?"
    facts.append(threads)
    let probe = Collector<String>()
    if let token = try? wormhole.listenForMessage(withIdentifier: "probe-\(identifier)", as: String.self, listener: { probe.append($0) }) {
        _ = try? await wormhole.passMessage("probe", identifier: "probe-\(identifier)")
        facts.append("a new listener there heard \(await probe.wait(for: 1, seconds: 5))")
        token.cancel()
    }
    return facts.joined(separator: "; ")
}
