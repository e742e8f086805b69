#if canImport(Glibc)
import Glibc
#endif
import Foundation
@_spi(Backend) import Wormhole
import WormholeTestSupport
import Synchronization

/// The agent's `relative` command:
///
///     relative DIR                     open Wormhole(directory: DIR) as given (a
///                                      relative DIR is taken from the current
///                                      directory), pass "x" under n, print the
///                                      wormhole's directory
func relativeCommand() throws {
    let wormhole = try Wormhole(directory: argument(1))
    try wormhole.passMessage("x", identifier: "n")
    print(wormhole.directory ?? "none")
}
