#if canImport(Glibc)
import Glibc
#endif
import Foundation
@_spi(Backend) import Wormhole
import WormholeTestSupport
import Synchronization

/// The agent's `group` command:
///
///     group GROUP SUB                  open Wormhole(applicationGroupIdentifier:
///                                      GROUP, optionalDirectory: SUB) where the
///                                      environment puts containers, print its
///                                      directory
func groupCommand() throws {
    let wormhole = try Wormhole(applicationGroupIdentifier: argument(1), optionalDirectory: argument(2))
    print(wormhole.directory ?? "none")
}
