import Foundation
import Testing
@_spi(Backend) @testable import Wormhole
@_spi(Backend) @testable import WormholeCore
@_spi(Backend) @testable import WormholeFiles
import WormholeTestSupport

/// Work queues across the boundaries an operator meets: members in another PID namespace
/// (a container sharing the volume), and a full disk under the queue's files.
@Suite("Work queues across PID namespaces and a full disk")
struct WorkQueueBoundaryTests {
    @Test("members in another PID namespace share a queue with members outside it: each job handled once, and the job of a member SIGKILLed inside the namespace goes to another member",
          .enabled(if: geteuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/unshare"), "unshare --pid needs root"),
          .timeLimit(.minutes(3)))
    func membersInAnotherPIDNamespace() async throws {
        let directory = TemporaryDirectory()
        let container = directory.file("c")
        let wormhole = try Wormhole(directory: container)
        let total = scaled(300)
        let outputs = ["outside0", "outside1", "inside"].map { directory.file("\($0).txt") }
        // Each job takes 30 ms after its line is written: a member killed just after it
        // wrote a line holds that job.
        func worker(_ output: String) -> [String] { ["worker", container, "jobs", "workers", output, "-", "-", "-", "30"] }
        var members = try (0..<2).map { try Agent.start(worker(outputs[$0])) }
        var inside = try Self.inPIDNamespace(worker(outputs[2]))
        for output in outputs { #expect(await waitForFile(output + ".ready")) }
        let joined = try #require(try wormhole.workQueues(identifier: "jobs").first)
        #expect(joined.members.count == 3, "\(joined.members)")
        let ours = Syscalls.pidNamespace
        #expect(joined.members.filter { $0.pidNamespace != ours }.count == 1, "one member in another PID namespace: \(joined.members)")

        _ = try wormhole.passMessages((1...total).map { "job-\($0)" }, identifier: "jobs")
        // Killed from outside its namespace, by its pid here, just after it took a job.
        func lines(_ path: String) -> [String] {
            ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
        }
        var held: String?
        for _ in 0..<20_000 {
            let seen = lines(outputs[2])
            if seen.count >= 3 {
                let child = try #require(Self.child(of: inside.processIdentifier), "the member inside the namespace")
                #expect(kill(child, SIGKILL) == 0)
                held = seen.last?.split(separator: " ", maxSplits: 2).last.map(String.init)
                break
            }
            try await Task.sleep(for: .milliseconds(1))
        }
        inside.waitUntilExit()
        let job = try #require(held, "the member inside the namespace took jobs")
        let before = lines(outputs[2]).count
        // Another member joins inside a namespace of its own; the queue goes on.
        inside = try Self.inPIDNamespace(worker(outputs[2]))
        func acknowledged() -> UInt64 { (try? wormhole.workQueues(identifier: "jobs").first?.acknowledged) ?? 0 }
        for _ in 0..<1200 where acknowledged() < UInt64(total) { try await Task.sleep(for: .milliseconds(100)) }
        let status = try #require(try wormhole.workQueues(identifier: "jobs").first)
        for process in members + [inside] {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        members = []

        let handled = try WorkQueueProcessTests.workerLines(outputs)
        #expect(handled.allSatisfy { $0.payload.hasPrefix("job-") }, "no error reported: \(handled.filter { !$0.payload.hasPrefix("job-") }.prefix(3))")
        #expect(Set(handled.map(\.payload)) == Set((1...total).map { "job-\($0)" }), "every job handled")
        #expect(handled.count - total <= 1, "only the job the killed member held was handled twice: \(handled.count) lines for \(total) jobs")
        // A member always holds a job while jobs remain (its acknowledgement and its next
        // take are one step): the one it held when killed is handed out again, once. It is
        // the last it wrote, or, when the kill came after that job's acknowledgement, the
        // next, taken but not yet written.
        let again = handled.filter { $0.deliveries == 2 }
        #expect(again.count == 1, "one job handed out again: \(again)")
        let killedWrote = Set(lines(outputs[2]).prefix(before).compactMap { $0.split(separator: " ", maxSplits: 2).last.map(String.init) })
        #expect(again.first.map { $0.payload == job || !killedWrote.contains($0.payload) } == true,
                "\(again.first?.payload ?? "none"), handed out again, was held by the member killed (its last line: \(job))")
        #expect(status.acknowledged == UInt64(total) && status.pending == 0 && status.inFlight == 0 && status.lost == 0 && status.deadLettered == 0,
                "\(status)")
        print("PID namespaces: \(total) jobs, 2 members outside and 1 inside; the one inside killed holding \(job) after \(before) lines; acknowledged \(status.acknowledged), handled \(handled.count) times")
    }

    /// The test agent in a PID namespace (and a mount namespace with its own /proc) of
    /// its own, as a container's process is.
    private static func inPIDNamespace(_ arguments: [String]) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/unshare")
        process.arguments = ["--pid", "--fork", "--kill-child", "--mount-proc", Agent.path] + arguments
        try process.run()
        return process
    }

