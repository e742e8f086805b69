#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing

/// Application groups shared by several Unix users (`wormhole share`), with real users
/// made by `useradd` and commands run as each by `runuser`, as an administrator deploys
/// a system service and a desktop user's widget. Needs root (CI runs as root); every
/// user, group and shared container a test makes is removed after it.
@Suite("Shared application groups", .serialized,
       .enabled(if: geteuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/sbin/useradd"),
                "needs root, useradd and runuser"))
struct SharedGroupTests {
    /// A Unix group, its members and an outsider, made for one test and removed after it.
    final class Deployment: Sendable {
        let suffix = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        var unixGroup: String { "whg\(suffix)" }
        var service: String { "whsvc\(suffix)" }
        var desktop: String { "whdesk\(suffix)" }
        var outsider: String { "whevil\(suffix)" }
        var group: String { "group.test.shared-\(suffix)" }
        var container: String { "/run/wormhole/app-groups/\(group)" }
        let sandbox = Sandbox()

        init() throws {
            try Self.system(["/usr/sbin/groupadd", unixGroup])
            // The service as a system user without a home or a login, as a package makes one.
            try Self.system(["/usr/sbin/useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "--groups", unixGroup, service])
            try Self.system(["/usr/sbin/useradd", "--no-create-home", "--groups", unixGroup, desktop])
            try Self.system(["/usr/sbin/useradd", "--no-create-home", outsider])
        }

        deinit {
            _ = try? Self.system([Products.path("wormhole"), "share", group, "--revoke"])
            for user in [service, desktop, outsider] {
                if let uid = Self.uid(user) {
                    for root in ["/dev/shm", "/tmp"] { try? FileManager.default.removeItem(atPath: "\(root)/app-groups-\(uid)") }
                }
                _ = try? Self.system(["/usr/sbin/userdel", user])
            }
            _ = try? Self.system(["/usr/sbin/groupdel", unixGroup])
        }

        static func uid(_ user: String) -> uid_t? { getpwnam(user)?.pointee.pw_uid }

        @discardableResult
        static func system(_ arguments: [String]) throws -> Int32 {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: arguments[0])
            process.arguments = Array(arguments.dropFirst())
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            process.waitUntilExit()
            return process.terminationStatus
        }

        /// `wormhole` as `user` in a bare environment (no WORMHOLE_*, no XDG_RUNTIME_DIR,
        /// no HOME of its own), with umask 077, as a service or a cron job starts.
        func start(as user: String, _ arguments: [String], command: String? = nil) throws -> RunningCommand {
            let program = command ?? Products.runnableByAnyone("wormhole")
            return try sandbox.start(["-u", user, "--", "/usr/bin/env", "-i", "PATH=/usr/bin:/bin", "LANG=C.UTF-8",
                                      "/bin/sh", "-c", "umask 077; cd /; exec \"$@\"", "sh", program] + arguments,
                                     product: "/usr/sbin/runuser")
        }

        func run(as user: String, _ arguments: [String], command: String? = nil) async throws -> CommandResult {
            try await start(as: user, arguments, command: command).finish()
        }

        /// `wormhole share` as root, without the sandbox's override.
        func share(_ arguments: [String]) async throws -> CommandResult {
            try await sandbox.run(["share", group] + arguments, environment: [:])
        }
    }

