import Foundation
import Testing
@_spi(Backend) @testable import Wormhole
@_spi(Backend) @testable import WormholeCore
@_spi(Backend) @testable import WormholeFiles
import WormholeTestSupport

/// The container under attack: another user, links, FIFOs, sparse and forged files,
/// moved directories, stalled listeners, exhausted caches. Each case says what an
/// attacker (or an accident) could do before protocol version 2 reached every file
/// through the container's descriptor, and checks that it no longer works.
@Suite("Hostile files and directories", .serialized)
struct HostileFileTests {
    private static let otherUser: uid_t = 65534

    private func mode(_ path: String) -> mode_t {
        var status = stat()
        return lstat(path, &status) == 0 ? status.st_mode & 0o7777 : 0
    }

    // MARK: - The parent and the path

    @Test("a container whose parent other users may write to (not sticky) is refused; a sticky one is fine")
    func parentWritableByOthersIsRefused() throws {
        let top = TemporaryDirectory()
        let open = top.file("open")
        mkdir(open, 0o700)
        chmod(open, 0o777)
        let error = #expect(throws: WormholeError.self) { try Wormhole(directory: open + "/c") }
        #expect(error?.code == .containerInsecure)
        #expect(error?.description.contains(open) == true, "\(String(describing: error))")
        let sticky = top.file("sticky")
        mkdir(sticky, 0o700)
        chmod(sticky, 0o1777)
        let wormhole = try Wormhole(directory: sticky + "/c")
        try wormhole.passMessage("fine", identifier: "x")
        #expect(try wormhole.message(withIdentifier: "x", as: String.self) == "fine")
    }

    @Test("a container whose parent another user owns is refused even when the parent is sticky: the sticky bit lets the directory's owner rename any entry",
          .enabled(if: geteuid() == 0, "giving a directory to another user needs root"))
    func stickyParentOwnedByAnotherUserIsRefused() throws {
        let top = TemporaryDirectory()
        let theirs = top.file("theirs")
        mkdir(theirs, 0o700)
        chmod(theirs, 0o1777)
        chown(theirs, 65534, 65534)
        let error = #expect(throws: WormholeError.self) { try Wormhole(directory: theirs + "/c") }
        #expect(error?.code == .containerInsecure)
        #expect(error?.description.contains("belongs to user 65534") == true, "\(String(describing: error))")
    }

    @Test("'/link/.' and '/link/' do not pass for the directory behind a symbolic link; nothing is written there")
    func dotAndTrailingSlashOnALinkAreRefused() throws {
        let top = TemporaryDirectory()
        let target = top.file("target")
        mkdir(target, 0o700)
        try FileManager.default.createSymbolicLink(atPath: top.file("link"), withDestinationPath: target)
        for spelling in [top.file("link") + "/.", top.file("link") + "/", top.file("link") + "//./"] {
            let error = #expect(throws: WormholeError.self, "\(spelling)") {
                let wormhole = try Wormhole(directory: spelling)
                try wormhole.passMessage("leak", identifier: "x")
            }
            #expect(error?.code == .containerInsecure, "\(spelling): \(String(describing: error))")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: target).isEmpty)
    }

