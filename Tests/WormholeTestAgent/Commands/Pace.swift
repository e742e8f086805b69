#if canImport(Glibc)
import Glibc
#endif
import Foundation
@_spi(Backend) import Wormhole
import WormholeTestSupport
import Synchronization

/// The agent's `pace` command:
///
///     pace DIR ID COUNT MICROSECONDS TAG   pass COUNT messages, one per interval
func paceCommand() throws {
    let wormhole = try AgentLocation.wormhole(argument(1))
    let identifier = argument(2)
    let count = Int(argument(3)) ?? 0
    let interval = UInt32(argument(4)) ?? 1000
    let tag = argument(5)
    // With a sixth argument: stop after that many seconds too, then pass
    // "<tag>:end:<count passed>" (what soak-listen waits for).
    let seconds = arguments.count > 6 ? Double(arguments[6]) : nil
    let deadline = seconds.map { ContinuousClock.now + .seconds($0) }
    var passed = 0
    for index in 1...max(count, 1) where count > 0 {
        if let deadline, ContinuousClock.now >= deadline { break }
        try wormhole.passMessage(payload(tag: tag, index: index, size: 64 + index % 512), identifier: identifier)
        passed = index
        usleep(interval)
    }
    if seconds != nil { try wormhole.passMessage("\(tag):end:\(passed)", identifier: identifier) }
}
