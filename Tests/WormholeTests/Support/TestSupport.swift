import Foundation
import Synchronization
@testable import Wormhole

/// A fresh directory under /tmp, removed when the test ends.
final class TemporaryDirectory: Sendable {
    let path: String

    init(_ name: String = "wormhole-test") {
        let template = NSTemporaryDirectory() + "\(name)-XXXXXX"
        var bytes = Array(template.utf8CString)
        let result = bytes.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        path = result.map { String(cString: $0) } ?? template
    }

    func file(_ name: String) -> String { path + "/" + name }

    deinit { try? FileManager.default.removeItem(atPath: path) }
}

/// Collects values from any thread; waits for a count with a deadline.
final class Collector<Value: Sendable>: Sendable {
    private let values = Mutex<[Value]>([])

    func append(_ value: Value) { values.withLock { $0.append(value) } }
    var all: [Value] { values.withLock { $0 } }
    var count: Int { values.withLock { $0.count } }

    /// Waits until at least `count` values arrived, or `seconds` passed.
    @discardableResult
    func wait(for count: Int, seconds: Double = 10) async -> [Value] {
        let deadline = Date().addingTimeInterval(seconds)
        while self.count < count && Date() < deadline {
            try? await Task.sleep(for: .milliseconds(5))
        }
        return all
    }
}

/// Waits briefly so that nothing that should not arrive can arrive unseen.
func settle(_ milliseconds: Int = 200) async {
    try? await Task.sleep(for: .milliseconds(milliseconds))
}

struct Note: Codable, Sendable, Equatable {
    var text: String
}
