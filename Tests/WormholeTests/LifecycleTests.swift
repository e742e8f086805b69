import Foundation
import Synchronization
import Testing
@_spi(Backend) @testable import Wormhole
@_spi(Backend) @testable import WormholeCore
@_spi(Backend) @testable import WormholeFiles
import WormholeTestSupport

/// How long a listener lives: until it is cancelled, stopped, or its wormhole goes —
/// never because its token was dropped — and not one call after `cancel()` returns.
@Suite("Listener lifecycle")
struct LifecycleTests {
    @Test("a listener whose token is dropped at once goes on receiving, as MMWormhole's do, until stopListening",
          .timeLimit(.minutes(1)))
    func droppedTokenKeepsListening() async throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.path)
        let received = Collector<String>()
        _ = try wormhole.listenForMessage(withIdentifier: "id", as: String.self) { received.append($0) }
        try await wormhole.passMessage("one", identifier: "id")
        let heard = await received.wait(for: 1)
        #expect(heard == ["one"])
        if heard.isEmpty { Issue.record("the listener heard nothing in 10 s: \(await silentListenerReport(wormhole, directory: directory.path, identifier: "id"))") }
        wormhole.stopListeningForMessage(withIdentifier: "id")
        try await wormhole.passMessage("two", identifier: "id")
        await settle(200)
        #expect(received.all == ["one"])
    }

    @Test("no call of a listener starts after cancel() returns, from another thread, while messages stream in",
          .timeLimit(.minutes(2)))
    func noCallAfterCancelReturns() async throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.path)
        var late = 0
        for round in 0..<scaled(100) {
            let cancelled = Atomic<Bool>(false)
            let lateCalls = Atomic<Int>(0)
            let started = DispatchSemaphore(value: 0)
            let token = try wormhole.listenForMessage(withIdentifier: "r\(round)", as: Int.self) { _ in
                if cancelled.load(ordering: .acquiring) { lateCalls.add(1, ordering: .relaxed) }
                started.signal()
            }
            let writer = Thread {
                for index in 0..<200 { _ = try? wormhole.passMessage(index, identifier: "r\(round)") }
            }
            writer.start()
            started.wait()
            token.cancel()
            cancelled.store(true, ordering: .releasing)
            // A window for what must not happen: a call started after cancel() returned.
            try await Task.sleep(for: .milliseconds(5))
            late += lateCalls.load(ordering: .relaxed)
        }
        #expect(late == 0, "\(late) calls started after cancel() returned")
    }

    @Test("2,000 listen/cancel cycles, then 200 listeners each cancelled and replaced from its own handler: never more than one inotify instance, and none soon after the last cancel",
          .timeLimit(.minutes(2)))
    func listenCancelCyclesHoldOneInotifyInstanceAtMost() throws {
        // In a process of its own, whose only inotify instance is the engine's: this one
        // runs other suites, and libinotifytools, meanwhile.
        let directory = TemporaryDirectory()
        let (status, output) = try Agent.run(["instances", directory.path, "\(scaled(2_000))", "200"])
        #expect(status == 0)
        let numbers = output.split(whereSeparator: \.isWhitespace).compactMap { Int($0) }
        try #require(numbers.count == 4, "\(output)")
        #expect(numbers[0] == 1, "at most \(numbers[0]) inotify instances open at once")
        #expect(numbers[2] == 0, "\(numbers[2]) inotify instances left 5 s after the last cancel")
        #expect(numbers[3] < 1_000_000, "the last instance closed \(numbers[3]) µs after the last cancel")
        print("instances: most \(numbers[0]) at once; \(numbers[1]) when the last cancel returned, \(numbers[2]) after \(numbers[3]) µs")
    }
}
