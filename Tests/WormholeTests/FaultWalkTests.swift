import Foundation
import Testing
@_spi(Backend) @testable import Wormhole
@_spi(Backend) @testable import WormholeCore
@_spi(Backend) @testable import WormholeFiles
import WormholeTestSupport

/// Every system call of an operation, made to fail in turn, as SQLite's I/O-error and
/// crash tests do: the test agent runs one operation (a pass, which compacts; a clear; a
/// listener's start, first drain and cancel with its claim; a listener's wake-up and
/// drain; a durable listener's drains and acknowledgements; a work-queue member's and a
/// responder's life; three blocking requests) with its Nth system call
/// failing (ENOSPC, EIO, EMFILE, EINTR), writing half (a short write), or followed by the
/// end of the process (as `kill -9` right after it). N walks over every call the operation
/// makes. After each run the test checks the invariants, with a listener that was
/// listening throughout and a durable name that was not running:
/// - a pass that returned success reached both, once, in order; one that failed reached
///   neither; sequence numbers only grow;
/// - a listener in the faulted process got every message, or was told (`onError`);
/// - a durable name resumes with nothing skipped (at most the message in hand repeated);
/// - a message passed after the run reaches everyone (nothing hangs), and the log reads;
/// - a work queue's member (its join, takes, and acknowledgements with the next take) or a
///   responder (its reply passes too): every job handled and every request answered with
///   its own reply (by it, or by the member or responder that takes over once it ended),
///   or, for one reply the fault kept from passing, with an error reply saying so (the
///   request is not run again), twice at most once and only after a fault it reported or
///   its death; one that a fault
///   did not end handles every job while it lives (it takes again); nothing left in
///   flight;
/// - a requester: each request got its own reply or failed at once with the fault's error,
///   never by waiting out its timeout, and the next ones were answered.
@Suite("Fault walk")
struct FaultWalkTests {
    static let kinds = ["enospc", "eio", "emfile", "eintr", "short", "exit"]

    /// The container of one run: a log with u1...u4, a listener of it since the start,
    /// and the durable name "d" stopped after u4.
    struct Setting {
        let directory = TemporaryDirectory()
        let wormhole: Wormhole
        let received = Collector<WormholeRecord>()
        let errors = Collector<WormholeError>()
        let token: ListenerToken

        init() async throws {
            var configuration = Wormhole.Configuration()
            // The agent's pass (the 5th) compacts the log.
            configuration.retainedMessageCount = 2
            wormhole = try Wormhole(directory: directory.path, configuration: configuration)
            let received = self.received, errors = self.errors
            token = try wormhole.listenForRecords(withIdentifier: "walk", startingFrom: .after(sequence: 0),
                                                  onError: { errors.append($0) }) { received.append($0) }
            for index in 1...4 { try await wormhole.passMessage("u\(index)", identifier: "walk") }
            let durable = Collector<String>()
            let stopped = try wormhole.listenForMessage(withIdentifier: "walk", as: String.self, durableName: "d",
                                                        startingFrom: .history) { durable.append($0) }
            // Waits for the setting, not a measure: generous, as three tests beside it on two
            // cores (CI) can hold the reader thread back for seconds.
            guard await durable.wait(for: 2, seconds: 60).count == 2, await received.wait(for: 4, seconds: 60).count == 4 else {
                throw WormholeError(.systemError, "the setting did not come up")
            }
            stopped.cancel()
        }

        /// The durable name "d" resumed until it has handled `sentinel`.
        func resumeDurable(until sentinel: String) async throws -> [String] {
            let got = Collector<String>()
            let token = try wormhole.listenForMessage(withIdentifier: "walk", as: String.self, durableName: "d") { got.append($0) }
            defer { token.cancel() }
            _ = await eventually(seconds: 10) { got.all.contains(sentinel) }
            return got.all
        }
    }

