#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
@_spi(Backend) @testable import Wormhole
@_spi(Backend) @testable import WormholeCore
@_spi(Backend) @testable import WormholeFiles
import WormholeTestSupport

/// Requests, replies and work queues between the Swift library and the Python package
/// (`Tests/Interop/python_peer.py`), as separate processes in one container.
extension PythonInteropTests {
    /// An error a Swift responder throws, described as its requester will read it.
    struct Refusal: Error, CustomStringConvertible {
        let description: String
    }

    /// A scratch directory, the path of a container in it, and a wormhole of that container.
    static func scratchContainer() throws -> (TemporaryDirectory, String, Wormhole) {
        let scratch = TemporaryDirectory("python-interop-scratch")
        let container = scratch.file("c")
        return (scratch, container, try Wormhole(directory: container))
    }

    @Test("a Swift requester is answered by a Python responder and a Python requester by a Swift one; a failure reaches either as requestFailed with what the responder said; no responder times out saying so",
          .timeLimit(.minutes(3)))
    func requestsAnsweredAcrossLanguages() async throws {
        let (scratch, container, wormhole) = try Self.scratchContainer()

        // Python responds, Swift asks.
        let answered = scratch.file("python-responder.out")
        let responder = try Self.peer(["respond", container, "py.state", "python", answered, "--fail", "broken"], scratch, "responder")
        defer { kill(responder.pid, SIGKILL) }
        #expect(await waitForFile(answered + ".ready"))
        for index in 1...20 {
            let reply = try await wormhole.request("ask \(index)", identifier: "py.state", as: String.self, timeout: 10)
            #expect(reply == "python:ask \(index)")
        }
        do {
            let reply = try await wormhole.request("broken", identifier: "py.state", as: String.self, timeout: 10)
            Issue.record("a failing Python responder answered \(reply)")
        } catch {
            #expect(error.code == .requestFailed)
            #expect(error.message == "the responder of 'py.state' failed: cannot answer broken")
        }

        // Swift responds, Python asks.
        let member = try wormhole.respondToRequests(withIdentifier: "swift.state", as: String.self) { request in
            if request == "q:3" { throw Refusal(description: "refused \(request)") }
            return "swift:\(request)"
        }
        defer { member.cancel() }
        let asked = scratch.file("requests.out")
        let python = await (try Self.peer(["request", container, "swift.state", "5", "q", asked, "--timeout", "10"], scratch, "requester")).finish()
        #expect(python.status == 0, "\(python.errorOutput)")
        let lines = try String(contentsOfFile: asked, encoding: .utf8).split(separator: "\n").map { $0.split(separator: " ", maxSplits: 4).map(String.init) }
        #expect(lines.count == 5)
        for (index, line) in lines.enumerated() where index != 2 {
            #expect(line.count == 4 && line[1] == "ok" && line[2] == "swift:q:\(index + 1)", "\(line)")
        }
        #expect(lines.count == 5 && lines[2].count == 5 && lines[2][1] == "error" && lines[2][2] == "requestFailed"
                && lines[2][4] == "the responder of 'swift.state' failed: refused q:3", "\(lines.count == 5 ? lines[2] : [])")

