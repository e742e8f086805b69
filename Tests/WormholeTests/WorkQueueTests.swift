import Foundation
import Testing
@_spi(Backend) @testable import Wormhole
@_spi(Backend) @testable import WormholeCore
@_spi(Backend) @testable import WormholeFiles
import WormholeTestSupport

@Suite("Work queues")
struct WorkQueueTests {
    @Test("a queue state whose logID is 0 claims taken (or an entry's sequence − 1) on any log, as a durable position of logID 0 does; a state of another log claims 0 (§18.4)")
    func stateOfLogIDZeroClaimsOnAnyLog() {
        var state = WorkQueueState()
        state.taken = 5
        #expect(state.lowestUnhandled(in: 123) == 5)
        state.entries.append(WorkQueueState.Entry(sequence: 3, member: 0, deliveries: 1, delivered: 0))
        #expect(state.lowestUnhandled(in: 123) == 2)
        state.logID = 7
        #expect(state.lowestUnhandled(in: 123) == 0)
        #expect(state.lowestUnhandled(in: 7) == 2)
    }

    @Test("each message to exactly one member; acknowledged when the closure returns; status counts them", .timeLimit(.minutes(1)),
          arguments: Backend.all)
    func eachMessageToOneMember(backend: Backend) async throws {
        let store = try backend.makeStore()
        let wormhole = try store.wormhole()
        let a = Collector<Int>(), b = Collector<Int>()
        let first = try wormhole.listenForMessage(withIdentifier: "jobs", as: Int.self, workQueue: "workers") { a.append($0) }
        let other = try store.wormhole()
        let second = try other.listenForMessage(withIdentifier: "jobs", as: Int.self, workQueue: "workers") { b.append($0) }
        for index in 1...200 { try await wormhole.passMessage(index, identifier: "jobs") }
        #expect(await eventually { a.count + b.count >= 200 })
        await settle()
        #expect((a.all + b.all).sorted() == Array(1...200))
        let status = try #require(try wormhole.workQueues(identifier: "jobs").first)
        #expect(status.name == "workers")
        #expect(status.acknowledged == 200)
        #expect(status.pending == 0 && status.inFlight == 0)
        #expect(status.members.count == 2)
        first.cancel()
        second.cancel()
    }

    @Test("a member that joins later gets what nobody has handled; a throwing handler's message is tried again, then dead-lettered with the reason",
          .timeLimit(.minutes(1)), arguments: Backend.all)
    func lateJoinerAndDeadLetters(backend: Backend) async throws {
        let store = try backend.makeStore()
        let wormhole = try store.wormhole()
        for index in 1...50 { try await wormhole.passMessage(index, identifier: "jobs") }
        struct Poisoned: Error {}
        let handled = Collector<Int>()
        let attempts = Collector<Int>()
        let member = try wormhole.listenForMessage(withIdentifier: "jobs", as: Int.self, workQueue: "w",
                                                   options: WorkQueueOptions(maximumDeliveries: 3)) { job in
            if job == 13 {
                attempts.append(job)
                throw Poisoned()
            }
            handled.append(job)
        }
        #expect(await eventually { handled.count >= 49 })
        let letters = Collector<WormholeDeadLetter>()
        let token = try wormhole.listenForMessage(withIdentifier: "jobs.dead-letters", as: WormholeDeadLetter.self, startingFrom: .history) {
            letters.append($0)
        }
        #expect(await letters.wait(for: 1).count == 1)
        let letter = try #require(letters.all.first)
        #expect(letter.sequence == 13 && letter.deliveries == 3 && letter.queue == "w")
        #expect(letter.reason.contains("Poisoned"))
        #expect(String(decoding: letter.payload, as: UTF8.self) == "13")
        #expect(attempts.count == 3)
        #expect(handled.all.sorted() == Array(1...50).filter { $0 != 13 })
        let status = try #require(try wormhole.workQueues(identifier: "jobs").first)
        #expect(status.acknowledged == 49 && status.deadLettered == 1 && status.pending == 0)
        token.cancel()
        member.cancel()
    }

