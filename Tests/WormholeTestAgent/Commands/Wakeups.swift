#if canImport(Glibc)
import Glibc
#endif
import Foundation
@_spi(Backend) import Wormhole
import WormholeTestSupport
import Synchronization

/// The agent's `wakeups` command:
///
///     wakeups DIR N                    a responder, a work-queue member and a
///                                      listener of one identifier each woken by
///                                      each of 2,000 requests, then N, then N more;
///                                      prints "resident <kB after each of the
///                                      three> heard <requests the listener heard>"
func wakeupsCommand() throws {
    let wormhole = try AgentLocation.wormhole(argument(1))
    let count = Int(argument(2)) ?? 0
    let responder = try wormhole.respondToRequests(withIdentifier: "ask", as: Int.self) { $0 + 1 }
    let member = try wormhole.listenForRecords(withIdentifier: "ask", workQueue: "audit") { _, _ in }
    let heard = Atomic<Int>(0)
    let listener = try wormhole.listenForRecords(withIdentifier: "ask") { _ in heard.add(1, ordering: .relaxed) }
    func ask(_ times: Int) throws {
        for index in 0..<times where try wormhole.request(index, identifier: "ask", as: Int.self, timeout: 10) != index + 1 {
            throw WormholeError(.requestFailed, "wrong reply to \(index)")
        }
    }
    func resident() -> Int {
        let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
        return status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") }
            .flatMap { Int($0.split(whereSeparator: \.isWhitespace).dropFirst().first ?? "") } ?? -1
    }
    try ask(2_000)
    let first = resident()
    try ask(count)
    let second = resident()
    try ask(count)
    let third = resident()
    // The listener runs on the reader thread too: it has heard the last request once
    // it gets there.
    for _ in 0..<1_000 where heard.load(ordering: .relaxed) < 2_000 + 2 * count { usleep(10_000) }
    print("resident \(first) \(second) \(third) heard \(heard.load(ordering: .relaxed))")
    _ = (responder, member, listener)
}
