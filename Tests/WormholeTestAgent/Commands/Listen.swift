#if canImport(Glibc)
import Glibc
#endif
import Foundation
@_spi(Backend) import Wormhole
import WormholeTestSupport
import Synchronization

/// The agent's `listen` command:
///
///     listen DIR ID COUNT OUT [START]  record COUNT messages to OUT, one
///                                      "sequence payload" line each; OUT.ready
///                                      appears once listening has started
func listenCommand() throws {
    let wormhole = try AgentLocation.wormhole(argument(1))
    let identifier = argument(2)
    let count = Int(argument(3)) ?? 0
    let output = argument(4)
    let start: Wormhole.StartingPoint = arguments.count > 5 && argument(5) == "history" ? .history : .now
    let done = DispatchSemaphore(value: 0)
    nonisolated(unsafe) var lines: [String] = []
    lines.reserveCapacity(count)
    let token = try wormhole.listenForRecords(withIdentifier: identifier, startingFrom: start, onError: { error in
        FileHandle.standardError.write(Data("agent: \(error)\n".utf8))
        lines.append("error \(error.code)")
    }) { record in
        lines.append("\(record.sequence) \(String(decoding: record.payload, as: UTF8.self))")
        if lines.count == count { done.signal() }
    }
    _ = FileManager.default.createFile(atPath: output + ".ready", contents: nil)
    done.wait()
    token.cancel()
    try lines.joined(separator: "\n").appending("\n").write(toFile: output, atomically: true, encoding: .utf8)
}
