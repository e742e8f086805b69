#if canImport(Glibc)
import Glibc
#endif
import Foundation
@_spi(Backend) import Wormhole
import WormholeTestSupport
import Synchronization

/// A value that closures on other threads share.
final class Shared<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>
    init(_ value: Value) { mutex = Mutex(value) }
    func withLock<Result>(_ body: (inout Value) -> Result) -> Result { mutex.withLock { body(&$0) } }
}

/// Ends the agent: status 1, after "agent: MESSAGE" on standard error.
func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("agent: \(message)\n".utf8))
    exit(1)
}

/// A payload that says how long it is, so a torn one is detectable: "TAG:i:LEN:xxxx…".
func payload(tag: String, index: Int, size: Int) -> String {
    let head = "\(tag):\(index):"
    let fill = max(0, size - head.utf8.count - 8)
    return head + String(format: "%07d:", fill) + String(repeating: "x", count: fill)
}

/// Appends lines to the file at `path`, one write per line: a kill leaves whole lines only.
func lineAppender(_ path: String) -> @Sendable (String) -> Void {
    let output = Glibc.open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
    guard output >= 0 else { fail("cannot open \(path)") }
    return { line in
        let bytes = Array((line + "\n").utf8)
        _ = bytes.withUnsafeBytes { Glibc.write(output, $0.baseAddress, $0.count) }
    }
}

/// Strings appended from any thread.
final class Tally: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [String] = []
    func append(_ item: String) { lock.withLock { items.append(item) } }
    var all: [String] { lock.withLock { items } }
    var count: Int { lock.withLock { items.count } }
}

/// The agent's arguments: the command's name, then its own.
let arguments: [String] = Array(CommandLine.arguments.dropFirst())

/// The command's name (empty when none was given).
let command: String = arguments.first ?? ""

/// The argument at `index` (1 is the command's first); ends the agent when it is missing.
func argument(_ index: Int) -> String {
    guard index < arguments.count else { fail("missing argument \(index) for \(command)") }
    return arguments[index]
}
