import Dispatch
import Foundation
import Testing
@_spi(Backend) @testable import Wormhole
@_spi(Backend) @testable import WormholeCore
@_spi(Backend) @testable import WormholeFiles
import WormholeTestSupport

/// The lock order of Architecture.md: no lock of the library is taken under another of
/// the same or a lower rank (debug builds record each one: `LockDiscipline`), and the
/// library's delayed work runs on its one timer service, never on a Dispatch timer.
@Suite("Lock order")
struct LockOrderTests {
    /// Runs `body` on a thread of its own (a requester that blocks).
    static func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            Thread { continuation.resume(with: Result { try body() }) }.start()
        }
    }

    /// Returns once the retry clock has run everything due `seconds` from now.
    static func clockPassed(_ seconds: Double) async {
        await withCheckedContinuation { continuation in
            RetryClock.shared.schedule(after: seconds) { continuation.resume() }
        }
    }

    #if DEBUG
    @Test("requests made, answered, timed out, gone idle and made again, routers looked up from many threads at once, and a work queue member joined, redelivered and cancelled take no lock under another",
          .timeLimit(.minutes(1)))
    func requestsAndQueuesNestNoLock() async throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.path)
        let responder = try wormhole.respondToRequests(withIdentifier: "square", as: Int.self) { $0 * $0 }
        defer { responder.cancel() }
        // Routers made for several identifiers at the same moment, from threads that block.
        try await withThrowingTaskGroup(of: Int.self) { group in
            for number in 1...8 {
                group.addTask { try await Self.onThread { try wormhole.request(number, identifier: "square", as: Int.self, timeout: 10) } }
                group.addTask {
                    let error = try await Self.onThread { () -> WormholeError? in
                        do throws(WormholeError) {
                            _ = try wormhole.request(number, identifier: "nobody-\(number % 3)", as: Int.self, timeout: 0.2)
                            return nil
                        } catch { return error }
                    }
                    #expect(error != nil, "no one answers")
                    return -1
                }
            }
            for try await _ in group {}
        }
        #expect(try await wormhole.request(3, identifier: "square", as: Int.self, timeout: 10) == 9)
        // The router goes idle (its reader thread follows the log again), then a request
        // leaves the idle state.
        await Self.clockPassed(ReplyRouter.idleDelay + 0.2)
        #expect(try await Self.onThread { try wormhole.request(4, identifier: "square", as: Int.self, timeout: 10) } == 16)
        #expect(try await wormhole.request(5, identifier: "square", as: Int.self, timeout: 10) == 25)

        struct Failed: Error {}
        let second = Collector<Int>()
        let options = WorkQueueOptions(startingFrom: .history, redeliveryInterval: 0.05, retryDelay: 0.05)
        let member = try wormhole.listenForRecords(withIdentifier: "jobs", workQueue: "w", options: options) { _, deliveries in
            if deliveries == 1 { throw Failed() }
            second.append(deliveries)
        }
        try await wormhole.passMessage("job", identifier: "jobs")
        #expect(await second.wait(for: 1) == [2])
        member.cancel()
        #expect(LockDiscipline.violations == [], "locks taken out of order")
    }
    #endif

    @Test("a work queue member's redelivery timer runs on the library's timer service: a process whose member was redelivered holds no epoll instance (a Dispatch timer makes one, which a process out of descriptors cannot)",
          .timeLimit(.minutes(1)))
    func redeliveryTimerMakesNoDispatchTimer() async throws {
        let directory = TemporaryDirectory()
        let output = directory.file("timers.out")
        _ = FileManager.default.createFile(atPath: output, contents: nil)
        let agent = try Agent.start(["timers", directory.path], output: FileHandle(forWritingAtPath: output))
        #expect(await waitForExit(agent, seconds: 40) == 0)
        let lines = try String(contentsOfFile: output, encoding: .utf8).split(separator: "\n").map(String.init)
        #expect(lines == ["redelivered", "epoll 0"])
    }
}
