import Foundation
import Testing
@_spi(Backend) @testable import Wormhole
@_spi(Backend) @testable import WormholeCore
@_spi(Backend) @testable import WormholeFiles
import WormholeTestSupport

/// Durable listeners: a name keeps a listener's position while its process is not
/// running; it resumes after the last message it handled.
@Suite("Durable listeners")
struct DurableListenerTests {
    @Test("a durable listener stopped and started again gets exactly what was passed meanwhile; the first time, its start applies",
          arguments: Backend.all)
    func resumesAfterTheLastMessageHandled(backend: Backend) async throws {
        let store = try backend.makeStore()
        let wormhole = try store.wormhole()
        try await wormhole.passMessage(0, identifier: "jobs")
        let first = Collector<Int>()
        let token = try wormhole.listenForMessage(withIdentifier: "jobs", as: Int.self, durableName: "worker", startingFrom: .history) { first.append($0) }
        for value in 1...3 { try await wormhole.passMessage(value, identifier: "jobs") }
        #expect(await first.wait(for: 4) == [0, 1, 2, 3])
        token.cancel()
        for value in 4...6 { try await wormhole.passMessage(value, identifier: "jobs") }
        // Started again (in a new wormhole, as a restarted process would): `.history` no
        // longer applies; what the name had not handled does.
        let again = Collector<Int>()
        let other = try store.wormhole()
        let resumed = try other.listenForMessage(withIdentifier: "jobs", as: Int.self, durableName: "worker", startingFrom: .history) { again.append($0) }
        try await wormhole.passMessage(7, identifier: "jobs")
        #expect(await again.wait(for: 4) == [4, 5, 6, 7])
        await settle()
        #expect(again.all == [4, 5, 6, 7])
        resumed.cancel()
        // A name used for the first time starts where it is told (now: nothing old).
        let fresh = Collector<Int>()
        let newcomer = try other.listenForMessage(withIdentifier: "jobs", as: Int.self, durableName: "newcomer") { fresh.append($0) }
        try await wormhole.passMessage(8, identifier: "jobs")
        #expect(await fresh.wait(for: 1) == [8])
        newcomer.cancel()
    }

    @Test("the async sequence with a name: an element counts as handled when the next is requested; the one in hand at a break comes again",
          arguments: Backend.all)
    func asyncSequenceAcknowledgesOnTheNextRequest(backend: Backend) async throws {
        let store = try backend.makeStore()
        let wormhole = try store.wormhole()
        for value in 1...5 { try await wormhole.passMessage(value, identifier: "q") }
        var first: [Int] = []
        for try await value in wormhole.messages(withIdentifier: "q", as: Int.self, durableName: "reader", startingFrom: .history) {
            first.append(value)
            if value == 3 { break }
        }
        #expect(first == [1, 2, 3])
        var second: [Int] = []
        for try await value in try store.wormhole().messages(withIdentifier: "q", as: Int.self, durableName: "reader") {
            second.append(value)
            if value == 5 { break }
        }
        #expect(second == [3, 4, 5], "3 was in hand at the break: it comes again")
    }

    @Test("without durable names, retention keeps what it kept before: 100 passes with 10 retained leave at most 20",
          arguments: Backend.all)
    func retentionWithoutDurableNamesIsUnchanged(backend: Backend) async throws {
        let store = try backend.makeStore()
        var configuration = Wormhole.Configuration()
        configuration.retainedMessageCount = 10
        let wormhole = try store.wormhole(configuration: configuration)
        for value in 1...100 { try await wormhole.passMessage(value, identifier: "plain") }
        // Compaction (files) and pruning (PostgreSQL) run when twice the retention is held.
        let kept = try #require(try await wormhole.summaries().first { $0.identifier == "plain" }).messageCount
        #expect(kept >= 10 && kept <= 20, "\(kept) kept")
    }

    @Test("a listener that starts .after(sequence:) older than what is kept is told how many it missed, then gets what is kept",
          arguments: Backend.all)
    func startingAfterWhatIsKeptReportsTheGap(backend: Backend) async throws {
        let store = try backend.makeStore()
        var configuration = Wormhole.Configuration()
        configuration.retainedMessageCount = 10
        let wormhole = try store.wormhole(configuration: configuration)
        for value in 1...100 { try await wormhole.passMessage(value, identifier: "old") }
        let received = Collector<Int>()
        let reports = Collector<WormholeError>()
        let token = try wormhole.listenForMessage(withIdentifier: "old", as: Int.self, startingFrom: .after(sequence: 5),
                                                  onError: { reports.append($0) }) { received.append($0) }
        let first = try #require(await received.wait(for: 1).first)
        let report = try #require(await reports.wait(for: 1).first)
        #expect(report.code == .messagesLost && report.missedMessageCount == UInt64(first - 6), "\(report)")
        #expect(await received.wait(for: 100 - first + 1) == Array(first...100))
        token.cancel()
    }

