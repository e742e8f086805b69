#if canImport(Glibc)
import Glibc
#endif
import Foundation
@_spi(Backend) import Wormhole
import WormholeTestSupport
import Synchronization

/// The agent's `instances` command:
///
///     instances DIR N K                N listen/cancel cycles, then K listeners
///                                      that each cancel themselves and start the
///                                      next from their handler (on the reader
///                                      thread); prints "most left final
///                                      microseconds": the most inotify instances
///                                      open at once, those open when the last
///                                      cancel returned, at the end, and how long
///                                      the last one took to close
func instancesCommand() throws {
    let wormhole = try AgentLocation.wormhole(argument(1))
    let cycles = Int(argument(2)) ?? 0
    let chained = Int(argument(3)) ?? 0
    /// The inotify instances this process holds: descriptors that are links to
    /// `anon_inode:inotify`.
    @Sendable func instances() -> Int {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return names.count { (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + $0)) == "anon_inode:inotify" }
    }
    let most = Shared(0)
    @Sendable func note() { let now = instances(); most.withLock { $0 = max($0, now) } }
    for _ in 0..<cycles {
        let token = try wormhole.listenForMessage(withIdentifier: "cycle", as: String.self) { _ in }
        note()
        token.cancel()
        note()
    }
    // Each listener runs on the reader thread (it has no queue), cancels itself there,
    // so that nothing is subscribed for a moment, and starts the next one. Passes go
    // through a new wormhole each, which subscribes nothing.
    let handled = DispatchSemaphore(value: 0)
    let current = Shared<ListenerToken?>(nil)
    @Sendable func listen() throws {
        let token = try wormhole.listenForMessage(withIdentifier: "chain", as: Int.self) { _ in
            current.withLock { $0 }?.cancel()
            note()
            try? listen()
            note()
            handled.signal()
        }
        current.withLock { $0 = token }
    }
    if chained > 0 { try listen() }
    for index in 0..<chained {
        try Wormhole(directory: argument(1)).passMessage(index, identifier: "chain")
        handled.wait()
    }
    current.withLock { $0 }?.cancel()
    let cancelled = DispatchTime.now().uptimeNanoseconds
    let left = instances()
    var final = left
    let deadline = ContinuousClock.now + .seconds(5)
    while final > 0 && ContinuousClock.now < deadline {
        usleep(100)
        final = instances()
    }
    let microseconds = (DispatchTime.now().uptimeNanoseconds - cancelled) / 1000
    print("\(most.withLock { $0 }) \(left) \(final) \(microseconds)")
}
