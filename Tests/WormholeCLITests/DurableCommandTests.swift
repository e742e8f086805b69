import Foundation
import Testing

/// `listen --durable`, `status` and `forget`, as separate processes.
@Suite("Durable listeners from the command line")
struct DurableCommandTests {
    @Test("listen --durable resumes after the last message it printed, --count included; status shows the name; forget removes it")
    func durableListenResumesAndForgetRemoves() async throws {
        let sandbox = Sandbox()
        #expect(try await sandbox.run(["send", "chat", "m1"]).status == 0)
        var result = try await sandbox.run(["listen", "--durable", "archiver", "--history", "--count", "1", "chat"])
        #expect(result.status == 0 && result.lines == ["m1"])
        for text in ["m2", "m3", "m4"] { #expect(try await sandbox.run(["send", "chat", text]).status == 0) }
        // --count 1 with three waiting: m2 is printed; m3 and m4, read in the same batch but
        // not printed, are not counted as handled.
        result = try await sandbox.run(["listen", "--durable", "archiver", "--count", "1", "chat"])
        #expect(result.lines == ["m2"])
        result = try await sandbox.run(["listen", "--durable", "archiver", "--history", "--count", "2", "chat"])
        #expect(result.lines == ["m3", "m4"], "--history applies only the first time a name is used; status \(result.status): \(result.stderr)")

        let status = try await sandbox.run(["status"])
        #expect(status.status == 0)
        #expect(status.lines.first?.split(separator: " ").map(String.init) == ["IDENTIFIER", "DURABLE", "RUNNING", "PID", "USER", "POSITION", "BEHIND", "LAST", "SEEN"],
                "\(status.output)")
        let row = try #require(status.lines.first { $0.contains("archiver") })
        let cells = row.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
        #expect(Array(cells.prefix(3)) == ["chat", "archiver", "no"] && cells[4] == "root" && cells[5] == "4" && cells[6] == "0", "\(row)")
        let json = try await sandbox.run(["status", "--json", "chat"])
        #expect(json.output.contains("\"durable\":\"archiver\",\"running\":false"), "\(json.output)")

        // One process at a time per name.
        let running = try sandbox.start(["listen", "-v", "--durable", "archiver", "chat"])
        #expect(await running.waitForStandardError(containing: "listening to"))
        let second = try await sandbox.run(["listen", "--durable", "archiver", "chat", "--timeout", "5"])
        #expect(second.status == 1 && second.stderr.contains("already running (process \(running.pid))"), "\(second.stderr)")
        let refused = try await sandbox.run(["forget", "archiver"])
        #expect(refused.status == 1 && refused.stderr.contains("is running"), "\(refused.stderr)")
        running.send(SIGINT)
        _ = await running.finish()

        let forgot = try await sandbox.run(["forget", "archiver"])
        #expect(forgot.status == 0 && forgot.stderr.contains("forgot the durable listener 'archiver' (1 identifier)"), "\(forgot.stderr)")
        #expect(try await sandbox.run(["forget", "archiver"]).status == 2)
        #expect(try await sandbox.run(["status"]).lines.count == 1, "only the header")
    }

    @Test("doctor on a working set-up: the container and why, the limits, the listeners, a test message; exit 0")
    func doctorOnAWorkingSetUp() async throws {
        // A group of this test's own: the machine's own containers of the default group
        // (outside the sandbox) would be another container of it, which doctor reports.
        let group = "group.test.doctor-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let sandbox = Sandbox(extra: ["WORMHOLE_GROUP": group])
        let listener = try sandbox.start(["listen", "-v", "chat"])
        #expect(await listener.waitForStandardError(containing: "listening to"))
        let result = try await sandbox.run(["doctor"])
        #expect(result.status == 0, "\(result.output)\(result.stderr)")
        #expect(result.output.contains("chosen by: WORMHOLE_GROUP=\(group)"))
        #expect(result.output.contains("path: \(sandbox.root.file("app-groups"))/\(group)"))
        #expect(result.output.contains("mode 0700"))
        #expect(result.output.contains("listeners: 1 running (on 'chat')"), "\(result.output)")
        #expect(result.output.contains("reached a listener in"))
        #expect(result.lines.last == "all is well")
        // Another group, which exists: nobody listens there, and doctor says what that means.
        #expect(try await sandbox.run(["send", "--group", "group.other", "x", "1"]).status == 0)
        let other = try await sandbox.run(["doctor", "--group", "group.other"])
        #expect(other.output.contains("chosen by: --group group.other"))
        #expect(other.output.contains("no process listens in this container now"))
        // A group a typo away: doctor creates nothing and names the group that exists.
        let typo = try await sandbox.run(["doctor", "--group", "group.ohter"])
        #expect(typo.status == 1 && typo.output.contains("did you mean 'group.other'?"), "\(typo.output)")
        #expect(!FileManager.default.fileExists(atPath: sandbox.root.file("app-groups/group.ohter")))
        listener.send(SIGINT)
        _ = await listener.finish()
    }

    @Test("doctor with one inotify watch left (a user namespace's limit): exit 1, each problem with its fix",
          .enabled(if: ResourceLimitTests.userNamespaces, "needs unshare -U -r and a writable /proc/sys/user"))
    func doctorOnABrokenSetUp() async throws {
        let sandbox = Sandbox()
        #expect(try await sandbox.run(["send", "x", "1"]).status == 0, "doctor never creates the container")
        let script = "echo 1 > /proc/sys/user/max_inotify_watches && exec \"$0\" \"$@\""
        let result = try await sandbox.run(["-U", "-r", "sh", "-c", script, Products.path("wormhole"), "doctor"],
                                           product: "/usr/bin/unshare", seconds: 30)
        #expect(result.status == 1)
        #expect(result.output.contains("of 1 (user.max_inotify_watches)"), "\(result.output)")
        #expect(result.stderr.contains("problem: 1 of this user's 1 inotify watches are left, and a listener needs 2"), "\(result.stderr)")
        #expect(result.stderr.contains("sysctl -w user.max_inotify_watches="))
        #expect(result.stderr.contains("problem: the test message failed: cannot watch"))
    }
}
