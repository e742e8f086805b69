import ArgumentParser
import Foundation
import Synchronization
import Wormhole

/// The containing app: counts steps, shares each new count, and obeys the widget's button.
struct ContainingApp: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "app",
        abstract: "Run the containing app: it keeps updating today's step count.")

    @OptionGroup var container: SharedContainer

    @Option(help: ArgumentHelp("Seconds between updates.", valueName: "seconds"))
    var interval = 1.0

    @Option(help: ArgumentHelp("Steps added per update (random between 40 and 160 when not given).", valueName: "steps"))
    var increment: Int?

    @Option(help: "The daily goal.")
    var goal = 10_000

    @Option(help: ArgumentHelp("Stop after this many updates (runs until interrupted when not given).", valueName: "count"))
    var updates: Int?

    func validate() throws {
        guard interval > 0, interval.isFinite else { throw ValidationError("--interval must be a positive number of seconds.") }
        if let updates, updates < 1 { throw ValidationError("--updates must be at least 1.") }
        if let increment, increment < 0 { throw ValidationError("--increment may not be negative.") }
    }

    func run() async throws {
        try await failing {
            let wormhole = try container.makeWormhole()
            // Carry on from the last shared count: the store outlives the process.
            let restored = try await wormhole.message(withIdentifier: Identifiers.snapshot, as: StepsSnapshot.self)
            let model = StepsModel(wormhole: wormhole, snapshot: restored ?? StepsSnapshot(steps: 0, goal: goal, handledAction: 0))
            say("app: sharing in \(wormhole.directory ?? "?")" + (restored.map { "; restored \($0.summary)" } ?? ""))

            // Taps made while the app was not running are still in the store: the durable
            // listener "app" resumes after the last one it handled, so each is handled
            // once (the first run takes every tap kept). Taps and timer ticks take turns
            // on the model's queue.
            let token = try wormhole.listenForRecords(
                withIdentifier: Identifiers.action,
                durableName: "app",
                startingFrom: .history,
                queue: model.queue
            ) { record in
                guard let action = try? record.decode(as: WidgetAction.self) else { return }
                switch action.kind {
                case .reset:
                    say("app: the widget (pid \(record.processID)) pressed reset")
                    model.change("reset by the widget") { $0.steps = 0; $0.handledAction = record.sequence }
                }
            }
            defer { token.cancel() }

            model.queue.sync { model.change("started") { _ in } }
            var count = 0
            while updates.map({ count < $0 }) ?? true {
                try await Task.sleep(for: .seconds(interval))
                let added = increment ?? Int.random(in: 40...160)
                model.queue.sync { model.change("+\(added)") { $0.steps += added } }
                count += 1
            }
        }
    }
}

/// The app's state and the one queue on which it changes and is shared, so that the
/// counts it passes are in the order it made them.
final class StepsModel: Sendable {
    let queue = DispatchQueue(label: "today.app")
    private let wormhole: Wormhole
    private let state: Mutex<StepsSnapshot>

    init(wormhole: Wormhole, snapshot: StepsSnapshot) {
        self.wormhole = wormhole
        self.state = Mutex(snapshot)
    }

    var snapshot: StepsSnapshot { state.withLock { $0 } }

    /// Changes the count and shares it with the widget. Call on ``queue``.
    func change(_ reason: String, _ body: (inout StepsSnapshot) -> Void) {
        dispatchPrecondition(condition: .onQueue(queue))
        let snapshot = state.withLock { body(&$0); return $0 }
        do {
            let sequence = try wormhole.passMessage(snapshot, identifier: Identifiers.snapshot)
            say("app: \(snapshot.summary) (\(reason), update #\(sequence))")
        } catch {
            say("app: could not share the count: \(error)")
        }
    }
}