    @Test("a system service and a desktop user's widget exchange messages both ways through a shared group, durable names and compaction included; files keep the group's access whatever the umask",
          .timeLimit(.minutes(3)))
    func serviceAndWidgetShareAGroup() async throws {
        let deployment = try Deployment()
        let shared = try await deployment.share(["--unix-group", deployment.unixGroup])
        #expect(shared.status == 0, "\(shared.stderr)")
        #expect(shared.output.contains("shared \(deployment.group) with Unix group \(deployment.unixGroup)"))
        let again = try await deployment.share(["--unix-group", deployment.unixGroup])
        #expect(again.status == 0 && again.output.contains("nothing changed"), "share is idempotent: \(again.output)")
        var status = stat()
        #expect(lstat(deployment.container, &status) == 0)
        #expect(status.st_uid == 0 && status.st_gid == getgrnam(deployment.unixGroup)!.pointee.gr_gid && status.st_mode & 0o7777 == 0o2770)

        let group = ["--group", deployment.group]
        // The service listens under a durable name; the widget listens live.
        let service = try deployment.start(as: deployment.service, ["listen", "--durable", "svc", "--count", "40", "--timeout", "150", "--verbose", "to-service"] + group)
        let widget = try deployment.start(as: deployment.desktop, ["listen", "--count", "40", "--timeout", "150", "--verbose", "to-widget"] + group)
        #expect(await service.waitForStandardError(containing: "listening to"))
        #expect(await widget.waitForStandardError(containing: "listening to"))
        // Each side passes 40 messages from one shell of its user (a process per message,
        // as a script's sends are), both at once.
        func sends(_ identifier: String, _ text: String) -> [String] {
            ["-c", "for n in $(seq 1 40); do \"$0\" send --group \(deployment.group) \(identifier) \"\(text) $n\" || exit 1; done", Products.runnableByAnyone("wormhole")]
        }
        let widgetSends = try deployment.start(as: deployment.desktop, sends("to-service", "from widget"), command: "/bin/sh")
        let serviceSends = try deployment.start(as: deployment.service, sends("to-widget", "from service"), command: "/bin/sh")
        let widgetSent = await widgetSends.finish(seconds: 150)
        let serviceSent = await serviceSends.finish(seconds: 150)
        #expect(widgetSent.status == 0 && serviceSent.status == 0, "\(widgetSent.stderr) \(serviceSent.stderr)")
        let heardByService = await service.finish()
        let heardByWidget = await widget.finish()
        #expect(heardByService.status == 0, "\(heardByService.stderr)")
        #expect(heardByService.lines == (1...40).map { "from widget \($0)" })
        #expect(heardByWidget.lines == (1...40).map { "from service \($0)" }, "\(heardByWidget.stderr)")
        #expect(heardByService.stderr.contains(deployment.container), "the service resolved the shared container: \(heardByService.stderr)")
        // Each record carries its sender's uid, and --verbose names the user.
        let desktopUID = try #require(Deployment.uid(deployment.desktop))
        #expect(heardByService.stderr.contains("'to-service' #1 from pid ") && heardByService.stderr.contains("uid \(desktopUID) (\(deployment.desktop))"), "\(heardByService.stderr)")

        // The durable name resumes after what it printed, from a message the other user
        // passed while it was not running; the other member sees it in status.
        #expect(try await deployment.run(as: deployment.desktop, ["send", "to-service", "while away"] + group).status == 0)
        let seen = try await deployment.run(as: deployment.desktop, ["status", "to-service"] + group)
        #expect(seen.status == 0 && seen.output.contains("svc"), "a member sees the other's durable listener: \(seen.output) \(seen.stderr)")
        #expect(seen.lines.contains { $0.contains(" svc ") && $0.contains(" \(deployment.service) ") }, "status names the listener's user: \(seen.output)")
        let resumed = try await deployment.run(as: deployment.service, ["listen", "--durable", "svc", "--count", "1", "--timeout", "20", "to-service"] + group)
        #expect(resumed.status == 0 && resumed.lines == ["while away"], "\(resumed.stderr)")

        // Every file and directory in the container: the group's, readable and writable
        // by it, nothing for others, though every command ran with umask 077.
        let enumerator = FileManager.default.enumerator(atPath: deployment.container)
        var checked = 0
        while let name = enumerator?.nextObject() as? String {
            let path = deployment.container + "/" + name
            #expect(lstat(path, &status) == 0)
            let isDirectory = status.st_mode & S_IFMT == S_IFDIR
            #expect(status.st_gid == getgrnam(deployment.unixGroup)!.pointee.gr_gid, "\(path) has group \(status.st_gid)")
            #expect(status.st_mode & 0o7777 == (isDirectory ? 0o2770 : 0o660), "\(path) has mode \(String(status.st_mode & 0o7777, radix: 8))")
            checked += 1
        }
        #expect(checked >= 5, "logs, claims, durable positions, their directories")

        // Revoking removes it; members then use their own containers again.
        let revoked = try await deployment.share(["--revoke"])
        #expect(revoked.status == 0 && !FileManager.default.fileExists(atPath: deployment.container))
        #expect(try await deployment.share(["--revoke"]).output.contains("nothing changed"))
    }

