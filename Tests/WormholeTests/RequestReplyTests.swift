import Foundation
import Testing
@_spi(Backend) @testable import Wormhole
@_spi(Backend) @testable import WormholeCore
@_spi(Backend) @testable import WormholeFiles
import WormholeTestSupport

@Suite("Request and reply")
struct RequestReplyTests {
    struct Query: Codable, Sendable { var number: Int }
    struct Answer: Codable, Sendable, Equatable { var square: Int; var responder: String }
    struct Refused: Error, CustomStringConvertible { var description: String { "odd numbers are refused" } }

    @Test("a new responders queue starts at the retained history (§19): a request passed before any responder ran is answered; a role 0 message is acknowledged unanswered",
          .timeLimit(.minutes(1)))
    func newRespondersStartAtTheHistory() async throws {
        let store = try Backend.file.makeStore()
        let wormhole = try store.wormhole()
        try await wormhole.passMessage(Query(number: 0), identifier: "square")
        let requester = Task { try await wormhole.request(Query(number: 3), identifier: "square", as: Answer.self, timeout: 20) }
        #expect(await eventually { try wormhole.summaries().first { $0.identifier == "square" }?.messageCount ?? 0 >= 2 })
        let calls = Collector<Int>()
        let responder = try wormhole.respondToRequests(withIdentifier: "square", as: Query.self) { query in
            calls.append(query.number)
            return Answer(square: query.number * query.number, responder: "late")
        }
        defer { responder.cancel() }
        #expect(try await requester.value == Answer(square: 9, responder: "late"))
        #expect(calls.all == [3], "the role 0 message is not run as a request")
    }

    @Test("a request is answered once by one of two responders; concurrent requests get their own replies; a thrown error reaches the requester",
          .timeLimit(.minutes(1)), arguments: Backend.all)
    func answeredOnceAndCorrelated(backend: Backend) async throws {
        let store = try backend.makeStore()
        let wormhole = try store.wormhole()
        let other = try store.wormhole()
        let calls = Collector<String>()
        let first = try wormhole.respondToRequests(withIdentifier: "square", as: Query.self) { query in
            calls.append("a\(query.number)")
            if query.number == -1 { throw Refused() }
            return Answer(square: query.number * query.number, responder: "a")
        }
        let second = try other.respondToRequests(withIdentifier: "square", as: Query.self) { query in
            calls.append("b\(query.number)")
            if query.number == -1 { throw Refused() }
            return Answer(square: query.number * query.number, responder: "b")
        }
        let requester = try store.wormhole()
        try await withThrowingTaskGroup(of: (Int, Answer).self) { group in
            for number in 1...100 {
                group.addTask { (number, try await requester.request(Query(number: number), identifier: "square", as: Answer.self, timeout: 10)) }
            }
            for try await (number, answer) in group { #expect(answer.square == number * number) }
        }
        #expect(calls.count == 100, "each request answered once")
        let error = await #expect(throws: WormholeError.self) {
            _ = try await requester.request(Query(number: -1), identifier: "square", as: Answer.self, timeout: 5)
        }
        #expect(error?.code == .requestFailed)
        #expect(error?.message.contains("odd numbers are refused") == true)
        // The synchronous form, from a thread that may block.
        let answer = try await Task.detached { try await requester.request(Query(number: 7), identifier: "square", as: Answer.self, timeout: 5) }.value
        #expect(answer.square == 49)
        first.cancel()
        second.cancel()
    }

