#if canImport(Glibc)
import Glibc
#endif
import Foundation
@_spi(Backend) import Wormhole
import WormholeTestSupport
import Synchronization

/// The agent's `flood` command:
///
///     flood  DIR ID TAG STARTED [ACKS] pass messages until killed
func floodCommand() throws {
    // flood DIR ID TAG STARTED [ACKS]: after each pass returns, its index is appended
    // to ACKS, so a test knows which messages were acknowledged before the kill.
    var configuration = Wormhole.Configuration()
    configuration.retainedMessageCount = 20
    let wormhole = try AgentLocation.wormhole(argument(1), configuration: configuration)
    let identifier = argument(2)
    let tag = argument(3)
    let acknowledgements: Int32 = arguments.count > 5 ? open(argument(5), O_WRONLY | O_CREAT | O_APPEND, 0o600) : -1
    var index = 1
    while true {
        // Sizes vary so that records straddle pages and the kill lands anywhere.
        try wormhole.passMessage(payload(tag: tag, index: index, size: 40 + (index * 7919) % 9000), identifier: identifier)
        if acknowledgements >= 0 {
            let line = Array("\(index)\n".utf8)
            _ = line.withUnsafeBytes { write(acknowledgements, $0.baseAddress, $0.count) }
        }
        if index == 1 { _ = FileManager.default.createFile(atPath: argument(4), contents: nil) }
        index += 1
    }
}
