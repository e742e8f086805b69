#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// A fresh directory under the system's temporary directory (`mkdtemp`, mode 0700),
/// removed with everything in it when the last reference goes. The one helper of its
/// kind for every test target: `WormholeTests`, `WormholeCLITests` and the agent.
package final class TemporaryDirectory: Sendable {
    package let path: String

    /// `name`: the start of the directory's name, for telling one test's leftovers from
    /// another's.
    package init(_ name: String = "wormhole-test") {
        let template = NSTemporaryDirectory() + "\(name)-XXXXXX"
        var bytes = Array(template.utf8CString)
        let made = bytes.withUnsafeMutableBufferPointer { buffer in
            buffer.baseAddress.flatMap { mkdtemp($0) }.map { String(cString: $0) }
        }
        path = made ?? template
        chmod(path, 0o700)
    }

    /// The path of `name` in the directory.
    package func file(_ name: String) -> String { path + "/" + name }

    deinit { try? FileManager.default.removeItem(atPath: path) }
}
