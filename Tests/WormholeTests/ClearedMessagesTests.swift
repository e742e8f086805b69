import Foundation
import Testing
@_spi(Backend) @testable import Wormhole
@_spi(Backend) @testable import WormholeCore
@_spi(Backend) @testable import WormholeFiles
import WormholeTestSupport

/// What a clear hides, and from whom (Protocol.md §10.3, §11.3, §12.3 Q1, §12.4 D4, §18.1,
/// §18.3 T2 and T3): a clear hides the messages so far from readers that start later, not
/// from a position whose claim kept them. A work queue's state and a durable name hold
/// such a claim, in their own log and (keeping everything) in a log made anew; a new
/// queue does not.
@Suite("Cleared messages")
struct ClearedMessagesTests {
    static func take(_ queue: any WormholeTransitingWorkQueue, reports: inout [WormholeError]) throws -> WormholeWorkQueueDelivery? {
        var seen: [WormholeError] = []
        defer { reports += seen }
        return try queue.take(maximumDeliveries: 5, deadLetters: "jobs.dead-letters", report: { seen.append($0) })
    }

    static func text(_ delivery: WormholeWorkQueueDelivery?) -> String? {
        delivery.map { String(decoding: $0.record.payload, as: UTF8.self) }
    }

    @Test("a work queue is handed what it had not taken when the log was cleared, and nothing is called lost (T3)")
    func aQueueIsHandedWhatItHadNotTakenWhenTheLogWasCleared() async throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.path)
        let transiting = try #require(wormhole.transiting as? FileTransiting)
        for index in 1...5 { _ = try await wormhole.passMessage("m\(index)", identifier: "jobs") }
        var reports: [WormholeError] = []
        let first = try transiting.joinWorkQueue(identifier: "jobs", name: "w", startingFrom: .history)
        for expected in ["m1", "m2"] {
            let delivery = try #require(try Self.take(first, reports: &reports))
            #expect(Self.text(delivery) == expected)
            try first.acknowledge(delivery.record.sequence)
        }
        first.close()
        try await wormhole.clearMessageContents(forIdentifier: "jobs")
        _ = try await wormhole.passMessage("m6", identifier: "jobs")
        let second = try transiting.joinWorkQueue(identifier: "jobs", name: "w", startingFrom: .history)
        defer { second.close() }
        var handed: [String] = []
        while let delivery = try Self.take(second, reports: &reports) {
            handed.append(Self.text(delivery) ?? "")
            try second.acknowledge(delivery.record.sequence)
        }
        #expect(handed == ["m3", "m4", "m5", "m6"])
        #expect(reports.isEmpty, "\(reports)")
        let status = try #require(try wormhole.workQueues(identifier: "jobs").first)
        #expect(status.lost == 0 && status.acknowledged == 6)
    }

    @Test("a message handed out and given back before a clear is handed out again after it, with its count (T2)")
    func aMessageHeldAtTheClearIsHandedOutAgain() async throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.path)
        let transiting = try #require(wormhole.transiting as? FileTransiting)
        for index in 1...3 { _ = try await wormhole.passMessage("m\(index)", identifier: "jobs") }
        var reports: [WormholeError] = []
        let queue = try transiting.joinWorkQueue(identifier: "jobs", name: "w", startingFrom: .history)
        defer { queue.close() }
        let held = try #require(try Self.take(queue, reports: &reports))
        try await wormhole.clearMessageContents(forIdentifier: "jobs")
        try queue.giveBack(held.record.sequence, reason: "failed", maximumDeliveries: 5, deadLetters: "jobs.dead-letters")
        let again = try #require(try Self.take(queue, reports: &reports))
        #expect(Self.text(again) == "m1" && again.deliveries == 2)
        #expect(reports.isEmpty, "\(reports)")
    }

    @Test("a queue made after a clear starts above it: the cleared messages are not its to handle (§18.1)")
    func aQueueMadeAfterAClearStartsAboveIt() async throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.path)
        let transiting = try #require(wormhole.transiting as? FileTransiting)
        for index in 1...3 { _ = try await wormhole.passMessage("m\(index)", identifier: "jobs") }
        try await wormhole.clearMessageContents(forIdentifier: "jobs")
        _ = try await wormhole.passMessage("m4", identifier: "jobs")
        var reports: [WormholeError] = []
        let queue = try transiting.joinWorkQueue(identifier: "jobs", name: "late", startingFrom: .history)
        defer { queue.close() }
        let delivery = try #require(try Self.take(queue, reports: &reports))
        #expect(Self.text(delivery) == "m4")
        try queue.acknowledge(delivery.record.sequence)
        #expect(try Self.take(queue, reports: &reports) == nil)
        #expect(reports.isEmpty, "\(reports)")
    }

    @Test("a durable name gets what was cleared while it was stopped, in its own log and in a log made anew, whose compaction its position kept from removing them (Q1, D4)",
          .timeLimit(.minutes(1)))
    func aDurableNameGetsWhatWasClearedWhileItWasStopped() async throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.path)
        let logPath = directory.file("chat.wormhole")
        _ = try await wormhole.passMessage("x", identifier: "chat")
        for name in ["same", "anew"] {
            let first = Collector<String>()
            let token = try wormhole.listenForMessage(withIdentifier: "chat", as: String.self, durableName: name, startingFrom: .history) { first.append($0) }
            await first.wait(for: 1)
            #expect(await eventually { try wormhole.listeners(identifier: "chat").contains { $0.durableName == name && $0.position == 1 } })
            token.cancel()
        }
        _ = try await wormhole.passMessage("y", identifier: "chat")
        try await wormhole.clearMessageContents(forIdentifier: "chat")
        _ = try await wormhole.passMessage("z", identifier: "chat")
        let same = Collector<String>()
        let errors = Collector<WormholeError>()
        let resumed = try wormhole.listenForMessage(withIdentifier: "chat", as: String.self, durableName: "same", onError: { errors.append($0) }) { same.append($0) }
        await same.wait(for: 2)
        resumed.cancel()
        #expect(same.all == ["y", "z"])

        // The log made anew (deleted outside the protocol), given a, b, cleared, then c.
        try FileManager.default.removeItem(atPath: logPath)
        for text in ["a", "b"] { _ = try await wormhole.passMessage(text, identifier: "chat") }
        try await wormhole.clearMessageContents(forIdentifier: "chat")
        _ = try await wormhole.passMessage("c", identifier: "chat")
        let anew = Collector<String>()
        let again = try wormhole.listenForMessage(withIdentifier: "chat", as: String.self, durableName: "anew", onError: { errors.append($0) }) { anew.append($0) }
        await anew.wait(for: 3)
        await settle(150)
        again.cancel()
        #expect(anew.all == ["a", "b", "c"])
        #expect(errors.all.isEmpty, "\(errors.all)")
    }
}
