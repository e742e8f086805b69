import ArgumentParser
import Foundation
import Wormhole

/// What the containing app shares with its widget: today's step count. Passed as JSON
/// under ``Identifiers/snapshot``; the widget shows the latest one.
struct StepsSnapshot: Codable, Sendable, Equatable {
    var steps: Int
    var goal: Int
    /// The sequence number of the last widget action the app has handled, so that a
    /// restarted app picks up the taps made while it was not running.
    var handledAction: UInt64

    /// `4,210 of 10,000 steps (42%)`.
    var summary: String {
        let percent = goal > 0 ? steps * 100 / goal : 0
        return "\(Self.grouped(steps)) of \(Self.grouped(goal)) steps (\(percent)%)"
    }

    static func grouped(_ value: Int) -> String {
        var digits = String(value)
        var index = digits.count - 3
        while index > 0 {
            digits.insert(",", at: digits.index(digits.startIndex, offsetBy: index))
            index -= 3
        }
        return digits
    }
}

/// What the widget's button sends back to the app, under ``Identifiers/action``.
struct WidgetAction: Codable, Sendable, Equatable {
    enum Kind: String, Codable, Sendable {
        /// Start the day's count again.
        case reset
    }

    var kind: Kind
}

/// The widget's question to the running app: "what is the count right now?" (a request
/// under ``Identifiers/state``; the reply is a ``StepsSnapshot``).
struct StateQuery: Codable, Sendable, Equatable {
    var asker = "widget"
}

/// The identifiers the app and its widget agree on.
enum Identifiers {
    static let snapshot = "today.steps"
    static let action = "today.widget-action"
    /// Requests for the app's current state (request/reply).
    static let state = "today.state"
}

/// The app group shared by the app and its widget, as on iOS.
struct SharedContainer: ParsableArguments {
    @Option(help: ArgumentHelp("The application group the app and the widget share.", valueName: "application-group-identifier"))
    var group = "group.example.today"

    @Option(help: ArgumentHelp("Use this directory instead of the group's container.", valueName: "path"))
    var directory: String?

    func makeWormhole() throws -> Wormhole {
        if let directory { return try Wormhole(directory: directory) }
        return try Wormhole(applicationGroupIdentifier: group, optionalDirectory: "wormhole")
    }
}

/// `HH:mm:ss` in local time.
func clock(_ date: Date) -> String {
    let parts = Calendar.current.dateComponents([.hour, .minute, .second], from: date)
    return String(format: "%02d:%02d:%02d", parts.hour ?? 0, parts.minute ?? 0, parts.second ?? 0)
}

/// Writes a line to standard output at once, so that it reaches a pipe or a log.
func say(_ line: String) {
    try? FileHandle.standardOutput.write(contentsOf: Data((line + "\n").utf8))
}

/// Reports a library error on standard error and exits with status 1.
func failing<T>(_ body: () async throws -> T) async throws -> T {
    do {
        return try await body()
    } catch let error as WormholeError {
        FileHandle.standardError.write(Data("today-widget: \(error)\n".utf8))
        throw ExitCode.failure
    }
}
