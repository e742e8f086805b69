#if canImport(Glibc)
import Glibc
#endif
import Foundation
@_spi(Backend) import Wormhole
import WormholeTestSupport
import Synchronization

/// The agent's `peak` command:
///
///     peak DIR ID [PAYLOAD]           read the latest message of ID, then pass
///                                      PAYLOAD if given; print "<latest> <peak>":
///                                      the latest's byte count ("none", or
///                                      "error:<code>"), and VmHWM in kB
func peakCommand() throws {
    let wormhole = try AgentLocation.wormhole(argument(1))
    let identifier = argument(2)
    var latest: String
    do throws(WormholeError) {
        latest = try wormhole.record(withIdentifier: identifier).map { "\($0.payload.count)" } ?? "none"
    } catch {
        latest = "error:\(error.code)"
    }
    if arguments.count > 3 {
        do throws(WormholeError) {
            try wormhole.passMessage(argument(3), identifier: identifier)
        } catch {
            latest += ",pass-error:\(error.code)"
        }
    }
    let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
    let peak = status.split(separator: "\n").first { $0.hasPrefix("VmHWM:") }
        .flatMap { $0.split(whereSeparator: \.isWhitespace).dropFirst().first } ?? "-1"
    print("\(latest) \(peak)")
}