    /// What the agent printed.
    struct Outcome {
        var calls = 0
        var line = ""
        var handled: [String] = []
        var exitStatus: Int32 = 0
        var ok: Bool { line.hasPrefix("ok") }
        var failed: Bool { line.hasPrefix("error ") }
        var reportedErrors: Int { line.hasPrefix("errors ") ? Int(line.split(separator: " ")[1]) ?? 0 : 0 }
        var died: Bool { exitStatus == 9 }
        /// What the queue held for the agent's member after its last message ("inflight N").
        var inFlight: Int? { line.range(of: " inflight ").flatMap { Int(line[$0.upperBound...].prefix { $0 != " " }) } }
    }

    static func runAgent(_ directory: String, _ scenario: String, _ at: Int, _ kind: String,
                         passing messages: [String] = [], with wormhole: Wormhole? = nil,
                         once ready: (() -> Void)? = nil) async throws -> Outcome {
        let pipe = Pipe()
        let process = try Agent.start(["fault", directory, scenario, String(at), kind], output: pipe.fileHandleForWriting)
        try? pipe.fileHandleForWriting.close()
        if !messages.isEmpty || ready != nil {
            // The agent listens, armed, once READY exists (or it ended before: the
            // messages are passed all the same, for the other listeners).
            _ = await eventually(seconds: 10) { FileManager.default.fileExists(atPath: directory + "/READY") || !process.isRunning }
            ready?()
            if let wormhole { for message in messages { try await wormhole.passMessage(message, identifier: "walk") } }
        }
        let data = await readToEnd(pipe.fileHandleForReading)
        let status = await waitForExit(process, seconds: 30)
        var outcome = Outcome(exitStatus: status ?? -1)
        for line in String(decoding: data, as: UTF8.self).split(separator: "\n") {
            if line.hasPrefix("calls ") { outcome.calls = Int(line.dropFirst(6)) ?? 0 }
            else if line.hasPrefix("got ") { outcome.handled.append(String(line.dropFirst(4))) }
            else { outcome.line = String(line) }
        }
        return outcome
    }

