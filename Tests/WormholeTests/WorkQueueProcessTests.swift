import Foundation
import Testing
@_spi(Backend) @testable import Wormhole
@_spi(Backend) @testable import WormholeCore
@_spi(Backend) @testable import WormholeFiles
import WormholeTestSupport

/// Work queues and request/reply across real processes, with members killed by SIGKILL.
@Suite("Work queues across processes")
struct WorkQueueProcessTests {
    /// The lines "sequence deliveries payload" that worker agents wrote.
    static func workerLines(_ paths: [String]) throws -> [(sequence: UInt64, deliveries: Int, payload: String)] {
        try paths.flatMap { path -> [(UInt64, Int, String)] in
            guard FileManager.default.fileExists(atPath: path) else { return [] }
            return try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n").map { line in
                let parts = line.split(separator: " ", maxSplits: 2)
                return (UInt64(parts[0]) ?? 0, parts.count > 1 ? Int(parts[1]) ?? 0 : 0, parts.count > 2 ? String(parts[2]) : String(line))
            }
        }
    }

    @Test("3 workers x 10,000 jobs (1,000 on PostgreSQL), workers killed with SIGKILL at random instants: every job handled, each acknowledged once, redeliveries no more than kills",
          .timeLimit(.minutes(5)), arguments: Backend.all)
    func killedWorkersLoseNoJob(backend: Backend) async throws {
        let directory = TemporaryDirectory()
        let store = try backend.makeStore()
        let container = store.location
        let wormhole = try store.wormhole()
        // On PostgreSQL each job is a few round trips and commits (pass, take, acknowledge),
        // and a worker started again connects first: with a kill every few tens of
        // milliseconds, 2,000 jobs took 40 s on a busy 2-core machine. 1,000 keep the
        // kills and the contention.
        let total = scaled(backend == .postgres ? 1_000 : 10_000)
        let outputs = (0..<3).map { directory.file("worker\($0).txt") }
        var workers: [Process] = []
        for output in outputs {
            workers.append(try Agent.start(["worker", container, "jobs", "workers", output]))
            #expect(await waitForFile(output + ".ready"))
        }
        let started = ContinuousClock.now
        let producer = Task.detached {
            for index in 1...total { try await wormhole.passMessage("job-\(index)", identifier: "jobs") }
        }
        var kills = 0
        var generator = SystemRandomNumberGenerator()
        func acknowledged() -> UInt64 { (try? wormhole.workQueues(identifier: "jobs").first?.acknowledged) ?? 0 }
        while acknowledged() < UInt64(total) && ContinuousClock.now - started < .seconds(200) {
            try await Task.sleep(for: .milliseconds(Int.random(in: 5...40, using: &generator)))
            guard acknowledged() < UInt64(total) else { break }
            let victim = Int.random(in: 0..<3, using: &generator)
            kill(workers[victim].processIdentifier, SIGKILL)
            workers[victim].waitUntilExit()
            kills += 1
            workers[victim] = try Agent.start(["worker", container, "jobs", "workers", outputs[victim]])
        }
        try await producer.value
        let elapsed = (ContinuousClock.now - started).inSeconds
        let status = try #require(try wormhole.workQueues(identifier: "jobs").first)
        for worker in workers {
            kill(worker.processIdentifier, SIGKILL)
            worker.waitUntilExit()
        }
        let lines = try Self.workerLines(outputs)
        let taken = lines.filter { $0.payload.hasPrefix("job-") }
        #expect(lines.count == taken.count, "no error reported: \(lines.filter { !$0.payload.hasPrefix("job-") }.prefix(3))")
        #expect(Set(taken.map(\.payload)) == Set((1...total).map { "job-\($0)" }), "every job handled")
        let repeated = taken.count - total
        let redelivered = taken.filter { $0.deliveries > 1 }.count
        #expect(repeated <= kills && redelivered <= kills, "redeliveries \(redelivered), repeats \(repeated), kills \(kills)")
        #expect(status.acknowledged == UInt64(total), "each job acknowledged exactly once")
        #expect(status.pending == 0 && status.inFlight == 0 && status.deadLettered == 0 && status.lost == 0)
        print("work queue kill test (\(backend)): \(total) jobs, 3 worker processes, \(kills) SIGKILLs; handled \(Set(taken.map(\.payload)).count), acknowledged \(status.acknowledged), redelivered \(redelivered), taken twice \(repeated); \(String(format: "%.1f", elapsed)) s")
    }
}