    @Test("a container swapped for another user's directory: her forged message is never delivered, and no message reaches her directory",
          .enabled(if: geteuid() == 0, "needs root to give a directory to another user"), .timeLimit(.minutes(1)))
    func containerSwappedByAnotherUserIsNotUsed() async throws {
        let top = TemporaryDirectory()
        let path = top.file("c")
        let wormhole = try Wormhole(directory: path)
        try await wormhole.passMessage("before", identifier: "x")
        let received = Collector<String>()
        let errors = Collector<WormholeError>()
        let token = try wormhole.listenForMessage(withIdentifier: "x", as: String.self, onError: { errors.append($0) }) {
            received.append($0)
        }
        // Her directory, with a well-formed log carrying a forged message, put in place
        // of the container.
        let forged = top.file("forged")
        let forger = try Wormhole(directory: forged)
        try await forger.passMessage("forged", identifier: "x")
        #expect(chown(forged, Self.otherUser, Self.otherUser) == 0)
        #expect(chown(forged + "/x.wormhole", Self.otherUser, Self.otherUser) == 0)
        #expect(rename(path, top.file("c.away")) == 0)
        #expect(rename(forged, path) == 0)
        let forgedSize = try FileManager.default.attributesOfItem(atPath: path + "/x.wormhole")[.size] as? Int
        // The writer that opened the original container does not write into hers.
        _ = try? await wormhole.passMessage("secret", identifier: "x")
        await settle(500)
        #expect(!received.all.contains("forged"), "\(received.all)")
        #expect(try FileManager.default.attributesOfItem(atPath: path + "/x.wormhole")[.size] as? Int == forgedSize)
        // A new wormhole on the path refuses her directory.
        let error = #expect(throws: WormholeError.self) { try Wormhole(directory: path) }
        #expect(error?.code == .containerInsecure)
        token.cancel()
    }

    // MARK: - FIFOs and links inside the container