    @Test("each system call of an operation failing in turn, or the process ending after it: no message lost or repeated in silence, no number reused, nothing hangs",
          .timeLimit(.minutes(10)), arguments: ["pass", "batch", "clear", "listen", "drain", "durable", "queue", "respond", "request"], FaultWalkTests.kinds)
    func walk(scenario: String, kind: String) async throws {
        // WORMHOLE_FAULT_WALK=scenario[:kind[:N or N-M]] runs those cases alone (to look into them).
        let only = ProcessInfo.processInfo.environment["WORMHOLE_FAULT_WALK"]?.split(separator: ":").map(String.init)
        if let only, only.first != scenario || only.count >= 2 && only[1] != kind { return }
        let extra = ["drain", "durable", "queue"].contains(scenario) ? ["m1", "m2", "m3"] : []
        // A dry run counts the calls.
        let dry = try await Setting()
        let dryRequests = Requests(scenario == "respond" ? dry.wormhole : nil)
        let dryResponder = scenario == "request" ? try Self.respond(dry.wormhole) : nil
        defer { dryResponder?.cancel() }
        let total = try await Self.runAgent(dry.directory.path, scenario, 0, "eio", passing: extra, with: dry.wormhole, once: dryRequests.ask).calls
        _ = try await dryRequests.answers(after: dry)
        dry.token.cancel()
        try #require(total > 0)
        var runs = 0, checks = 0, faulted = 0
        var violations: [String] = []
        // Scaled runs (the sanitizers': WORMHOLE_TEST_SCALE=0.25, which look for races, the
        // full run having walked every case) fault each call once, with one of the kinds
        // in turn: every 6th call of each kind, a different sixth for each.
        let stride = scaled(100) < 100 ? Self.kinds.count : 1
        let index = Self.kinds.firstIndex(of: kind) ?? 0
        do {
            for at in 1...total where only.map({ $0.count < 3 || Self.selects($0[2], at) }) ?? ((at + index) % stride == 0) {
                let setting = try await Setting()
                let requests = Requests(scenario == "respond" ? setting.wormhole : nil)
                let responder = scenario == "request" ? try Self.respond(setting.wormhole) : nil
                defer { responder?.cancel() }
                let outcome = try await Self.runAgent(setting.directory.path, scenario, at, kind, passing: extra, with: setting.wormhole, once: requests.ask)
                runs += 1
                if outcome.failed || outcome.died || outcome.reportedErrors > 0 { faulted += 1 }
                var problems: [String] = []
                func check(_ condition: Bool, _ what: @autoclosure () -> String) {
                    checks += 1
                    if !condition { problems.append(what()) }
                }
                check(outcome.died || !outcome.line.isEmpty, "the agent ended without saying how (status \(outcome.exitStatus))")
                // The container is there throughout: an error names the fault, not that.
                check(!outcome.line.contains("the container was removed"), "the agent's error blames a removed container: \(outcome.line)")

                // After the run: a message reaches the listener that was listening all along.
                try await setting.wormhole.passMessage("s", identifier: "walk")
                _ = await eventually(seconds: 10) { setting.received.all.contains { $0.payload == Data("s".utf8) } }
                // A moment more, for anything that should not come after it.
                await settle(20)
                let records = setting.received.all
                let payloads = records.map { String(decoding: $0.payload, as: UTF8.self) }
                check(payloads.last == "s" || payloads.contains("s"), "the message passed after the run did not arrive: \(payloads)")
                let sequences = records.map(\.sequence)
                check(zip(sequences, sequences.dropFirst()).allSatisfy { $0 < $1 }, "sequence numbers did not only grow: \(sequences)")
                let lost = setting.errors.all.compactMap(\.missedMessageCount).reduce(0, +)
                let gaps = zip(sequences, sequences.dropFirst()).reduce(UInt64(0)) { $0 + ($1.1 > $1.0 ? $1.1 - $1.0 - 1 : 0) }
                check(gaps == lost, "\(gaps) numbers missing, \(lost) reported lost")
                check(setting.errors.all.allSatisfy { $0.code == .messagesLost }, "the unfaulted listener reported: \(setting.errors.all)")
                let before = ["u1", "u2", "u3", "u4"]
                switch scenario {
                case "pass":
                    let expected = outcome.ok ? before + ["f", "s"] : outcome.failed ? before + ["s"] : nil
                    if let expected { check(payloads == expected, "\(outcome.line): the listener got \(payloads)") }
                    else { check(payloads == before + ["s"] || payloads == before + ["f", "s"], "killed: the listener got \(payloads)") }
                case "batch":
                    // All three, none, or (a write that failed part-way) the first ones, as
                    // many as the error says; killed: the first ones, any number.
                    let batch = ["f1", "f2", "f3"]
                    let passed = outcome.ok ? 3 : outcome.failed ? Self.passedCount(outcome.line) : nil
                    if let passed { check(payloads == before + batch.prefix(passed) + ["s"], "\(outcome.line): the listener got \(payloads)") }
                    else { check((0...3).contains { payloads == before + batch.prefix($0) + ["s"] }, "killed: the listener got \(payloads)") }
                case "clear", "listen":
                    check(payloads == before + ["s"], "the listener got \(payloads)")
                default:
                    check(payloads == before + extra + ["s"], "the listener got \(payloads)")
                }
                // The durable name that was not running: nothing skipped, nothing twice.
                let resumed = try await setting.resumeDurable(until: "s")
                check(resumed == Array(payloads.dropFirst(4)), "the durable name resumed with \(resumed), after \(payloads)")
                // The faulted process's own listener: every message, or told.
                switch scenario {
                case "listen":
                    // It starts from the history: the 2 retained.
                    let history = Array(before.suffix(2))
                    check(outcome.died || outcome.failed || outcome.handled == history || outcome.reportedErrors > 0 && history.starts(with: outcome.handled),
                          "the agent's listener got \(outcome.handled) and reported nothing (\(outcome.line))")
                case "drain":
                    check(outcome.died || outcome.handled == extra || outcome.reportedErrors > 0 && extra.starts(with: outcome.handled),
                          "the agent's listener got \(outcome.handled) and reported nothing (\(outcome.line))")
                case "durable":
                    // Resumed here: what the agent handled, then the rest, at most one repeated.
                    let again = try await resumeAgentDurable(setting)
                    let joined = outcome.handled + again
                    let deduplicated = outcome.handled + (again.first.map { $0 == outcome.handled.last } == true ? Array(again.dropFirst()) : again)
                    check(deduplicated == extra + ["s"] || joined == extra + ["s"],
                          "the durable name handled \(outcome.handled) in the agent, then \(again) (\(outcome.line))")
                case "queue":
                    try await checkQueue(setting, outcome, jobs: extra, check: check)
                case "respond":
                    try await checkRequests(requests, setting, outcome, check: check)
                case "request":
                    try await checkRequester(setting, outcome, check: check)
                default:
                    break
                }
                await #expect(try setting.wormhole.message(withIdentifier: "walk", as: String.self) == "s")
                setting.token.cancel()
                if !problems.isEmpty {
                    violations.append("\(scenario) \(kind) at call \(at) of \(total): " + problems.joined(separator: "; "))
                    print("fault walk violation: \(violations.last!)")
                    if ProcessInfo.processInfo.environment["WORMHOLE_FAULT_WALK"] != nil {
                        let names = (try? FileManager.default.contentsOfDirectory(atPath: setting.directory.path)) ?? []
                        for name in names.sorted() {
                            let attributes = try? FileManager.default.attributesOfItem(atPath: setting.directory.file(name))
                            print("  \(name) \(attributes?[.size] ?? "?") inode \(attributes?[.systemFileNumber] ?? "?")")
                        }
                        let claims = (try? FileManager.default.contentsOfDirectory(atPath: setting.directory.file(".listeners/walk"))) ?? []
                        print("  claims: \(claims)")
                        if let data = FileManager.default.contents(atPath: setting.directory.file("walk.wormhole")),
                           let header = try? data.withUnsafeBytes({ try LogFormat.Header.decode($0, path: "walk") }) {
                            print("  header: logID \(header.logID) base \(header.baseSequence) cleared \(header.clearedThrough)")
                        }
                    }
                }
            }
        }
        print("fault walk (\(scenario), \(kind)): \(total) calls, \(runs) runs; faults that showed (an error, a report or a death): \(faulted); \(checks) invariant checks, \(violations.count) violations")
        #expect(violations.isEmpty, "\(violations.prefix(10).joined(separator: "\n"))")
    }

