#if canImport(Glibc)
import Glibc
#endif
import Foundation
@_spi(Backend) import Wormhole
import WormholeTestSupport
import Synchronization

/// The agent's `respond` command:
///
///     respond DIR ID NAME [READY [HANG]]
///                                      answer each request of ID with "NAME:<request>"
///                                      (never returning for the request HANG);
///                                      READY (default NAME.ready in DIR's parent)
///                                      once serving; runs until killed
func respondCommand() throws {
    let wormhole = try AgentLocation.wormhole(argument(1))
    let name = argument(3)
    let hang = arguments.count > 5 ? argument(5) : nil
    let member = try wormhole.respondToRequests(withIdentifier: argument(2), as: String.self) { request in
        if request == hang { while true { sleep(60) } }
        return "\(name):\(request)"
    }
    // [ready file]: by default <name>.ready beside the container directory.
    _ = FileManager.default.createFile(atPath: arguments.count > 4 ? argument(4) : argument(1) + "/../" + name + ".ready", contents: nil)
    while true { sleep(60) }
    _ = member
}
