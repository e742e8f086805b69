#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
@_spi(Backend) import Wormhole

@Suite("Sending and listening across processes", .timeLimit(.minutes(10)))
struct SendListenTests {
    /// Starts `wormhole listen` and waits until it says it listens. The listeners of these
    /// tests have no `--timeout`: the test's own wait bounds them, and it does not run
    /// out while other tests keep the test process busy.
    /// `signalsBlocked`: started as ``Sandbox/startWithSignalsBlocked(_:product:interactive:)`` starts it.
    func listener(_ sandbox: Sandbox, _ arguments: [String], signalsBlocked: Bool = false) async throws -> RunningCommand {
        let words = ["listen", "--verbose"] + arguments
        let listener = signalsBlocked ? try sandbox.startWithSignalsBlocked(words) : try sandbox.start(words)
        let ready = await listener.waitForStandardError(containing: "listening to")
        try #require(ready, "the listener did not start: \(listener.stderr)")
        return listener
    }

    @Test func aListenerInAnotherProcessPrintsEachMessageOnItsOwnLineAndExitsZeroAtTheCount() async throws {
        let sandbox = Sandbox()
        let listener = try await listener(sandbox, ["chat", "--count", "3"])
        for text in ["one", "two", "three"] {
            let send = try await sandbox.run(["send", "chat", text])
            #expect(send.status == 0, "\(send.stderr)")
        }
        let result = await listener.finish()
        #expect(result.status == 0)
        #expect(result.lines == ["one", "two", "three"])
    }

    @Test func eachLineIsWrittenAsSoonAsTheMessageArrives() async throws {
        let sandbox = Sandbox()
        let listener = try await listener(sandbox, ["chat", "--count", "2"])
        _ = try await sandbox.run(["send", "chat", "first"])
        // The listener is still running: the first line must already be out, unbuffered.
        #expect(await listener.waitForStandardOutput(containing: "first\n", seconds: 20))
        #expect(listener.process.isRunning)
        _ = try await sandbox.run(["send", "chat", "second"])
        let result = await listener.finish()
        #expect(result.status == 0)
        #expect(result.lines == ["first", "second"])
    }

    @Test func jsonLinesNameTheIdentifierSequenceTimeAndSendingProcess() async throws {
        let sandbox = Sandbox()
        let listener = try await listener(sandbox, ["status", "--json", "--count", "1"])
        let sender = try sandbox.start(["send", "status", "ready"])
        let sent = await sender.finish()
        #expect(sent.status == 0)
        let result = await listener.finish()
        #expect(result.status == 0)
        let line = try #require(result.lines.first)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect(object["identifier"] as? String == "status")
        #expect(object["sequence"] as? Int == 1)
        #expect(object["pid"] as? Int == Int(sender.pid))
        #expect(object["kind"] as? String == "text")
        #expect(object["payload"] as? String == "ready")
        let time = try #require(object["time"] as? String)
        let date = try Date.ISO8601FormatStyle(includingFractionalSeconds: true).parse(time)
        #expect(abs(date.timeIntervalSinceNow) < 120)
    }

    @Test func historyStartsFromTheMessagesSentBeforeTheListenerStarted() async throws {
        let sandbox = Sandbox()
        for text in ["a", "b", "c"] { _ = try await sandbox.run(["send", "log", text]) }
        let result = try await sandbox.run(["listen", "log", "--history", "--count", "3", "--timeout", "30"])
        #expect(result.status == 0)
        #expect(result.lines == ["a", "b", "c"])
    }

    @Test func latestStartsWithTheNewestMessageOnly() async throws {
        let sandbox = Sandbox()
        for text in ["old", "new"] { _ = try await sandbox.run(["send", "state", text]) }
        let result = try await sandbox.run(["listen", "state", "--latest", "--count", "1", "--timeout", "30"])
        #expect(result.status == 0)
        #expect(result.lines == ["new"])
    }