    /// How many messages of a batch a failed pass says were passed ("2 of the 3 messages ... were passed"); 0 when it says none.
    static func passedCount(_ line: String) -> Int {
        guard let range = line.range(of: " of the 3 messages") else { return 0 }
        return Int(line[..<range.lowerBound].split(separator: " ").last ?? "") ?? 0
    }

    /// Whether `spec` ("7", or "3-9") takes the call `at`.
    static func selects(_ spec: String, _ at: Int) -> Bool {
        let bounds = spec.split(separator: "-").compactMap { Int($0) }
        return bounds.count == 2 ? (bounds[0]...bounds[1]).contains(at) : bounds.first == at
    }

    /// The work queue "q" after the agent's member: a member here takes the rest, until
    /// "s". Every job handled, in order by each member; one handled twice only when the
    /// agent's member died or could not join, and at most one: a member that lives on
    /// repeats nothing, whatever fault it was told of (a take that failed is handed to it
    /// again; an acknowledgement that could not be stored is stored with its next take,
    /// Protocol.md §18.3); nothing left in flight by a member that lives on, none lost,
    /// every job acknowledged once.
    private func checkQueue(_ setting: Setting, _ outcome: Outcome, jobs: [String],
                            check: (Bool, @autoclosure () -> String) -> Void) async throws {
        if !outcome.died, !outcome.failed, outcome.handled.count == jobs.count {
            // It handled all three and lived on: it holds nothing once their handlers returned.
            check(outcome.inFlight == 0, "the agent's member handled \(outcome.handled) and still held \(outcome.inFlight ?? -1) (\(outcome.line))")
        }
        // A fault that did not end it was reported, and it recovered: it took again and
        // handled every job while it lived (in order; the one in hand at the fault again).
        check(outcome.died || outcome.failed || outcome.handled == jobs || outcome.reportedErrors > 0 && Set(outcome.handled) == Set(jobs),
              "the agent's member handled \(outcome.handled) while it lived (\(outcome.line))")
        let got = Collector<String>()
        // No retry delay: the walk checks that no job is lost or repeated, not when.
        let options = WorkQueueOptions(startingFrom: .after(sequence: 4), redeliveryInterval: 0.05, retryDelay: 0)
        let member = try setting.wormhole.listenForMessage(withIdentifier: "walk", as: String.self, workQueue: "q", options: options) { got.append($0) }
        _ = await eventually(seconds: 10) { got.all.contains("s") }
        member.cancel()
        let here = got.all
        let all = outcome.handled + here
        let expected = jobs + ["s"]
        check(Set(all) == Set(expected), "the agent's member handled \(outcome.handled), the next \(here): not every job once")
        check(here == here.sorted(), "the member after the agent took \(here) out of order")
        let repeated = all.count - Set(all).count
        check(repeated <= (outcome.died || outcome.failed ? 1 : 0), "\(repeated) jobs handled twice: \(outcome.handled) then \(here) (\(outcome.line))")
        let status = try setting.wormhole.workQueues(identifier: "walk").first { $0.name == "q" }
        check(status.map { $0.inFlight == 0 && $0.pending == 0 && $0.acknowledged == UInt64(expected.count) && $0.lost == 0 && $0.deadLettered == 0 } ?? false,
              "the queue's status afterwards: \(status.map { "\($0)" } ?? "none")")
    }