    @Test("a responder's, a work-queue member's and a listener's wake-ups keep no memory: 10,000 more of them leave resident memory as it was",
          .timeLimit(.minutes(2)))
    func wakeUpsKeepNoMemory() async throws {
        // The work-queue members, responders among them, once relayed their events through
        // a closure kept in a lock, which each event wrapped in one more thunk: the n-th
        // event ran through n thunks, and kept them all (resident memory grew 4.5 MB over
        // each 10,000 requests here, and each request cost more than the one before).
        let directory = TemporaryDirectory()
        let output = directory.file("wakeups.txt")
        _ = FileManager.default.createFile(atPath: output, contents: nil)
        let count = scaled(10_000)
        let agent = try Agent.start(["wakeups", directory.path, "\(count)"], output: FileHandle(forWritingAtPath: output))
        #expect(await waitForExit(agent, seconds: 100) == 0)
        let words = try String(contentsOfFile: output, encoding: .utf8).split(whereSeparator: \.isWhitespace)
        try #require(words.count == 6 && words[0] == "resident" && words[4] == "heard", "\(words)")
        let kilobytes = words[1...3].map { Int($0) ?? 0 }
        #expect(Int(words[5]) == 2_000 + 2 * count, "the listener heard each request: \(words[5])")
        // The first interval may still grow (buffers, the logs' pages); the second holds
        // as many requests again. Under a sanitizer resident memory says nothing (see the
        // soak test).
        if ProcessInfo.processInfo.environment["WORMHOLE_SANITIZER"] == nil {
            #expect(kilobytes[2] - kilobytes[1] < 1024, "resident memory grew \(kilobytes[2] - kilobytes[1]) kB over the second \(count) requests")
        }
        print("wake-ups: resident memory \(kilobytes[0]) -> \(kilobytes[1]) -> \(kilobytes[2]) kB over 2,000, then twice \(count) requests")
    }

    @Test("blocking requests, the first before the reply log exists, never wake the requester's reader thread; asynchronous ones do",
          .timeLimit(.minutes(1)))
    func blockingRequestsLeaveTheReaderThreadAlone() async throws {
        let store = try Backend.file.makeStore()
        let responder = try store.wormhole()
        let serving = try responder.respondToRequests(withIdentifier: "ask", as: Int.self) { $0 + 1 }
        defer { serving.cancel() }
        func wakeUps(_ mode: String) async throws -> Int {
            let pipe = Pipe()
            let agent = try Agent.start(["quiet-requests", store.location, "20", mode], output: pipe.fileHandleForWriting)
            try? pipe.fileHandleForWriting.close()
            let output = String(decoding: await readToEnd(pipe.fileHandleForReading), as: UTF8.self)
            #expect(await waitForExit(agent, seconds: 30) == 0)
            let words = output.split(whereSeparator: \.isWhitespace)
            try #require(words.count == 2 && words[0] == "wakeups", "the agent printed \(output)")
            return Int(words[1]) ?? -1
        }
        // A thread blocked in a request reads its reply itself, with a watch of its own;
        // for the first, on the directory, until the reply log exists.
        let blocking = try await wakeUps("block")
        #expect(blocking == 0, "the reader thread woke \(blocking) times for 20 blocking requests")
        // The probe sees wake-ups: an asynchronous request's reply comes through the thread.
        let asynchronous = try await wakeUps("async")
        #expect(asynchronous >= 20, "the reader thread woke \(asynchronous) times for 20 asynchronous requests")
    }