    @Test("a directory of the container that another member has just made, under its umask, and not yet given the group's mode is waited for: the other user's listener starts",
          .timeLimit(.minutes(1)))
    func directoryMadeByAnotherMemberIsWaitedFor() async throws {
        let deployment = try Deployment()
        let shared = try await deployment.share(["--unix-group", deployment.unixGroup])
        try #require(shared.status == 0, "\(shared.stderr)")
        // `.listeners` as the desktop user's process leaves it between its `mkdir` (umask
        // 077) and the `chmod` that follows; the service's listener needs it at once. The
        // CI run of 2a3395d failed this way: "cannot open '.../.listeners': Permission denied".
        let listeners = deployment.container + "/.listeners"
        #expect(mkdir(listeners, 0o700) == 0)
        let desktopUID = try #require(Deployment.uid(deployment.desktop))
        #expect(chown(listeners, desktopUID, getgrnam(deployment.unixGroup)!.pointee.gr_gid) == 0)
        let group = ["--group", deployment.group]
        let service = try deployment.start(as: deployment.service, ["listen", "--durable", "svc", "--count", "1", "--timeout", "30", "--verbose", "to-service"] + group)
        // A pause, not a wait: nothing marks the service's refused open of `.listeners`
        // (a failed open(2) raises no inotify event, and the listener says nothing until
        // it listens). 300 ms is well inside the second the library keeps trying.
        try await Task.sleep(for: .milliseconds(300))
        #expect(chmod(listeners, 0o2770) == 0)
        #expect(await service.waitForStandardError(containing: "listening to"))
        #expect(try await deployment.run(as: deployment.desktop, ["send", "to-service", "hello"] + group).status == 0)
        let heard = await service.finish()
        #expect(heard.status == 0 && heard.lines == ["hello"], "\(heard.stderr)")
    }

    @Test("the Today example as a deployment: the app as a system service's user and the widget as a desktop user, both through Wormhole(applicationGroupIdentifier:), meet in the shared container both ways",
          .timeLimit(.minutes(2)))
    func todayAppAndWidgetAsTwoUsers() async throws {
        let deployment = try Deployment()
        #expect(try await deployment.share(["--unix-group", deployment.unixGroup]).status == 0)
        let app = try deployment.start(as: deployment.service, ["app", "--group", deployment.group, "--interval", "0.1", "--increment", "100", "--updates", "80"],
                                       command: Products.runnableByAnyone("today-widget"))
        #expect(await app.waitForStandardOutput(containing: "app: sharing in \(deployment.container)/wormhole"))
        #expect(await app.waitForStandardOutput(containing: "update #2"))
        let widget = try await deployment.run(as: deployment.desktop, ["widget", "--group", deployment.group, "--press", "--once"],
                                              command: Products.runnableByAnyone("today-widget"))
        #expect(widget.status == 0, "\(widget.stderr)")
        #expect(widget.output.contains("widget: pressed [ Reset ]") && widget.output.contains(" of 10,000 steps"), "\(widget.output)")
        #expect(await app.waitForStandardOutput(containing: "pressed reset"), "the app, another user, heard the widget's button")
        let ended = await app.finish()
        #expect(ended.status == 0, "\(ended.stderr)")
    }

