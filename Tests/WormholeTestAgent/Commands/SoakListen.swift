#if canImport(Glibc)
import Glibc
#endif
import Foundation
@_spi(Backend) import Wormhole
import WormholeTestSupport
import Synchronization

/// The agent's `soak-listen` command:
///
///     soak-listen DIR ID EXPECTED OUT  check order and uniqueness on the fly
///                                      (no memory kept per message); write
///                                      "received duplicates disorder" to OUT
func soakListenCommand() throws {
    // Listens until each of <writers> timed pace writers passed its "<tag>:end:<n>";
    // writes "<received> <passed> <duplicates> <out of order>", where passed is the
    // sum of the writers' n, to <output>, then goes on listening until <output>.exit
    // exists.
    let wormhole = try AgentLocation.wormhole(argument(1))
    let writers = Int(argument(3)) ?? 0
    let output = argument(4)
    let done = DispatchSemaphore(value: 0)
    nonisolated(unsafe) var received = 0, passed = 0, ended = 0, duplicates = 0, disorder = 0
    nonisolated(unsafe) var lastSequence: UInt64 = 0
    nonisolated(unsafe) var lastIndex: [Substring: Int] = [:]
    let token = try wormhole.listenForRecords(withIdentifier: argument(2)) { record in
        if record.sequence <= lastSequence { duplicates += 1 } else if record.sequence != lastSequence + 1 { disorder += 1 }
        lastSequence = max(lastSequence, record.sequence)
        let text = String(decoding: record.payload, as: UTF8.self)
        let parts = text.split(separator: ":", maxSplits: 2)
        if parts.count == 3, parts[1] == "end", let count = Int(parts[2]) {
            if count != lastIndex[parts[0]] ?? 0 { disorder += 1 }
            passed += count
            ended += 1
            if ended == writers { done.signal() }
            return
        }
        if parts.count == 3, let index = Int(parts[1]) {
            if index != (lastIndex[parts[0]] ?? 0) + 1 { disorder += 1 }
            lastIndex[parts[0]] = index
        }
        received += 1
    }
    _ = FileManager.default.createFile(atPath: output + ".ready", contents: nil)
    done.wait()
    try "\(received) \(passed) \(duplicates) \(disorder)\n".write(toFile: output, atomically: true, encoding: .utf8)
    // Still listening until told to go (<output>.exit, or a minute), so that the
    // test can measure this process after the last message.
    let patience = ContinuousClock.now + .seconds(60)
    while !FileManager.default.fileExists(atPath: output + ".exit") && ContinuousClock.now < patience { usleep(20_000) }
    token.cancel()
}