    @Test func countStopsAfterThatManyMessagesEvenWhenMoreAreWaiting() async throws {
        let sandbox = Sandbox()
        for index in 1...5 { _ = try await sandbox.run(["send", "many", "m\(index)"]) }
        let result = try await sandbox.run(["listen", "many", "--history", "--count", "2"])
        #expect(result.status == 0)
        #expect(result.lines == ["m1", "m2"])
    }

    @Test func severalIdentifiersAreHeardWithTheirPrefix() async throws {
        let sandbox = Sandbox()
        let listener = try await listener(sandbox, ["alpha", "beta", "--prefix", "--count", "2"])
        _ = try await sandbox.run(["send", "alpha", "to alpha"])
        _ = try await sandbox.run(["send", "beta", "to beta"])
        let result = await listener.finish()
        #expect(result.status == 0)
        #expect(result.lines == ["alpha: to alpha", "beta: to beta"])
    }

    @Test func anIdentifierNamedTwiceIsHeardOnce() async throws {
        let sandbox = Sandbox()
        _ = try await sandbox.run(["send", "twice", "once"])
        let result = try await sandbox.run(["listen", "twice", "twice", "--history", "--timeout", "2"])
        #expect(result.status == 0)
        #expect(result.lines == ["once"])
    }

    @Test func aTimeoutWithNoMessageExitsTwoWithOneLineOnStandardError() async throws {
        let sandbox = Sandbox()
        let started = ContinuousClock.now
        let result = try await sandbox.run(["listen", "quiet", "--timeout", "0.5"])
        #expect(result.status == 2)
        #expect(result.stdout.isEmpty)
        #expect(result.stderrLines == ["wormhole: no message arrived within 0.5 seconds on 'quiet'"])
        #expect(ContinuousClock.now - started >= .milliseconds(500))
    }

    @Test func aTimeoutBeforeTheCountIsReachedExitsTwoAfterPrintingWhatCame() async throws {
        let sandbox = Sandbox()
        _ = try await sandbox.run(["send", "few", "only one"])
        let result = try await sandbox.run(["listen", "few", "--history", "--count", "3", "--timeout", "3"])
        #expect(result.status == 2)
        #expect(result.lines == ["only one"])
        #expect(result.stderrLines == ["wormhole: only 1 of 3 messages arrived within 3 seconds"])
    }

    @Test func aTimeoutAfterSomeMessagesWithoutACountExitsZero() async throws {
        let sandbox = Sandbox()
        _ = try await sandbox.run(["send", "some", "hello"])
        let result = try await sandbox.run(["listen", "some", "--history", "--timeout", "3"])
        #expect(result.status == 0)
        #expect(result.lines == ["hello"])
    }

    /// SIGTERM ends the listener by that signal, after it released its listeners. Also
    /// when it was started with SIGINT, SIGTERM and SIGHUP blocked: a process inherits its
    /// parent's blocked signals (a parent's Dispatch thread blocks them), and nothing
    /// else in `wormhole listen` would ever take them.
    @Test(arguments: [false, true])
    func sigtermEndsTheListenerBySignalAfterItReleasedItsListeners(startedWithSignalsBlocked: Bool) async throws {
        let sandbox = Sandbox()
        let listener = try await self.listener(sandbox, ["chat"], signalsBlocked: startedWithSignalsBlocked)
        listener.send(SIGTERM)
        let result = await listener.finish(seconds: 20)
        #expect(result.signaled)
        #expect(result.status == SIGTERM)
    }