    @Test("an outsider's attacks on a shared group are each refused: pass, read, list, status, listen, clear, --directory, listing or reading its files, share; a member cannot rename or replace the container; a directory planted in /dev/shm does not capture a member",
          .timeLimit(.minutes(3)))
    func outsiderAndMemberAttacksAreRefused() async throws {
        let deployment = try Deployment()
        // Before the share: the outsider plants a container where the desktop user's
        // per-user fallback would be.
        let desktopUID = try #require(Deployment.uid(deployment.desktop))
        let planted = "/dev/shm/app-groups-\(desktopUID)"
        #expect(try await deployment.run(as: deployment.outsider, [planted], command: "/bin/mkdir").status == 0)
        let refused = try await deployment.run(as: deployment.desktop, ["send", "--group", deployment.group, "x", "secret"])
        #expect(refused.status != 0 && refused.stderr.contains("belongs to user"), "\(refused.stderr)")

        #expect(try await deployment.share(["--unix-group", deployment.unixGroup]).status == 0)
        let group = ["--group", deployment.group]
        let sent = try await deployment.run(as: deployment.desktop, ["send", "x", "secret"] + group)
        #expect(sent.status == 0, "after the share the member uses the shared container, not the planted one: \(sent.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: planted).isEmpty)

        let evil = deployment.outsider
        for attempt in [["send", "x", "forged"] + group, ["read", "x"] + group, ["list"] + group, ["status"] + group,
                        ["listen", "--timeout", "2", "x"] + group, ["clear", "x"] + group,
                        ["read", "--directory", deployment.container, "x"]] {
            let result = try await deployment.run(as: evil, attempt)
            #expect(result.status != 0 && result.stdout.isEmpty, "\(attempt): \(result.status) \(result.output) \(result.stderr)")
            #expect(result.stderr.contains("not a member") || result.stderr.contains("Permission denied"), "\(attempt): \(result.stderr)")
        }
        #expect(try await deployment.run(as: evil, [deployment.container], command: "/bin/ls").status != 0)
        let share = try await deployment.run(as: evil, ["share", deployment.group, "--unix-group", "root"])
        #expect(share.status != 0 && share.stderr.contains("root"), "\(share.stderr)")
        #expect(try await deployment.run(as: deployment.desktop, ["read", "x"] + group).output == "secret\n", "nothing was forged or cleared")

        // A member cannot take the container over: rename it, change its mode, or put
        // another in its place.
        let member = deployment.desktop
        #expect(try await deployment.run(as: member, [deployment.container, deployment.container + ".mine"], command: "/bin/mv").status != 0)
        #expect(try await deployment.run(as: member, ["777", deployment.container], command: "/bin/chmod").status != 0)
        #expect(try await deployment.run(as: member, ["/run/wormhole/app-groups/group.test.other"], command: "/bin/mkdir").status != 0)
        var status = stat()
        #expect(lstat(deployment.container, &status) == 0 && status.st_uid == 0 && status.st_mode & 0o7777 == 0o2770)
    }
}

extension SharedGroupTests {
    @Test("a work queue in a shared group with members of two Unix users: each job to one member, files the group's; a request whose responder (one user) is SIGKILLed while it runs is answered by the other user's",
          .timeLimit(.minutes(3)))
    func workQueueOfTwoUsers() async throws {
        let deployment = try Deployment()
        #expect(try await deployment.share(["--unix-group", deployment.unixGroup]).status == 0)
        let group = ["--group", deployment.group]
        func queues(_ identifier: String) async throws -> [[String: Any]] {
            let status = try await deployment.run(as: deployment.desktop, ["status", "--json", identifier] + group)
            return status.lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }.filter { $0["queue"] != nil }
        }