    /// The "respond" scenario's requests: q1, q2 and q3 to "ask", made at once as the
    /// agent's responder starts (`ask`), 15 s to answer each.
    final class Requests: @unchecked Sendable {
        let wormhole: Wormhole?
        private var tasks: [Task<Result<String, WormholeError>, Never>] = []
        init(_ wormhole: Wormhole?) { self.wormhole = wormhole }

        var ask: (() -> Void)? {
            guard let wormhole else { return nil }
            return { [self] in
                tasks = (1...3).map { index in
                    Task { () -> Result<String, WormholeError> in
                        do throws(WormholeError) {
                            return .success(try await wormhole.request("q\(index)", identifier: "ask", as: String.self, timeout: 15))
                        } catch {
                            return .failure(error)
                        }
                    }
                }
            }
        }

        /// Once the agent has ended, a responder here answers what it left (as another
        /// responder of a deployment would); then what each request got.
        func answers(after setting: Setting) async throws -> [Result<String, WormholeError>] {
            guard let wormhole else { return [] }
            let backup = try wormhole.respondToRequests(withIdentifier: "ask", as: String.self) { "re:\($0)" }
            defer { backup.cancel() }
            var results: [Result<String, WormholeError>] = []
            for task in tasks { results.append(await task.value) }
            // A request asked after it all is answered.
            do throws(WormholeError) {
                results.append(.success(try await wormhole.request("after", identifier: "ask", as: String.self, timeout: 15)))
            } catch {
                results.append(.failure(error))
            }
            return results
        }
    }

