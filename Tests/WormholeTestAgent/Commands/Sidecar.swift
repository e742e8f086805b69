#if canImport(Glibc)
import Glibc
#endif
import Foundation
@_spi(Backend) import Wormhole
import WormholeTestSupport
import Synchronization

/// The agent's `sidecar` command.
func sidecarCommand() throws {
    // sidecar DIR NAME INBOUND OUTBOUND COUNT OUTFILE RETAIN: a durable listener NAME
    // on INBOUND (lines "sequence payload" to OUTFILE, "lost N" for a gap) that ends
    // on "end", and, once OUTFILE.go exists, COUNT passes "NAME i" to OUTBOUND, with
    // RETAIN messages kept per identifier (so that passes compact).
    var configuration = Wormhole.Configuration()
    configuration.retainedMessageCount = Int(argument(7)) ?? 4
    let wormhole = try AgentLocation.wormhole(argument(1), configuration: configuration)
    let name = argument(2)
    let append = lineAppender(argument(6))
    let done = DispatchSemaphore(value: 0)
    let token = try wormhole.listenForRecords(withIdentifier: argument(3), durableName: name, startingFrom: .history, onError: { error in
        if let missed = error.missedMessageCount { append("lost \(missed)") } else { append("error \(error.code)") }
    }) { record in
        let payload = String(decoding: record.payload, as: UTF8.self)
        if payload == "end" { done.signal() } else { append("\(record.sequence) \(payload)") }
    }
    _ = FileManager.default.createFile(atPath: argument(6) + ".ready", contents: nil)
    // Passing starts once the test says so (the file ARGUMENT6.go): when the other
    // side's durable listener exists too.
    while !FileManager.default.fileExists(atPath: argument(6) + ".go") { usleep(10_000) }
    for index in 1...max(1, Int(argument(5)) ?? 0) {
        try wormhole.passMessage("\(name) \(index)", identifier: argument(4))
        usleep(500)
    }
    if done.wait(timeout: .now() + 120) == .timedOut { fail("no 'end' within 120 s") }
    token.cancel()
}
