import Foundation
import Testing
@_spi(Backend) @testable import Wormhole
@_spi(Backend) @testable import WormholeCore
@_spi(Backend) @testable import WormholeFiles
import WormholeTestSupport

/// `passMessages(_:identifier:)`: a batch under one lock and one write, each message its
/// own record; listeners take them one by one.
@Suite("Batched passes")
struct BatchPassTests {
    @Test("batches from one thread and single passes from another: every message once, in one order, each batch unbroken",
          .timeLimit(.minutes(1)))
    func batchesArriveWholeAndInOrderBesideSinglePasses() async throws {
        let directory = TemporaryDirectory()
        var configuration = Wormhole.Configuration()
        // Compactions happen during the run.
        configuration.retainedMessageCount = 50
        let wormhole = try Wormhole(directory: directory.path, configuration: configuration)
        let received = Collector<WormholeRecord>()
        let token = try wormhole.listenForRecords(withIdentifier: "stream", startingFrom: .after(sequence: 0)) { received.append($0) }
        let batches = 40, size = 64, singles = 500
        async let batched: [Range<UInt64>] = Task.detached {
            var ranges: [Range<UInt64>] = []
            for batch in 0..<batches {
                ranges.append(try wormhole.passMessages((0..<size).map { "b\(batch)-\($0)" }, identifier: "stream"))
            }
            return ranges
        }.value
        async let single: Void = Task.detached {
            for index in 0..<singles { try await wormhole.passMessage("s\(index)", identifier: "stream") }
        }.value
        let ranges = try await batched
        try await single
        let total = batches * size + singles
        let all = await received.wait(for: total, seconds: 30)
        await settle()
        #expect(received.count == total)
        #expect(all.map(\.sequence) == Array(1...UInt64(total)))
        for (batch, range) in ranges.enumerated() {
            #expect(range.count == size)
            let texts = all.filter { range.contains($0.sequence) }.map { String(decoding: $0.payload, as: UTF8.self) }
            #expect(texts == (0..<size).map { "b\(batch)-\($0)" }, "batch \(batch) at \(range)")
        }
        #expect(all.allSatisfy { $0.senderUID == geteuid() && $0.kind == .text })
        token.cancel()
    }

    @Test("an empty batch writes nothing; a batch with one message too large or of the wrong kind stores none of it")
    func badBatchesStoreNothing() throws {
        let directory = TemporaryDirectory()
        var configuration = Wormhole.Configuration()
        configuration.maximumMessageSize = 1024
        let wormhole = try Wormhole(directory: directory.path, configuration: configuration)
        #expect(try wormhole.passMessages([String](), identifier: "x").isEmpty)
        #expect(!FileManager.default.fileExists(atPath: directory.file("x.wormhole")))
        try wormhole.passMessage("first", identifier: "x")
        let before = try Data(contentsOf: URL(fileURLWithPath: directory.file("x.wormhole")))
        let tooLarge = #expect(throws: WormholeError.self) {
            try wormhole.passMessages(["a", String(repeating: "b", count: 2000), "c"], identifier: "x")
        }
        #expect(tooLarge?.code == .messageTooLarge)
        let notText = #expect(throws: WormholeError.self) {
            try wormhole.passPayloads([(Data("ok".utf8), .text), (Data([0xFF, 0xFE]), .text)], identifier: "x")
        }
        #expect(notText?.code == .encodingFailed)
        #expect(try Data(contentsOf: URL(fileURLWithPath: directory.file("x.wormhole"))) == before)
        #expect(try wormhole.passMessages(["second", "third"], identifier: "x") == 2..<4)
    }

    @Test("a batch that fills the filesystem part-way: the error says how many were passed, listeners get exactly those, numbering goes on",
          .enabled(if: geteuid() == 0, "mounting a small tmpfs needs root"), .timeLimit(.minutes(1)))
    func batchOnAFullDiskPassesWhatItSays() async throws {
        let parent = TemporaryDirectory()
        let mountPoint = parent.file("small")
        mkdir(mountPoint, 0o700)
        try #require(mount("tmpfs", mountPoint, "tmpfs", 0, "size=128k,mode=0700") == 0, "mount: \(String(cString: strerror(errno)))")
        defer { umount2(mountPoint, Int32(MNT_DETACH)) }
        let wormhole = try Wormhole(directory: mountPoint + "/c")
        let received = Collector<WormholeRecord>()
        let token = try wormhole.listenForRecords(withIdentifier: "fill", startingFrom: .after(sequence: 0)) { received.append($0) }
        let payload = String(repeating: "x", count: 1000)
        let error = #expect(throws: WormholeError.self) {
            try wormhole.passMessages(Array(repeating: payload, count: 200), identifier: "fill")
        }
        #expect(error?.errno == .noSpace)
        let text = error?.description ?? ""
        let passed = text.range(of: " of the 200 messages").flatMap { Int(text[..<$0.lowerBound].split(separator: " ").last ?? "") } ?? 0
        #expect(passed > 0 && passed < 200, "\(text)")
        let got = await received.wait(for: passed, seconds: 5)
        await settle()
        #expect(received.count == passed)
        #expect(got.map(\.sequence) == Array(1...UInt64(max(passed, 1))).prefix(passed).map { $0 })
        // Room again (a clear on a full disk empties the log in place): the next number follows.
        try await wormhole.clearMessageContents(forIdentifier: "fill")
        #expect(try wormhole.passMessages(["after"], identifier: "fill") == UInt64(passed + 1)..<UInt64(passed + 2))
        token.cancel()
    }
}
