import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
@_spi(Backend) import Wormhole

/// `wormhole observe <name>...`: prints each notification as it arrives.
struct Observe: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "observe",
        abstract: "Print a line each time one of the names is posted.",
        discussion: """
            Prints the name (or, with --state, the name and its state value) each time it \
            is posted. Notifications carry no payload and coalesce: several quick posts \
            may print one line. Sending a message to an identifier posts its name too.

            On a terminal it says on standard error where it observes; --verbose says so \
            in any case.

            Exit status: 0 when --count notifications arrived (or on a plain end); 2 when \
            --timeout passed first.

            Examples:
              wormhole observe refresh
              wormhole observe --state --count 1 --timeout 30 battery
            """)

    @Argument(help: "The names to observe.")
    var names: [String]

    @Option(name: .shortAndLong, help: "Exit after this many notifications.")
    var count: Int?

    @Option(name: .shortAndLong, help: ArgumentHelp("Stop observing after this many seconds; exit 2 if the notifications waited for did not all arrive.", valueName: "seconds"))
    var timeout: Double?

    @Flag(name: .long, help: "Print the name's state value after the name.")
    var state = false

    @Flag(name: .shortAndLong, help: "Say on standard error where it observes, once it observes (scripts can wait for that line).")
    var verbose = false

    @OptionGroup(title: "Container") var container: NotificationContainerOptions

    func validate() throws {
        if names.isEmpty {
            throw ValidationError("Name at least one notification to observe, such as 'wormhole observe refresh'.")
        }
        if let count, count < 1 {
            throw ValidationError("--count must be at least 1, not \(count).")
        }
        try Listen.validateTimeout(timeout)
    }

    func run() throws {
        try Failures.reported {
            // Signals first: a process out of descriptors must still stop on Ctrl-C.
            let session = try ListeningSession(limit: count)
            let center = try container.makeNotificationCenter()
            let showState = state
            var observations: [NotificationObservation] = []
            defer { observations.forEach { $0.cancel() } }
            var seen = Set<String>()
            for name in names where seen.insert(name).inserted {
                observations.append(try center.addObserver(forName: name, queue: session.queue, onError: { error in
                    session.finish(.failed("stopped observing '\(name)': \(error.description)"))
                }) { name in
                    session.admit {
                        if showState {
                            let value = (try? center.state(forName: name)).map(String.init) ?? "?"
                            Output.line("\(name) \(value)")
                        } else {
                            Output.line(name)
                        }
                    }
                })
            }
            // A person at a terminal sees where it observes, as with listen; a script asks
            // with --verbose.
            if verbose {
                Output.error("observing \(Listen.names(names)) in \(center.directory)")
            } else if Output.errorIsTerminal {
                Output.error("observing \(Listen.names(names)) in \(center.directory); Ctrl-C stops")
            }
            try session.finish(count: count, timeout: timeout, what: "notifications", names: Listen.names(names)) {
                observations.forEach { $0.cancel() }
            }
        }
    }
}
