#if canImport(Glibc)
import Glibc
#endif
import Foundation
@_spi(Backend) import Wormhole
import WormholeTestSupport
import Synchronization

/// The agent's `cycles` command:
///
///     cycles DIR N                     N listen/cancel cycles; prints
///                                      "descriptors threads" before and after
func cyclesCommand() throws {
    let wormhole = try AgentLocation.wormhole(argument(1))
    let cycles = Int(argument(2)) ?? 0
    func descriptors() -> Int { (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? -1 }
    func threads() -> Int { (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").count) ?? -1 }
    func cycle(_ index: Int) throws {
        let received = DispatchSemaphore(value: 0)
        let token = try wormhole.listenForMessage(withIdentifier: "cycle", as: String.self) { _ in received.signal() }
        if index % 10 == 0 {
            try wormhole.passMessage("m\(index)", identifier: "cycle")
            received.wait()
        }
        token.cancel()
    }
    // Warm up: let Foundation and Dispatch create what they keep for the process.
    for index in 0..<20 { try cycle(index) }
    Thread.sleep(forTimeInterval: 0.5)
    let before = (descriptors(), threads())
    for index in 0..<cycles { try cycle(index) }
    var after = (descriptors(), threads())
    let deadline = ContinuousClock.now + .seconds(5)
    while (after.0 > before.0 || after.1 > before.1) && ContinuousClock.now < deadline {
        Thread.sleep(forTimeInterval: 0.05)
        after = (descriptors(), threads())
    }
    print("\(before.0) \(before.1) \(after.0) \(after.1)")
}