        // One member of each user; the jobs from the desktop user, in one batch.
        let total = 60
        let members = try [deployment.service, deployment.desktop].map { user in
            try deployment.start(as: user, ["listen", "--queue", "workers", "--timeout", "120", "--verbose", "jobs"] + group)
        }
        for member in members { #expect(await member.waitForStandardError(containing: "taking messages of")) }
        let sent = try await deployment.run(as: deployment.desktop, ["-c", "seq 1 \(total) | \"$0\" send --lines --group \(deployment.group) jobs", Products.runnableByAnyone("wormhole")],
                                            command: "/bin/sh")
        #expect(sent.status == 0, "\(sent.stderr)")
        var queue: [String: Any]?
        for _ in 0..<60 {
            queue = try await queues("jobs").first
            if queue?["acknowledged"] as? Int == total { break }
            try await Task.sleep(for: .milliseconds(250))
        }
        #expect(queue?["acknowledged"] as? Int == total && queue?["damaged"] as? Bool == false, "\(String(describing: queue))")
        #expect((queue?["members"] as? [Any])?.count == 2, "both users' members, as the desktop user sees them: \(String(describing: queue))")
        var printed: [String] = []
        for member in members {
            member.send(SIGTERM)
            let ended = await member.finish()
            #expect(!ended.stderr.contains("error"), "\(ended.stderr)")
            printed += ended.lines
        }
        #expect(printed.sorted() == (1...total).map(String.init).sorted(), "each job printed once, by one member or the other: \(printed.count) lines")

        // Request/reply across the users: the service's responder takes the request and is
        // killed while its command runs; the desktop user's responder answers it.
        let command = ["--", "/bin/sh", "-c", "sleep 1; id -un"]
        let first = try deployment.start(as: deployment.service, ["respond", "ask", "--verbose"] + group + command)
        #expect(await first.waitForStandardError(containing: "answering requests"))
        let request = try deployment.start(as: deployment.desktop, ["request", "ask", "who", "--timeout", "30"] + group)
        var holder: Int32?
        for _ in 0..<100 where holder == nil {
            let members = try await queues("ask").first { $0["queue"] as? String == "responders" }?["members"] as? [[String: Any]] ?? []
            holder = members.first { $0["handling"] as? Bool == true }.flatMap { ($0["pid"] as? Int).map(Int32.init) }
            if holder == nil { try await Task.sleep(for: .milliseconds(20)) }
        }
        guard let killed = holder else {
            Issue.record("the service's responder did not take the request")
            first.send(SIGTERM)
            request.send(SIGTERM)
            for command in members + [first, request] { _ = await command.finish() }
            return
        }
        let second = try deployment.start(as: deployment.desktop, ["respond", "ask", "--verbose"] + group + command)
        #expect(await second.waitForStandardError(containing: "answering requests"))
        #expect(kill(killed, SIGKILL) == 0)
        let answered = await request.finish(seconds: 60)
        #expect(answered.status == 0 && answered.lines == [deployment.desktop], "answered by the other user's responder: \(answered.output) \(answered.stderr)")
        _ = await first.finish()
        second.send(SIGTERM)
        _ = await second.finish()

        // The queue's files are the group's, whichever user made them.
        let gid = getgrnam(deployment.unixGroup)!.pointee.gr_gid
        var checked = 0
        let enumerator = FileManager.default.enumerator(atPath: deployment.container + "/.queues")
        while let name = enumerator?.nextObject() as? String {
            var status = stat()
            #expect(lstat(deployment.container + "/.queues/" + name, &status) == 0)
            #expect(status.st_gid == gid && status.st_mode & 0o070 != 0, "\(name): group \(status.st_gid), mode \(String(status.st_mode & 0o7777, radix: 8))")
            checked += 1
        }
        #expect(checked >= 6, "the queues' directories and state files")
    }
}

extension SharedGroupTests {
    @Test("what a member killed between making a file and giving it the group's mode left (a log 0600 and .listeners 2700 of the desktop user) is named, with its user and the fix, to the other user's send and listen; the desktop user's next commands repair both",
          .timeLimit(.minutes(2)))
    func wrongModeLeftByAKilledMemberIsNamedAndRepaired() async throws {
        let deployment = try Deployment()
        try #require(try await deployment.share(["--unix-group", deployment.unixGroup]).status == 0)
        let desktopUID = try #require(Deployment.uid(deployment.desktop))
        let gid = getgrnam(deployment.unixGroup)!.pointee.gr_gid
        // What the desktop user's process, with umask 077, left when it was killed
        // between its `openat`/`mkdirat` and its `fchmod`.
        let listeners = deployment.container + "/.listeners"
        let log = deployment.container + "/x.wormhole"
        #expect(mkdir(listeners, 0o700) == 0 && chmod(listeners, 0o2700) == 0 && chown(listeners, desktopUID, gid) == 0)
        let fd = open(log, O_CREAT | O_EXCL | O_WRONLY, 0o600)
        #expect(fd >= 0 && fchown(fd, desktopUID, gid) == 0 && fchmod(fd, 0o600) == 0)
        close(fd)
        let group = ["--group", deployment.group]

        // The service's user may use neither: each command says whose it is and what to run.
        let sent = try await deployment.run(as: deployment.service, ["send", "x", "hi"] + group)
        #expect(sent.status == 1, "\(sent.stderr)")
        #expect(sent.stderr.contains("'\(log)' belongs to user \(deployment.desktop) (uid \(desktopUID)) and has mode 600")
                && sent.stderr.contains("chmod 660 \(log)"), "\(sent.stderr)")
        let listened = try await deployment.run(as: deployment.service, ["listen", "--timeout", "20", "y"] + group)
        #expect(listened.status == 1, "\(listened.stderr)")
        #expect(listened.stderr.contains("'\(listeners)' belongs to user \(deployment.desktop) (uid \(desktopUID)) and has mode 2700")
                && listened.stderr.contains("chmod 2770 \(listeners)"), "\(listened.stderr)")

