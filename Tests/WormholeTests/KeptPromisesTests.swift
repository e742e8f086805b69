import Foundation
import Testing
@_spi(Backend) @testable import Wormhole
@_spi(Backend) @testable import WormholeCore
@_spi(Backend) @testable import WormholeFiles
import WormholeTestSupport

/// What users build on, in ordinary operation: a compaction while a durable listener is
/// held up, a full disk when a name is first used, a clear while a name is not running,
/// a log made again under a stopped listener, listeners in another PID namespace, and a
/// program with few descriptors.
@Suite("Promises kept in ordinary operation")
struct KeptPromisesTests {
    @Test("a durable listener held up while a compaction replaces its log gets every message once it runs, with no further pass",
          .timeLimit(.minutes(1)))
    func durableListenerMovesToTheCompactedLogByItself() async throws {
        let directory = TemporaryDirectory()
        var configuration = Wormhole.Configuration()
        configuration.retainedMessageCount = 10
        let wormhole = try Wormhole(directory: directory.path, configuration: configuration)
        try await wormhole.passMessage(0, identifier: "jobs")
        let queue = DispatchQueue(label: "held")
        let received = Collector<Int>()
        let token = try wormhole.listenForMessage(withIdentifier: "jobs", as: Int.self, durableName: "held", queue: queue) { received.append($0) }
        // Its first drain has run (it holds the first log open, after message 1).
        queue.sync {}
        queue.suspend()
        // Compactions replace the log (its identity stays): the held listener's position
        // keeps every message in the new file.
        for value in 1...25 { try await wormhole.passMessage(value, identifier: "jobs") }
        queue.resume()
        // Without another pass: before, the drain returned the old file's 20 and left the
        // new file's 5 until the next message on "jobs".
        #expect(await received.wait(for: 25, seconds: 5) == Array(1...25))
        await settle()
        #expect(received.all == Array(1...25))
        token.cancel()
    }

    @Test("a durable name first used on a full filesystem is refused with a clear error and leaves no position behind; once space is freed it starts and keeps its place",
          .enabled(if: geteuid() == 0, "mounting a small tmpfs needs root"), .timeLimit(.minutes(1)))
    func durableNameOnAFullDiskIsRefusedNotForgotten() async throws {
        let small = try SmallFilesystem()
        defer { withExtendedLifetime(small) {} }
        let mountPoint = small.path
        let wormhole = try Wormhole(directory: mountPoint + "/c")
        try await wormhole.passMessage("before", identifier: "jobs")
        // Every block taken; inodes to spare (an empty file can still be made).
        let filler = try small.fill()

        let error = #expect(throws: WormholeError.self) {
            try wormhole.listenForMessage(withIdentifier: "jobs", as: String.self, durableName: "late", startingFrom: .history) { _ in }
        }
        #expect(error?.errno == .noSpace)
        #expect(error?.description.contains("the filesystem is full") == true, "\(String(describing: error))")
        #expect(error?.description.contains("no position was lost") == true)
        let claims = try FileManager.default.contentsOfDirectory(atPath: mountPoint + "/c/.listeners/jobs")
        #expect(claims.isEmpty, "no empty or temporary position left: \(claims)")