    /// A listener waiting for messages makes no system call: every thread blocks until
    /// something arrives. (While it waited in a task, Dispatch's pool monitor woke it
    /// once a second: 2 or 3 switches in any 2.5 s.) One-off events are not the
    /// question: the end of a start-up slowed by a busy machine, or Dispatch ending its
    /// parked worker about 5 s after its last job. So the test looks at 2.5 s windows, one
    /// after another for up to 20 s, and asks that one of them be quiet.
    @Test func anIdleListenerSleepsUntilAMessageArrives() async throws {
        let sandbox = Sandbox()
        let listener = try await listener(sandbox, ["chat", "--count", "1"])
        let pid = listener.process.processIdentifier
        // Each thread's voluntary context switches: one each time it blocks again.
        func switches() -> [String: Int] {
            let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
            return Dictionary(uniqueKeysWithValues: tasks.map { task in
                let status = (try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/status", encoding: .utf8)) ?? ""
                let line = status.split(separator: "\n").first { $0.hasPrefix("voluntary_ctxt_switches:") }
                return (task, line.flatMap { Int($0.split(separator: "\t").last ?? "") } ?? 0)
            })
        }
        // A thread that woke counts more; a new thread is a wake-up too. One that exited
        // is not compared.
        var woken: [[String: Int]] = []
        let deadline = ContinuousClock.now + .seconds(20)
        var before = switches()
        repeat {
            try await Task.sleep(for: .milliseconds(2_500))
            let after = switches()
            woken.append(after.filter { task, count in count > before[task] ?? -1 })
            before = after
        } while woken.last?.isEmpty == false && ContinuousClock.now < deadline
        #expect(woken.last?.isEmpty == true,
                "threads of an idle wormhole listen woke up in each 2.5 s for 20 s: \(woken) (last: \(before))")
        _ = try await sandbox.run(["send", "chat", "wake"])
        let result = await listener.finish()
        #expect(result.status == 0)
        #expect(result.lines == ["wake"])
    }

    @Test func readPrintsTheLatestMessageAndExitsTwoWhenThereIsNone() async throws {
        let sandbox = Sandbox()
        _ = try await sandbox.run(["send", "other", "x"])
        let none = try await sandbox.run(["read", "status"])
        #expect(none.status == 2)
        #expect(none.stderrLines.count == 1)
        #expect(none.stderr.hasPrefix("wormhole: no message under 'status'"))
        _ = try await sandbox.run(["send", "status", "first"])
        _ = try await sandbox.run(["send", "status", "second"])
        let read = try await sandbox.run(["read", "status"])
        #expect(read.status == 0)
        #expect(read.output == "second\n")
    }

    @Test func clearRemovesMessagesAndListShowsWhatIsLeft() async throws {
        let sandbox = Sandbox()
        _ = try await sandbox.run(["send", "keep", "12345"])
        _ = try await sandbox.run(["send", "drop", "x"])
        let before = try await sandbox.run(["list"])
        #expect(before.status == 0)
        #expect(before.lines.first?.hasPrefix("IDENTIFIER") == true)
        #expect(before.lines.dropFirst().map { $0.split(separator: " ").first.map(String.init) } == ["drop", "keep"])

        #expect(try await sandbox.run(["clear", "drop"]).status == 0)
        #expect(try await sandbox.run(["read", "drop"]).status == 2)
        let json = try await sandbox.run(["list", "--json"])
        let keep = try #require(json.lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            .first { $0["identifier"] as? String == "keep" })
        #expect(keep["messages"] as? Int == 1)
        #expect(keep["bytes"] as? Int == 5)

        #expect(try await sandbox.run(["clear", "--all"]).status == 0)
        #expect(try await sandbox.run(["read", "keep"]).status == 2)
    }

    @Test func withNoFlagsTwoProcessesShareTheDefaultContainer() async throws {
        let sandbox = Sandbox()
        let path = try await sandbox.run(["path"])
        #expect(path.output == sandbox.defaultContainer + "\n")
        _ = try await sandbox.run(["send", "hello", "there"])
        #expect(FileManager.default.fileExists(atPath: sandbox.defaultContainer + "/hello.wormhole"))
        #expect(try await sandbox.run(["read", "hello"]).output == "there\n")
    }