    @Test("a requester whose requests all block leaves the reply log to its waiters while it asks, and follows it again once idle: its claim holds back no compaction of the log that other requesters use",
          .timeLimit(.minutes(1)))
    func idleRequesterFollowsTheReplies() async throws {
        var configuration = Wormhole.Configuration()
        configuration.retainedMessageCount = 4
        let store = try Backend.file.makeStore()
        let responder = try store.wormhole(configuration: configuration)
        let member = try responder.respondToRequests(withIdentifier: "svc", as: Int.self) { $0 + 1 }
        let idle = try store.wormhole()
        let busy = try store.wormhole()
        func ask(_ wormhole: Wormhole, _ numbers: Range<Int>) async -> [Int] {
            await withCheckedContinuation { done in
                Thread.detachNewThread {
                    done.resume(returning: numbers.map { (try? wormhole.request($0, identifier: "svc", as: Int.self, timeout: 5)) ?? -1 })
                }
            }
        }
        #expect(await ask(idle, 0..<3) == [1, 2, 3])
        // Idle for longer than ReplyRouter.idleDelay: its listener follows the log again.
        try await Task.sleep(for: .seconds(ReplyRouter.idleDelay + 0.5))
        #expect(await ask(busy, 0..<300) == (1...300).map { $0 })
        // Both requesters' claims reach the last reply (each is written once its listener
        // has been idle a moment): none holds back the compactions of the log.
        let caughtUp = { () -> Bool in
            let claims = try busy.listeners(identifier: "svc.replies")
            return claims.count == 2 && claims.allSatisfy { $0.behind == 0 && $0.position == 303 }
        }
        #expect(await eventually(seconds: 10, caughtUp),
                "the idle requester's claim stayed behind: \((try? busy.listeners(identifier: "svc.replies")) ?? [])")
        // And it asks again, read by its own thread.
        #expect(await ask(idle, 10..<13) == [11, 12, 13])
        member.cancel()
    }

    @Test("with no responder a request fails at its timeout, on the monotonic clock, saying that nobody serves the identifier",
          .timeLimit(.minutes(1)), arguments: Backend.all)
    func noResponderTimesOut(backend: Backend) async throws {
        let store = try backend.makeStore()
        let wormhole = try store.wormhole()
        let error = await #expect(throws: WormholeError.self) {
            _ = try await wormhole.request("anyone?", identifier: "nobody", as: String.self, timeout: 0.5)
        }
        #expect(error?.code == .timedOut)
        #expect(error?.message.contains("no responder serves 'nobody'") == true, "\(error?.message ?? "")")
        // How long it waited is measured on a thread of its own: a task's resumption also
        // waits for a free thread of the shared pool, which the other suites keep busy.
        let waited = await withCheckedContinuation { (done: CheckedContinuation<Duration, Never>) in
            Thread.detachNewThread {
                let started = ContinuousClock.now
                _ = try? wormhole.request("anyone?", identifier: "nobody", as: String.self, timeout: 0.5)
                done.resume(returning: ContinuousClock.now - started)
            }
        }
        #expect(waited >= .milliseconds(500) && waited < .seconds(3), "the request waited \(waited)")
        #expect(throws: WormholeError.self) { _ = try wormhole.request("x", identifier: "nobody", as: String.self, timeout: -1) }
    }

    @Test("a responder and a listener that run on the reader thread can make blocking requests of their own; blocking requests are answered while compaction keeps replacing the reply log",
          .timeLimit(.minutes(1)))
    func blockingRequestsFromTheReaderThread() async throws {
        var configuration = Wormhole.Configuration()
        configuration.retainedMessageCount = 4
        let store = try Backend.file.makeStore()
        let wormhole = try store.wormhole(configuration: configuration)
        let inner = try wormhole.respondToRequests(withIdentifier: "double", as: Int.self) { $0 * 2 }
        // Without a queue: answered on the reader thread, which the blocking request below
        // cannot wait for; it reads its reply through a watch of its own.
        let outer = try wormhole.respondToRequests(withIdentifier: "double-plus-one", as: Int.self) { number in
            try wormhole.request(number, identifier: "double", as: Int.self, timeout: 5) + 1
        }
        let heard = Collector<Int>()
        let token = try wormhole.listenForMessage(withIdentifier: "ask", as: Int.self) { number in
            if let answer = try? wormhole.request(number, identifier: "double", as: Int.self, timeout: 5) { heard.append(answer) }
        }
        let requester = try store.wormhole(configuration: configuration)
        let (answers, slowest) = await withCheckedContinuation { (done: CheckedContinuation<([Int], Duration), Never>) in
            Thread.detachNewThread {
                var answers: [Int] = []
                var slowest = Duration.zero
                for number in 0..<200 {
                    let started = ContinuousClock.now
                    answers.append((try? requester.request(number, identifier: "double-plus-one", as: Int.self, timeout: 5)) ?? -1)
                    slowest = max(slowest, ContinuousClock.now - started)
                }
                done.resume(returning: (answers, slowest))
            }
        }
        #expect(answers == (0..<200).map { $0 * 2 + 1 }, "every request answered, by way of the inner responder")
        #expect(slowest < .seconds(2), "the slowest request took \(slowest)")
        for number in 1...3 { try await wormhole.passMessage(number, identifier: "ask") }
        #expect(await eventually { heard.count == 3 }, "the listener's requests: \(heard.all)")
        #expect(heard.all.sorted() == [2, 4, 6])
        token.cancel()
        outer.cancel()
        inner.cancel()
    }

    @Test("blocking requests to many identifiers hold a few inotify instances, not one per identifier (a limit every process of the user shares)",
          .timeLimit(.minutes(1)))
    func blockingRequestsShareFewInotifyInstances() async throws {
        let store = try Backend.file.makeStore()
        let wormhole = try store.wormhole()
        let identifiers = (0..<40).map { "service-\($0)" }
        let responders = try identifiers.map { identifier in
            try wormhole.respondToRequests(withIdentifier: identifier, as: Int.self) { $0 + 1 }
        }
        let requester = try store.wormhole()
        let answers = await withCheckedContinuation { (done: CheckedContinuation<[Int], Never>) in
            Thread.detachNewThread {
                done.resume(returning: identifiers.enumerated().map { index, identifier in
                    (try? requester.request(index, identifier: identifier, as: Int.self, timeout: 5)) ?? -1
                })
            }
        }
        #expect(answers == (1...40).map { $0 })
        // The process's engine holds one; the blocking requests, of this test and of others
        // running meanwhile, at most LogWaiter.maximumInUse.
        let instances = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").filter { fd in
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(fd)")) == "anon_inode:inotify"
        }
        #expect(instances.count <= 1 + LogWaiter.maximumInUse, "\(instances.count) inotify instances after blocking requests to 40 identifiers")
        // More threads blocked at once than there are waiters: those beyond are woken by
        // the reader thread, and every one is answered.
        let threads = LogWaiter.maximumInUse + 4
        let concurrent = Collector<Int>()
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            let remaining = Locked(threads)
            for thread in 0..<threads {
                Thread.detachNewThread {
                    for round in 0..<20 {
                        let number = thread * 100 + round
                        concurrent.append((try? requester.request(number, identifier: "service-0", as: Int.self, timeout: 5)) == number + 1 ? 1 : 0)
                    }
                    if remaining.withLock({ $0 -= 1; return $0 == 0 }) { done.resume() }
                }
            }
        }
        #expect(concurrent.count == threads * 20 && concurrent.all.allSatisfy { $0 == 1 }, "\(concurrent.all.filter { $0 == 0 }.count) of \(concurrent.count) concurrent blocking requests not answered")
        for responder in responders { responder.cancel() }
    }

    @Test("a blocked requester polls for its reply only when replies come fast and it ran since its last request: not for a slow responder, not after a sleep, never with replySpinTime 0; every reply is its own; a replySpinTime out of range is refused",
          .timeLimit(.minutes(1)))
    func requestersPollOnlyWhenItPays() async throws {
        let store = try Backend.file.makeStore()
        let responder = try store.wormhole()
        let fast = try responder.respondToRequests(withIdentifier: "fast", as: Int.self) { $0 + 1 }
        let slow = try responder.respondToRequests(withIdentifier: "slow", as: Int.self, queue: DispatchQueue(label: "slow responder")) { number in
            Thread.sleep(forTimeInterval: 0.005)
            return number + 1
        }
        defer { fast.cancel(); slow.cancel() }
        /// `count` blocking requests of `identifier` from one thread, `pause` seconds
        /// apart: whether each reply was its request's, and how many of them polled.
        func ask(_ identifier: String, count: Int, pause: Double = 0, spinTime: Double) async throws -> (answered: Bool, polled: Int) {
            var configuration = Wormhole.Configuration()
            configuration.replySpinTime = spinTime
            let requester = try store.wormhole(configuration: configuration)
            let (answers, polled) = await withCheckedContinuation { (done: CheckedContinuation<([Int], Int), Never>) in
                Thread.detachNewThread {
                    let answers = (0..<count).map { number in
                        if pause > 0, number > 0 { Thread.sleep(forTimeInterval: pause) }
                        return (try? requester.request(number, identifier: identifier, as: Int.self, timeout: 10)) ?? -1
                    }
                    let router = try? requester.replyRouters.router(for: identifier, in: requester)
                    done.resume(returning: (answers, router?.polledRequests ?? -1))
                }
            }
            return (answers == (1...count).map { $0 }, polled)
        }
        // 10 ms (the most allowed), so that replies slowed down by a loaded machine or a
        // sanitizer still count as fast: with 1 ms, ThreadSanitizer's run beside the rest
        // of CI saw replies slower than that and no request polled.
        if ReplyRouter.mayRunOnAnotherCPU {
            // Most poll; a few may not, on a loaded machine: a thread preempted between two
            // requests has not run for most of the time since the last. Other test
            // processes sharing the two cores can preempt a whole series, so up to three
            // series are asked; at least one must poll for most of its requests.
            var series: [Int] = []
            for _ in 0..<3 where (series.max() ?? 0) < 10 {
                let backToBack = try await ask("fast", count: 50, spinTime: 0.01)
                #expect(backToBack.answered)
                series.append(backToBack.polled)
            }
            #expect((series.max() ?? 0) >= 10, "of 49 back-to-back requests, \(series) polled in each series")
            print("reply polling: of 49 back-to-back requests, \(series) polled in each series")
        }
        let asleepBetween = try await ask("fast", count: 6, pause: 0.02, spinTime: 0.01)
        #expect(asleepBetween.answered)
        #expect(asleepBetween.polled == 0, "\(asleepBetween.polled) requests polled after 20 ms asleep")
        let slowReplies = try await ask("slow", count: 6, spinTime: 0.0001)
        #expect(slowReplies.answered)
        #expect(slowReplies.polled == 0, "\(slowReplies.polled) requests polled for replies that take 5 ms")
        let never = try await ask("fast", count: 20, spinTime: 0)
        #expect(never.answered)
        #expect(never.polled == 0)
        // Asynchronous requests suspend; they never poll, back to back or not.
        var configuration = Wormhole.Configuration()
        configuration.replySpinTime = 0.01
        let suspending = try store.wormhole(configuration: configuration)
        for number in 0..<20 { #expect(try await suspending.request(number, identifier: "fast", as: Int.self, timeout: 10) == number + 1) }
        #expect(try suspending.replyRouters.router(for: "fast", in: suspending).polledRequests == 0)
        for wrong in [-0.001, 0.02, .nan] {
            var configuration = Wormhole.Configuration()
            configuration.replySpinTime = wrong
            let error = #expect(throws: WormholeError.self) { _ = try store.wormhole(configuration: configuration) }
            #expect(error?.code == .invalidConfiguration)
            #expect(error?.message.contains("replySpinTime must be between 0 and 0.01 seconds") == true, "\(error?.message ?? "")")
        }
    }

    @Test("a reply over the message size limit reaches the requester as an error reply that says so, and its request is run once, not again for each failed reply",
          .timeLimit(.minutes(1)))
    func replyTooLargeIsAnErrorReplyAndRunsOnce() async throws {
        let directory = TemporaryDirectory()
        var configuration = Wormhole.Configuration()
        configuration.maximumMessageSize = 1024
        let wormhole = try Wormhole(directory: directory.path, configuration: configuration)
        let runs = Collector<String>()
        let responder = try wormhole.respondToRecords(withIdentifier: "big") { request in
            runs.append(String(decoding: request.payload, as: UTF8.self))
            return (Data(count: 2048), .data)
        }
        let error = await #expect(throws: WormholeError.self) {
            _ = try await wormhole.requestRecord(payload: Data("once".utf8), kind: .text, identifier: "big", timeout: 10)
        }
        #expect(error?.code == .requestFailed, "\(error?.description ?? "")")
        #expect(error?.message.contains("is 2048 bytes; the limit is 1024 bytes") == true, "\(error?.message ?? "")")
        // A request run again would come before this one: the queue hands out in order.
        await #expect(throws: WormholeError.self) {
            _ = try await wormhole.requestRecord(payload: Data("next".utf8), kind: .text, identifier: "big", timeout: 10)
        }
        #expect(runs.all == ["once", "next"], "\(runs.all)")
        responder.cancel()
    }

    @Test("the work queue name 'responders' is the library's: a work queue of that name is refused with an error that says why, and requests go to the responders alone",
          .timeLimit(.minutes(1)))
    func respondersQueueNameIsReserved() async throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.path)
        let error = #expect(throws: WormholeError.self) {
            try wormhole.listenForRecords(withIdentifier: "service", workQueue: "responders") { _, _ in }
        }
        #expect(error?.code == .invalidIdentifier, "\(error?.description ?? "")")
        #expect(error?.message.contains("work queue name 'responders' is reserved") == true, "\(error?.message ?? "")")
        // Other names stay free, beside a responder.
        let responder = try wormhole.respondToRequests(withIdentifier: "service", as: String.self) { $0.uppercased() }
        let member = try wormhole.listenForRecords(withIdentifier: "service", workQueue: "workers") { _, _ in }
        for index in 1...5 {
            let reply = try await wormhole.request("r\(index)", identifier: "service", as: String.self, timeout: 10)
            #expect(reply == "R\(index)")
        }
        member.cancel()
        responder.cancel()
    }
}
