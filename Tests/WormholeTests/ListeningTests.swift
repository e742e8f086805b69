import Foundation
import Testing
@_spi(Backend) @testable import Wormhole
@_spi(Backend) @testable import WormholeCore
@_spi(Backend) @testable import WormholeFiles
import WormholeTestSupport

/// Listeners: several per identifier, queues, starting points, async sequences, stalls.
@Suite("Listening")
struct ListeningTests {
    @Test("a caught-up listener writes its exact position (§12.2): listeners() shows it 0 behind, not the batch step behind",
          .timeLimit(.minutes(1)))
    func caughtUpListenerShowsItsExactPosition() async throws {
        let store = try Backend.file.makeStore()
        let wormhole = try store.wormhole()
        try await wormhole.passMessage(0, identifier: "chat")
        let received = Collector<Int>()
        let token = try wormhole.listenForMessage(withIdentifier: "chat", as: Int.self) { received.append($0) }
        defer { token.cancel() }
        // One at a time, each received before the next is passed: twenty reads of the same
        // log, each far less than the step (R/4) past the last claim written.
        for value in 1...20 {
            try await wormhole.passMessage(value, identifier: "chat")
            #expect(await received.wait(for: value) == Array(1...value))
        }
        var statuses: [WormholeListenerStatus] = []
        let exact = await eventually(seconds: 4) {
            statuses = try wormhole.listeners(identifier: "chat")
            return statuses.map { [$0.position, $0.behind] } == [[21, 0]]
        }
        #expect(exact, "position 21, 0 behind: \(statuses)")
    }

