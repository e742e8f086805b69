#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
import ExampleSupport
import Foundation
import Synchronization
import Wormhole

/// The widget: shows the latest count at once, follows it live, and has one button.
struct Widget: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the widget: it shows the app's latest count and sends its button back.",
        discussion: """
            Press Enter to press the widget's button (reset the count); Ctrl-D or q closes \
            the widget. With standard input from a pipe, each line presses the button and \
            the widget stays until it is stopped.
            """)

    @OptionGroup var container: SharedContainer

    @Flag(help: "Show the latest count and exit.")
    var once = false

    @Flag(help: "Ask the running app for its count (a request, answered by the app) and exit.")
    var ask = false

    @Flag(help: "Press the button once at launch.")
    var press = false

    @Option(help: ArgumentHelp("Exit after showing this many counts.", valueName: "count"))
    var updates: Int?

    func validate() throws {
        if let updates, updates < 1 { throw ValidationError("--updates must be at least 1.") }
    }

    func run() async throws {
        try await failing {
            let wormhole = try container.makeWormhole()
            if press { try pressButton(wormhole) }
            if ask {
                do {
                    let snapshot = try await wormhole.request(StateQuery(), identifier: Identifiers.state, as: StepsSnapshot.self, timeout: 2)
                    say("widget: the app says \(snapshot.summary)")
                } catch let error as WormholeError where error.code == .timedOut {
                    say("widget: the app did not answer; is it running? (today-widget app)")
                    throw ExitCode(2)
                }
                return
            }
            if once {
                guard let snapshot = try await wormhole.message(withIdentifier: Identifiers.snapshot, as: StepsSnapshot.self) else {
                    say("widget: no steps yet; start the app: today-widget app")
                    return
                }
                say("widget: \(snapshot.summary)")
                return
            }

            let ending = Ending()
            let typing = isatty(STDIN_FILENO) == 1
            if typing { say("widget: [ Reset ] press Enter to reset the count; q or Ctrl-D closes the widget") }
            let shown = Atomic<Int>(0)
            let limit = updates
            // .latest: the current value at once (a widget never starts blank), then live.
            let token = try wormhole.listenForRecords(withIdentifier: Identifiers.snapshot, startingFrom: .latest) { record in
                guard let snapshot = try? record.decode(as: StepsSnapshot.self) else { return }
                say("widget: \(snapshot.summary) · updated \(clock(record.date))")
                let count = shown.add(1, ordering: .relaxed).newValue
                if let limit, count >= limit { ending.end() }
            }
            defer { token.cancel() }
            if try await wormhole.record(withIdentifier: Identifiers.snapshot) == nil {
                say("widget: no steps yet; waiting for the app (today-widget app)")
            }

            let input = Thread {
                while let line = readLine() {
                    if typing && (line == "q" || line == "quit") { break }
                    do { try pressButton(wormhole) } catch { say("widget: \(error)") }
                }
                // A person closing the input closes the widget; a pipe that ends does not.
                if typing { ending.end() }
            }
            input.start()
            await ending.wait()
        }
    }

    func pressButton(_ wormhole: Wormhole) throws {
        say("widget: pressed [ Reset ]")
        try wormhole.passMessage(WidgetAction(kind: .reset), identifier: Identifiers.action)
    }
}