    @Test("one listener at a time per name: a second is refused with durableNameInUse, naming the process; after cancel the name is free",
          arguments: Backend.all)
    func oneListenerPerName(backend: Backend) async throws {
        let store = try backend.makeStore()
        let wormhole = try store.wormhole()
        let token = try wormhole.listenForRecords(withIdentifier: "jobs", durableName: "worker") { _ in }
        let error = #expect(throws: WormholeError.self) {
            try store.wormhole().listenForRecords(withIdentifier: "jobs", durableName: "worker") { _ in }
        }
        #expect(error?.code == .durableNameInUse)
        #expect(error?.description.contains("process \(getpid())") == true, "\(String(describing: error))")
        // Another identifier, or another name, is another position.
        let other = try wormhole.listenForRecords(withIdentifier: "other", durableName: "worker") { _ in }
        token.cancel()
        // The name is free once the cancel has reached the store (at once for files; the
        // database hears it on the wormhole's own connection).
        var again: ListenerToken?
        for _ in 0..<200 where again == nil {
            again = try? wormhole.listenForRecords(withIdentifier: "jobs", durableName: "worker") { _ in }
            if again == nil { try await Task.sleep(for: .milliseconds(10)) }
        }
        #expect(again != nil)
        again?.cancel()
        other.cancel()
        #expect(throws: WormholeError.self) { try wormhole.listenForRecords(withIdentifier: "jobs", durableName: "../x") { _ in } }
    }

    @Test("a stopped durable listener keeps its messages up to the backlog cap; past it, it is told exactly how many it missed, then gets the rest in order",
          arguments: Backend.all)
    func pastTheCapAGapReportWithTheExactCount(backend: Backend) async throws {
        let store = try backend.makeStore()
        var configuration = Wormhole.Configuration()
        configuration.retainedMessageCount = 10
        configuration.maximumBacklogMessageCount = 100
        let wormhole = try store.wormhole(configuration: configuration)
        let handled = Collector<Int>()
        let token = try wormhole.listenForMessage(withIdentifier: "n", as: Int.self, durableName: "slow") { handled.append($0) }
        for value in 1...5 { try await wormhole.passMessage(value, identifier: "n") }
        #expect(await handled.wait(for: 5) == Array(1...5))
        token.cancel()
        // Within the cap: all kept for it.
        for value in 6...80 { try await wormhole.passMessage(value, identifier: "n") }
        let within = Collector<Int>()
        let second = try wormhole.listenForMessage(withIdentifier: "n", as: Int.self, durableName: "slow") { within.append($0) }
        #expect(await within.wait(for: 75) == Array(6...80))
        second.cancel()
        // Past the cap: 2,000 more while it is stopped.
        for value in 81...2080 { try await wormhole.passMessage(value, identifier: "n") }
        let received = Collector<Int>()
        let reports = Collector<WormholeError>()
        let third = try wormhole.listenForMessage(withIdentifier: "n", as: Int.self, durableName: "slow",
                                                  onError: { reports.append($0) }) { received.append($0) }
        let report = try #require(await reports.wait(for: 1).first)
        #expect(report.code == .messagesLost)
        let first = try #require(await received.wait(for: 1).first)
        #expect(report.missedMessageCount == UInt64(first - 81), "missed = first received - 1 - last handled (80)")
        #expect(await received.wait(for: 2080 - first + 1) == Array(first...2080))
        #expect(received.all.count <= max(configuration.maximumBacklogMessageCount, 2 * configuration.maximumBacklogMessageCount))
        print("durable gap (\(backend)): 2,000 passed while stopped, backlog cap 100: missed \(report.missedMessageCount ?? 0), then \(received.all.count) in order (\(first)...2080)")
        third.cancel()
    }

    @Test("status shows running listeners and durable names with their positions; forget removes a name, and is refused while it runs",
          arguments: Backend.all)
    func statusAndForget(backend: Backend) async throws {
        let store = try backend.makeStore()
        let wormhole = try store.wormhole()
        for value in 1...3 { try await wormhole.passMessage(value, identifier: "jobs") }
        let handled = Collector<Int>()
        let durable = try wormhole.listenForMessage(withIdentifier: "jobs", as: Int.self, durableName: "worker", startingFrom: .history) { handled.append($0) }
        let live = try wormhole.listenForRecords(withIdentifier: "jobs") { _ in }
        #expect(await handled.wait(for: 3) == [1, 2, 3])
        var statuses = try wormhole.listeners(identifier: "jobs")
        #expect(statuses.count == 2, "\(statuses)")
        let named = try #require(statuses.first { $0.durableName == "worker" })
        #expect(named.isRunning && named.position == 3 && named.behind == 0 && named.processID == getpid())
        // The database knows its sessions, not their processes.
        #expect(statuses.contains { $0.durableName == nil && $0.isRunning && (backend == .postgres || $0.processID == getpid()) })
        #expect(throws: WormholeError.self) { try wormhole.forgetDurableListener(named: "worker") }
        durable.cancel()
        live.cancel()
        try await wormhole.passMessage(4, identifier: "jobs")
        let deadline = ContinuousClock.now + .seconds(10)
        repeat {
            statuses = try wormhole.listeners()
            if statuses.count == 1 && statuses.first?.isRunning == false { break }
            try await Task.sleep(for: .milliseconds(10))
        } while ContinuousClock.now < deadline
        #expect(statuses.map(\.durableName) == ["worker"])
        #expect(statuses.first?.isRunning == false && statuses.first?.behind == 1)
        #expect(try wormhole.forgetDurableListener(named: "worker") == 1)
        #expect(try wormhole.listeners().isEmpty)
        #expect(try wormhole.forgetDurableListener(named: "worker") == 0)
    }

    @Test("a durable listener process SIGKILLed at random instants, 200 times, while two writer processes pass: every message handled at least once, in order, at most one repeat per kill",
          .timeLimit(.minutes(5)), arguments: Backend.all)
    func killedAtRandomInstantsMissesNothing(backend: Backend) async throws {
        let store = try backend.makeStore()
        let directory = TemporaryDirectory()
        let output = directory.file("handled")
        // The name exists before the first message: everything is its to handle.
        let first = try Agent.start(["durable", store.location, "jobs", "worker", output])
        #expect(await waitForFile(output + ".ready", seconds: 30))
        kill(first.processIdentifier, SIGKILL)
        first.waitUntilExit()
        // Two writers, one message a millisecond each (the database's passes are slower),
        // for as long as the kill cycles last.
        let perWriter = scaled(backend == .postgres ? 2_000 : 10_000)
        let cycles = scaled(200)
        let writers = try (0..<2).map { index in try Agent.start(["pace", store.location, "jobs", "\(perWriter)", "1000", "w\(index)"]) }
        var kills = 1
        while kills <= cycles || writers.contains(where: \.isRunning) {
            try? FileManager.default.removeItem(atPath: output + ".ready")
            let agent = try Agent.start(["durable", store.location, "jobs", "worker", output])
            _ = await waitForFile(output + ".ready", seconds: 30)
            try await Task.sleep(for: .microseconds(Int.random(in: 0...20_000)))
            kill(agent.processIdentifier, SIGKILL)
            agent.waitUntilExit()
            kills += 1
        }
        for writer in writers { #expect(await waitForExit(writer) == 0) }
        try await store.wormhole().passMessage("stop", identifier: "jobs")
        let last = try Agent.start(["durable", store.location, "jobs", "worker", output])
        #expect(await waitForExit(last, seconds: 120) == 0)

        let lines = try String(contentsOfFile: output, encoding: .utf8).split(separator: "\n").map(String.init)
        #expect(!lines.contains { $0.hasPrefix("lost") || $0.hasPrefix("error") }, "\(lines.filter { !$0.first!.isNumber })")
        let sequences = lines.compactMap { UInt64($0.split(separator: " ").first ?? "") }
        let total = UInt64(2 * perWriter + 1)
        var repeats = 0
        var expected: UInt64 = 1
        var disorder = 0
        for (index, sequence) in sequences.enumerated() {
            if sequence == expected {
                expected += 1
            } else if index > 0 && sequence == sequences[index - 1] {
                repeats += 1
            } else {
                disorder += 1
            }
        }
        #expect(disorder == 0, "every line is the next message or a repeat of the one before")
        #expect(expected == total + 1, "all \(total) handled: got to \(expected - 1)")
        #expect(repeats <= kills)
        let missed = total + 1 - expected
        print("durable kills (\(backend)): \(kills) SIGKILLs of the durable listener while 2 writers passed \(2 * perWriter); \(expected - 1) of \(total) messages handled in order, missed \(missed), out of order \(disorder), repeats \(repeats) (at most one per kill)")
    }
}
