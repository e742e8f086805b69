import Dispatch
import Foundation
import Testing
@_spi(Backend) @testable import Wormhole
@_spi(Backend) @testable import WormholeCore
@_spi(Backend) @testable import WormholeFiles
import WormholeTestSupport

/// `Wormhole.waitUntilIdle(for:)`: what a service started on demand waits for before it
/// exits (Activation.md).
@Suite("Waiting until idle", .timeLimit(.minutes(1)))
struct IdleWaitTests {
    /// Calls `waitUntilIdle(for:)` on a thread of its own; returns when it returned.
    static func idle(_ wormhole: Wormhole, for seconds: Double) async -> ContinuousClock.Instant {
        await withCheckedContinuation { continuation in
            Thread {
                wormhole.waitUntilIdle(for: seconds)
                continuation.resume(returning: ContinuousClock.now)
            }.start()
        }
    }

    @Test("a durable listener's backlog is handled first; a handler that runs longer than the idle time holds it; it returns that long after the last handler returned",
          arguments: Backend.all)
    func durableListenerBacklogThenIdle(backend: Backend) async throws {
        let store = try backend.makeStore()
        for value in 1...3 { try await store.wormhole().passMessage(value, identifier: "jobs") }
        let wormhole = try store.wormhole()
        let handled = Collector<Int>()
        let lastReturn = Locked(ContinuousClock.now)
        let handlingTwo = DispatchSemaphore(value: 0)
        let token = try wormhole.listenForMessage(withIdentifier: "jobs", as: Int.self, durableName: "worker", startingFrom: .history,
                                                  queue: DispatchQueue(label: "idle.test")) { value in
            // Message 2 is handled for longer than the idle time asked for.
            if value == 2 {
                handlingTwo.signal()
                Thread.sleep(forTimeInterval: 1)
            }
            handled.append(value)
            lastReturn.withLock { $0 = .now }
        }
        // The wait starts while message 2 is being handled (the idle time counts from the
        // call: started before the backlog is read, on a loaded machine, it could pass first).
        await withCheckedContinuation { continuation in
            Thread {
                handlingTwo.wait()
                continuation.resume()
            }.start()
        }
        let returned = await Self.idle(wormhole, for: 0.5)
        #expect(handled.all == [1, 2, 3])
        let quiet = returned - lastReturn.withLock { $0 }
        #expect(quiet >= .milliseconds(500), "returned \(quiet) after the last handler returned")
        token.cancel()
    }

    @Test("a listener's or queue member's first read that has not run yet is no idleness, however long it is held up: the wait ends the idle time after it",
          arguments: ["durable", "queue"])
    func firstReadHeldUpIsNotIdleness(kind: String) async throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.path)
        try await wormhole.passMessage("waiting", identifier: "jobs")
        // Its queue held: the read that delivers what was passed cannot start, as on a
        // machine too loaded to run it for longer than the idle time.
        let held = DispatchQueue(label: "idle.held")
        held.suspend()
        let handled = Collector<String>()
        let cancel: () -> Void
        if kind == "durable" {
            let token = try wormhole.listenForMessage(withIdentifier: "jobs", as: String.self, durableName: "worker",
                                                      startingFrom: .history, queue: held) { handled.append($0) }
            cancel = token.cancel
        } else {
            let member = try wormhole.listenForMessage(withIdentifier: "jobs", as: String.self, workQueue: "workers",
                                                       options: WorkQueueOptions(startingFrom: .history), queue: held) { handled.append($0) }
            cancel = member.cancel
        }
        let waited = ContinuousClock.now
        async let returned = Self.idle(wormhole, for: 0.2)
        // A wait for something that must not happen (a message handled, the idle wait
        // over, while the queue is held): four times the idle time, then it is let go.
        try await Task.sleep(for: .milliseconds(800))
        #expect(handled.all.isEmpty)
        held.resume()
        #expect(await handled.wait(for: 1) == ["waiting"])
        let end = await returned
        #expect(end - waited >= .milliseconds(800), "returned \(end - waited) after the call, before the held read ran")
        cancel()
    }

    @Test("a responder counts: idle only once the request it answers has been answered, and the idle time after it",
          arguments: Backend.all)
    func responderHoldsIdle(backend: Backend) async throws {
        let store = try backend.makeStore()
        let service = try store.wormhole()
        let answered = Locked<ContinuousClock.Instant?>(nil)
        let answering = DispatchSemaphore(value: 0)
        let responder = try service.respondToRequests(withIdentifier: "slow", as: String.self, queue: DispatchQueue(label: "idle.responder")) { request in
            answering.signal()
            Thread.sleep(forTimeInterval: 0.5)
            answered.withLock { $0 = .now }
            return request.uppercased()
        }
        let requester = try store.wormhole()
        async let reply = requester.request("hi", identifier: "slow", as: String.self, timeout: 20)
        await withCheckedContinuation { continuation in
            Thread {
                answering.wait()
                continuation.resume()
            }.start()
        }
        let returned = await Self.idle(service, for: 0.2)
        #expect(try await reply == "HI")
        let end = try #require(answered.withLock { $0 }, "returned before the request was answered")
        #expect(returned - end >= .milliseconds(200), "returned \(returned - end) after the answer")
        responder.cancel()
    }
}
