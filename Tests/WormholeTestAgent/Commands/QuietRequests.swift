#if canImport(Glibc)
import Glibc
#endif
import Foundation
@_spi(Backend) import Wormhole
import WormholeTestSupport
import Synchronization

/// The agent's `quiet-requests` command.
func quietRequestsCommand() throws {
    // <count> requests to "ask" (answered by another process, with its number plus
    // one), the first before the reply log exists; blocking, or "async" ones. Prints
    // how many times this process's reader thread woke meanwhile.
    let wormhole = try AgentLocation.wormhole(argument(1))
    let count = Int(argument(2)) ?? 1
    let asynchronous = arguments.count > 3 && argument(3) == "async"
    let before = ReaderThreadWakeUps.count
    for index in 0..<count {
        let reply: Int
        if asynchronous {
            // Awaited by a detached task (this code runs on the main actor, which the
            // wait below blocks), this thread waiting for it.
            let done = DispatchSemaphore(value: 0)
            let result = Tally()
            Task.detached {
                do throws(WormholeError) {
                    result.append(String(try await wormhole.request(index, identifier: "ask", as: Int.self, timeout: 10)))
                } catch {
                    result.append("error \(error)")
                }
                done.signal()
            }
            done.wait()
            guard let answer = result.all.first.flatMap({ Int($0) }) else { fail("request \(index): \(result.all)") }
            reply = answer
        } else {
            reply = try wormhole.request(index, identifier: "ask", as: Int.self, timeout: 10)
        }
        guard reply == index + 1 else { fail("wrong reply \(reply) to \(index)") }
    }
    print("wakeups \(ReaderThreadWakeUps.count - before)")
}