    /// The process that `unshare --fork` started: its pid in this namespace.
    private static func child(of pid: Int32) -> Int32? {
        for _ in 0..<500 {
            if let text = try? String(contentsOfFile: "/proc/\(pid)/task/\(pid)/children", encoding: .utf8),
               let child = text.split(separator: " ").first.flatMap({ Int32($0) }) {
                return child
            }
            usleep(10_000)
        }
        return nil
    }

    @Test("a full disk under a queue: a new queue is refused with a clear error; members report the dead letters they cannot pass, lose no message, and move them once space returns",
          .enabled(if: geteuid() == 0, "mounting a small tmpfs needs root"), .timeLimit(.minutes(1)))
    func fullDiskUnderAQueue() async throws {
        let small = try SmallFilesystem()
        defer { withExtendedLifetime(small) {} }
        let mountPoint = small.path
        let wormhole = try Wormhole(directory: mountPoint + "/c")
        let jobs = (1...20).map { "job-\($0)" }
        let poisoned: Set = ["job-5", "job-13"]
        // The queue exists (its state written) before the jobs come and the disk fills.
        try wormhole.listenForMessage(withIdentifier: "jobs", as: String.self, workQueue: "workers") { _ in }.cancel()
        _ = try wormhole.passMessages(jobs, identifier: "jobs")
        // Every block taken; inodes to spare.
        let filler = try small.fill()

        let refused = #expect(throws: WormholeError.self) {
            try wormhole.listenForMessage(withIdentifier: "jobs", as: String.self, workQueue: "other") { _ in }
        }
        #expect(refused?.errno == .noSpace)
        #expect(refused?.description.contains("the filesystem is full") == true && refused?.description.contains("work queue") == true,
                "\(String(describing: refused))")
        #expect(!FileManager.default.fileExists(atPath: mountPoint + "/c/.queues/jobs/other/state"), "no state half made")
        #expect(try wormhole.workQueues(identifier: "jobs").map(\.name) == ["workers"], "the queue that could not be made is not listed, as damaged or otherwise")

        // Two members; the poisoned jobs fail every time and have nowhere to go.
        struct Poisoned: Error {}
        let handled = Collector<String>(), errors = Collector<WormholeError>()
        let options = WorkQueueOptions(maximumDeliveries: 2, startingFrom: .history, redeliveryInterval: 0.05)
        let members = try (0..<2).map { _ in
            try wormhole.listenForMessage(withIdentifier: "jobs", as: String.self, workQueue: "workers", options: options,
                                          onError: { errors.append($0) }) { job in
                if poisoned.contains(job) { throw Poisoned() }
                handled.append(job)
            }
        }
        defer { for member in members { member.cancel() } }
        #expect(Set(await handled.wait(for: jobs.count - poisoned.count)) == Set(jobs).subtracting(poisoned), "the other jobs are handled")
        #expect(await eventually(seconds: 10) { errors.all.contains { $0.errno == .noSpace } })
        let reported = try #require(errors.all.first { $0.errno == .noSpace }, "\(errors.all)")
        #expect(reported.description.contains("dead letters") && reported.description.contains("the filesystem is full")
                && reported.description.contains("stays in the queue"), "\(reported)")
        // The report comes from inside a take, which stores the state (the last job's
        // acknowledgement with it) once it is done: looked at until it is.
        let kept = { () -> Bool in
            guard let status = try? wormhole.workQueues(identifier: "jobs").first(where: { $0.name == "workers" }) else { return false }
            return status.pending + UInt64(status.inFlight) == 2 && status.acknowledged == 18 && status.deadLettered == 0 && status.lost == 0
        }
        var status = try #require(try wormhole.workQueues(identifier: "jobs").first { $0.name == "workers" })
        #expect(await eventually(seconds: 10, kept), "the poisoned jobs are kept, not lost: \(status)")

        // Space returns: the dead letters are passed, and new jobs flow.
        try FileManager.default.removeItem(atPath: filler)
        try await wormhole.passMessage("job-21", identifier: "jobs")
        #expect(await handled.wait(for: jobs.count - poisoned.count + 1).contains("job-21"))
        #expect(await eventually(seconds: 10) { (try? wormhole.workQueues(identifier: "jobs").first { $0.name == "workers" }?.deadLettered) == 2 })
        // job-21's acknowledgement is stored with its member's next take (one locked step),
        // a redelivery interval later: looked at until it is.
        let settled = { () -> Bool in
            guard let status = try? wormhole.workQueues(identifier: "jobs").first(where: { $0.name == "workers" }) else { return false }
            return status.deadLettered == 2 && status.acknowledged == 19 && status.pending == 0 && status.inFlight == 0 && status.lost == 0
        }
        status = try #require(try wormhole.workQueues(identifier: "jobs").first { $0.name == "workers" })
        #expect(await eventually(seconds: 10, settled), "\(status)")
        let letters = Collector<WormholeDeadLetter>()
        let reader = try wormhole.listenForMessage(withIdentifier: "jobs.dead-letters", as: WormholeDeadLetter.self, startingFrom: .history) {
            letters.append($0)
        }
        defer { reader.cancel() }
        #expect(Set(await letters.wait(for: 2).map { String(decoding: $0.payload, as: UTF8.self) }) == poisoned, "\(letters.all)")
        #expect(handled.all.count == 19, "each job handled once: \(handled.all)")
    }
}
