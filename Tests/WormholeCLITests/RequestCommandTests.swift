import Foundation
import Testing

/// `request`, `respond`, `listen --queue` and `send --ttl`, as separate processes.
@Suite("Requests and work queues from the command line")
struct RequestCommandTests {
    @Test("request with nobody serving exits 2 saying so; respond answers with its command's output; a failing command's status and error come back, exit 1")
    func requestAndRespond() async throws {
        try await Self.requestAndRespond(Sandbox())
    }

    @Test("listen --queue: two members share the messages, each printed once; status shows the queue; an expired message is skipped and counted")
    func queueMembersShareMessages() async throws {
        try await Self.queueMembersShareMessages(Sandbox())
    }

    /// The request/respond transcript, on the container that `container` (options put
    /// after each command's name) chooses: the default directory, or a PostgreSQL group
    /// (`PostgresOptionTests`).
    static func requestAndRespond(_ sandbox: Sandbox, container: [String] = []) async throws {
        let alone = try await sandbox.run(["request"] + container + ["--timeout", "0.5", "greet", "hello"])
        #expect(alone.status == 2 && alone.stderr.contains("no responder serves 'greet'"), "\(alone.stderr)")
        let responder = try sandbox.start(["respond"] + container + ["-v", "greet", "--", "tr", "a-z", "A-Z"])
        #expect(await responder.waitForStandardError(containing: "answering requests to 'greet'"))
        let answered = try await sandbox.run(["request"] + container + ["greet", "hello"])
        #expect(answered.status == 0 && answered.lines == ["HELLO"], "\(answered.stderr)")
        let json = try await sandbox.run(["request"] + container + ["--json", "greet", #"{"a": 1}"#])
        #expect(json.status == 0 && json.output.contains(#""payload":"{\"A\": 1}""#), "\(json.output)")
        let failing = try sandbox.start(["respond"] + container + ["-v", "failing", "--", "sh", "-c", "echo \"no such user: $(cat)\" >&2; exit 3"])
        #expect(await failing.waitForStandardError(containing: "answering requests"))
        let refused = try await sandbox.run(["request"] + container + ["failing", "bob"])
        #expect(refused.status == 1 && refused.stderr.contains("exited with status 3: no such user: bob"), "\(refused.stderr)")
        let missing = try await sandbox.run(["respond"] + container + ["greet"])
        #expect(missing.status == 64 && missing.stderr.contains("after '--'"), "\(missing.stderr)")
        responder.send(SIGINT)
        failing.send(SIGINT)
        _ = await responder.finish()
        _ = await failing.finish()
    }

    /// The `listen --queue` transcript, on the container `container` chooses.
    static func queueMembersShareMessages(_ sandbox: Sandbox, container: [String] = []) async throws {
        #expect(try await sandbox.run(["send"] + container + ["--ttl", "0.2", "jobs", "stale"]).status == 0)
        // The wall clock is what expiry follows: nothing to wait on but it.
        try await Task.sleep(for: .milliseconds(300))
        for index in 1...6 { #expect(try await sandbox.run(["send"] + container + ["jobs", "job \(index)"]).status == 0) }
        let first = try await sandbox.run(["listen"] + container + ["--queue", "w", "--count", "4", "jobs"])
        let second = try await sandbox.run(["listen"] + container + ["--queue", "w", "--count", "2", "jobs"])
        #expect(first.status == 0 && second.status == 0, "\(first.stderr) \(second.stderr)")
        #expect(first.lines + second.lines == (1...6).map { "job \($0)" }, "\(first.lines) \(second.lines)")
        let status = try await sandbox.run(["status"] + container + ["--json", "jobs"])
        #expect(status.output.contains(#""queue":"w","members":[],"pending":0,"inFlight":0,"acknowledged":6,"deadLettered":0,"expired":1"#), "\(status.output)")
        let conflicting = try await sandbox.run(["listen"] + container + ["--queue", "w", "--durable", "d", "jobs"])
        #expect(conflicting.status == 64)
    }

    @Test("status lists a running queue member once: in its queue's row, not again as a running listener")
    func statusListsAMemberOnce() async throws {
        let sandbox = Sandbox()
        let member = try sandbox.start(["listen", "--queue", "w", "--verbose", "jobs"])
        #expect(await member.waitForStandardError(containing: "taking messages of"))
        let json = try await sandbox.run(["status", "--json", "jobs"])
        #expect(json.status == 0)
        let queues = json.lines.filter { $0.contains(#""queue":"w""#) }
        #expect(queues.count == 1 && queues[0].contains(#""members":[{"pid":\#(member.pid),"#), "\(json.output)")
        #expect(!json.lines.contains { $0.contains(#""running":true"#) }, "no running listener besides the member: \(json.output)")
        let table = try await sandbox.run(["status", "jobs"])
        #expect(table.lines.filter { $0.contains(String(member.pid)) }.count == 1, "one row names the member's process: \(table.output)")
        #expect(table.lines.first?.hasPrefix("IDENTIFIER  QUEUE") == true && table.lines.count == 2,
                "only the queues' table when nothing else listens, not an empty listeners' header first: \(table.output)")
        member.send(SIGINT)
        _ = await member.finish()
    }

    @Test("respond's command starts as a shell would start it: every signal at its default action and none blocked, so that a pipeline into 'head -n1' ends",
          .timeLimit(.minutes(1)))
    func respondersCommandStartsWithDefaultSignals() async throws {
        let sandbox = Sandbox()
        let signals = try sandbox.start(["respond", "-v", "signals", "--", "grep", "-E", "^Sig(Blk|Ign):", "/proc/self/status"])
        #expect(await signals.waitForStandardError(containing: "answering requests"))
        // Twice: the responder ignored SIGPIPE from its first command on (the Dispatch
        // thread that runs them blocks signals from the start).
        for _ in 1...2 {
            let status = try await sandbox.run(["request", "--timeout", "10", "signals", "?"])
            #expect(status.status == 0 && status.lines == ["SigBlk:\t0000000000000000", "SigIgn:\t0000000000000000"],
                    "\(status.output) \(status.stderr)")
        }
        // With SIGPIPE ignored, 'yes' went on after 'head' had gone, and said so (a shell
        // loop of 'echo' went on for ever).
        let pipeline = try sandbox.start(["respond", "-v", "pipeline", "--", "sh", "-c", "(yes | head -n1) 2>&1"])
        #expect(await pipeline.waitForStandardError(containing: "answering requests"))
        for _ in 1...2 {
            let reply = try await sandbox.run(["request", "--timeout", "10", "pipeline", "?"])
            #expect(reply.status == 0 && reply.lines == ["y"], "\(reply.output) \(reply.stderr)")
        }
        for responder in [signals, pipeline] {
            responder.send(SIGINT)
            _ = await responder.finish()
        }
    }

    @Test("listen --queue takes --retry-delay and --max-retry-delay in seconds; without --queue, out of range, or a maximum below the first delay, they are refused naming the problem")
    func queueRetryDelayOptions() async throws {
        let sandbox = Sandbox()
        for (arguments, text) in [(["--retry-delay", "2"], "apply to a work queue; add --queue NAME"),
                                  (["--queue", "w", "--retry-delay", "3e6"], "--retry-delay must be between 0 and 2000000 seconds, not 3000000.0"),
                                  (["--queue", "w", "--retry-delay", "5", "--max-retry-delay", "1"], "--max-retry-delay (1.0) must be at least --retry-delay (5.0)")] {
            let result = try await sandbox.run(["listen"] + arguments + ["jobs"])
            #expect(result.status == 64 && result.stderr.contains(text), "\(arguments): \(result.stderr)")
        }
        #expect(try await sandbox.run(["send", "jobs", "one"]).status == 0)
        let taken = try await sandbox.run(["listen", "--queue", "w", "--retry-delay", "0.5", "--max-retry-delay", "10", "--count", "1", "jobs"])
        #expect(taken.status == 0 && taken.lines == ["one"], "\(taken.stderr)")
    }

    @Test("listen --queue responders is refused, saying the name is the responders' (it took half the requests of a 'respond' beside it)",
          .timeLimit(.minutes(1)))
    func respondersQueueNameIsRefused() async throws {
        let sandbox = Sandbox()
        let refused = try await sandbox.run(["listen", "--queue", "responders", "--timeout", "1", "service"])
        #expect(refused.status == 64 && refused.stderr.contains("work queue name 'responders' is reserved"), "\(refused.status) \(refused.stderr)")
    }

    @Test("a requester that cannot watch for its reply (no inotify instance left) fails before it passes the request: the responder never runs it",
          .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/unshare")), .timeLimit(.minutes(1)))
    func requestThatCannotWaitIsNotPassed() async throws {
        let sandbox = Sandbox()
        let ran = sandbox.root.file("ran")
        let responder = try sandbox.start(["respond", "-v", "counted", "--", "sh", "-c", "echo x >> '\(ran)'; wc -l < '\(ran)'"])
        #expect(await responder.waitForStandardError(containing: "answering requests"))
        // In a user namespace of its own, whose inotify instance limit is 0.
        let starved = try await sandbox.run(["--user", "--map-root-user", "/bin/sh", "-c",
                                             "echo 0 > /proc/sys/user/max_inotify_instances && exec \"$0\" request --timeout 5 counted first",
                                             Products.path("wormhole")], product: "/usr/bin/unshare")
        #expect(starved.status == 1 && starved.stderr.contains("inotify instances"), "\(starved.status) \(starved.stderr)")
        #expect(starved.stderr.contains("was not sent"), "\(starved.stderr)")
        // Had the first request been passed, the responder would have run it first.
        let next = try await sandbox.run(["request", "--timeout", "10", "counted", "second"])
        #expect(next.status == 0 && next.lines == ["1"], "\(next.output) \(next.stderr)")
        responder.send(SIGINT)
        _ = await responder.finish()
    }

    @Test("a command that writes more than a reply may hold sends an error reply saying so, at once; its request is run once",
          .timeLimit(.minutes(1)))
    func oversizedOutputIsAnErrorReply() async throws {
        let sandbox = Sandbox()
        let ran = sandbox.root.file("ran")
        let script = "echo x >> '\(ran)'; if [ \"$(cat)\" = big ]; then head -c 9000000 /dev/zero; else wc -l < '\(ran)'; fi"
        let responder = try sandbox.start(["respond", "-v", "dump", "--", "sh", "-c", script])
        #expect(await responder.waitForStandardError(containing: "answering requests"))
        let big = try await sandbox.run(["request", "--timeout", "20", "dump", "big"])
        #expect(big.status == 1 && big.stderr.contains("wrote more than 8388608 bytes"), "\(big.status) \(big.stderr)")
        // A request run again would come before this one: the queue hands out in order.
        let next = try await sandbox.run(["request", "--timeout", "20", "dump", "small"])
        #expect(next.status == 0 && next.lines == ["2"], "\(next.output) \(next.stderr)")
        responder.send(SIGINT)
        _ = await responder.finish()
    }

    @Test("request and respond take the identifier and the request from files or standard input: neither is in the command line that every user of the machine can read",
          .timeLimit(.minutes(1)))
    func identifierAndRequestOffTheCommandLine() async throws {
        let sandbox = Sandbox()
        let identifierFile = sandbox.root.file("identifier"), requestFile = sandbox.root.file("request")
        try "payroll.query\n".write(toFile: identifierFile, atomically: true, encoding: .utf8)
        try "salary of bob: 12345".write(toFile: requestFile, atomically: true, encoding: .utf8)
        let responder = try sandbox.start(["respond", "-v", "--identifier-file", identifierFile, "--", "tr", "a-z", "A-Z"])
        #expect(await responder.waitForStandardError(containing: "answering requests to 'payroll.query'"), "\(responder.stderr)")
        let asFile = try sandbox.start(["request", "--timeout", "10", "--identifier-file", identifierFile, "--file", requestFile])
        let fromInput = try sandbox.start(["request", "--timeout", "10", "--identifier-file", identifierFile],
                                          input: Data("bonus of alice".utf8))
        for running in [responder, asFile, fromInput] {
            let shown = String(decoding: FileManager.default.contents(atPath: "/proc/\(running.pid)/cmdline") ?? Data(), as: UTF8.self)
            #expect(!shown.contains("payroll") && !shown.contains("bob") && !shown.contains("alice"), "\(shown)")
        }
        let first = await asFile.finish(), second = await fromInput.finish()
        #expect(first.status == 0 && first.lines == ["SALARY OF BOB: 12345"], "\(first.output) \(first.stderr)")
        #expect(second.status == 0 && second.lines == ["BONUS OF ALICE"], "\(second.output) \(second.stderr)")
        // One identifier, from one place; a file that holds none is named.
        let both = try await sandbox.run(["request", "--identifier-file", identifierFile, "payroll.query", "x"])
        #expect(both.status == 64, "\(both.stderr)")
        try "".write(toFile: identifierFile, atomically: true, encoding: .utf8)
        let empty = try await sandbox.run(["request", "--identifier-file", identifierFile, "--file", requestFile])
        #expect(empty.status != 0 && empty.stderr.contains(identifierFile), "\(empty.stderr)")
        responder.send(SIGINT)
        _ = await responder.finish()
    }
}