        try FileManager.default.removeItem(atPath: filler)
        let received = Collector<String>()
        let token = try wormhole.listenForMessage(withIdentifier: "jobs", as: String.self, durableName: "late", startingFrom: .history) { received.append($0) }
        #expect(await received.wait(for: 1) == ["before"])
        token.cancel()
        try await wormhole.passMessage("meanwhile", identifier: "jobs")
        let again = Collector<String>()
        let resumed = try wormhole.listenForMessage(withIdentifier: "jobs", as: String.self, durableName: "late", startingFrom: .now) { again.append($0) }
        #expect(await again.wait(for: 1) == ["meanwhile"], "the name resumes where it stopped, not as a new name")
        resumed.cancel()
    }

    @Test("a durable position that holds no valid value is refused, naming the way to start over, instead of starting as a new name")
    func damagedDurablePositionIsRefused() async throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.path)
        try await wormhole.passMessage("one", identifier: "jobs")
        try FileManager.default.createDirectory(atPath: directory.file(".listeners/jobs"), withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        // Empty: what a full disk used to leave.
        try Data().write(to: URL(fileURLWithPath: directory.file(".listeners/jobs/durable-archiver")))
        let error = #expect(throws: WormholeError.self) {
            try wormhole.listenForMessage(withIdentifier: "jobs", as: String.self, durableName: "archiver") { _ in }
        }
        #expect(error?.code == .corruptRecord)
        #expect(error?.description.contains("is damaged") == true, "\(String(describing: error))")
        #expect(error?.description.contains("wormhole forget archiver jobs") == true)
        #expect(try wormhole.forgetDurableListener(named: "archiver", identifier: "jobs") == 1)
        let received = Collector<String>()
        let token = try wormhole.listenForMessage(withIdentifier: "jobs", as: String.self, durableName: "archiver", startingFrom: .history) { received.append($0) }
        #expect(await received.wait(for: 1) == ["one"])
        token.cancel()
    }

    @Test("a clear while a durable name is not running: the name still gets what it had not handled, as a listener that kept running would",
          .timeLimit(.minutes(1)))
    func clearDoesNotSkipADurableNamesBacklog() async throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.path)
        let first = Collector<Int>()
        let token = try wormhole.listenForMessage(withIdentifier: "jobs", as: Int.self, durableName: "worker") { first.append($0) }
        for value in 1...3 { try await wormhole.passMessage(value, identifier: "jobs") }
        #expect(await first.wait(for: 3) == [1, 2, 3])
        token.cancel()
        for value in 4...6 { try await wormhole.passMessage(value, identifier: "jobs") }
        try await wormhole.clearMessageContents(forIdentifier: "jobs")
        await #expect(try wormhole.message(withIdentifier: "jobs", as: Int.self) == nil, "cleared for readers that start now")
        let status = try #require(try wormhole.listeners(identifier: "jobs").first { $0.durableName == "worker" })
        #expect(status.behind == 3)

        let again = Collector<Int>()
        let errors = Collector<WormholeError>()
        let resumed = try wormhole.listenForMessage(withIdentifier: "jobs", as: Int.self, durableName: "worker",
                                                    onError: { errors.append($0) }) { again.append($0) }
        #expect(await again.wait(for: 3) == [4, 5, 6])
        try await wormhole.passMessage(7, identifier: "jobs")
        #expect(await again.wait(for: 4) == [4, 5, 6, 7])
        #expect(errors.all.isEmpty, "\(errors.all)")
        resumed.cancel()
        // A listener that starts now with the history sees nothing cleared.
        let newcomer = Collector<Int>()
        let fresh = try wormhole.listenForMessage(withIdentifier: "jobs", as: Int.self, startingFrom: .history) { newcomer.append($0) }
        #expect(await newcomer.wait(for: 1) == [7])
        fresh.cancel()
    }

    @Test("a listener stopped while its log is removed and made again: its claim names the old log, so compaction keeps all of the new one for it",
          .timeLimit(.minutes(1)))
    func claimOnARemovedLogKeepsTheNewLog() async throws {
        let directory = TemporaryDirectory()
        var configuration = Wormhole.Configuration()
        configuration.retainedMessageCount = 10
        let wormhole = try Wormhole(directory: directory.path, configuration: configuration)
        let queue = DispatchQueue(label: "stopped")
        let received = Collector<String>()
        let errors = Collector<WormholeError>()
        let token = try wormhole.listenForMessage(withIdentifier: "log", as: String.self, queue: queue,
                                                  onError: { errors.append($0) }) { received.append($0) }
        for index in 1...30 { try await wormhole.passMessage("old \(index)", identifier: "log") }
        #expect(await received.wait(for: 30).count == 30)
        queue.sync {}
        queue.suspend()
        // Its claim now says "30 of the old log". The log goes (an operator, or a clear
        // on a full disk) and a new one starts at 1.
        try FileManager.default.removeItem(atPath: directory.file("log.wormhole"))
        for index in 1...60 { try await wormhole.passMessage("new \(index)", identifier: "log") }
        queue.resume()
        let all = await received.wait(for: 90)
        #expect(Array(all.dropFirst(30)) == (1...60).map { "new \($0)" })
        #expect(errors.all.isEmpty, "nothing reported lost: \(errors.all)")
        token.cancel()
    }

    @Test("bytes that are no record appended to a log: its listeners are told it was rewritten, never cut, since it did not get shorter (§11.3 R5)",
          .timeLimit(.minutes(1)))
    func appendedGarbageIsReportedAsRewrittenNotCut() async throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.path)
        let received = Collector<WormholeRecord>()
        let errors = Collector<WormholeError>()
        let token = try wormhole.listenForRecords(withIdentifier: "app", onError: { errors.append($0) }) { received.append($0) }
        defer { token.cancel() }
        for index in 1...3 { try await wormhole.passMessage("m\(index)", identifier: "app") }
        #expect(await received.wait(for: 3).count == 3)
        let handle = try #require(FileHandle(forWritingAtPath: directory.file("app.wormhole")))
        try handle.seekToEnd()
        try handle.write(contentsOf: Data(repeating: 0xAB, count: 16))
        try handle.close()
        #expect(await eventually { errors.all.contains { $0.code == .logChangedOutsideWormhole } }, "the listener noticed")
        let text = errors.all.map { "\($0)" }.joined(separator: "\n")
        #expect(text.contains("rewritten by another program") && !text.contains("cut by"), "\(text)")
    }

    @Test("a log emptied under a long-lived writer (copytruncate): the writer writes its header again and numbers on; listeners are told, lose nothing they had read, and others read the log",
          .timeLimit(.minutes(1)))
    func logEmptiedUnderALongLivedWriter() async throws {
        let directory = TemporaryDirectory()
        let writer = try Wormhole(directory: directory.path)
        let received = Collector<WormholeRecord>()
        let errors = Collector<WormholeError>()
        let token = try writer.listenForRecords(withIdentifier: "app", onError: { errors.append($0) }) { received.append($0) }
        for index in 1...10 { try await writer.passMessage("m\(index)", identifier: "app") }
        #expect(await received.wait(for: 10).count == 10)
        #expect(truncate(directory.file("app.wormhole"), 0) == 0)
        #expect(await eventually { errors.all.contains { $0.code == .logChangedOutsideWormhole } }, "the listener noticed")
        for index in 11...15 { try await writer.passMessage("m\(index)", identifier: "app") }
        let all = await received.wait(for: 15)
        #expect(all.map(\.sequence) == Array(1...15), "numbering went on: no number used twice")
        #expect(all.map { String(decoding: $0.payload, as: UTF8.self) } == (1...15).map { "m\($0)" })
        #expect(errors.all.filter { $0.code == .messagesLost }.isEmpty, "nothing it had not read was lost: \(errors.all)")
        // Another process sees a log again, from its header on.
        let other = try Wormhole(directory: directory.path)
        await #expect(try other.message(withIdentifier: "app", as: String.self) == "m15")
        await #expect(try other.summaries().map(\.identifier) == ["app"])
        token.cancel()
    }

    @Test("a log cut in the middle: a writer that did not know it numbers above every listener's position, and a listener that had not read the cut messages is told how many",
          .timeLimit(.minutes(1)))
    func logCutInTheMiddle() async throws {
        let directory = TemporaryDirectory()
        let first = try Wormhole(directory: directory.path)
        let ahead = Collector<WormholeRecord>()
        let aheadErrors = Collector<WormholeError>()
        let fast = try first.listenForRecords(withIdentifier: "app", onError: { aheadErrors.append($0) }) { ahead.append($0) }
        // A second listener, held up inside message 5 after it has read 1...10.
        let gate = DispatchSemaphore(value: 0)
        let behind = Collector<WormholeRecord>()
        let behindErrors = Collector<WormholeError>()
        let slow = try first.listenForRecords(withIdentifier: "app", queue: DispatchQueue(label: "behind"),
                                              onError: { behindErrors.append($0) }) { record in
            behind.append(record)
            if record.sequence == 5 { gate.wait() }
        }
        for index in 1...10 { try await first.passMessage("m\(index)", identifier: "app") }
        #expect(await behind.wait(for: 5).count == 5)
        for index in 11...20 { try await first.passMessage("m\(index)", identifier: "app") }
        #expect(await ahead.wait(for: 20).count == 20)
        // Cut after message 10 (each record: 36 + payload + 4 bytes after the 128-byte header).
        let cut = (1...10).reduce(LogFormat.headerSize) { $0 + LogFormat.recordOverhead + "m\($1)".utf8.count }
        #expect(truncate(directory.file("app.wormhole"), off_t(cut)) == 0)
        #expect(await eventually { aheadErrors.all.contains { $0.code == .logChangedOutsideWormhole } })
        // A new process, which knows nothing of 11...20.
        let second = try Wormhole(directory: directory.path)
        for index in 21...23 { try await second.passMessage("m\(index)", identifier: "app") }
        let got = await ahead.wait(for: 23)
        #expect(got.map(\.sequence) == Array(1...23), "numbers 11...20 were not handed out again")
        #expect(got.suffix(3).map { String(decoding: $0.payload, as: UTF8.self) } == ["m21", "m22", "m23"])
        gate.signal()
        let late = await behind.wait(for: 13)
        #expect(late.map(\.sequence) == Array(1...10) + [21, 22, 23])
        #expect(behindErrors.all.compactMap(\.missedMessageCount) == [10], "told that 11...20 are gone: \(behindErrors.all)")
        fast.cancel()
        slow.cancel()
    }

    @Test("a record longer than the reader's limit whose trailer does not repeat its length is damage: reported once and skipped, and the next message arrives (it was waited on for ever)",
          .timeLimit(.minutes(1)))
    func tooLargeRecordWithABadTrailerIsSkipped() async throws {
        let directory = TemporaryDirectory()
        let writer = try Wormhole(directory: directory.path)
        try await writer.passMessage(String(repeating: "x", count: 4096), identifier: "big")
        let size = try #require(try FileManager.default.attributesOfItem(atPath: directory.file("big.wormhole"))[.size] as? Int)
        // Its trailer (the last 4 bytes) no longer says 4096.
        let handle = try #require(FileHandle(forUpdatingAtPath: directory.file("big.wormhole")))
        try handle.seek(toOffset: UInt64(size - 4))
        try handle.write(contentsOf: Data([0xFF, 0xFF, 0x00, 0x00]))
        try handle.close()
        try await writer.passMessage("after", identifier: "big")

        var configuration = Wormhole.Configuration()
        configuration.maximumMessageSize = 1024
        let reader = try Wormhole(directory: directory.path, configuration: configuration)
        let received = Collector<String>()
        let errors = Collector<WormholeError>()
        let token = try reader.listenForMessage(withIdentifier: "big", as: String.self, startingFrom: .history,
                                                onError: { errors.append($0) }) { received.append($0) }
        #expect(await received.wait(for: 1) == ["after"])
        #expect(errors.all.map(\.code) == [.corruptRecord], "\(errors.all)")
        token.cancel()
    }

    @Test("listeners in another PID namespace: compactions here never remove the claims they are creating, and status says whose process ids are not ours",
          .enabled(if: geteuid() == 0, "unshare --pid needs root"), .timeLimit(.minutes(3)))
    func listenersInAnotherPIDNamespace() async throws {
        let directory = TemporaryDirectory()
        var configuration = Wormhole.Configuration()
        configuration.retainedMessageCount = 1
        let wormhole = try Wormhole(directory: directory.path, configuration: configuration)
        try await wormhole.passMessage("first", identifier: "cycle")
        // Listen/cancel cycles in a PID namespace of their own, beside a writer here that
        // compacts at every other pass (and so looks at every claim).
        let cycles = scaled(20_000)
        let agent = try Self.inPIDNamespace(["cycles", directory.path, String(cycles)])
        let writer = Task {
            var passes = 0
            while agent.isRunning && !Task.isCancelled {
                _ = try? await wormhole.passMessage("w\(passes)", identifier: "cycle")
                passes += 1
            }
            return passes
        }
        let status = await waitForExit(agent, seconds: 150)
        let passes = await writer.value
        #expect(status == 0, "every listen in the other namespace succeeded (agent exit status \(String(describing: status)))")
        print("PID namespaces: \(cycles) listen/cancel cycles there, \(passes) passes here, exit status \(String(describing: status))")

        // A durable listener there: shown as running, its process id marked as another
        // namespace's, and named so when another listener asks for the name.
        let out = directory.file("durable-out")
        let durable = try Self.inPIDNamespace(["durable", directory.path, "jobs", "far", out])
        #expect(await waitForFile(out + ".ready"))
        let listed = try #require(try wormhole.listeners(identifier: "jobs").first { $0.durableName == "far" })
        #expect(listed.isRunning)
        #expect(!listed.isInThisPIDNamespace, "\(listed)")
        let refused = #expect(throws: WormholeError.self) {
            try wormhole.listenForMessage(withIdentifier: "jobs", as: String.self, durableName: "far") { _ in }
        }
        #expect(refused?.description.contains("of another PID namespace") == true, "\(String(describing: refused))")
        try await wormhole.passMessage("stop", identifier: "jobs")
        #expect(await waitForExit(durable, seconds: 20) == 0)
    }

    @Test("a writer under a low descriptor limit keeps descriptors for the program: every pass succeeds and a file can still be opened",
          arguments: [16, 20])
    func writerUnderALowDescriptorLimit(limit: Int) throws {
        let directory = TemporaryDirectory()
        let (status, output) = try Agent.run(["tight", directory.path, String(limit), "400"])
        #expect(status == 0)
        #expect(output.trimmingCharacters(in: .whitespacesAndNewlines) == "passed 400 failed 0 spare ok", "ulimit -n \(limit): \(output)")
    }

    @Test("a listener whose container is replaced claims again in the new one: a compaction there keeps what it has not read, and its old claim goes",
          .timeLimit(.minutes(1)))
    func listenerClaimsAgainInAReplacedContainer() async throws {
        let top = TemporaryDirectory()
        let path = top.file("c")
        var configuration = Wormhole.Configuration()
        configuration.retainedMessageCount = 10
        let writer = try Wormhole(directory: path, configuration: configuration)
        let listener = try Wormhole(directory: path, configuration: configuration)
        try await writer.passMessage(0, identifier: "x")
        let queue = DispatchQueue(label: "held")
        let received = Collector<Int>()
        let errors = Collector<WormholeError>()
        let token = try listener.listenForMessage(withIdentifier: "x", as: Int.self, queue: queue, onError: { errors.append($0) }) { received.append($0) }
        try await writer.passMessage(1, identifier: "x")
        #expect(await received.wait(for: 1) == [1])
        #expect(rename(path, path + ".old") == 0)
        await settle(300)
        try await writer.passMessage(2, identifier: "x")
        #expect(await received.wait(for: 2) == [1, 2])
        // Claimed in the new container, and the old claim withdrawn.
        #expect(await eventually(seconds: 5) {
            ((try? FileManager.default.contentsOfDirectory(atPath: path + "/.listeners/x")) ?? []).count == 1
        })
        // The old one is withdrawn: no longer held (a compaction there removes it).
        for name in (try? FileManager.default.contentsOfDirectory(atPath: path + ".old/.listeners/x")) ?? [] {
            let fd = open(path + ".old/.listeners/x/" + name, O_RDONLY)
            #expect(fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0, "the old claim \(name) is still held")
            close(fd)
        }
        // Held up while compactions in the new container keep 10: its claim keeps the rest.
        queue.suspend()
        for value in 3...60 { try await writer.passMessage(value, identifier: "x") }
        queue.resume()
        #expect(await received.wait(for: 60, seconds: 10) == Array(1...60))
        #expect(errors.all.isEmpty, "\(errors.all)")
        token.cancel()
    }

    @Test("a damaged last record (whole, its checksum wrong) is reported and skipped, not cut: the next message takes the next number and reaches a running listener",
          .timeLimit(.minutes(1)))
    func damagedLastRecordIsNotCutOrRenumbered() async throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.path)
        let received = Collector<WormholeRecord>()
        let errors = Collector<WormholeError>()
        let token = try wormhole.listenForRecords(withIdentifier: "x", startingFrom: .after(sequence: 0), onError: { errors.append($0) }) { received.append($0) }
        for text in ["one", "two", "three"] { try await wormhole.passMessage(text, identifier: "x") }
        #expect(await received.wait(for: 3).count == 3)
        // Flip a payload byte of "four" as it lies in the file: its checksum no longer matches.
        try await wormhole.passMessage("four", identifier: "x")
        _ = await received.wait(for: 4)
        let path = directory.file("x.wormhole")
        // In place, as a bit flip on the device would.
        let bytes = try Data(contentsOf: URL(fileURLWithPath: path))
        let at = bytes.count - LogFormat.recordTrailerSize - 1
        let handle = try #require(FileHandle(forUpdatingAtPath: path))
        try handle.seek(toOffset: UInt64(at))
        try handle.write(contentsOf: Data([bytes[at] ^ 0x20]))
        try handle.close()
        // A new writer (it knows nothing of the file) and a new reader.
        let other = try Wormhole(directory: directory.path)
        let latest = #expect(throws: WormholeError.self) { try other.record(withIdentifier: "x") }
        #expect(latest?.code == .corruptRecord && latest?.description.contains("the latest message of 'x' (4) is damaged") == true,
                "\(String(describing: latest))")
        #expect(try await other.passMessage("five", identifier: "x") == 5)
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)).count == bytes.count + LogFormat.recordOverhead + 4)
        let all = await received.wait(for: 5)
        #expect(all.map(\.sequence) == [1, 2, 3, 4, 5])
        #expect(errors.all.isEmpty, "the running listener had read 4 before it was damaged: \(errors.all)")
        // A listener that reads the file now: 1...3, the damage, 5.
        let later = Collector<WormholeRecord>()
        let laterErrors = Collector<WormholeError>()
        let second = try other.listenForRecords(withIdentifier: "x", startingFrom: .after(sequence: 0), onError: { laterErrors.append($0) }) { later.append($0) }
        #expect(await later.wait(for: 4).map(\.sequence) == [1, 2, 3, 5])
        #expect(laterErrors.all.map(\.code) == [.corruptRecord])
        second.cancel()
        token.cancel()
    }

    @Test("a damaged last record holds the number one above the last whole record, not its own sequence field, and reading the latest reports it (Protocol.md 9.3, 11.1 L4)")
    func damagedLastRecordHoldsTheNumberAfterTheLastWholeRecord() async throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.path)
        for text in ["one", "two", "three"] { try await wormhole.passMessage(text, identifier: "x") }
        let path = directory.file("x.wormhole")
        let size = try Data(contentsOf: URL(fileURLWithPath: path)).count
        // "three" (text, 5 bytes) now says it is message 9: its checksum no longer matches.
        let handle = try #require(FileHandle(forUpdatingAtPath: path))
        try handle.seek(toOffset: UInt64(size - (LogFormat.recordOverhead + 5) + 8))
        try handle.write(contentsOf: withUnsafeBytes(of: UInt64(9).littleEndian) { Data($0) })
        try handle.close()
        let other = try Wormhole(directory: directory.path)
        let latest = #expect(throws: WormholeError.self) { try other.record(withIdentifier: "x") }
        #expect(latest?.code == .corruptRecord && latest?.description.contains("the latest message of 'x' (3) is damaged") == true,
                "\(String(describing: latest))")
        #expect(try await other.passMessage("four", identifier: "x") == 4)
        #expect(try await other.message(withIdentifier: "x", as: String.self) == "four")
    }

    /// Starts the test agent in a PID namespace of its own (`unshare --pid --fork`).
    private static func inPIDNamespace(_ arguments: [String]) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/unshare")
        process.arguments = ["--pid", "--fork", "--kill-child", Agent.path] + arguments
        try process.run()
        return process
    }
}