        // Nobody serves: the Python requester's error is the Swift library's.
        let none = scratch.file("none.out")
        let unserved = await (try Self.peer(["request", container, "nobody", "1", "q", none, "--timeout", "0.5"], scratch, "none")).finish()
        #expect(unserved.status == 0, "\(unserved.errorOutput)")
        let timedOut = try String(contentsOfFile: none, encoding: .utf8).split(separator: " ", maxSplits: 3).map(String.init)
        #expect(timedOut.count == 4 && timedOut[1] == "error" && timedOut[2] == "timedOut")
        #expect(timedOut.last?.hasSuffix("no reply to the request to 'nobody' within 0.5 s: no responder serves 'nobody' (start one with respondToRequests(withIdentifier:) or 'wormhole respond nobody -- COMMAND')\n") == true, "\(timedOut)")
    }

    @Test("Swift and Python requesters asking at once share one reply log: each gets the replies to its own requests, none to another's",
          .timeLimit(.minutes(3)))
    func swiftAndPythonRequestersShareTheReplyLog() async throws {
        let (scratch, container, wormhole) = try Self.scratchContainer()
        let member = try wormhole.respondToRequests(withIdentifier: "mixed", as: String.self) { "re:\($0)" }
        defer { member.cancel() }
        let count = scaled(200)
        // Two Python processes ask one after the other each; this process asks from 4
        // tasks at once, all while they do.
        let outputs = [scratch.file("py1.out"), scratch.file("py2.out")]
        let pythons = try outputs.enumerated().map { index, output in
            try Self.peer(["request", container, "mixed", "\(count)", "py\(index + 1)", output, "--timeout", "20"], scratch, "requester-\(index + 1)")
        }
        let asker = try Wormhole(directory: container)
        // Each task asks `count` times, and on until both Python processes have ended
        // (each writes its file at its end), so that the languages ask at once.
        func pythonsAsk() -> Bool { !outputs.allSatisfy { FileManager.default.fileExists(atPath: $0) } }
        let asked = try await withThrowingTaskGroup(of: (asked: Int, wrong: [String]).self) { group in
            for task in 1...4 {
                group.addTask {
                    var wrong: [String] = []
                    var index = 0
                    while index < count || pythonsAsk() {
                        index += 1
                        let reply = try await asker.request("sw\(task):\(index)", identifier: "mixed", as: String.self, timeout: 20)
                        if reply != "re:sw\(task):\(index)" { wrong.append("sw\(task):\(index) -> \(reply)") }
                    }
                    return (index, wrong)
                }
            }
            return try await group.reduce(into: (asked: 0, wrong: [String]())) { $0.asked += $1.asked; $0.wrong += $1.wrong }
        }
        #expect(asked.wrong.isEmpty, "Swift requests answered with another's reply: \(asked.wrong.prefix(5))")
        for (index, python) in pythons.enumerated() {
            let finished = await python.finish()
            #expect(finished.status == 0, "\(finished.errorOutput)")
            let lines = try String(contentsOfFile: outputs[index], encoding: .utf8).split(separator: "\n").map { $0.split(separator: " ").map(String.init) }
            let tag = "py\(index + 1)"
            let mismatched = lines.enumerated().filter { $1.count < 3 || $1[1] != "ok" || $1[2] != "re:\(tag):\($0 + 1)" }
            #expect(lines.count == count && mismatched.isEmpty, "\(tag): \(lines.count) lines; not its own replies: \(mismatched.prefix(5).map { $0.element })")
        }
        let requests = try wormhole.workQueues(identifier: "mixed").first
        #expect(requests?.acknowledged == UInt64(asked.asked + 2 * count) && requests?.inFlight == 0, "\(requests.map { "\($0)" } ?? "no queue")")
        print("mixed requesters: Swift \(asked.asked) requests from 4 tasks, Python 2 x \(count), one reply log")
    }

    @Test("a work queue whose members are a Swift process and a Python process: each job handled once, by one of them; a Python member killed with SIGKILL holding a job leaves it to a Swift member",
          .timeLimit(.minutes(3)))
    func aWorkQueueSharedByASwiftAndAPythonProcess() async throws {
        let (scratch, container, wormhole) = try Self.scratchContainer()
        let swiftOut = scratch.file("swift.txt"), pythonOut = scratch.file("python.txt")
        func status() -> WormholeWorkQueueStatus? { try? wormhole.workQueues(identifier: "jobs").first }
        // The Python member alone first (20 jobs, all its own), then beside a Swift member
        // (it takes 50 ms a job, so the Swift member takes its share whatever the timing).
        let python = try Self.peer(["work", container, "jobs", "workers", pythonOut, "--delay", "0.05"], scratch, "python-worker")
        defer { kill(python.pid, SIGKILL) }
        #expect(await waitForFile(pythonOut + ".ready"))
        for index in 1...20 { try await wormhole.passMessage("job-\(index)", identifier: "jobs") }
        #expect(await eventually(seconds: 60) { status()?.acknowledged == 20 })
        let swift = try Agent.start(["worker", container, "jobs", "workers", swiftOut])
        defer { kill(swift.processIdentifier, SIGKILL); swift.waitUntilExit() }
        #expect(await waitForFile(swiftOut + ".ready"))
        let total = 20 + scaled(400)
        for index in 21...total { try await wormhole.passMessage("job-\(index)", identifier: "jobs") }
        #expect(await eventually(seconds: 60) { status()?.acknowledged == UInt64(total) })
        #expect(status()?.members.count == 2)
        let bySwift = try WorkQueueProcessTests.workerLines([swiftOut]), byPython = try WorkQueueProcessTests.workerLines([pythonOut])
        let handled = (bySwift + byPython).map(\.payload)
        #expect(handled.count == total, "each job handled once: \(handled.count) handlings of \(total) jobs")
        #expect(Set(handled) == Set((1...total).map { "job-\($0)" }), "every job handled")
        #expect(byPython.count >= 20 && !bySwift.isEmpty, "both members took jobs: Swift \(bySwift.count), Python \(byPython.count)")
        let final = try #require(status())
        #expect(final.pending == 0 && final.inFlight == 0 && final.deadLettered == 0 && final.lost == 0)
        print("python interop work queue: \(total) jobs, Swift member \(bySwift.count), Python member \(byPython.count) (20 of them alone), acknowledged \(final.acknowledged)")

        // A Python member killed holding a job: the Swift member gets it, its second delivery.
        kill(swift.processIdentifier, SIGKILL)
        swift.waitUntilExit()
        kill(python.pid, SIGKILL)
        _ = await python.finish()
        let hangingOut = scratch.file("python-hanging.txt")
        let hanging = try Self.peer(["work", container, "jobs", "workers", hangingOut, "--hang", "stuck"], scratch, "python-hanging")
        defer { kill(hanging.pid, SIGKILL) }
        #expect(await waitForFile(hangingOut + ".ready"))
        let stuck = try await wormhole.passMessage("stuck", identifier: "jobs")
        #expect(await eventually(seconds: 30) { ((try? WorkQueueProcessTests.workerLines([hangingOut])) ?? []).contains { $0.payload == "stuck" } })
        kill(hanging.pid, SIGKILL)
        _ = await hanging.finish()
        let againOut = scratch.file("swift-again.txt")
        let again = try Agent.start(["worker", container, "jobs", "workers", againOut])
        defer { kill(again.processIdentifier, SIGKILL); again.waitUntilExit() }
        #expect(await eventually(seconds: 30) { status()?.acknowledged == UInt64(total + 1) })
        let redelivered = try WorkQueueProcessTests.workerLines([againOut])
        #expect(redelivered.map(\.sequence) == [stuck] && redelivered.first?.deliveries == 2, "\(redelivered)")
    }

    @Test("a job a Python member gave up on reaches the dead letters as the Swift library's WormholeDeadLetter, byte for byte as Swift encodes it",
          .timeLimit(.minutes(2)))
    func aPythonDeadLetterIsSwiftsDeadLetter() async throws {
        let (scratch, container, wormhole) = try Self.scratchContainer()
        let out = scratch.file("python.txt")
        let python = try Self.peer(["work", container, "jobs", "workers", out, "--poison", "bad/job é"], scratch, "python-worker")
        defer { kill(python.pid, SIGKILL) }
        #expect(await waitForFile(out + ".ready"))
        let sequence = try await wormhole.passMessage("bad/job é", identifier: "jobs")
        #expect(await eventually(seconds: 30) { (try? wormhole.record(withIdentifier: "jobs.dead-letters")) != nil })
        let record = try #require(try await wormhole.record(withIdentifier: "jobs.dead-letters"))
        let letter = try record.decode(as: WormholeDeadLetter.self)
        #expect(letter.identifier == "jobs" && letter.queue == "workers" && letter.sequence == sequence && letter.deliveries == 3)
        #expect(letter.reason == "the handler threw: cannot handle bad/job é")
        #expect(letter.kind == "text" && letter.payload == Data("bad/job é".utf8))
        let passed = try #require(try await wormhole.record(withIdentifier: "jobs")).date
        #expect(abs(letter.date.timeIntervalSince(passed)) < 0.001)
        #expect(record.kind == .json)
        #expect(record.payload == (try WormholeJSONCoding.standardEncoder().encode(letter)), "the same bytes as Swift's encoding of the letter")
        #expect(try wormhole.workQueues(identifier: "jobs").first?.deadLettered == 1)
    }

    @Test("a Swift member and a Python member of one queue honour each other's retry delays: a job one gave back (its handler threw) is not handed out again by the other before the delay stored in the state (Protocol.md §18.1, revision 3.1)",
          .timeLimit(.minutes(2)))
    func swiftAndPythonMembersHonourEachOthersRetryDelays() async throws {
        let (scratch, container, wormhole) = try Self.scratchContainer()
        @Sendable func wallNanoseconds() -> Int64 {
            var now = timespec()
            clock_gettime(CLOCK_REALTIME, &now)
            return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
        }
        struct Failed: Error {}

        // Python fails the job (retry delay 0.8 s) and leaves; a Swift member with no
        // delay of its own waits for the one stored.
        let pythonOut = scratch.file("python.txt"), pythonTimes = scratch.file("python-times.txt")
        let python = try Self.peer(["work", container, "jobs", "w", pythonOut, "--poison", "first", "--retry-delay", "0.8",
                                    "--times", pythonTimes, "--leave-after-failure"], scratch, "python-worker")
        defer { kill(python.pid, SIGKILL) }
        #expect(await waitForFile(pythonOut + ".ready"))
        let first = try await wormhole.passMessage("first", identifier: "jobs")
        #expect(await waitForFile(pythonOut + ".left", seconds: 30))
        let received = Collector<(Int64, UInt64, Int)>()
        let swift = try wormhole.listenForRecords(withIdentifier: "jobs", workQueue: "w",
                                                  options: WorkQueueOptions(maximumDeliveries: 3, retryDelay: 0.8)) { record, deliveries in
            received.append((wallNanoseconds(), record.sequence, deliveries))
            if String(decoding: record.payload, as: UTF8.self) == "second" { throw Failed() }
        }
        let byPython = try String(contentsOfFile: pythonTimes, encoding: .utf8).split(separator: "\n").map { $0.split(separator: " ") }
        #expect(byPython.count == 1 && byPython.first?.first.map(String.init) == String(first), "\(byPython)")
        let pythonDelivered = Int64(byPython.first?.last.map(String.init) ?? "") ?? .max
        let again = try #require(await received.wait(for: 1, seconds: 30).first)
        #expect(again.1 == first && again.2 == 2, "\(again)")
        #expect(again.0 - pythonDelivered >= 800_000_000, "handed out by Swift \((again.0 - pythonDelivered) / 1_000_000) ms after Python's delivery")

        // Swift fails a job (retry delay 0.8 s) and leaves; a Python member with no delay
        // of its own waits for the one stored.
        let second = try await wormhole.passMessage("second", identifier: "jobs")
        #expect(await received.wait(for: 2, seconds: 30).count == 2)
        swift.cancel()
        let swiftDelivered = try #require(received.all.last { $0.1 == second }).0
        let laterOut = scratch.file("python-later.txt"), laterTimes = scratch.file("python-later-times.txt")
        let later = try Self.peer(["work", container, "jobs", "w", laterOut, "--times", laterTimes], scratch, "python-later")
        defer { kill(later.pid, SIGKILL) }
        #expect(await eventually(seconds: 30) { ((try? String(contentsOfFile: laterTimes, encoding: .utf8)) ?? "").contains("\n") })
        let byLater = try String(contentsOfFile: laterTimes, encoding: .utf8).split(separator: "\n").map { $0.split(separator: " ").map(String.init) }
        #expect(byLater.first?.count == 3 && byLater.first?[0] == String(second) && byLater.first?[1] == "2", "\(byLater)")
        let pythonAgain = Int64(byLater.first?.last ?? "") ?? 0
        #expect(pythonAgain - swiftDelivered >= 800_000_000, "handed out by Python \((pythonAgain - swiftDelivered) / 1_000_000) ms after Swift's delivery")
    }
}