    @Test("a queue keeps from compaction what it has not handed out, within the backlog cap; past the cap its members are told how many it lost",
          .timeLimit(.minutes(1)), arguments: Backend.all)
    func queueHoldsBackCompaction(backend: Backend) async throws {
        let store = try backend.makeStore()
        var configuration = Wormhole.Configuration()
        configuration.retainedMessageCount = 10
        configuration.maximumBacklogMessageCount = 300
        let wormhole = try store.wormhole(configuration: configuration)
        // The queue exists (a member joined and left) before the messages are passed.
        try wormhole.listenForMessage(withIdentifier: "jobs", as: Int.self, workQueue: "w") { _ in }.cancel()
        for index in 1...250 { try await wormhole.passMessage(index, identifier: "jobs") }
        let handled = Collector<Int>()
        let member = try wormhole.listenForMessage(withIdentifier: "jobs", as: Int.self, workQueue: "w") { handled.append($0) }
        #expect(await handled.wait(for: 250).count == 250)
        #expect(handled.all == Array(1...250), "kept although only 10 are retained, and taken in order")
        member.cancel()
        for index in 251...1_000 { try await wormhole.passMessage(index, identifier: "jobs") }
        let late = Collector<Int>()
        let errors = Collector<WormholeError>()
        let again = try wormhole.listenForMessage(withIdentifier: "jobs", as: Int.self, workQueue: "w", onError: { errors.append($0) }) { late.append($0) }
        #expect(await eventually { (late.all.last ?? 0) == 1_000 })
        let lost = errors.all.compactMap(\.missedMessageCount).reduce(0, +)
        #expect(lost > 0 && lost + UInt64(late.count) == 750, "lost \(lost), then \(late.count) handled")
        #expect(errors.all.allSatisfy { $0.code == .messagesLost && $0.message.contains("work queue 'w'") })
        let status = try #require(try wormhole.workQueues(identifier: "jobs").first)
        #expect(status.lost == lost && status.acknowledged == 250 + UInt64(late.count))
        again.cancel()
    }