extension WorkQueueProcessTests {
    @Test("4 requesters x 1,000 requests (250 on PostgreSQL) to 2 responders, one killed with SIGKILL: every request answered or failed with a clear error within its timeout, none answered to the wrong requester",
          .timeLimit(.minutes(5)), arguments: Backend.all)
    func requestsSurviveAKilledResponder(backend: Backend) async throws {
        let directory = TemporaryDirectory()
        let store = try backend.makeStore()
        let container = store.location
        _ = try store.wormhole()
        // On PostgreSQL a request and its reply are some ten statements: 4 x 1,000 took 87 s
        // with the one responder left on a busy 2-core machine; 250 each keep the kill.
        let count = scaled(backend == .postgres ? 250 : 1_000), timeout = 5.0
        let responders = try ["r1", "r2"].map { name in try Agent.start(["respond", container, "ask", name, directory.file(name + ".ready")]) }
        for name in ["r1", "r2"] { #expect(await waitForFile(directory.file(name + ".ready"))) }
        let outputs = (0..<4).map { directory.file("requester\($0).txt") }
        let started = ContinuousClock.now
        let requesters = try outputs.enumerated().map { index, output in
            try Agent.start(["request", container, "ask", "\(count)", "q\(index)", output, "\(timeout)"])
        }
        // Killed at a random instant while the requests flow (agents that talk to a
        // server take longer to start).
        try await Task.sleep(for: .milliseconds(backend == .postgres ? Int.random(in: 300...1_500) : Int.random(in: 50...400)))
        let victim = Int.random(in: 0..<2)
        kill(responders[victim].processIdentifier, SIGKILL)
        responders[victim].waitUntilExit()
        for requester in requesters { #expect(await waitForExit(requester) == 0) }
        let elapsed = (ContinuousClock.now - started).inSeconds
        kill(responders[1 - victim].processIdentifier, SIGKILL)
        responders[1 - victim].waitUntilExit()
        var answered = 0, failed = 0, slowest = 0, byVictim = 0
        for (index, output) in outputs.enumerated() {
            let lines = try String(contentsOfFile: output, encoding: .utf8).split(separator: "\n")
            #expect(lines.count == count)
            for (number, line) in lines.enumerated() {
                let parts = line.split(separator: " ")
                #expect(parts[0] == "\(number + 1)")
                let milliseconds = Int(parts[3]) ?? .max
                slowest = max(slowest, milliseconds)
                if parts[1] == "ok" {
                    answered += 1
                    let reply = parts[2].split(separator: ":", maxSplits: 1)
                    #expect(reply.count == 2 && reply[1] == "q\(index):\(number + 1)", "a reply to its own request: \(line)")
                    if reply[0] == (victim == 0 ? "r1" : "r2") { byVictim += 1 }
                } else {
                    failed += 1
                    #expect(parts[2] == "timedOut" && line.contains("did not answer in time"), "a clear error: \(line)")
                }
                #expect(milliseconds <= Int(timeout * 1_000) + 1_000, "within its timeout: \(line)")
            }
        }
        #expect(answered + failed == 4 * count)
        print("request kill test (\(backend)): 4 requesters x \(count) requests, 2 responders, one killed (it had answered \(byVictim)); answered \(answered), failed \(failed) (timed out), slowest \(slowest) ms; \(String(format: "%.1f", elapsed)) s")
    }
}

extension WorkQueueProcessTests {
    @Test("a responder killed while it handles a request: another responder answers it; with none left, the requester gets its timeout error, never a hang",
          .timeLimit(.minutes(2)), arguments: Backend.all)
    func aResponderKilledMidRequest(backend: Backend) async throws {
        let directory = TemporaryDirectory()
        let store = try backend.makeStore()
        let wormhole = try store.wormhole()
        func held() -> Int { (try? wormhole.workQueues(identifier: "ask").first { $0.name == "responders" }?.inFlight) ?? 0 }
        func responder(_ name: String, hangingOn hang: String? = nil) async throws -> Process {
            let ready = directory.file(name + ".ready")
            let process = try Agent.start(["respond", store.location, "ask", name, ready] + (hang.map { [$0] } ?? []))
            #expect(await waitForFile(ready))
            return process
        }
        let hanging = try await responder("r1", hangingOn: "stuck")
        let answer = Task { try await wormhole.request("stuck", identifier: "ask", as: String.self, timeout: 30) }
        #expect(await eventually(seconds: 20) { held() == 1 }, "the hanging responder holds the request")
        let other = try await responder("r2")
        kill(hanging.processIdentifier, SIGKILL)
        hanging.waitUntilExit()
        #expect(try await answer.value == "r2:stuck")
        kill(other.processIdentifier, SIGKILL)
        other.waitUntilExit()
        // The only responder hangs on the request and is killed: nobody is left to answer.
        let last = try await responder("r3", hangingOn: "stuck")
        // Timed on a thread of its own (an awaiting task's resumption also waits for a
        // free thread of the shared pool, which the other suites keep busy).
        let failed = Task {
            await withCheckedContinuation { (done: CheckedContinuation<(WormholeError?, Duration), Never>) in
                Thread.detachNewThread {
                    let started = ContinuousClock.now
                    var failure: WormholeError?
                    do { _ = try wormhole.request("stuck", identifier: "ask", as: String.self, timeout: 4) } catch { failure = error as? WormholeError }
                    done.resume(returning: (failure, ContinuousClock.now - started))
                }
            }
        }
        #expect(await eventually(seconds: 3) { held() == 1 }, "the last responder holds the request")
        kill(last.processIdentifier, SIGKILL)
        last.waitUntilExit()
        let (error, waited) = await failed.value
        #expect(error?.code == .timedOut && error?.message.contains("no responder serves 'ask'") == true, "\(error?.message ?? "no error")")
        #expect(waited >= .seconds(4) && waited < .seconds(8), "failed after \(waited)")
    }
}
