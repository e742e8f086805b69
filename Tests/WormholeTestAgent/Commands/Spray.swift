#if canImport(Glibc)
import Glibc
#endif
import Foundation
@_spi(Backend) import Wormhole
import WormholeTestSupport
import Synchronization

/// The agent's `spray` command:
///
///     spray  DIR COUNT ID...           pass COUNT messages round-robin over IDs
func sprayCommand() throws {
    let wormhole = try AgentLocation.wormhole(argument(1))
    let count = Int(argument(2)) ?? 0
    let identifiers = Array(arguments.dropFirst(3))
    for index in 0..<count {
        try wormhole.passMessage("m\(index)", identifier: identifiers[index % identifiers.count])
    }
}
