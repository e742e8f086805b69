import Foundation
import Testing
@_spi(Backend) @testable import Wormhole
@_spi(Backend) @testable import WormholeCore
@_spi(Backend) @testable import WormholeFiles
import WormholeTestSupport

@Suite("Expiry")
struct ExpiryTests {
    @Test("an expired message is not delivered to a listener that starts later, a durable one that resumes, or a work queue; each counts it",
          .timeLimit(.minutes(1)), arguments: Backend.all)
    func expiredMessagesAreNotDelivered(backend: Backend) async throws {
        let store = try backend.makeStore()
        let wormhole = try store.wormhole()
        // The durable name and the queue exist before the messages are passed.
        try wormhole.listenForRecords(withIdentifier: "news", durableName: "archive") { _ in }.cancel()
        try wormhole.listenForMessage(withIdentifier: "news", as: String.self, workQueue: "w") { _ in }.cancel()
        try await wormhole.passMessage("old 1", identifier: "news", timeToLive: 0.2)
        try await wormhole.passMessage("kept", identifier: "news")
        try await wormhole.passMessage("old 2", identifier: "news", timeToLive: 0.2)
        try await wormhole.passMessage("fresh", identifier: "news", timeToLive: 60)
        // The wall clock is what expiry follows: nothing to wait on but it.
        try await Task.sleep(for: .milliseconds(400))
        for durable in [nil, "archive"] as [String?] {
            let received = Collector<String>()
            let reports = Collector<WormholeError>()
            let token = if let durable {
                try wormhole.listenForMessage(withIdentifier: "news", as: String.self, durableName: durable, startingFrom: .history,
                                              onError: { reports.append($0) }) { received.append($0) }
            } else {
                try wormhole.listenForMessage(withIdentifier: "news", as: String.self, startingFrom: .history,
                                              onError: { reports.append($0) }) { received.append($0) }
            }
            #expect(await received.wait(for: 2).count == 2)
            await settle()
            #expect(received.all == ["kept", "fresh"], "\(durable ?? "plain")")
            #expect(reports.all.filter { $0.code == .messagesExpired }.compactMap(\.missedMessageCount).reduce(0, +) == 2)
            token.cancel()
        }
        let taken = Collector<String>()
        let member = try wormhole.listenForMessage(withIdentifier: "news", as: String.self, workQueue: "w") { taken.append($0) }
        #expect(await taken.wait(for: 2).count == 2)
        #expect(taken.all == ["kept", "fresh"])
        #expect(try wormhole.workQueues(identifier: "news").first?.expired == 2)
        member.cancel()
        #expect(throws: WormholeError.self) { try wormhole.passMessage("x", identifier: "news", timeToLive: 0) }
    }
    @Test("the latest message is none when it has expired (an older one is not the latest), and a listener's expiry report names the newest message it stands for",
          arguments: Backend.all)
    func anExpiredLatestMessageIsNotRead(backend: Backend) async throws {
        let store = try backend.makeStore()
        let wormhole = try store.wormhole()
        try await wormhole.passMessage("kept", identifier: "news")
        let first = try await wormhole.passMessage("old 1", identifier: "news", timeToLive: 0.05)
        let second = try await wormhole.passMessage("old 2", identifier: "news", timeToLive: 0.05)
        let before = try await wormhole.record(withIdentifier: "news")
        #expect(before?.sequence == second, "not expired yet")
        // The wall clock is what expiry follows: nothing to wait on but it.
        try await Task.sleep(for: .milliseconds(200))
        let after = try await wormhole.record(withIdentifier: "news")
        #expect(after == nil, "\(after.map { String(decoding: $0.payload, as: UTF8.self) } ?? "")")
        try await wormhole.passMessage("new", identifier: "news")
        let latest = try await wormhole.message(withIdentifier: "news", as: String.self)
        #expect(latest == "new")
        let reports = Collector<WormholeError>()
        let received = Collector<String>()
        let token = try wormhole.listenForMessage(withIdentifier: "news", as: String.self, startingFrom: .history,
                                                  onError: { reports.append($0) }) { received.append($0) }
        defer { token.cancel() }
        #expect(await received.wait(for: 2).count == 2)
        #expect(received.all == ["kept", "new"])
        let expired = reports.all.filter { $0.code == .messagesExpired }
        #expect(expired.map(\.missedMessageCount) == [2] && expired.map(\.sequence) == [second], "\(expired), \(first)")
    }

    @Test("a running listener is not given a message whose expiry passed before it read it: a messagesExpired report, naming the newest, stands in its place (Protocol.md 11.3 R1)",
          .timeLimit(.minutes(1)))
    func aRunningListenerIsNotGivenAnExpiredMessage() async throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.path)
        let received = Collector<String>()
        let reports = Collector<WormholeError>()
        let token = try wormhole.listenForMessage(withIdentifier: "news", as: String.self,
                                                  onError: { reports.append($0) }) { received.append($0) }
        defer { token.cancel() }
        try await wormhole.passMessage("before", identifier: "news")
        #expect(await received.wait(for: 1) == ["before"])
        // Expired the moment they are passed: every read of them comes after their expiry.
        let expired = WormholeRecordAttributes(expires: Date())
        _ = try wormhole.transiting.append(Data("\"stale 1\"".utf8), kind: .json, identifier: "news", attributes: expired)
        let newest = try wormhole.transiting.append(Data("\"stale 2\"".utf8), kind: .json, identifier: "news", attributes: expired).sequence
        try await wormhole.passMessage("after", identifier: "news")
        #expect(await received.wait(for: 2) == ["before", "after"])
        await settle()
        #expect(received.all == ["before", "after"])
        let counted = reports.all.filter { $0.code == .messagesExpired }
        #expect(counted.compactMap(\.missedMessageCount).reduce(0, +) == 2, "\(reports.all)")
        #expect(counted.last?.sequence == newest)
    }

    @Test("a durable name's position moves with handled messages only: an expired message after it is reported again each time the name resumes (Protocol.md 11.3 R1, 12.4 D5)",
          .timeLimit(.minutes(1)))
    func anExpiredMessageAfterADurablePositionIsReportedAgain() async throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.path)
        try wormhole.listenForRecords(withIdentifier: "news", durableName: "archive") { _ in }.cancel()
        try await wormhole.passMessage("kept", identifier: "news")
        let stale = try wormhole.transiting.append(Data("\"stale\"".utf8), kind: .json, identifier: "news",
                                                         attributes: WormholeRecordAttributes(expires: Date())).sequence
        let received = Collector<String>()
        for round in 1...2 {
            let reports = Collector<WormholeError>()
            let token = try wormhole.listenForMessage(withIdentifier: "news", as: String.self, durableName: "archive", startingFrom: .history,
                                                      onError: { reports.append($0) }) { received.append($0) }
            let first = await reports.wait(for: 1)
            token.cancel()
            #expect(first.map(\.code) == [.messagesExpired] && first.map(\.sequence) == [stale], "round \(round): \(first)")
        }
        #expect(received.all == ["kept"])
    }
}