        // The desktop user's next pass and listener repair them; then the service hears.
        #expect(try await deployment.run(as: deployment.desktop, ["send", "x", "hello"] + group).status == 0)
        let heard = try await deployment.run(as: deployment.desktop, ["listen", "--history", "--count", "1", "--timeout", "20", "x"] + group)
        #expect(heard.status == 0 && heard.lines == ["hello"], "\(heard.stderr)")
        var status = stat()
        #expect(lstat(log, &status) == 0 && status.st_mode & 0o7777 == 0o660)
        #expect(lstat(listeners, &status) == 0 && status.st_mode & 0o7777 == 0o2770)
        let service = try await deployment.run(as: deployment.service, ["listen", "--history", "--count", "1", "--timeout", "20", "x"] + group)
        #expect(service.status == 0 && service.lines == ["hello"], "\(service.stderr)")
    }

    @Test("'share --revoke' while members listen (one live, one under a durable name, a work queue member; two users): each ends at once with an error that says the shared container was removed, instead of waiting in the deleted directory; a sender's next pass fails so, instead of making a directory in its place",
          .timeLimit(.minutes(2)))
    func revokingEndsTheListenersWithAnError() async throws {
        let deployment = try Deployment()
        try #require(try await deployment.share(["--unix-group", deployment.unixGroup]).status == 0)
        let group = ["--group", deployment.group]
        let plain = try deployment.start(as: deployment.service, ["listen", "--verbose", "--timeout", "30", "x"] + group)
        let durable = try deployment.start(as: deployment.desktop, ["listen", "--verbose", "--durable", "d", "--timeout", "30", "x"] + group)
        let member = try deployment.start(as: deployment.service, ["listen", "--verbose", "--queue", "q", "--timeout", "30", "jobs"] + group)
        let tap = try deployment.start(as: deployment.desktop, ["listen", "--verbose", "--all", "--timeout", "30"] + group)
        let observer = try deployment.start(as: deployment.service, ["observe", "--verbose", "--timeout", "30", "x"] + group)
        #expect(await tap.waitForStandardError(containing: "listening to"))
        #expect(await observer.waitForStandardError(containing: "observing"))
        #expect(await plain.waitForStandardError(containing: "listening to"))
        #expect(await durable.waitForStandardError(containing: "listening to"))
        #expect(await member.waitForStandardError(containing: "taking messages of"))
        // A sender that stays (root's, one process for every line) passes one message before.
        let sender = try deployment.sandbox.start(["send", "--lines", "--directory", deployment.container, "x"], interactive: true)
        try sender.type("before\n")
        #expect(await plain.waitForStandardOutput(containing: "before"))
        #expect(try await deployment.share(["--revoke"]).status == 0)
        let left = await member.finish(seconds: 25)
        #expect(left.status == 1, "\(left.status) \(left.stderr)")
        #expect(left.stderr.contains("stopped taking messages of 'jobs': the shared container '\(deployment.container)' was removed"), "\(left.stderr)")
        for (listener, printed) in [(plain, "before"), (durable, "before"), (tap, "x: before"), (observer, "x")] {
            let ended = await listener.finish(seconds: 25)
            #expect(ended.status == 1, "\(ended.status) \(ended.stderr)")
            // (The observer hears the log's header and its first record written: one post
            // or two.)
            #expect(listener === observer ? !ended.lines.isEmpty && Set(ended.lines) == [printed] : ended.lines == [printed],
                    "the other user's message, before the revocation: \(ended.output)")
            let reports = ended.stderr.components(separatedBy: "the shared container '\(deployment.container)' was removed ('wormhole share --revoke'").count - 1
            // Once, also by the tap on every identifier (not once per identifier).
            #expect(reports == 1, "\(ended.stderr)")
        }
        // The sender's next pass fails, saying so, and makes no directory in its place.
        try sender.type("after\n")
        try sender.closeInput()
        let sent = await sender.finish(seconds: 25)
        #expect(sent.status == 1 && sent.stderr.contains("the shared container '\(deployment.container)' was removed"), "\(sent.status) \(sent.stderr)")
        // Nothing made the shared container again; members use their own.
        #expect(!FileManager.default.fileExists(atPath: deployment.container))
        let own = try await deployment.run(as: deployment.service, ["path"] + group)
        #expect(own.status == 0 && !own.output.contains("/run/wormhole"), "\(own.output) \(own.stderr)")
    }
}
