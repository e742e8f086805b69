#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
import Foundation
import Synchronization
import Wormhole

/// The weather service of the weather example (README.md here): it publishes readings,
/// answers forecast requests and works the alert jobs' queue. Started on demand by a
/// systemd path unit (`wormhole activation`), it handles what started it and exits once
/// idle; the next message starts it again.
@main
struct WeatherService: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "weather-service",
        abstract: "The weather example's service: readings, forecasts and alert jobs through a wormhole.",
        discussion: """
            Examples (after swift build, from .build/debug):
              weather-service --group group.example.weather publish 21.5
              weather-service --group group.example.weather alerts --exit-when-idle 2
              weather-service --group group.example.weather forecast --exit-when-idle 2
            """,
        subcommands: [Publish.self, Alerts.self, Forecast.self])
}

enum Identifiers {
    static let current = "weather.current"
    static let forecast = "weather.forecast"
    static let alerts = "weather.alerts"
    static let alertsDone = "weather.alerts.done"
    static let queue = "alerts"
}

/// A reading, as published under `weather.current`.
struct Reading: Codable, Sendable {
    var celsius: Double
    var at: String
}

/// An alert job, as the widget submits it under `weather.alerts`.
struct AlertJob: Codable, Sendable {
    var job: Int
    var text: String
    /// How long the job takes (the service's `--job-seconds` when absent).
    var seconds: Double?
}

/// What the service passes under `weather.alerts.done` for each job it has done.
struct AlertDone: Codable, Sendable {
    var job: Int
    var pid: Int32
    var deliveries: Int
}

struct ForecastRequest: Codable, Sendable {
    var days: Int
}

struct ForecastReply: Codable, Sendable {
    var days: Int
    var summary: String
    var pid: Int32
}

struct Place: ParsableArguments {
    @Option(help: ArgumentHelp("The application group (default: WORMHOLE_GROUP, as the unit sets it).", valueName: "group"))
    var group: String?
    @Option(help: ArgumentHelp("Append what the service does to this file too, each line with the time.", valueName: "path"))
    var log: String?

    func makeWormhole() throws -> Wormhole {
        Log.path.withLock { $0 = log }
        guard let group = group ?? ProcessInfo.processInfo.environment["WORMHOLE_GROUP"] else {
            throw ValidationError("no group: give --group or set WORMHOLE_GROUP")
        }
        return try Wormhole(applicationGroupIdentifier: group)
    }
}

enum Log {
    static let path = Mutex<String?>(nil)
}

/// Says what the service does on standard output and, with `--log`, appends it to that
/// file with the time (seconds since 1970), in one write.
func say(_ line: String) {
    let text = "service[\(getpid())]: " + line + "\n"
    try? FileHandle.standardOutput.write(contentsOf: Data(text.utf8))
    guard let path = Log.path.withLock({ $0 }) else { return }
    let stamped = String(format: "%.3f ", Date().timeIntervalSince1970) + text
    let descriptor = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o644)
    guard descriptor >= 0 else { return }
    _ = stamped.utf8CString.withUnsafeBufferPointer { write(descriptor, $0.baseAddress, $0.count - 1) }
    close(descriptor)
}

struct Publish: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Publish one reading under weather.current.")
    @OptionGroup var place: Place
    @Argument(help: "The temperature, in degrees Celsius.") var celsius: Double

    func run() throws {
        let wormhole = try place.makeWormhole()
        let reading = Reading(celsius: celsius, at: ISO8601DateFormatter().string(from: Date()))
        try wormhole.passMessage(reading, identifier: Identifiers.current)
        say("published \(celsius) °C")
    }
}

struct Alerts: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Work the alert jobs' queue, then exit when idle.")
    @OptionGroup var place: Place
    @Option(help: ArgumentHelp("Exit once no job has come for this long.", valueName: "seconds")) var exitWhenIdle = 2.0
    @Option(help: ArgumentHelp("How long each job takes.", valueName: "seconds")) var jobSeconds = 0.2

    func run() throws {
        let wormhole = try place.makeWormhole()
        let jobTime = useconds_t(jobSeconds * 1_000_000)
        say("started: alerts")
        // A job counts as done once the handler returns: a service killed in the middle
        // of one leaves it to the next run, which receives it with its delivery count.
        let member = try wormhole.listenForRecords(withIdentifier: Identifiers.alerts, workQueue: Identifiers.queue,
                                                   onError: { say("error: \($0)") }) { record, deliveries in
            let job = try record.decode(as: AlertJob.self)
            say("job \(job.job) started (delivery \(deliveries)): \(job.text)")
            usleep(job.seconds.map { useconds_t($0 * 1_000_000) } ?? jobTime)
            try wormhole.passMessage(AlertDone(job: job.job, pid: getpid(), deliveries: deliveries), identifier: Identifiers.alertsDone)
            say("job \(job.job) done")
        }
        wormhole.waitUntilIdle(for: exitWhenIdle)
        member.cancel()
        say("idle for \(exitWhenIdle) s: exiting")
    }
}

struct Forecast: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Answer forecast requests, then exit when idle.")
    @OptionGroup var place: Place
    @Option(help: ArgumentHelp("Exit once no request has come for this long.", valueName: "seconds")) var exitWhenIdle = 2.0

    func run() throws {
        let wormhole = try place.makeWormhole()
        say("started: forecast")
        let responder = try wormhole.respondToRequests(withIdentifier: Identifiers.forecast, as: ForecastRequest.self,
                                             onError: { say("error: \($0)") }) { request in
            say("answering a forecast for \(request.days) days")
            return ForecastReply(days: request.days, summary: "sunny, then showers", pid: getpid())
        }
        wormhole.waitUntilIdle(for: exitWhenIdle)
        responder.cancel()
        say("idle for \(exitWhenIdle) s: exiting")
    }
}
