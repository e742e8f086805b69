#if canImport(Glibc)
import Glibc
#endif
import Foundation
@_spi(Backend) import Wormhole
import WormholeTestSupport
import Synchronization

/// The agent's `request` command:
///
///     request DIR ID COUNT TAG OUT S    COUNT requests "TAG:i", one after another, each
///                                      with a timeout of S seconds; append to OUT
///                                      "i ok <reply> <ms>" or "i error <code> <ms>"
func requestCommand() throws {
    let wormhole = try AgentLocation.wormhole(argument(1))
    let count = Int(argument(3)) ?? 0, tag = argument(4), timeout = Double(argument(6)) ?? 5
    var lines = ""
    for index in 1...max(1, count) {
        let started = DispatchTime.now().uptimeNanoseconds
        let outcome = Result { () throws(WormholeError) in try wormhole.request("\(tag):\(index)", identifier: argument(2), as: String.self, timeout: timeout) }
        let milliseconds = (DispatchTime.now().uptimeNanoseconds - started) / 1_000_000
        switch outcome {
        case .success(let reply): lines += "\(index) ok \(reply) \(milliseconds)\n"
        case .failure(let error): lines += "\(index) error \(error.code) \(milliseconds) \(error.message)\n"
        }
    }
    try lines.write(toFile: argument(5), atomically: true, encoding: .utf8)
}