    @Test("a message whose handing out never reached its live member (the take was stored, its answer lost) is handed out again at that member's next take, with its count, not held for as long as the member lives")
    func aTakeThatDidNotReachItsMemberIsHandedOutAgain() async throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.path)
        try await wormhole.passMessage("job", identifier: "jobs")
        let transiting = try #require(wormhole.transiting as? FileTransiting)
        let queue = try transiting.joinWorkQueue(identifier: "jobs", name: "w", startingFrom: .history)
        defer { queue.close() }
        let lost = try #require(try queue.take(maximumDeliveries: 5, deadLetters: "jobs.dead-letters", report: { _ in }))
        #expect(lost.deliveries == 1)
        #expect(try wormhole.workQueues(identifier: "jobs").first?.inFlight == 1)
        let again = try #require(try queue.take(maximumDeliveries: 5, deadLetters: "jobs.dead-letters", report: { _ in }),
                                 "the message held by this member, with nothing in its hands, is handed out again")
        #expect(again.record.sequence == lost.record.sequence && again.deliveries == 2)
        try queue.acknowledge(again.record.sequence)
        let status = try #require(try wormhole.workQueues(identifier: "jobs").first)
        #expect(status.inFlight == 0 && status.pending == 0 && status.acknowledged == 1)
        #expect(try queue.take(maximumDeliveries: 5, deadLetters: "jobs.dead-letters", report: { _ in }) == nil)
    }

    @Test("a queue started on a compacted log reports the messages before the first one kept as lost and hands out that first one (T3)")
    func aQueueOnACompactedLogStartsWithTheFirstRecordKept() async throws {
        let directory = TemporaryDirectory()
        var configuration = Wormhole.Configuration()
        configuration.retainedMessageCount = 3
        let wormhole = try Wormhole(directory: directory.path, configuration: configuration)
        for index in 1...20 { try await wormhole.passMessage(index, identifier: "jobs") }
        let summary = try await #require(try wormhole.summaries().first { $0.identifier == "jobs" })
        let first = summary.lastSequence - UInt64(summary.messageCount) + 1
        try #require(first > 1, "the log was compacted: \(summary)")
        let transiting = try #require(wormhole.transiting as? FileTransiting)
        let queue = try transiting.joinWorkQueue(identifier: "jobs", name: "w", startingFrom: .history)
        defer { queue.close() }
        var reports: [WormholeError] = []
        let delivery = try #require(try queue.take(maximumDeliveries: 5, deadLetters: "jobs.dead-letters", report: { reports.append($0) }))
        #expect(delivery.record.sequence == first, "records \(first)...\(summary.lastSequence) kept")
        #expect(reports.map(\.code) == [.messagesLost] && reports.compactMap(\.missedMessageCount) == [first - 1])
        #expect(try wormhole.workQueues(identifier: "jobs").first?.lost == first - 1)
    }

    @Test("dead letters that cannot be passed (the dead-letter log is not a log) are reported once each, not at every take, and the take goes on with the next message; a state full of them is said once; repaired, they are moved")
    func deadLettersThatCannotBePassedAreReportedOnceEach() throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.path)
        let letters = try #require(wormhole.directory) + "/jobs.dead-letters.wormhole"
        try Data(repeating: 0x2A, count: 300).write(to: URL(fileURLWithPath: letters))
        let transiting = try #require(wormhole.transiting as? FileTransiting)
        let queue = try transiting.joinWorkQueue(identifier: "jobs", name: "w", startingFrom: .history)
        defer { queue.close() }
        var reports: [WormholeError] = []
        /// Takes until the queue has nothing: the bad jobs fail (given back at their only
        /// delivery), the others are handled. Returns the good ones.
        func drain() -> [UInt64] {
            var handled: [UInt64] = []
            while let delivery = try? queue.take(maximumDeliveries: 1, deadLetters: "jobs.dead-letters", report: { reports.append($0) }) {
                let sequence = delivery.record.sequence
                if String(decoding: delivery.record.payload, as: UTF8.self) == "bad" {
                    do { try queue.giveBack(sequence, reason: "bad", maximumDeliveries: 1, deadLetters: "jobs.dead-letters") }
                    catch { reports.append(error) }
                } else {
                    handled.append(sequence)
                    try? queue.acknowledge(sequence)
                }
            }
            return handled
        }
        func moves() -> [UInt64] {
            reports.compactMap { report in
                guard let range = report.message.range(of: "cannot move message ") else { return nil }
                return UInt64(report.message[range.upperBound...].prefix { $0.isNumber })
            }.sorted()
        }
        let bad = try (0..<3).map { _ in try wormhole.passMessage("bad", identifier: "jobs") }
        let good = try wormhole.passMessage("good", identifier: "jobs")
        #expect(drain() == [good], "the take goes on past the messages it cannot move")
        for _ in 0..<3 { #expect(drain() == []) }
        #expect(moves() == bad, "each reported once, not at each take: \(reports.map(\.message))")
        #expect(reports.first?.message.contains("not a Wormhole message log") == true, "\(reports.first?.message ?? "")")

        let more = try (0..<(WorkQueueState.maximumEntries - 3)).map { _ in try wormhole.passMessage("bad", identifier: "jobs") }
        #expect(drain() == [])
        let waiting = try wormhole.passMessage("good", identifier: "jobs")
        for _ in 0..<3 { #expect(drain() == [], "120 entries: nothing new is taken") }
        #expect(moves() == bad + more)
        let full = reports.filter { $0.message.contains("as many as its state can") }
        #expect(full.count == 1, "said once: \(full.map(\.message))")
        #expect(full.first?.message.contains("holds 120 messages") == true && full.first?.message.contains("it takes no new message until some are moved") == true)

        try FileManager.default.removeItem(atPath: letters)
        #expect(drain() == [waiting])
        let status = try #require(try wormhole.workQueues(identifier: "jobs").first)
        #expect(status.deadLettered == UInt64(WorkQueueState.maximumEntries) && status.pending == 0 && status.lost == 0, "\(status)")
    }

    @Test("the dead letter of a message too large to carry in base64 is passed without its payload, saying its size, instead of staying in the queue for ever")
    func aDeadLetterTooLargeForItsPayloadIsPassedWithoutIt() async throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.path)
        let size = 7_000_000   // within the 8 MiB limit; its base64 is not
        let sequence = try await wormhole.passPayload(Data(count: size), kind: .data, identifier: "jobs")
        let transiting = try #require(wormhole.transiting as? FileTransiting)
        let queue = try transiting.joinWorkQueue(identifier: "jobs", name: "w", startingFrom: .history)
        defer { queue.close() }
        var reports: [WormholeError] = []
        let delivery = try #require(try queue.take(maximumDeliveries: 1, deadLetters: "jobs.dead-letters", report: { reports.append($0) }))
        #expect(delivery.record.sequence == sequence)
        do { try queue.giveBack(sequence, reason: "the handler threw: too big", maximumDeliveries: 1, deadLetters: "jobs.dead-letters") }
        catch { reports.append(error) }
        #expect(try queue.take(maximumDeliveries: 1, deadLetters: "jobs.dead-letters", report: { reports.append($0) }) == nil)
        #expect(reports.isEmpty, "\(reports.map(\.message))")
        let status = try #require(try wormhole.workQueues(identifier: "jobs").first)
        #expect(status.deadLettered == 1 && status.pending == 0, "\(status)")
        let letter = try #require(try await wormhole.message(withIdentifier: "jobs.dead-letters", as: WormholeDeadLetter.self))
        #expect(letter.sequence == sequence && letter.reason == "the handler threw: too big" && letter.kind == "data")
        #expect(letter.payload.isEmpty && letter.omittedPayloadSize == size)
    }

    @Test("on every back end, a member that gives up on a message too large for its dead letter in base64 passes the letter without the payload, and goes on with the next job",
          .timeLimit(.minutes(1)), arguments: Backend.all)
    func aTooLargeDeadLetterDoesNotBlockTheQueue(backend: Backend) async throws {
        let store = try backend.makeStore()
        let wormhole = try store.wormhole()
        let size = 7_000_000   // within the 8 MiB limit; its base64 is not
        let big = try await wormhole.passPayload(Data(count: size), kind: .data, identifier: "jobs")
        _ = try await wormhole.passPayload(Data("next".utf8), kind: .text, identifier: "jobs")
        struct Refused: Error {}
        let handled = Collector<String>()
        let errors = Collector<WormholeError>()
        let member = try wormhole.listenForRecords(withIdentifier: "jobs", workQueue: "w", options: WorkQueueOptions(maximumDeliveries: 1),
                                                   onError: { errors.append($0) }) { record, _ in
            if record.sequence == big { throw Refused() }
            handled.append(String(decoding: record.payload, as: UTF8.self))
        }
        defer { member.cancel() }
        #expect(await handled.wait(for: 1).contains("next"))
        let letter = try #require(try await wormhole.message(withIdentifier: "jobs.dead-letters", as: WormholeDeadLetter.self))
        #expect(letter.sequence == big && letter.payload.isEmpty && letter.omittedPayloadSize == size, "\(letter)")
        #expect(!errors.all.contains { $0.message.contains("cannot move") }, "\(errors.all.map(\.message))")
    }

    @Test("a live member goes on taking after compaction replaces the log (it was left reading the old file)", .timeLimit(.minutes(1)))
    func memberFollowsCompaction() async throws {
        let directory = TemporaryDirectory()
        var configuration = Wormhole.Configuration()
        configuration.retainedMessageCount = 10
        let wormhole = try Wormhole(directory: directory.path, configuration: configuration)
        let handled = Collector<Int>()
        let member = try wormhole.listenForMessage(withIdentifier: "jobs", as: Int.self, workQueue: "w") { handled.append($0) }
        for round in 0..<5 {
            for index in 1...100 { try await wormhole.passMessage(round * 100 + index, identifier: "jobs") }
            #expect(await handled.wait(for: (round + 1) * 100, seconds: 5).count == (round + 1) * 100, "round \(round)")
        }
        #expect(handled.all == Array(1...500))
        member.cancel()
    }

    @Test("a queue skips and counts an expired message; a member killed mid-message (its connection or lock gone) has it handed to another with its delivery count, then dead-lettered with the reason",
          .timeLimit(.minutes(2)), arguments: Backend.all)
    func expiryAndAKilledMember(backend: Backend) async throws {
        let store = try backend.makeStore()
        let directory = TemporaryDirectory()
        let wormhole = try store.wormhole()
        try wormhole.listenForMessage(withIdentifier: "jobs", as: String.self, workQueue: "w") { _ in }.cancel()
        try await wormhole.passMessage("stale", identifier: "jobs", timeToLive: 0.2)
        try await wormhole.passMessage("hang", identifier: "jobs")
        // The wall clock is what expiry follows: nothing to wait on but it.
        try await Task.sleep(for: .milliseconds(400))
        // A worker process that hangs in its handler, killed there twice (the limit is 3 here).
        let output = directory.file("worker.txt")
        for round in 1...2 {
            let worker = try Agent.start(["worker", store.location, "jobs", "w", output, "-", "hang", "3"])
            #expect(await eventually(seconds: 20) { (try? WorkQueueProcessTests.workerLines([output]).count) == round })
            #expect(try wormhole.workQueues(identifier: "jobs").first?.inFlight == 1, "held by the hanging member")
            kill(worker.processIdentifier, SIGKILL)
            worker.waitUntilExit()
        }
        let lines = try WorkQueueProcessTests.workerLines([output])
        #expect(lines.map(\.payload) == ["hang", "hang"] && lines.map(\.deliveries) == [1, 2], "\(lines)")
        let letters = Collector<WormholeDeadLetter>()
        let token = try wormhole.listenForMessage(withIdentifier: "jobs.dead-letters", as: WormholeDeadLetter.self, startingFrom: .history) {
            letters.append($0)
        }
        let handled = Collector<String>()
        let member = try wormhole.listenForMessage(withIdentifier: "jobs", as: String.self, workQueue: "w",
                                                   options: WorkQueueOptions(maximumDeliveries: 2)) { handled.append($0) }
        #expect(await letters.wait(for: 1).count == 1)
        let letter = try #require(letters.all.first)
        #expect(letter.sequence == 2 && letter.deliveries == 2 && letter.reason.contains("ended (killed or stopped)"), "\(letter)")
        #expect(String(decoding: letter.payload, as: UTF8.self) == "hang" && letter.kind == "text")
        await settle()
        #expect(handled.all.isEmpty, "the stale message expired, the killed one went to the dead letters")
        let status = try #require(try wormhole.workQueues(identifier: "jobs").first)
        #expect(status.expired == 1 && status.deadLettered == 1 && status.pending == 0 && status.inFlight == 0, "\(status)")
        #expect(status.members.count == 1 && status.members.first?.processID == getpid())
        member.cancel()
        token.cancel()
    }

    @Test("an entry is due once its retry delay ran out after its delivery, at once without one, and at once when the wall clock was set back before its delivery (§18.1)")
    func entryIsDue() {
        var entry = WorkQueueState.Entry(sequence: 1, member: 0, deliveries: 1, delivered: 10_000_000_000)
        #expect(entry.isDue(at: 10_000_000_000))
        entry.waitBeforeRedelivery(1, now: 10_500_000_000)
        #expect(entry.retryDelay == 1_500)
        #expect(!entry.isDue(at: 11_499_999_999) && entry.isDue(at: 11_500_000_000))
        #expect(entry.isDue(at: 9_999_999_999), "the clock set back before its delivery")
        entry.waitBeforeRedelivery(1e9, now: 10_500_000_000)
        #expect(entry.retryDelay == UInt32.max)
    }

    @Test("a take frees the entries of the member taking and of members that ended (these after their back-off), and looks next at the lowest due entry held by nobody, or one at its maximum deliveries however long its delay")
    func takeReleasesAndPicksTheNextWaitingEntry() {
        let now: Int64 = 100_000_000_000
        var state = WorkQueueState()
        state.entries = [
            .init(sequence: 9, member: 0, deliveries: 1, delivered: now),
            .init(sequence: 4, member: 7, deliveries: 2, delivered: now),
            .init(sequence: 5, member: 8, deliveries: 1, delivered: now),
            .init(sequence: 6, member: 9, deliveries: 1, delivered: now),
        ]
        state.entries[0].retryDelay = 0
        // Member 7 takes; member 8 ended; member 9 lives.
        state.releaseEntries(heldBy: 7, now: now, isAlive: { $0 == 9 }, delay: { Double($0) * 2 })
        #expect(state.entries.map(\.member) == [0, 0, 0, 9])
        #expect(state.entries[1].retryDelay == 0, "its own: handed out again at once")
        #expect(state.entries[2].retryDelay == 2_000, "an ended member's: after the back-off of 1 delivery")
        #expect(state.nextWaitingEntry(at: now, maximumDeliveries: 5, skipping: []) == 1)
        #expect(state.nextWaitingEntry(at: now, maximumDeliveries: 5, skipping: [4]) == 0, "5 waits for its delay")
        #expect(state.nextWaitingEntry(at: now, maximumDeliveries: 1, skipping: [4]) == 2, "at its maximum: to the dead letters now")
        #expect(state.nextWaitingEntry(at: now + 2_000_000_000, maximumDeliveries: 5, skipping: [4]) == 2)
        #expect(state.nextWaitingEntry(at: now, maximumDeliveries: 5, skipping: [4, 9]) == nil)
    }

    @Test("queue options are refused with a message naming the option: no delivery, a redelivery interval that is not positive, retry delays out of range or out of order, dead letters to the queue's own identifier")
    func optionsAreValidated() throws {
        #expect(try WorkQueueOptions().validatedDeadLetters(of: "jobs") == WorkQueueOptions().deadLetters(of: "jobs"))
        let refused: [(WorkQueueOptions, String)] = [
            (WorkQueueOptions(maximumDeliveries: 0), "maximumDeliveries is 0"),
            (WorkQueueOptions(redeliveryInterval: .infinity), "redeliveryInterval is inf"),
            (WorkQueueOptions(retryDelay: -1), "retryDelay is -1.0"),
            (WorkQueueOptions(retryDelay: 10, maximumRetryDelay: 5), "maximumRetryDelay is 5.0, less than retryDelay 10.0"),
            (WorkQueueOptions(deadLetterIdentifier: "jobs"), "cannot be 'jobs' itself"),
        ]
        for (options, message) in refused {
            do {
                _ = try options.validatedDeadLetters(of: "jobs")
                Issue.record("accepted, though \(message)")
            } catch {
                #expect(error.code == .invalidConfiguration && error.message.contains(message), "\(error.message)")
            }
        }
    }

    @Test("reading the queues' states (for status and compaction) leaves no descriptor of theirs open: the caller gets values, not directories to close",
          .timeLimit(.minutes(1)))
    func statesLeaveNoDescriptorOpen() async throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.file("c"))
        let member = try wormhole.listenForMessage(withIdentifier: "jobs", as: String.self, workQueue: "w") { _ in }
        defer { member.cancel() }
        try await wormhole.passMessage("a", identifier: "jobs")
        let container = try ContainerDirectory(path: directory.file("c"))
        // This process's descriptors on the queue's members directory (the member holds one).
        func membersDescriptors() -> Int {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
            return names.filter { name in
                let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + name)
                return target?.hasSuffix("/c/.queues/jobs/w/members") == true && target?.hasPrefix(directory.path) == true
            }.count
        }
        let before = membersDescriptors()
        #expect(before >= 1, "the member's own")
        for _ in 0..<5 {
            let states = WorkQueueFile.states(container: container, identifier: "jobs")
            #expect(states.map(\.name) == ["w"])
        }
        _ = WormholeWorkQueueStatus.read(transiting: try FileTransiting(directory: directory.file("c")), identifier: "jobs")
        #expect(WorkQueueFile.lowestUnhandled(container: container, identifier: "jobs", logID: 0) != nil)
        #expect(membersDescriptors() == before)
    }

    @Test("a failing job is handed out again only after its retry delay, doubled at each failure up to the maximum, while other jobs are handed out meanwhile; the member waiting for it wakes when it is due (Protocol.md §18.1, revision 3.1)",
          .timeLimit(.minutes(1)))
    func failingJobBacksOff() async throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.file("c"))
        struct Failed: Error {}
        let attempts = Collector<ContinuousClock.Instant>()
        let handled = Collector<String>()
        let options = WorkQueueOptions(maximumDeliveries: 4, retryDelay: 1, maximumRetryDelay: 1.5)
        #expect([1, 2, 3, 4].map { options.retryDelay(afterDeliveries: $0) } == [1, 1.5, 1.5, 1.5])
        let member = try wormhole.listenForMessage(withIdentifier: "jobs", as: String.self, workQueue: "w", options: options) { job in
            guard job == "poison" else { return handled.append(job) }
            attempts.append(.now)
            throw Failed()
        }
        defer { member.cancel() }
        try await wormhole.passMessage("poison", identifier: "jobs")
        #expect(await attempts.wait(for: 1).count >= 1)
        // Waiting for its delay, the first failure's entry says so in the state file.
        let container = try ContainerDirectory(path: directory.file("c"))
        func entry() -> WorkQueueState.Entry? {
            let states = WorkQueueFile.states(container: container, identifier: "jobs")
            return states.compactMap { $0.state?.entries.first }.first
        }
        #expect(await eventually { entry()?.member == 0 })
        let waiting = try #require(entry())
        #expect(waiting.deliveries == 1 && waiting.retryDelay >= 1_000 && waiting.retryDelay < 3_000, "\(waiting)")
        try await wormhole.passMessage("a", identifier: "jobs")
        try await wormhole.passMessage("b", identifier: "jobs")
        #expect(await attempts.wait(for: 4, seconds: 20).count == 4)
        let times = attempts.all
        let gaps = zip(times.dropFirst(), times).map { ($0 - $1) / .milliseconds(1) }
        #expect(gaps.count == 3 && gaps[0] >= 1_000 && gaps[1] >= 1_500 && gaps[2] >= 1_500, "gaps in ms: \(gaps)")
        // Woken when due (its redelivery timer, every 0.25 s), not long after.
        #expect(gaps.allSatisfy { $0 < 4_000 }, "gaps in ms: \(gaps)")
        #expect(handled.all == ["a", "b"], "handed out while the failing job waited")
        #expect(await eventually { (try? wormhole.workQueues(identifier: "jobs").first?.deadLettered) == 1 })
    }

    @Test("every back end backs off: a failing job comes back after 1 s, then 2 s, while another job is handed out at once; its last failure goes to the dead letters",
          .timeLimit(.minutes(1)), arguments: Backend.all)
    func failingJobBacksOffOnEveryBackend(backend: Backend) async throws {
        let store = try backend.makeStore()
        let wormhole = try store.wormhole()
        struct Failed: Error {}
        let attempts = Collector<ContinuousClock.Instant>()
        let handled = Collector<String>()
        let options = WorkQueueOptions(maximumDeliveries: 3, retryDelay: 1, maximumRetryDelay: 5)
        let member = try wormhole.listenForMessage(withIdentifier: "jobs", as: String.self, workQueue: "w", options: options) { job in
            guard job == "poison" else { return handled.append(job) }
            attempts.append(.now)
            throw Failed()
        }
        defer { member.cancel() }
        try await wormhole.passMessage("poison", identifier: "jobs")
        #expect(await attempts.wait(for: 1).count >= 1)
        try await wormhole.passMessage("meanwhile", identifier: "jobs")
        #expect(await handled.wait(for: 1) == ["meanwhile"])
        #expect(attempts.all.count == 1, "the failing job waits while the other is handed out")
        #expect(await attempts.wait(for: 3, seconds: 20).count == 3)
        let times = attempts.all
        let gaps = zip(times.dropFirst(), times).map { ($0 - $1) / .milliseconds(1) }
        #expect(gaps.count == 2 && gaps[0] >= 950 && gaps[1] >= 1_950, "gaps in ms: \(gaps)")
        #expect(gaps.allSatisfy { $0 < 6_000 }, "gaps in ms: \(gaps)")
        #expect(await eventually { (try? wormhole.workQueues(identifier: "jobs").first?.deadLettered) == 1 })
    }

    @Test("a job held by a member that was killed is handed out again only after the retry delay of the member that finds it dead",
          .timeLimit(.minutes(1)))
    func killedMembersJobBacksOff() async throws {
        let directory = TemporaryDirectory()
        let container = directory.file("c")
        let wormhole = try Wormhole(directory: container)
        try wormhole.listenForMessage(withIdentifier: "jobs", as: String.self, workQueue: "w") { _ in }.cancel()
        try await wormhole.passMessage("hang", identifier: "jobs")
        let output = directory.file("worker.txt")
        let worker = try Agent.start(["worker", container, "jobs", "w", output, "-", "hang"])
        #expect(await eventually(seconds: 20) { (try? WorkQueueProcessTests.workerLines([output]).count) == 1 })
        kill(worker.processIdentifier, SIGKILL)
        worker.waitUntilExit()
        let killed = ContinuousClock.now
        let received = Collector<(ContinuousClock.Instant, Int)>()
        let member = try wormhole.listenForRecords(withIdentifier: "jobs", workQueue: "w",
                                                   options: WorkQueueOptions(retryDelay: 0.6)) { _, deliveries in
            received.append((.now, deliveries))
        }
        defer { member.cancel() }
        let got = try #require(await received.wait(for: 1, seconds: 20).first)
        #expect(got.1 == 2)
        #expect(got.0 - killed >= .milliseconds(600), "handed out again \(got.0 - killed) after its member was killed")
    }
}
