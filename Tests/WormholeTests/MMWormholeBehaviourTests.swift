import Foundation
import Testing
@_spi(Backend) @testable import Wormhole
@_spi(Backend) @testable import WormholeCore
@_spi(Backend) @testable import WormholeFiles
import WormholeTestSupport

/// The behaviours MMWormhole's own test suite checks, on the Swift API.
@Suite("MMWormhole behaviours")
struct MMWormholeBehaviourTests {
    @Test(arguments: Backend.all) func passThenReadBack(backend: Backend) throws {
        let store = try backend.makeStore()
        let wormhole = try store.wormhole()
        try wormhole.passMessage(Note(text: "hello"), identifier: "note")
        #expect(try wormhole.message(withIdentifier: "note", as: Note.self) == Note(text: "hello"))
    }

    @Test(arguments: Backend.all) func readReturnsTheLatestMessage(backend: Backend) throws {
        let store = try backend.makeStore()
        let wormhole = try store.wormhole()
        for index in 1...5 { try wormhole.passMessage("message \(index)", identifier: "text") }
        #expect(try wormhole.message(withIdentifier: "text", as: String.self) == "message 5")
        #expect(try wormhole.message(withIdentifier: "never-passed", as: String.self) == nil)
    }

    @Test(arguments: Backend.all) func readAfterClearIsNil(backend: Backend) throws {
        let store = try backend.makeStore()
        let wormhole = try store.wormhole()
        try wormhole.passMessage("x", identifier: "a")
        try wormhole.clearMessageContents(forIdentifier: "a")
        #expect(try wormhole.message(withIdentifier: "a", as: String.self) == nil)
        try wormhole.passMessage("y", identifier: "a")
        #expect(try wormhole.message(withIdentifier: "a", as: String.self) == "y")
    }

    @Test(arguments: Backend.all) func clearAllEmptiesEveryIdentifier(backend: Backend) throws {
        let store = try backend.makeStore()
        let wormhole = try store.wormhole()
        for identifier in ["a", "b", "c"] { try wormhole.passMessage(identifier, identifier: identifier) }
        try wormhole.clearAllMessageContents()
        for identifier in ["a", "b", "c"] {
            #expect(try wormhole.message(withIdentifier: identifier, as: String.self) == nil)
        }
    }

