import ArgumentParser
import ExampleSupport
import Foundation
import Wormhole

/// A producer and workers sharing a work queue: each job to one worker, done once even
/// when a worker is killed in the middle of one; a poisoned job ends in the dead letters.
@main
struct JobQueue: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "job-queue",
        abstract: "A producer and workers sharing a work queue through a wormhole.",
        discussion: """
            Start three workers (each in its own terminal, or in the background), then the \
            producer; kill a worker in the middle of a job (kill -9): another worker does \
            that job. The poisoned job fails each time and, after its last try, goes to \
            the dead letters. 'results' says what was done.

            Examples (after swift build, from .build/debug):
              job-queue work --name w1 &
              job-queue work --name w2 &
              job-queue work --name w3 &
              job-queue produce --jobs 30 --poison 13
              job-queue results
            """,
        subcommands: [Produce.self, Work.self, Results.self])
}

/// A job as the producer passes it.
struct Job: Codable, Sendable {
    var number: Int
    var poisoned: Bool
}

/// What a worker passes when it has done a job.
struct JobDone: Codable, Sendable {
    var job: Int
    var worker: String
    var deliveries: Int
}

enum Identifiers {
    static let jobs = "jobs"
    static let done = "jobs.done"
    static let queue = "workers"
    static let deadLetters = "jobs.dead-letters"
}

/// Where the producer and the workers meet.
struct Place: ParsableArguments {
    @Option(help: ArgumentHelp("The shared directory (default: the group's container).", valueName: "path"))
    var directory: String?

    func makeWormhole() throws -> Wormhole {
        if let directory { return try Wormhole(directory: directory) }
        return try Wormhole(applicationGroupIdentifier: "group.example.jobs", optionalDirectory: "wormhole")
    }
}

func say(_ line: String) {
    try? FileHandle.standardOutput.write(contentsOf: Data((line + "\n").utf8))
}

struct Produce: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Pass jobs to the queue.")
    @OptionGroup var place: Place
    @Option(help: "How many jobs.") var jobs = 30
    @Option(help: ArgumentHelp("The number of a job that always fails.", valueName: "number")) var poison: Int?

    func validate() throws {
        if jobs < 1 { throw ValidationError("--jobs must be at least 1.") }
    }

    func run() async throws {
        let wormhole = try place.makeWormhole()
        for number in 1...jobs {
            try await wormhole.passMessage(Job(number: number, poisoned: number == poison), identifier: Identifiers.jobs)
        }
        say("producer: passed \(jobs) jobs" + (poison.map { " (job \($0) is poisoned)" } ?? ""))
    }
}

struct Work: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Take jobs from the queue until interrupted.")
    @OptionGroup var place: Place
    @Option(help: "This worker's name, in its reports.") var name = "worker-\(getpid())"
    @Option(help: ArgumentHelp("How long each job takes.", valueName: "milliseconds")) var jobTime = 200
    @Option(help: "Tries before a job goes to the dead letters.") var maxDeliveries = 3

    func run() async throws {
        let wormhole = try place.makeWormhole()
        struct Poisoned: Error, CustomStringConvertible {
            let number: Int
            var description: String { "job \(number) is poisoned" }
        }
        let ending = Ending()
        let options = WorkQueueOptions(maximumDeliveries: maxDeliveries, deadLetterIdentifier: Identifiers.deadLetters)
        let name = self.name, jobTime = self.jobTime
        let member = try wormhole.listenForRecords(withIdentifier: Identifiers.jobs, workQueue: Identifiers.queue, options: options,
                                                   onError: { say("\(name): \($0)") }) { record, deliveries in
            let job = try record.decode(as: Job.self)
            say("\(name): job \(job.number)" + (deliveries > 1 ? " (delivery \(deliveries))" : "") + "...")
            usleep(UInt32(jobTime) * 1_000)
            if job.poisoned {
                say("\(name): job \(job.number) failed")
                throw Poisoned(number: job.number)
            }
            try wormhole.passMessage(JobDone(job: job.number, worker: name, deliveries: deliveries), identifier: Identifiers.done)
            say("\(name): job \(job.number) done")
        }
        say("\(name): waiting for jobs (pid \(getpid()))")
        await ending.wait()
        member.cancel()
    }
}

struct Results: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Say which jobs were done, and what is in the dead letters.")
    @OptionGroup var place: Place
    @Option(help: "How many jobs were passed.") var jobs = 30

    func run() async throws {
        let wormhole = try place.makeWormhole()
        var done: [Int: [JobDone]] = [:]
        for record in try wormhole.retainedRecords(withIdentifier: Identifiers.done) {
            if let report = try? record.decode(as: JobDone.self) { done[report.job, default: []].append(report) }
        }
        var letters: [WormholeDeadLetter] = []
        for record in try wormhole.retainedRecords(withIdentifier: Identifiers.deadLetters) {
            if let letter = try? record.decode(as: WormholeDeadLetter.self) { letters.append(letter) }
        }
        let poisoned = Set(letters.compactMap { try? JSONDecoder().decode(Job.self, from: $0.payload).number })
        let missing = (1...jobs).filter { done[$0] == nil && !poisoned.contains($0) }
        let twice = done.filter { $0.value.count > 1 }.keys.sorted()
        say("results: \(done.count) of \(jobs) jobs done" + (missing.isEmpty ? "" : "; not done: \(missing)")
            + (twice.isEmpty ? "" : "; done twice: \(twice)"))
        for (job, reports) in done.sorted(by: { $0.key < $1.key }) where reports.contains(where: { $0.deliveries > 1 }) {
            say("results: job \(job) was done by \(reports.map(\.worker).joined(separator: ", ")) on delivery \(reports.map { String($0.deliveries) }.joined(separator: ", "))")
        }
        for letter in letters {
            say("results: dead letter: \(letter.identifier) #\(letter.sequence) after \(letter.deliveries) deliveries: \(letter.reason)")
        }
        let status = try wormhole.workQueues(identifier: Identifiers.jobs)
        for queue in status {
            say("results: queue '\(queue.name)': \(queue.members.count) members, \(queue.pending) pending, \(queue.inFlight) in flight, \(queue.acknowledged) acknowledged, \(queue.deadLettered) dead-lettered")
        }
    }
}

