import ArgumentParser
import ExampleSupport
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
            // once (the first run takes every tap kept). They are applied before the app
            // shares its first count, so the widget sees one count, not the old one and
            // then the reset. Taps and timer ticks take turns on the model's queue.
            let lastTap = try await wormhole.record(withIdentifier: Identifiers.action)?.sequence ?? 0
            let handledTap = try wormhole.listeners(identifier: Identifiers.action)
                .first { $0.durableName == "app" }?.position ?? 0
            let caughtUp = Ending(signals: [])
            if lastTap <= handledTap { caughtUp.end() }
            let token = try wormhole.listenForRecords(
                withIdentifier: Identifiers.action,
                durableName: "app",
                startingFrom: .history,
                queue: model.queue
            ) { record in
                if let action = try? record.decode(as: WidgetAction.self) {
                    switch action.kind {
                    case .reset:
                        say("app: the widget (pid \(record.processID)) pressed reset")
                        model.change("reset by the widget") { $0.steps = 0; $0.handledAction = record.sequence }
                    }
                }
                if record.sequence >= lastTap { caughtUp.end() }
            }
            defer { token.cancel() }
            // (Should a tap counted above be cleared meanwhile, start anyway.)
            let patience = Task { try? await Task.sleep(for: .seconds(5)); caughtUp.end() }
            await caughtUp.wait()
            patience.cancel()
            model.queue.sync { model.startSharing() }
            // A widget may also ask the running app for its state, and waits for the answer
            // (request/reply): answered on the model's queue, between ticks.
            let responder = try wormhole.respondToRequests(withIdentifier: Identifiers.state, as: StateQuery.self, queue: model.queue) { query in
                say("app: the \(query.asker) asked for the current count")
                return model.snapshot
            }
            defer { responder.cancel() }

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

    private struct State {
        var snapshot: StepsSnapshot
        /// Whether changes are shared as they are made (after ``startSharing()``).
        var sharing = false
        /// Why the count changed before sharing started.
        var unshared: [String] = []
    }

    private let state: Mutex<State>

    init(wormhole: Wormhole, snapshot: StepsSnapshot) {
        self.wormhole = wormhole
        self.state = Mutex(State(snapshot: snapshot))
    }

    var snapshot: StepsSnapshot { state.withLock { $0.snapshot } }

    /// Changes the count and, once sharing has started, shares it with the widget. Call
    /// on ``queue``.
    func change(_ reason: String, _ body: (inout StepsSnapshot) -> Void) {
        dispatchPrecondition(condition: .onQueue(queue))
        let (snapshot, sharing) = state.withLock { state in
            body(&state.snapshot)
            if !state.sharing { state.unshared.append(reason) }
            return (state.snapshot, state.sharing)
        }
        if sharing { share(snapshot, reason) }
    }

    /// Shares the count as it is now, with what changed it before, and every change
    /// from here on. Call on ``queue``.
    func startSharing() {
        dispatchPrecondition(condition: .onQueue(queue))
        let (snapshot, reasons) = state.withLock { state in
            state.sharing = true
            defer { state.unshared = [] }
            return (state.snapshot, state.unshared)
        }
        share(snapshot, (["started"] + reasons).joined(separator: "; "))
    }

    private func share(_ snapshot: StepsSnapshot, _ reason: String) {
        do {
            let sequence = try wormhole.passMessage(snapshot, identifier: Identifiers.snapshot)
            say("app: \(snapshot.summary) (\(reason), update #\(sequence))")
        } catch {
            say("app: could not share the count: \(error)")
        }
    }
}