    @Test func theDirectoryOptionAndItsEnvironmentVariableChooseTheSameContainer() async throws {
        let sandbox = Sandbox()
        let shared = sandbox.root.file("shared")
        _ = try await sandbox.run(["send", "--directory", shared, "note", "via option"])
        let read = try await sandbox.run(["read", "note"], environment: ["WORMHOLE_DIRECTORY": shared])
        #expect(read.output == "via option\n")
        let elsewhere = try await sandbox.run(["read", "note"])
        #expect(elsewhere.status == 2)
    }

    @Test func theGroupOptionAndItsEnvironmentVariableChooseTheSameContainer() async throws {
        let sandbox = Sandbox()
        _ = try await sandbox.run(["send", "--group", "group.com.example.notes", "note", "grouped"])
        let read = try await sandbox.run(["read", "note"], environment: ["WORMHOLE_GROUP": "group.com.example.notes"])
        #expect(read.output == "grouped\n")
        let path = try await sandbox.run(["path", "--group", "group.com.example.notes", "--optional-directory", "wormhole"])
        #expect(path.output == sandbox.root.file("app-groups") + "/group.com.example.notes/wormhole\n")
    }

    // MARK: - What is already there, and where it listens

    @Test func noFollowPrintsTheHistoryThenExitsAndSaysSoWhenThereIsNothing() async throws {
        let sandbox = Sandbox()
        for text in ["one", "two", "three"] { #expect(try await sandbox.run(["send", "chat", text]).status == 0) }
        let history = try await sandbox.run(["listen", "--history", "--no-follow", "chat"])
        #expect(history.status == 0, "\(history.stderr)")
        #expect(history.lines == ["one", "two", "three"])
        let latest = try await sandbox.run(["listen", "--latest", "--no-follow", "chat", "other"])
        #expect(latest.lines == ["three"])

        #expect(try await sandbox.run(["clear", "chat"]).status == 0)
        let nothing = try await sandbox.run(["listen", "--history", "--no-follow", "chat"])
        #expect(nothing.status == 2)
        #expect(nothing.stderr == "wormhole: no message to print under 'chat': none is kept\n")

        let alone = try await sandbox.run(["listen", "--no-follow", "chat"])
        #expect(alone.status == 64)
        #expect(alone.stderr.contains("--no-follow stops after the messages already there, so it needs --history, --latest or --durable"))
    }

    @Test("--no-follow whose last message is too large for the command prints those before it, reports that one, and ends")
    func noFollowEndsAtALastMessageTooLargeForIt() async throws {
        let sandbox = Sandbox()
        for text in ["one", "two"] { #expect(try await sandbox.run(["send", "chat", text]).status == 0) }
        // A program whose wormhole accepts larger messages than the command's 8 MiB.
        var configuration = Wormhole.Configuration()
        configuration.maximumMessageSize = 9 << 20
        let large = try Wormhole(directory: sandbox.defaultContainer, configuration: configuration)
        try await large.passMessage(Data(count: (8 << 20) + 1), identifier: "chat")
        let history = try await sandbox.run(["listen", "--history", "--no-follow", "chat"], seconds: 20)
        #expect(history.status == 0, "\(history.stderr)")
        #expect(history.lines == ["one", "two"])
        #expect(history.stderr.contains("message 3 of 'chat' is 8388609 bytes, more than this reader's limit"), "\(history.stderr)")
    }

    @Test("--no-follow ends when the newest message has expired (it is reported, not printed), and says so when nothing is left to print; read does not print an expired latest message (Protocol.md 8.1)",
          .timeLimit(.minutes(1)))
    func noFollowAndReadPassAnExpiredNewestMessage() async throws {
        let sandbox = Sandbox()
        for text in ["one", "two"] { #expect(try await sandbox.run(["send", "chat", text]).status == 0) }
        #expect(try await sandbox.run(["send", "--ttl", "0.05", "chat", "stale"]).status == 0)
        // The wall clock is what expiry follows: nothing to wait on but it.
        try await Task.sleep(for: .milliseconds(200))
        for _ in 0..<2 {
            let history = try await sandbox.run(["listen", "--history", "--no-follow", "chat"], seconds: 5)
            #expect(!history.signaled && history.status == 0, "ended by itself: \(history.stderr)")
            #expect(history.lines == ["one", "two"])
            #expect(history.stderr.contains("1 message of 'chat' expired"), "\(history.stderr)")
            let latest = try await sandbox.run(["listen", "--latest", "--no-follow", "chat"], seconds: 5)
            #expect(!latest.signaled && latest.status == 2, "ended by itself: \(latest.stderr)")
            #expect(latest.stdout.isEmpty)
            #expect(latest.stderr.contains("no message to print under 'chat'"), "\(latest.stderr)")
        }
        let read = try await sandbox.run(["read", "chat"])
        #expect(read.status == 2 && read.stdout.isEmpty, "\(read.output)")
        #expect(read.stderr.contains("no message under 'chat'"), "\(read.stderr)")
    }

    @Test func aDurableNameWithNoFollowIsABatchJob() async throws {
        let sandbox = Sandbox()
        for text in ["one", "two"] { #expect(try await sandbox.run(["send", "chat", text]).status == 0) }
        let job = ["listen", "--durable", "nightly", "--history", "--no-follow", "chat"]
        #expect(try await sandbox.run(job).lines == ["one", "two"])
        let again = try await sandbox.run(job)
        #expect(again.status == 2)
        #expect(again.stderr == "wormhole: no message to print under 'chat': the durable listener 'nightly' has printed every one\n")
        #expect(try await sandbox.run(["send", "chat", "three"]).status == 0)
        #expect(try await sandbox.run(job).lines == ["three"])
        // A name never used, starting with new messages only, has nothing to print.
        #expect(try await sandbox.run(["listen", "--durable", "fresh", "--no-follow", "chat"]).status == 2)
    }

    @Test func listShowsOnlyIdentifiersWithMessagesUnlessAskedForAll() async throws {
        let sandbox = Sandbox()
        #expect(try await sandbox.run(["send", "kept", "hi"]).status == 0)
        #expect(try await sandbox.run(["send", "cleared", "hi"]).status == 0)
        #expect(try await sandbox.run(["clear", "cleared"]).status == 0)
        let list = try await sandbox.run(["list"])
        #expect(list.lines.map { $0.split(separator: " ").first.map(String.init) ?? "" } == ["IDENTIFIER", "kept"])
        let all = try await sandbox.run(["list", "--all", "--json"])
        let identifiers = all.lines.compactMap { line in
            (try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])?["identifier"] as? String
        }
        #expect(identifiers == ["cleared", "kept"], "\(all.output)")
        #expect(all.output.contains(#""identifier":"cleared","messages":0"#))
    }

    @Test func onATerminalListenSaysWhereItListensAndInAPipeItDoesNot() async throws {
        let sandbox = Sandbox()
        let terminal = try sandbox.startOnTerminal(["listen", "chat", "--timeout", "60", "--count", "1"])
        #expect(await terminal.waitForStandardOutput(containing: "wormhole: listening to 'chat' in \(sandbox.defaultContainer); Ctrl-C stops"),
                "\(String(decoding: terminal.stdout, as: UTF8.self))")
        #expect(try await sandbox.run(["send", "chat", "hello"]).status == 0)
        let result = await terminal.finish()
        #expect(result.status == 0)
        #expect(result.output.contains("hello\r\n"))

        let piped = try await sandbox.run(["listen", "chat", "--timeout", "0.2"])
        #expect(piped.stderr == "wormhole: no message arrived within 0.2 seconds on 'chat'\n")
    }

    @Test func onATerminalAnEmptyListSaysWhyAndInAPipeItPrintsTheHeaderAlone() async throws {
        let sandbox = Sandbox()
        #expect(try await sandbox.run(["send", "chat", "hello"]).status == 0)
        #expect(try await sandbox.run(["clear", "chat"]).status == 0)
        let terminal = try sandbox.startOnTerminal(["list"])
        let result = await terminal.finish()
        #expect(result.status == 0)
        #expect(result.output.contains("no identifier has messages in \(sandbox.defaultContainer); 'wormhole list --all' also shows the 1 cleared"),
                "\(result.output)")
        let piped = try await sandbox.run(["list"])
        #expect(piped.output == "IDENTIFIER  MESSAGES  BYTES  LAST UPDATE\n")
        #expect(piped.stderr.isEmpty)
    }

    @Test func aHintRepeatsTheContainerOptionsGiven() async throws {
        let sandbox = Sandbox()
        let read = try await sandbox.run(["read", "--group", "group.com.example.notes", "--optional-directory", "wormhole", "note"])
        #expect(read.status == 2)
        #expect(read.stderr.hasSuffix("send one with 'wormhole send --group group.com.example.notes --optional-directory wormhole note ...'\n"), "\(read.stderr)")
        // The command suggested reaches that container: read finds what it sent.
        #expect(try await sandbox.run(["send", "--group", "group.com.example.notes", "--optional-directory", "wormhole", "note", "hi"]).status == 0)
        #expect(try await sandbox.run(["read", "--group", "group.com.example.notes", "--optional-directory", "wormhole", "note"]).lines == ["hi"])

        let directory = sandbox.root.file("a dir")
        let forget = try await sandbox.run(["forget", "nobody", "--directory", directory])
        #expect(forget.status == 2)
        #expect(forget.stderr == "wormhole: no durable listener named 'nobody' here; 'wormhole status --directory '\(directory)'' lists them\n")
    }

    @Test("send and listen take identifiers from a file or standard input: they are not in the command line that every user of the machine can read",
          .timeLimit(.minutes(1)))
    func identifiersOffTheCommandLine() async throws {
        let sandbox = Sandbox()
        let both = sandbox.root.file("both"), audit = sandbox.root.file("audit")
        try "payroll.events\npayroll.audit\n".write(toFile: both, atomically: true, encoding: .utf8)
        try "payroll.audit".write(toFile: audit, atomically: true, encoding: .utf8)
        let listener = try sandbox.start(["listen", "--verbose", "--count", "2", "--timeout", "30", "--identifier-file", both])
        #expect(await listener.waitForStandardError(containing: "listening to 'payroll.events', 'payroll.audit'"), "\(listener.stderr)")
        let shown = String(decoding: FileManager.default.contents(atPath: "/proc/\(listener.pid)/cmdline") ?? Data(), as: UTF8.self)
        #expect(!shown.contains("payroll"), "\(shown)")
        let first = try await sandbox.run(["send", "--identifier-file", audit, "salary of bob"])
        let second = try await sandbox.run(["send", "--identifier-file", "-", "--file", audit], input: Data("payroll.events\n".utf8))
        #expect(first.status == 0 && second.status == 0, "\(first.stderr) \(second.stderr)")
        let heard = await listener.finish()
        #expect(heard.status == 0 && heard.lines.sorted() == ["payroll.audit", "salary of bob"], "\(heard.output) \(heard.stderr)")
        // One identifier for send, from one place; a file with an empty line is named.
        let twice = try await sandbox.run(["send", "--identifier-file", audit, "payroll.audit", "x"])
        #expect(twice.status == 64, "\(twice.stderr)")
        try "payroll.events\n\npayroll.audit\n".write(toFile: both, atomically: true, encoding: .utf8)
        let gap = try await sandbox.run(["listen", "--count", "1", "--timeout", "1", "--identifier-file", both])
        #expect(gap.status == 1 && gap.stderr.contains("'\(both)' holds an empty line"), "\(gap.status) \(gap.stderr)")
    }
}