    @Test("a claim's PID namespace is the inode of the namespace /proc/self/ns/pid links to (stat, following the link), not the link's own (lstat) (§12.2)",
          .timeLimit(.minutes(1)))
    func claimNamesThePIDNamespaceByStatNotLstat() async throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.path)
        try await wormhole.passMessage(1, identifier: "chat")
        let token = try wormhole.listenForRecords(withIdentifier: "chat") { _ in }
        defer { token.cancel() }
        var followed = stat(), link = stat()
        #expect(stat("/proc/self/ns/pid", &followed) == 0 && lstat("/proc/self/ns/pid", &link) == 0)
        #expect(followed.st_ino != link.st_ino, "the namespace and the link are different inodes")
        let claims = directory.file(".listeners/chat")
        let names = try FileManager.default.contentsOfDirectory(atPath: claims).filter { !$0.hasPrefix(".") }
        #expect(names.count == 1)
        let bytes = try Data(contentsOf: URL(fileURLWithPath: claims + "/" + names[0]))
        #expect(bytes.count == 24)
        let namespace = bytes.count == 24 ? bytes[16..<24].enumerated().reduce(UInt64(0)) { $0 | UInt64($1.element) << (8 * UInt64($1.offset)) } : 0
        #expect(namespace == UInt64(followed.st_ino), "bytes 16-23: \(namespace), stat: \(followed.st_ino), lstat: \(link.st_ino)")
        #expect(Syscalls.pidNamespace == UInt64(followed.st_ino))
    }

    @Test("a compactor reads the pid of both temporary names, .<pid>-<hex> and .durable-<name>.<pid>-<hex>, with dots and dashes in the name (§12.3 Q4)",
          .timeLimit(.minutes(1)))
    func temporaryNamesCarryTheirPID() async throws {
        let finished = Process()
        finished.executableURL = URL(fileURLWithPath: "/bin/true")
        try finished.run()
        finished.waitUntilExit()
        let alive = getpid(), dead = finished.processIdentifier
        #expect(ListenerCursor.processMayBeAlive("\(alive)-1f"[...]))
        #expect(ListenerCursor.processMayBeAlive("durable-w\(alive).\(alive)-1f"[...]))
        #expect(ListenerCursor.processMayBeAlive("durable-a-b.c.\(alive)-1f"[...]))
        #expect(!ListenerCursor.processMayBeAlive("durable-a-b.c.\(dead)-1f"[...]))
        #expect(!ListenerCursor.processMayBeAlive("\(dead)-1f"[...]))
        #expect(!ListenerCursor.processMayBeAlive("durable-w"[...]))
    }

    @Test("large messages reach a listener once each, in order, across compactions that keep delivered ones",
          .timeLimit(.minutes(1)),
          arguments: Backend.all)
    func largeMessagesAcrossCompactionsArriveOnceInOrder(backend: Backend) async throws {
        // After a compaction the new file starts with retained records the listener has
        // delivered; large ones are skipped by their headers alone.
        let store = try backend.makeStore()
        var configuration = Wormhole.Configuration()
        configuration.retainedByteCount = 256 << 10
        let wormhole = try store.wormhole(configuration: configuration)
        let received = Collector<Data>()
        let token = try wormhole.listenForMessage(withIdentifier: "big", as: Data.self) { received.append($0) }
        let count = 40
        for index in 0..<count {
            try await wormhole.passMessage(Data(repeating: UInt8(index), count: 96 << 10), identifier: "big")
            if index % 8 == 7 { try await Task.sleep(for: .milliseconds(20)) }
        }
        let values = await received.wait(for: count, seconds: 20)
        token.cancel()
        #expect(values.count == count)
        #expect(values.map { $0.first ?? 255 } == (0..<count).map { UInt8($0) })
        #expect(values.allSatisfy { $0.count == 96 << 10 && Set($0).count == 1 })
    }

    @Test(.timeLimit(.minutes(1)), arguments: Backend.all)
    func severalListenersOfOneIdentifierEachReceiveEveryMessage(backend: Backend) async throws {
        let store = try backend.makeStore()
        let wormhole = try store.wormhole()
        let collectors = (0..<3).map { _ in Collector<Int>() }
        let tokens = try collectors.map { collector in
            try wormhole.listenForMessage(withIdentifier: "n", as: Int.self) { collector.append($0) }
        }
        for value in 1...50 { try await wormhole.passMessage(value, identifier: "n") }
        for collector in collectors { #expect(await collector.wait(for: 50) == Array(1...50)) }
        tokens[0].cancel()
        try await wormhole.passMessage(51, identifier: "n")
        await collectors[1].wait(for: 51)
        await collectors[2].wait(for: 51)
        await settle()
        #expect(collectors[0].count == 50)
        #expect(collectors[1].all.last == 51 && collectors[2].all.last == 51)
        for token in tokens { token.cancel() }
    }

    @Test(.timeLimit(.minutes(1)), arguments: Backend.all)
    func listenerRunsOnTheQueueTheCallerChose(backend: Backend) async throws {
        let store = try backend.makeStore()
        let wormhole = try store.wormhole()
        let queue = DispatchQueue(label: "ui", attributes: .concurrent)
        let key = DispatchSpecificKey<String>()
        queue.setSpecific(key: key, value: "ui")
        let seen = Collector<String?>()
        let token = try wormhole.listenForMessage(withIdentifier: "n", as: String.self, queue: queue) { _ in
            seen.append(DispatchQueue.getSpecific(key: key))
        }
        for index in 0..<20 { try await wormhole.passMessage("m\(index)", identifier: "n") }
        #expect(await seen.wait(for: 20) == Array(repeating: "ui", count: 20))
        token.cancel()
    }

    @Test(.timeLimit(.minutes(1)), arguments: Backend.all)
    func startingPointsChooseWhatIsReplayed(backend: Backend) async throws {
        let store = try backend.makeStore()
        var configuration = Wormhole.Configuration()
        configuration.retainedMessageCount = 5
        let wormhole = try store.wormhole(configuration: configuration)
        for value in 1...23 { try await wormhole.passMessage(value, identifier: "n") }
        let history = Collector<Int>(), latest = Collector<Int>(), after = Collector<Int>(), now = Collector<Int>()
        let tokens = [
            try wormhole.listenForMessage(withIdentifier: "n", as: Int.self, startingFrom: .history) { history.append($0) },
            try wormhole.listenForMessage(withIdentifier: "n", as: Int.self, startingFrom: .latest) { latest.append($0) },
            try wormhole.listenForMessage(withIdentifier: "n", as: Int.self, startingFrom: .after(sequence: 20)) { after.append($0) },
            try wormhole.listenForMessage(withIdentifier: "n", as: Int.self, startingFrom: .now) { now.append($0) },
        ]
        await history.wait(for: 5)
        try await wormhole.passMessage(24, identifier: "n")
        #expect(await history.wait(for: 6) == [19, 20, 21, 22, 23, 24], "the retained history: the last 5, then new ones")
        #expect(await latest.wait(for: 2) == [23, 24])
        #expect(await after.wait(for: 4) == [21, 22, 23, 24])
        #expect(await now.wait(for: 1) == [24])
        for token in tokens { token.cancel() }
    }

    @Test(.timeLimit(.minutes(1)), arguments: Backend.all)
    func clearedMessagesAreNotReplayed(backend: Backend) async throws {
        let store = try backend.makeStore()
        let wormhole = try store.wormhole()
        for value in 1...3 { try await wormhole.passMessage(value, identifier: "n") }
        try await wormhole.clearMessageContents(forIdentifier: "n")
        try await wormhole.passMessage(4, identifier: "n")
        let history = Collector<Int>()
        let token = try wormhole.listenForMessage(withIdentifier: "n", as: Int.self, startingFrom: .history) { history.append($0) }
        await history.wait(for: 1)
        await settle(100)
        #expect(history.all == [4])
        await #expect(try wormhole.record(withIdentifier: "n")?.sequence == 4, "sequence numbers go on after a clear")
        token.cancel()
    }

    @Test("a listener that stalls while thousands arrive loses none, though the log is compacted meanwhile",
          .timeLimit(.minutes(2)),
          arguments: Backend.all)
    func stalledListenerKeepsEverythingThroughCompaction(backend: Backend) async throws {
        let store = try backend.makeStore()
        var configuration = Wormhole.Configuration()
        configuration.retainedMessageCount = 10
        let wormhole = try store.wormhole(configuration: configuration)
        let stalled = try StalledListener(wormhole, identifier: "n")
        let total = 5000
        for value in 1...total { try await wormhole.passMessage(value, identifier: "n") }
        // Compaction ran many times while the listener's claim kept its unread records.
        let history = Collector<Int>()
        let late = try wormhole.listenForMessage(withIdentifier: "n", as: Int.self, startingFrom: .history) { history.append($0) }
        #expect(await history.wait(for: 10) == Array((total - 9)...total))
        stalled.gate.signal()
        #expect(await stalled.received.wait(for: total, seconds: 60) == Array(1...total))
        stalled.token.cancel()
        late.cancel()
    }

    @Test(.timeLimit(.minutes(1)), arguments: Backend.all)
    func asyncSequenceDeliversInOrderAndReleasesItsClaimWhenItEnds(backend: Backend) async throws {
        let store = try backend.makeStore()
        let wormhole = try store.wormhole()
        for value in 1...3 { try await wormhole.passMessage(Note(text: "\(value)"), identifier: "notes") }
        var texts: [String] = []
        for try await note in wormhole.messages(withIdentifier: "notes", as: Note.self, startingFrom: .history) {
            texts.append(note.text)
            if texts.count == 3 { try await wormhole.passMessage(Note(text: "4"), identifier: "notes") }
            if texts.count == 4 { break }
        }
        #expect(texts == ["1", "2", "3", "4"])
        // Its claim on unread messages is released: nothing is kept for it any more.
        await eventually(seconds: 5) { try store.claims(identifier: "notes") == 0 }
        #expect(try store.claims(identifier: "notes") == 0)
    }

    @Test(.timeLimit(.minutes(1)), arguments: Backend.all)
    func cancellingTheConsumingTaskOrStoppingEndsTheSequence(backend: Backend) async throws {
        let store = try backend.makeStore()
        let wormhole = try store.wormhole()
        let first = Task {
            var count = 0
            for try await _ in wormhole.records(withIdentifier: "a") { count += 1 }
            return count
        }
        let received = Collector<String>()
        let second = Task {
            var values: [String] = []
            for try await value in wormhole.messages(withIdentifier: "b", as: String.self) {
                values.append(value)
                received.append(value)
            }
            return values
        }
        // Each sequence listens once it holds its claim: wait for that, not for a time.
        #expect(await eventually { try store.claims(identifier: "a") == 1 && store.claims(identifier: "b") == 1 })
        first.cancel()
        #expect(try await first.value == 0)
        try await wormhole.passMessage("x", identifier: "b")
        #expect(await received.wait(for: 1) == ["x"])
        wormhole.stopListeningForMessage(withIdentifier: "b")
        #expect(try await second.value == ["x"])
    }

    @Test(.timeLimit(.minutes(1)), arguments: Backend.all)
    func droppingTheWormholeStopsItsListeners(backend: Backend) async throws {
        let store = try backend.makeStore()
        let received = Collector<String>()
        var wormhole: Wormhole? = try store.wormhole()
        let token = try wormhole?.listenForMessage(withIdentifier: "n", as: String.self) { received.append($0) }
        wormhole = nil
        #expect(token?.isCancelled == true)
        try await store.wormhole().passMessage("x", identifier: "n")
        await settle()
        #expect(received.count == 0)
    }
}
