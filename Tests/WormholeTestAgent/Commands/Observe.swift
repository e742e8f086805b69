#if canImport(Glibc)
import Glibc
#endif
import Foundation
@_spi(Backend) import Wormhole
import WormholeTestSupport
import Synchronization

/// The agent's `observe` command:
///
///     observe DIR NAME COUNT OUT       count COUNT posts of NAME
func observeCommand() throws {
    let center = try DarwinNotificationCenter(directory: argument(1))
    let count = Int(argument(3)) ?? 0
    let output = argument(4)
    let done = DispatchSemaphore(value: 0)
    nonisolated(unsafe) var seen = 0
    let observation = try center.addObserver(forName: argument(2)) { _ in
        seen += 1
        if seen == count { done.signal() }
    }
    _ = FileManager.default.createFile(atPath: output + ".ready", contents: nil)
    done.wait()
    observation.cancel()
    try "\(seen)\n".write(toFile: output, atomically: true, encoding: .utf8)
}
