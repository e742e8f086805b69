#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Wormhole
import WormholeTestSupport

/// The agent's `timers` command:
///
///     timers DIR                       join the work queue "w" of "jobs" (redelivery
///                                      every 50 ms), pass one job that fails at its
///                                      first delivery, wait for its second; print
///                                      "redelivered" (or "not redelivered") and
///                                      "epoll N": the epoll instances the process
///                                      holds then (a Dispatch timer makes one)
func timersCommand() throws {
    let wormhole = try AgentLocation.wormhole(argument(1))
    let say: @Sendable (String) -> Void = { line in FileHandle.standardOutput.write(Data((line + "\n").utf8)) }
    struct Failed: Error {}
    let second = DispatchSemaphore(value: 0)
    let options = WorkQueueOptions(startingFrom: .history, redeliveryInterval: 0.05, retryDelay: 0.05)
    let member = try wormhole.listenForRecords(withIdentifier: "jobs", workQueue: "w", options: options) { _, deliveries in
        if deliveries == 1 { throw Failed() }
        second.signal()
    }
    _ = try wormhole.passMessage("job", identifier: "jobs")
    say(second.wait(timeout: .now() + 20) == .success ? "redelivered" : "not redelivered")
    let descriptors = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
    let epolls = descriptors.filter { (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + $0)) == "anon_inode:[eventpoll]" }
    say("epoll \(epolls.count)")
    member.cancel()
}