    @Test("a FIFO at a log's name: read, list, listen and send fail at once with an error naming it; nothing hangs",
          .timeLimit(.minutes(1)))
    func fifoAtALogsNameHangsNothing() throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.path)
        #expect(mkfifo(directory.file("x.wormhole"), 0o600) == 0)
        for (what, call) in [
            ("read", { () throws(WormholeError) in _ = try wormhole.record(withIdentifier: "x") }),
            ("send", { () throws(WormholeError) in _ = try wormhole.passMessage("m", identifier: "x") }),
            ("listen", { () throws(WormholeError) in _ = try wormhole.listenForMessage(withIdentifier: "x", as: String.self) { _ in } }),
        ] as [(String, () throws(WormholeError) -> Void)] {
            let error = #expect(throws: WormholeError.self, "\(what)") { try call() }
            #expect(error?.code == .containerInsecure, "\(what): \(String(describing: error))")
            #expect(error?.description.contains("not a regular file") == true, "\(what): \(String(describing: error))")
        }
        // Listing skips what it cannot read, and returns.
        _ = try? wormhole.summaries()
        // Other identifiers are unaffected.
        try wormhole.passMessage("m", identifier: "y")
        #expect(try wormhole.message(withIdentifier: "y", as: String.self) == "m")
    }

    @Test("FIFOs in the listener claims and at the compaction file's name: compaction neither waits on them nor writes through them",
          .timeLimit(.minutes(1)))
    func fifosInClaimsAndAtTheCompactionFileHangNothing() throws {
        let directory = TemporaryDirectory()
        var configuration = Wormhole.Configuration()
        configuration.retainedMessageCount = 4
        let wormhole = try Wormhole(directory: directory.path, configuration: configuration)
        try wormhole.passMessage(0, identifier: "x")
        try FileManager.default.createDirectory(atPath: directory.file(".listeners/x"), withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        #expect(mkfifo(directory.file(".listeners/x/1-abc"), 0o600) == 0)
        #expect(mkfifo(directory.file(".x.wormhole.compacting"), 0o600) == 0)
        for index in 1...100 { try wormhole.passMessage(index, identifier: "x") }
        let history = try wormhole.transiting.makeReader(identifier: "x", startingFrom: .history).read(maximumCount: 100)
        let values = history.compactMap { try? $0.get().decode(as: Int.self) }
        #expect(values.last == 100)
        #expect(values.count <= 8, "compaction ran: at most twice the retained count is kept, not \(values.count)")
        #expect(mode(directory.file("x.wormhole")) == 0o600)
    }

    @Test("a leftover compaction file of mode 0666, hard-linked to another file: that file is untouched and the compacted log is 0600",
          .timeLimit(.minutes(1)))
    func plantedCompactionFileIsNeitherWrittenThroughNorItsModeKept() throws {
        let directory = TemporaryDirectory()
        let outside = TemporaryDirectory()
        let victim = outside.file("victim")
        try Data("the victim's own bytes".utf8).write(to: URL(fileURLWithPath: victim))
        chmod(victim, 0o666)
        var configuration = Wormhole.Configuration()
        configuration.retainedMessageCount = 4
        let wormhole = try Wormhole(directory: directory.path, configuration: configuration)
        try wormhole.passMessage("first", identifier: "x")
        #expect(link(victim, directory.file(".x.wormhole.compacting")) == 0)
        for index in 1...100 { try wormhole.passMessage("secret \(index)", identifier: "x") }
        #expect(try String(contentsOfFile: victim, encoding: .utf8) == "the victim's own bytes")
        #expect(mode(victim) == 0o666)
        #expect(mode(directory.file("x.wormhole")) == 0o600)
        #expect(try wormhole.message(withIdentifier: "x", as: String.self) == "secret 100")
    }

    @Test("a reader that failed to open the file at the log's name (a FIFO there for a moment) tries again at the next read, without another event")
    func readerRetriesAFailedOpen() throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.path)
        try wormhole.passMessage("one", identifier: "x")
        let reader = try wormhole.transiting.makeReader(identifier: "x", startingFrom: .after(sequence: 0))
        #expect(try reader.read(maximumCount: 10).compactMap { try? $0.get().decode(as: String.self) } == ["one"])
        // Something that is not a log takes the name; the reader hears of it once.
        #expect(mkfifo(directory.file("fifo"), 0o600) == 0)
        #expect(rename(directory.file("fifo"), directory.file("x.wormhole")) == 0)
        reader.invalidate()
        #expect(throws: WormholeError.self) { _ = try reader.read(maximumCount: 10) }
        // A real log takes the name again; no new event reaches the reader.
        let other = TemporaryDirectory()
        try Wormhole(directory: other.path).passMessage("two", identifier: "x")
        #expect(rename(other.file("x.wormhole"), directory.file("x.wormhole")) == 0)
        #expect(try reader.read(maximumCount: 10).compactMap { try? $0.get().decode(as: String.self) } == ["two"])
    }

    // MARK: - Sparse and forged files

    /// Runs the agent's `peak` command: "<latest> <peak kB>".
    private func peak(_ directory: String, _ identifier: String, passing payload: String? = nil) throws -> (latest: String, kilobytes: Int) {
        let (status, output) = try Agent.run(["peak", directory, identifier] + (payload.map { [$0] } ?? []))
        #expect(status == 0)
        let fields = output.split(whereSeparator: \.isWhitespace)
        try #require(fields.count == 2, "agent printed '\(output)'")
        return (String(fields[0]), Int(fields[1]) ?? -1)
    }

    @Test("a sparse 3 GiB log with a valid header: reading the latest and passing cost no more memory than a real message",
          .timeLimit(.minutes(3)))
    func sparseLogCostsNoMemory() throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.path)
        try wormhole.passMessage("hello", identifier: "x")
        let log = directory.file("x.wormhole")
        #expect(truncate(log, 3 << 30) == 0)
        let read = try peak(directory.path, "x")
        #expect(read.latest == "5", "the latest whole record is found behind the zeros")
        #expect(read.kilobytes < 100_000, "reading took \(read.kilobytes) kB")
        let passed = try peak(directory.path, "x", passing: "after")
        #expect(passed.kilobytes < 100_000, "passing took \(passed.kilobytes) kB")
        // The zeros were not records: the writer cut them, and both messages are there.
        let size = try FileManager.default.attributesOfItem(atPath: log)[.size] as? Int ?? -1
        #expect(size < 4096, "log is \(size) bytes")
        let history = try wormhole.transiting.makeReader(identifier: "x", startingFrom: .history).read(maximumCount: 10)
        #expect(history.compactMap { try? $0.get().decode(as: String.self) } == ["hello", "after"])
    }

    @Test("a forged record that declares 1 GiB, with a matching trailer at the end of a sparse file, is never read into memory",
          .timeLimit(.minutes(3)))
    func forgedHugeRecordIsNotRead() throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.path)
        try wormhole.passMessage("hello", identifier: "x")
        let log = directory.file("x.wormhole")
        let handle = try #require(FileHandle(forUpdatingAtPath: log))
        let start = try handle.seekToEnd()
        let payload = (1 << 30) - 1
        var header = Data()
        func append<T: FixedWidthInteger>(_ value: T) { withUnsafeBytes(of: value.littleEndian) { header.append(contentsOf: $0) } }
        append(LogFormat.layout.marker)
        append(UInt32(payload))
        append(UInt64(2))
        header.append(Data(count: LogFormat.recordHeaderSize - header.count))
        try handle.write(contentsOf: header)
        try handle.truncate(atOffset: start + UInt64(LogFormat.recordHeaderSize + payload))
        try handle.seekToEnd()
        var trailer = Data()
        withUnsafeBytes(of: UInt32(payload).littleEndian) { trailer.append(contentsOf: $0) }
        try handle.write(contentsOf: trailer)
        try handle.close()
        let read = try peak(directory.path, "x")
        #expect(read.kilobytes < 100_000, "reading took \(read.kilobytes) kB")
        #expect(read.latest == "error:messageTooLarge", "latest: \(read.latest)")
        let passed = try peak(directory.path, "x", passing: "after")
        #expect(passed.kilobytes < 100_000, "passing took \(passed.kilobytes) kB")
    }

    // MARK: - Moved containers

    @Test("a container moved away and made again: listeners (and the writer that opened it before) go on in the new one",
          .timeLimit(.minutes(1)), arguments: ContainerParent.allCases)
    func movedAwayContainerIsFollowed(in kind: ContainerParent) async throws {
        let top = TemporaryDirectory()
        let path = kind.directory(in: top) + "/c"
        let writer = try Wormhole(directory: path)
        let listener = try Wormhole(directory: path)
        try await writer.passMessage("before", identifier: "x")
        let received = Collector<String>()
        let token = try listener.listenForMessage(withIdentifier: "x", as: String.self) { received.append($0) }
        try await writer.passMessage("one", identifier: "x")
        #expect(await received.wait(for: 1) == ["one"])
        #expect(rename(path, path + ".old") == 0)
        await settle(300)
        let newcomer = try Wormhole(directory: path)
        try await newcomer.passMessage("two", identifier: "x")
        #expect(await received.wait(for: 2) == ["one", "two"])
        try await writer.passMessage("three", identifier: "x")
        #expect(await received.wait(for: 3) == ["one", "two", "three"])
        await #expect(try newcomer.message(withIdentifier: "x", as: String.self) == "three")
        token.cancel()
    }

    @Test("a long-lived writer notices that its container was moved away, from its first pass on: each next pass goes to the directory at the path (Protocol §4.1)",
          .timeLimit(.minutes(1)), arguments: ContainerParent.allCases)
    func writerFollowsItsContainerFromTheFirstPass(in kind: ContainerParent) async throws {
        let top = TemporaryDirectory()
        let path = kind.directory(in: top) + "/c"
        let writer = try Wormhole(directory: path)
        // After one pass the writer watches nothing yet: its second pass looks at the path.
        try await writer.passMessage("one", identifier: "x")
        #expect(rename(path, path + ".first") == 0)
        try await writer.passMessage("two", identifier: "x")
        // From then on the container's watch says when it moved.
        #expect(rename(path, path + ".second") == 0)
        await settle(300)
        try await writer.passMessage("three", identifier: "x")
        for (directory, latest) in [(path + ".first", "one"), (path + ".second", "two"), (path, "three")] {
            await #expect(try Wormhole(directory: directory).message(withIdentifier: "x", as: String.self) == latest, "in \(directory)")
        }
    }

    // MARK: - Limits

    @Test("a stalled listener holds at most the backlog cap; when it goes on it is told how many it lost, then gets the rest in order",
          .timeLimit(.minutes(2)))
    func stalledListenerIsCappedAndToldWhatItLost() async throws {
        let directory = TemporaryDirectory()
        var configuration = Wormhole.Configuration()
        configuration.retainedMessageCount = 10
        configuration.maximumBacklogMessageCount = 1000
        let wormhole = try Wormhole(directory: directory.path, configuration: configuration)
        let gate = DispatchSemaphore(value: 0)
        let queue = DispatchQueue(label: "stalled")
        queue.async { gate.wait() }
        let received = Collector<Int>()
        let lost = Collector<UInt64>()
        let reasons = Collector<String>()
        let token = try wormhole.listenForMessage(withIdentifier: "x", as: Int.self, queue: queue, onError: { error in
            if error.code == .messagesLost {
                lost.append(error.missedMessageCount ?? 0)
                reasons.append(error.message)
            }
        }) { received.append($0) }
        let total = 20_000
        var largest = 0
        for index in 1...total {
            try await wormhole.passMessage(index, identifier: "x")
            if index % 1000 == 0 {
                let size = try FileManager.default.attributesOfItem(atPath: directory.file("x.wormhole"))[.size] as? Int ?? 0
                largest = max(largest, size)
            }
        }
        // 1,000 records of about 45 bytes, twice over before a compaction, plus the header.
        #expect(largest < 2 * 1000 * 60 + 4096, "the log reached \(largest) bytes")
        gate.signal()
        let deadline = ContinuousClock.now + .seconds(30)
        while received.all.last != total && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        let values = received.all
        #expect(values.last == total)
        #expect(values == values.sorted() && Set(values).count == values.count, "in order, once each")
        let missed = lost.all.reduce(0, +)
        #expect(missed > 0)
        #expect(values.count + Int(missed) == total, "\(values.count) received + \(missed) reported lost")
        #expect(reasons.all.allSatisfy { $0.contains("compacted away") && $0.contains("backlog cap") }, "\(reasons.all)")
        token.cancel()
    }

    @Test("a record removed from the middle of a log outside the protocol: the listener is told that it is missing from the log, not that the backlog cap dropped it",
          .timeLimit(.minutes(1)))
    func recordRemovedFromTheMiddleIsReportedAsMissing() async throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.path)
        for text in ["m1", "m2", "m3"] { try await wormhole.passMessage(text, identifier: "cut") }
        // Records of one size: the second one's bytes are taken out, the third moves up.
        let path = directory.file("cut.wormhole")
        var bytes = try Data(contentsOf: URL(fileURLWithPath: path))
        let size = LogFormat.recordOverhead + 2
        #expect(bytes.count == LogFormat.headerSize + 3 * size)
        bytes.removeSubrange(LogFormat.headerSize + size ..< LogFormat.headerSize + 2 * size)
        try bytes.write(to: URL(fileURLWithPath: path))
        let received = Collector<String>()
        let reports = Collector<WormholeError>()
        let token = try wormhole.listenForMessage(withIdentifier: "cut", as: String.self, startingFrom: .history,
                                                  onError: { reports.append($0) }) { received.append($0) }
        #expect(await received.wait(for: 2, seconds: 10) == ["m1", "m3"])
        token.cancel()
        let report = try #require(reports.all.first { $0.code == .messagesLost })
        #expect(report.missedMessageCount == 1)
        #expect(report.message.contains("(2...2) are missing from the log"), "\(report.message)")
        #expect(!report.message.contains("backlog cap"))
    }

    @Test("1,000 wormholes passing to 5 identifiers each, then dropped: every descriptor they opened is closed")
    func droppedWormholesReleaseTheirDescriptors() throws {
        // In a process of its own: other suites running meanwhile open and close
        // descriptors in this one.
        let directory = TemporaryDirectory()
        let (status, output) = try Agent.run(["drop", directory.path, "1000"])
        #expect(status == 0)
        let numbers = output.split(whereSeparator: \.isWhitespace).compactMap { Int($0) }
        try #require(numbers.count == 2, "\(output)")
        print("dropped wormholes: 1000 created, passed to 5 identifiers each, and dropped; descriptors \(numbers[0]) -> \(numbers[1])")
        #expect(numbers[0] == numbers[1])
    }

    @Test("maximumOpenLogCount bounds the logs a writer keeps open (3 of 10 identifiers), keeps them all when it allows, and refuses a count below 1")
    func maximumOpenLogCountBoundsTheCache() throws {
        func openLogs(in directory: TemporaryDirectory) throws -> Int {
            let descriptors = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")
            return descriptors.filter { name in
                let target = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(name)")) ?? ""
                return target.hasPrefix(directory.path) && target.hasSuffix(".wormhole")
            }.count
        }
        for (limit, expected) in [(3, 3), (10, 10)] {
            let directory = TemporaryDirectory()
            var configuration = Wormhole.Configuration()
            configuration.maximumOpenLogCount = limit
            let wormhole = try Wormhole(directory: directory.path, configuration: configuration)
            for round in 0..<2 {
                for number in 0..<10 { try wormhole.passMessage("\(round)", identifier: "id\(number)") }
            }
            #expect(try openLogs(in: directory) == expected, "maximumOpenLogCount \(limit)")
            for number in 0..<10 { #expect(try wormhole.message(withIdentifier: "id\(number)", as: String.self) == "1") }
        }
        var configuration = Wormhole.Configuration()
        configuration.maximumOpenLogCount = 0
        let error = #expect(throws: WormholeError.self) { _ = try Wormhole(directory: TemporaryDirectory().path, configuration: configuration) }
        #expect(error?.code == .invalidConfiguration)
        #expect(error?.message.contains("maximumOpenLogCount must be at least 1, not 0") == true)
    }

    @Test("threads passing to more identifiers than the descriptor cache holds: every pass lands once, in order, none lost",
          .timeLimit(.minutes(2)))
    func cacheEvictionUnderConcurrentPassesLosesNothing() throws {
        let directory = TemporaryDirectory()
        var configuration = Wormhole.Configuration()
        configuration.retainedMessageCount = 100_000
        let wormhole = try Wormhole(directory: directory.path, configuration: configuration)
        let identifiers = FileTransiting.cachedLogLimit * 2
        let threads = 8
        let perThread = 1500
        let failures = Collector<String>()
        DispatchQueue.concurrentPerform(iterations: threads) { thread in
            var generator = SystemRandomNumberGenerator()
            for index in 0..<perThread {
                let identifier = "id\(Int.random(in: 0..<identifiers, using: &generator))"
                do throws(WormholeError) {
                    try wormhole.passMessage("\(thread):\(index)", identifier: identifier)
                } catch {
                    failures.append("\(error)")
                }
            }
        }
        #expect(failures.all.isEmpty, "\(failures.all.prefix(3))")
        var total = 0
        for identifier in 0..<identifiers {
            let records = try wormhole.transiting.makeReader(identifier: "id\(identifier)", startingFrom: .after(sequence: 0))
                .read(maximumCount: 100_000).compactMap { try? $0.get() }
            #expect(records.map(\.sequence) == Array(1...UInt64(max(records.count, 1))).prefix(records.count).map { $0 })
            // Each thread's passes to one identifier stay in the thread's order.
            var last: [Int: Int] = [:]
            for record in records {
                let parts = String(decoding: record.payload, as: UTF8.self).dropFirst().dropLast().split(separator: ":")
                guard parts.count == 2, let thread = Int(parts[0]), let index = Int(parts[1]) else { continue }
                #expect(index > last[thread, default: -1])
                last[thread] = index
            }
            total += records.count
        }
        #expect(total == threads * perThread)
    }
}
