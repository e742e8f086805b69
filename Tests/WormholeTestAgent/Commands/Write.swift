#if canImport(Glibc)
import Glibc
#endif
import Foundation
@_spi(Backend) import Wormhole
import WormholeTestSupport
import Synchronization

/// The agent's `write` command:
///
///     write  DIR ID COUNT TAG [SIZE]   pass COUNT messages "TAG:i:<padding>"
func writeCommand() throws {
    let wormhole = try AgentLocation.wormhole(argument(1))
    let identifier = argument(2)
    let count = Int(argument(3)) ?? 0
    let tag = argument(4)
    let size = arguments.count > 5 ? Int(argument(5)) ?? 0 : 0
    for index in 1...max(count, 1) where count > 0 {
        try wormhole.passMessage(payload(tag: tag, index: index, size: size), identifier: identifier)
    }
}
