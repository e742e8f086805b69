#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing

@Suite("The examples, run as real processes", .timeLimit(.minutes(10)))
struct ExamplesTests {
    func output(_ command: RunningCommand) -> String { String(decoding: command.stdout, as: UTF8.self) }

    @Test func chatParticipantsSeeEachOthersMessagesJoinsAndLeavesAndNewcomersSeeHistory() async throws {
        let sandbox = Sandbox()
        let alice = try sandbox.start(["alice"], product: "wormhole-chat", interactive: true)
        #expect(await alice.waitForStandardOutput(containing: "* alice joined"), "\(alice.stderr)")

        let bob = try sandbox.start(["bob"], product: "wormhole-chat", interactive: true)
        #expect(await bob.waitForStandardOutput(containing: "* bob joined"))
        #expect(await alice.waitForStandardOutput(containing: "* bob joined"))

        try alice.type("hi bob\n")
        #expect(await bob.waitForStandardOutput(containing: "alice: hi bob"))
        try bob.type("hello alice\n")
        #expect(await alice.waitForStandardOutput(containing: "bob: hello alice"))

        try bob.closeInput()
        let bobResult = await bob.finish()
        #expect(bobResult.status == 0)
        #expect(await alice.waitForStandardOutput(containing: "* bob left"))

        // A newcomer with piped input: sees the recent history, says its line, leaves.
        let carol = try await sandbox.run(["carol", "--history", "10"], product: "wormhole-chat", input: Data("hi all\n".utf8))
        #expect(carol.status == 0)
        let lines = carol.lines.map { $0.drop(while: { $0 != "]" }).dropFirst(2) }
        #expect(lines.starts(with: ["* alice joined", "* bob joined", "alice: hi bob", "bob: hello alice", "* bob left"]))
        #expect(carol.output.contains("recent history above"))
        #expect(await alice.waitForStandardOutput(containing: "carol: hi all"))
        #expect(await alice.waitForStandardOutput(containing: "* carol left"))

        try alice.closeInput()
        #expect(await alice.finish().status == 0)

        // Bob comes back: he is shown what was said since he left (carol's visit), not the
        // recent history again.
        let back = try await sandbox.run(["bob"], product: "wormhole-chat", input: Data("back\n".utf8))
        #expect(back.status == 0)
        let since = back.lines.map { String($0.drop(while: { $0 != "]" }).dropFirst(2)) }
        #expect(since.starts(with: ["* carol joined", "carol: hi all", "* carol left", "* alice left"]), "\(back.output)")
        #expect(back.output.contains("-- said since you last left above (4 events); live from here --"), "\(back.output)")
    }