    @Test func messageFileIsNamedAfterTheIdentifier() throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.path)
        try wormhole.passMessage("x", identifier: "com.example.state")
        #expect(FileManager.default.fileExists(atPath: directory.file("com.example.state.wormhole")))
    }

    @Test(arguments: Backend.all) func rawBytesAndTextPassUnchanged(backend: Backend) throws {
        let store = try backend.makeStore()
        let wormhole = try store.wormhole()
        let bytes = Data((0...255).map { UInt8($0) })
        try wormhole.passMessage(bytes, identifier: "bytes")
        try wormhole.passMessage("héllo\n", identifier: "text")
        #expect(try wormhole.message(withIdentifier: "bytes", as: Data.self) == bytes)
        #expect(try wormhole.message(withIdentifier: "text", as: String.self) == "héllo\n")
        #expect(try wormhole.record(withIdentifier: "text")?.payload == Data("héllo\n".utf8))
        #expect(try wormhole.record(withIdentifier: "text")?.kind == .text)
    }

    @Test(.timeLimit(.minutes(1)), arguments: Backend.all)
    func listenerFiresExactlyOncePerPass(backend: Backend) async throws {
        let store = try backend.makeStore()
        let wormhole = try store.wormhole()
        let received = Collector<String>()
        let token = try wormhole.listenForMessage(withIdentifier: "note", as: String.self) { received.append($0) }
        for index in 1...3 { try await wormhole.passMessage("m\(index)", identifier: "note") }
        await received.wait(for: 3)
        await settle()
        #expect(received.all == ["m1", "m2", "m3"])
        token.cancel()
    }

    @Test(.timeLimit(.minutes(1)), arguments: Backend.all)
    func listenerOnAnotherIdentifierOrInstanceDoesNotFire(backend: Backend) async throws {
        let store = try backend.makeStore()
        let other = try backend.makeStore()
        let wormhole = try store.wormhole()
        let elsewhere = try other.wormhole()
        let wrongIdentifier = Collector<String>()
        let wrongInstance = Collector<String>()
        let right = Collector<String>()
        let a = try wormhole.listenForMessage(withIdentifier: "other", as: String.self) { wrongIdentifier.append($0) }
        let b = try elsewhere.listenForMessage(withIdentifier: "note", as: String.self) { wrongInstance.append($0) }
        let c = try wormhole.listenForMessage(withIdentifier: "note", as: String.self) { right.append($0) }
        try await wormhole.passMessage("x", identifier: "note")
        await right.wait(for: 1)
        await settle()
        #expect(right.all == ["x"])
        #expect(wrongIdentifier.all.isEmpty)
        #expect(wrongInstance.all.isEmpty)
        for token in [a, b, c] { token.cancel() }
    }

    @Test(.timeLimit(.minutes(1)), arguments: Backend.all)
    func nothingFiresAfterCancelOrStop(backend: Backend) async throws {
        let store = try backend.makeStore()
        let wormhole = try store.wormhole()
        let cancelled = Collector<String>()
        let stopped = Collector<String>()
        let token = try wormhole.listenForMessage(withIdentifier: "a", as: String.self) { cancelled.append($0) }
        try wormhole.listenForMessage(withIdentifier: "b", as: String.self) { stopped.append($0) }
        token.cancel()
        wormhole.stopListeningForMessage(withIdentifier: "b")
        try await wormhole.passMessage("x", identifier: "a")
        try await wormhole.passMessage("y", identifier: "b")
        await settle(300)
        #expect(cancelled.all.isEmpty)
        #expect(stopped.all.isEmpty)
        #expect(token.isCancelled)
    }
}

/// Bytes that are already encoded, passed with their kind (what the CLI's `send --json`
/// and any relay use), and refused when they are not what the kind says.
@Suite("Passing encoded payloads")
struct PassPayloadTests {
    @Test(arguments: Backend.all) func aJSONPayloadDecodesAsTheTypeItEncodes(backend: Backend) throws {
        let store = try backend.makeStore()
        let wormhole = try store.wormhole()
        let sequence = try wormhole.passPayload(Data(#"{"text": "from elsewhere"}"#.utf8), kind: .json, identifier: "note")
        #expect(try wormhole.message(withIdentifier: "note", as: Note.self) == Note(text: "from elsewhere"))
        let record = try #require(try wormhole.record(withIdentifier: "note"))
        #expect(record.kind == .json && record.sequence == sequence)
        try wormhole.passPayload(Data("plain".utf8), kind: .text, identifier: "note")
        #expect(try wormhole.message(withIdentifier: "note", as: String.self) == "plain")
        try wormhole.passPayload(Data([0xFF, 0, 1]), kind: .data, identifier: "note")
        #expect(try wormhole.message(withIdentifier: "note", as: Data.self) == Data([0xFF, 0, 1]))
    }

    @Test(arguments: Backend.all) func bytesThatAreNotTheirKindAreRefusedAndNothingIsStored(backend: Backend) throws {
        let store = try backend.makeStore()
        let wormhole = try store.wormhole()
        for (payload, kind, words) in [(Data(#"{"text": 1,}"#.utf8), WormholePayloadKind.json, "is not JSON"),
                                       (Data("two values".utf8), .json, "is not JSON"),
                                       (Data([0x61, 0xFF]), .text, "is not UTF-8")] {
            let error = try #require(Result { () throws(WormholeError) in try wormhole.passPayload(payload, kind: kind, identifier: "note") }.failure)
            #expect(error.code == .encodingFailed)
            #expect(error.message.contains(words), "\(error)")
        }
        #expect(try wormhole.record(withIdentifier: "note") == nil)
    }
}

extension Result {
    fileprivate var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
