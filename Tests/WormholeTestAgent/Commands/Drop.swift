#if canImport(Glibc)
import Glibc
#endif
import Foundation
@_spi(Backend) import Wormhole
import WormholeTestSupport
import Synchronization

/// The agent's `drop` command:
///
///     drop DIR N                       create N wormholes, pass to 5 identifiers
///                                      with each, drop them; prints "descriptors
///                                      before after"
func dropCommand() throws {
    let directory = argument(1)
    let count = Int(argument(2)) ?? 0
    func descriptors() -> Int { (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? -1 }
    _ = try Wormhole(directory: directory)
    let before = descriptors()
    for round in 0..<count {
        let wormhole = try Wormhole(directory: directory)
        for identifier in 0..<5 { try wormhole.passMessage(round, identifier: "id\(identifier)") }
    }
    // The inotify reader closes its descriptor once its last watch is gone, on its
    // own thread: give it a moment.
    let deadline = ContinuousClock.now + .seconds(5)
    while descriptors() > before && ContinuousClock.now < deadline { Thread.sleep(forTimeInterval: 0.02) }
    print("\(before) \(descriptors())")
}