    @Test func theWidgetShowsTheLatestCountAtOnceAndFollowsTheApp() async throws {
        let sandbox = Sandbox()
        let empty = try await sandbox.run(["widget", "--once"], product: "today-widget")
        #expect(empty.status == 0)
        #expect(empty.output.contains("no steps yet"))

        let app = try await sandbox.run(["app", "--interval", "0.05", "--increment", "250", "--updates", "2"], product: "today-widget")
        #expect(app.status == 0, "\(app.stderr)")
        #expect(try await sandbox.run(["widget", "--once"], product: "today-widget").output == "widget: 500 of 10,000 steps (5%)\n")

        // Launched while the app is not running: the latest count at once, then live ones.
        let widget = try sandbox.start(["widget", "--updates", "3"], product: "today-widget", interactive: true)
        #expect(await widget.waitForStandardOutput(containing: "widget: 500 of 10,000 steps (5%)"))
        let again = try await sandbox.run(["app", "--interval", "0.05", "--increment", "250", "--updates", "1"], product: "today-widget")
        #expect(again.output.contains("restored 500 of 10,000 steps"))
        let result = await widget.finish()
        #expect(result.status == 0)
        #expect(result.lines.filter { $0.contains("steps") }.map { $0.components(separatedBy: " · ")[0] } == [
            "widget: 500 of 10,000 steps (5%)", "widget: 500 of 10,000 steps (5%)", "widget: 750 of 10,000 steps (7%)",
        ])
    }

    @Test func theWidgetsButtonReachesTheAppLiveAndAfterARestart() async throws {
        let sandbox = Sandbox()
        let app = try sandbox.start(["app", "--interval", "0.2", "--increment", "100", "--updates", "100000"], product: "today-widget")
        #expect(await app.waitForStandardOutput(containing: "(started, update #1)"))
        let widget = try sandbox.start(["widget"], product: "today-widget", interactive: true)
        #expect(await widget.waitForStandardOutput(containing: "steps"))
        try widget.type("\n")
        #expect(await app.waitForStandardOutput(containing: "pressed reset"))
        #expect(await app.waitForStandardOutput(containing: "0 of 10,000 steps (0%) (reset by the widget"))
        #expect(await widget.waitForStandardOutput(containing: "widget: 0 of 10,000 steps (0%)"))
        widget.send(SIGTERM)
        #expect(await widget.finish().status == 0)
        app.send(SIGKILL)
        _ = await app.finish()

        // Pressed while the app is not running: the app handles it when it starts.
        #expect(try await sandbox.run(["widget", "--press", "--once"], product: "today-widget").status == 0)
        let restarted = try await sandbox.run(["app", "--interval", "0.05", "--updates", "1"], product: "today-widget")
        #expect(restarted.output.contains("pressed reset"))
        // The press is applied before the app shares its first count: one count, the reset one.
        let shared = restarted.lines.filter { $0.contains("update #") }
        #expect(shared.count == 2, "\(restarted.output)")
        #expect(shared.first?.contains("0 of 10,000 steps (0%) (started; reset by the widget, update #") == true, "\(restarted.output)")
        // Handled once: started again, the app does not handle that press a second time.
        let third = try await sandbox.run(["app", "--interval", "0.05", "--updates", "1"], product: "today-widget")
        #expect(third.status == 0)
        #expect(!third.output.contains("pressed reset"), "\(third.output)")
    }

    /// The widget written in Python (`Examples/Python/today_widget.py`, the `wormhole`
    /// package) against the Swift app: it shows the app's count, its button resets it, and
    /// a press made while the app is stopped is handled when the app starts again.
    @Test func thePythonWidgetShowsTheSwiftAppsCountAndResetsIt() async throws {
        let sandbox = Sandbox()
        let widgetScript = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Examples/Python/today_widget.py").path
        func python(_ arguments: [String]) throws -> RunningCommand {
            try sandbox.start(["python3", widgetScript] + arguments, product: "/usr/bin/env", interactive: true)
        }
        let empty = await (try python(["--once"])).finish()
        #expect(empty.status == 0, "\(empty.stderr)")
        #expect(empty.output.contains("no steps yet"))

        let app = try sandbox.start(["app", "--interval", "0.2", "--increment", "100", "--updates", "100000"], product: "today-widget")
        #expect(await app.waitForStandardOutput(containing: "(started, update #1)"))
        let widget = try python([])
        #expect(await widget.waitForStandardOutput(containing: " of 10,000 steps"), "\(widget.stderr)")
        try widget.type("\n")
        #expect(await app.waitForStandardOutput(containing: "pressed reset"))
        #expect(await widget.waitForStandardOutput(containing: "widget: 0 of 10,000 steps (0%) · updated "))
        widget.send(SIGTERM)
        #expect(await widget.finish(seconds: 20).status == 0, "SIGTERM closes the widget, its listener cancelled")
        // --ask: a request the Swift app answers (Python requester, Swift responder).
        let asked = await (try python(["--ask"])).finish()
        #expect(asked.status == 0, "\(asked.stderr)")
        #expect(asked.output.hasPrefix("widget: the app says ") && asked.output.contains(" of 10,000 steps ("), "\(asked.output)")
        #expect(await app.waitForStandardOutput(containing: "app: the Python widget asked for the current count"))
        app.send(SIGKILL)
        _ = await app.finish()
        let unanswered = await (try python(["--ask"])).finish()
        #expect(unanswered.status == 2 && unanswered.output == "widget: the app did not answer; is it running? (today-widget app)\n",
                "\(unanswered.output)")

        let once = await (try python(["--once"])).finish()
        #expect(once.status == 0)
        #expect(once.output.hasPrefix("widget: ") && once.output.hasSuffix("%)\n"), "\(once.output)")
        // Pressed while the app is not running: the app handles it when it starts.
        let pressed = await (try python(["--press", "--once"])).finish()
        #expect(pressed.status == 0, "\(pressed.stderr)")
        let restarted = try await sandbox.run(["app", "--interval", "0.05", "--updates", "1"], product: "today-widget")
        #expect(restarted.output.contains("pressed reset"), "\(restarted.output)")
        #expect(restarted.output.contains("0 of 10,000 steps (0%) (started; reset by the widget"), "\(restarted.output)")
    }

    @Test func aWidgetKilledAtAnyTimeLeavesTheAppRunningAndANewWidgetShowsTheCountAtOnce() async throws {
        let sandbox = Sandbox()
        let app = try sandbox.start(["app", "--interval", "0.1", "--increment", "10", "--updates", "100000"], product: "today-widget")
        #expect(await app.waitForStandardOutput(containing: "(started, update #1)"))
        for _ in 0..<3 {
            let widget = try sandbox.start(["widget"], product: "today-widget", interactive: true)
            #expect(await widget.waitForStandardOutput(containing: "steps"))
            widget.send(SIGKILL)
            _ = await widget.finish()
        }
        #expect(app.process.isRunning)
        let updates = String(decoding: app.stdout, as: UTF8.self).components(separatedBy: "update #").count - 1
        #expect(await app.waitForStandardOutput(containing: "update #\(updates + 2))"))
        let last = try #require(try await sandbox.run(["widget", "--once"], product: "today-widget").lines.last)
        #expect(last.hasPrefix("widget: ") && last.hasSuffix("%)"))
        app.send(SIGKILL)
        _ = await app.finish()
    }

    /// Started with SIGINT, SIGTERM and SIGHUP blocked, as from a Dispatch thread: SIGTERM,
    /// which the chat catches, still ends it with its goodbye, and SIGHUP (a terminal
    /// closed), which it does not catch, still ends it by its default action. (The chat's
    /// main thread does not keep the inherited mask, so this passes even without
    /// `CaughtSignals`' own unblocking; `wormhole listen`'s main thread does keep it, and
    /// `SendListenTests.sigtermEndsTheListenerBySignalAfterItReleasedItsListeners` fails
    /// without that unblocking.)
    @Test(arguments: [SIGTERM, SIGHUP])
    func aChatStartedWithItsSignalsBlockedStillEndsOnThem(signal: Int32) async throws {
        let sandbox = Sandbox()
        let alice = try sandbox.startWithSignalsBlocked(["alice"], product: "wormhole-chat", interactive: true)
        #expect(await alice.waitForStandardOutput(containing: "* alice joined"), "\(output(alice)) \(alice.stderr)")
        alice.send(signal)
        let result = await alice.finish(seconds: 20)
        if signal == SIGTERM {
            #expect(!result.signaled && result.status == 0, "status \(result.status)")
            #expect(result.output.contains("* alice left"), "\(result.output)")
        } else {
            #expect(result.signaled && result.status == SIGHUP, "status \(result.status), signaled: \(result.signaled)")
        }
    }

    /// At a terminal, a message that arrives while a line is being typed is shown above
    /// it and the typed text drawn again below, as chat programs do; Backspace still
    /// edits, Enter says the line, Ctrl-D leaves.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/script")))
    func aMessageArrivingWhileTypingIsShownAboveWhatIsTyped() async throws {
        let sandbox = Sandbox()
        let alice = try sandbox.startOnTerminal(["alice"], product: "wormhole-chat")
        #expect(await alice.waitForStandardOutput(containing: "* alice joined"), "\(output(alice))")
        try alice.type("helx\u{7F}")   // Backspace: the chat, not the terminal, echoes and edits
        #expect(await alice.waitForStandardOutput(containing: "helx\r\u{1B}[Jhel"), "\(output(alice).debugDescription)")

        let bob = try await sandbox.run(["bob", "--history", "0"], product: "wormhole-chat", input: Data("hi alice\n".utf8))
        #expect(bob.status == 0)
        #expect(await alice.waitForStandardOutput(containing: "* bob left"))
        // Each of bob's lines: the typed text erased, the line, the typed text again.
        let shown = output(alice)
        for line in ["* bob joined", "bob: hi alice", "* bob left"] {
            let redrawn = try Regex("\r\u{1B}\\[J\\[[0-9:]{8}\\] \\Q\(line)\\E\r\nhel")
            #expect(shown.contains(redrawn), "\(line): \(shown.debugDescription)")
        }

        try alice.type("lo\n\u{04}")   // Enter says "hello"; Ctrl-D on the empty line leaves
        let result = await alice.finish(seconds: 20)
        #expect(result.status == 0, "\(result.output)")
        let carol = try await sandbox.run(["carol", "--history", "10"], product: "wormhole-chat", input: Data())
        #expect(carol.output.contains("alice: hello\n"), "\(carol.output)")
        #expect(carol.output.contains("* alice left"), "\(carol.output)")
    }

    /// Eight chats at once, each sent Ctrl-C as soon as it shows it joined: the signal is
    /// caught from then on, never lost and never fatal (a Dispatch signal source, which is
    /// registered later on another thread, lost about 1 in 30 under load).
    @Test(arguments: 1...8)
    func ctrlCAtATerminalEndsTheChatOnALineOfItsOwn(chat: Int) async throws {
        let sandbox = Sandbox()
        let alice = try sandbox.startOnTerminal(["alice"], product: "wormhole-chat")
        #expect(await alice.waitForStandardOutput(containing: "* alice joined", interval: .milliseconds(1)), "\(output(alice))")
        try alice.type("\u{03}")   // Ctrl-C: the terminal sends SIGINT and echoes ^C
        let result = await alice.finish(seconds: 20)
        #expect(result.status == 0, "chat \(chat): \(result.output)")
        #expect(result.output.contains("^C\r\n["), "\(result.output)")
        #expect(result.output.contains("* alice left"), "\(result.output)")
    }
}