    /// Requests to a responder that faulted, then ended: each is answered with its own
    /// reply (by the agent's responder, or by the one that took over), never another's;
    /// a fault the agent did not report and that did not end it leaves every request to
    /// it; the responders' queue ends with nothing in flight, none lost or dead-lettered.
    private func checkRequests(_ requests: Requests, _ setting: Setting, _ outcome: Outcome,
                               check: (Bool, @autoclosure () -> String) -> Void) async throws {
        let results = try await requests.answers(after: setting)
        let expected = ["re:q1", "re:q2", "re:q3", "re:after"]
        let got = results.map { result in
            switch result {
            case .success(let reply): reply
            case .failure(let error): "error \(error.code): \(error.message)"
            }
        }
        // A reply that the fault kept from passing reaches its requester as an error reply
        // saying so (the request is not run again): one request at most, of the agent's.
        let unpassable = "error requestFailed: the responder of 'ask' failed: its reply could not be passed: "
        check(got.count == expected.count && zip(got, expected).allSatisfy { $0 == $1 || $1 != "re:after" && $0.hasPrefix(unpassable) },
              "the requests got \(got) (the agent answered \(outcome.handled); \(outcome.line))")
        check(got.filter { $0.hasPrefix(unpassable) }.count <= 1, "more than one reply failed for one fault: \(got) (\(outcome.line))")
        if !outcome.died, !outcome.failed {
            // A fault that did not end it, reported or not, did not stop it: it answered all three.
            check(Set(outcome.handled) == ["q1", "q2", "q3"], "the agent's responder answered \(outcome.handled) while it lived (\(outcome.line))")
        }
        if !outcome.died, !outcome.failed, Set(outcome.handled) == ["q1", "q2", "q3"] {
            check(outcome.inFlight == 0, "the agent's responder answered all three and still held \(outcome.inFlight ?? -1) (\(outcome.line))")
        }
        _ = await eventually(seconds: 5) { (try? setting.wormhole.workQueues(identifier: "ask").first?.inFlight) == 0 }
        let status = try setting.wormhole.workQueues(identifier: "ask").first
        check(status.map { $0.inFlight == 0 && $0.pending == 0 && $0.lost == 0 && $0.deadLettered == 0 } ?? false,
              "the responders' queue afterwards: \(status.map { "\($0)" } ?? "none")")
    }

    /// The test's responder of "ask", for the "request" scenario.
    static func respond(_ wormhole: Wormhole) throws -> WorkQueueMember {
        try wormhole.respondToRequests(withIdentifier: "ask", as: String.self) { "re:\($0)" }
    }

    /// A requester that faulted: each request got its own reply, or failed at once with
    /// the fault's error; none waited for its timeout (a reply that came and was missed),
    /// and the requests after a failed one were answered; the responders' queue ends with
    /// nothing in flight.
    private func checkRequester(_ setting: Setting, _ outcome: Outcome,
                                check: (Bool, @autoclosure () -> String) -> Void) async throws {
        let expected = ["re:q1", "re:q2", "re:q3"]
        if outcome.died {
            check(outcome.handled.enumerated().allSatisfy { $1 == expected[$0] || $1.hasPrefix("error:") && $1 != "error:timedOut" },
                  "the requests got \(outcome.handled) before the agent ended")
        } else {
            check(outcome.handled.count == 3 && outcome.handled.enumerated().allSatisfy { $1 == expected[$0] || $1.hasPrefix("error:") && $1 != "error:timedOut" },
                  "the requests got \(outcome.handled) (\(outcome.line))")
            check(outcome.handled.filter { $0.hasPrefix("error:") }.count <= 1, "more than one request failed for one fault: \(outcome.handled) (\(outcome.line))")
            if let failed = outcome.handled.firstIndex(where: { $0.hasPrefix("error:") }) {
                check(Array(outcome.handled[(failed + 1)...]) == Array(expected[(failed + 1)...]), "the requests after a failed one got \(outcome.handled)")
            }
        }
        _ = await eventually(seconds: 5) { (try? setting.wormhole.workQueues(identifier: "ask").first?.inFlight) == 0 }
        let status = try setting.wormhole.workQueues(identifier: "ask").first
        check(status.map { $0.inFlight == 0 && $0.lost == 0 && $0.deadLettered == 0 } ?? false,
              "the responders' queue afterwards: \(status.map { "\($0)" } ?? "none")")
    }

    /// The agent's durable name "agent", resumed here until it has handled "s".
    private func resumeAgentDurable(_ setting: Setting) async throws -> [String] {
        let got = Collector<String>()
        let token = try setting.wormhole.listenForMessage(withIdentifier: "walk", as: String.self, durableName: "agent") { got.append($0) }
        defer { token.cancel() }
        _ = await eventually(seconds: 10) { got.all.contains("s") }
        return got.all
    }
}
