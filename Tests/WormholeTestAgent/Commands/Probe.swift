#if canImport(Glibc)
import Glibc
#endif
import Foundation
@_spi(Backend) import Wormhole
import WormholeTestSupport
import Synchronization

/// The agent's `probe` command:
///
///     probe DIR                        try to listen; print "ok" or
///                                      "error <code>: <description>"
func probeCommand() throws {
    let wormhole = try AgentLocation.wormhole(argument(1))
    do throws(WormholeError) {
        let token = try wormhole.listenForMessage(withIdentifier: "probe", as: String.self) { _ in }
        token.cancel()
        print("ok")
    } catch {
        print("error \(error.code): \(error)")
    }
}
