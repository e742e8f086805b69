import Foundation
import Synchronization
import Testing

/// `wormhole activation` (systemd path units that start a service on the first message)
/// and `--exit-when-idle` of `listen` and `respond`, with real processes: the units
/// `systemd-analyze verify` accepts, hostile identifiers, and a stand-in for systemd's
/// path unit (an inotify watch that starts the unit's command as systemd would) that
/// starts the service on a message and on a request.
@Suite("Activation on the first message", .timeLimit(.minutes(5)))
struct ActivationTests {
    static let analyzer = "/usr/bin/systemd-analyze"
    static var hasAnalyzer: Bool { FileManager.default.isExecutableFile(atPath: analyzer) }

    // MARK: - The units

    @Test("the units written for a user and for the system pass systemd-analyze verify, with nothing to say",
          .enabled(if: hasAnalyzer, "needs systemd-analyze"))
    func unitsVerify() async throws {
        let sandbox = Sandbox()
        let units = sandbox.root.file("units")
        let cli = Products.path("wormhole")
        var result = try await sandbox.run(["activation", "--group", "group.test.activation", "jobs", "--output", units + "/user", "--",
                                            cli, "listen", "--durable", "worker", "--history", "--exit-when-idle", "30", "jobs"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.output.contains("systemctl --user daemon-reload && systemctl --user enable --now wormhole-jobs.path"), "\(result.output)")
        result = try await sandbox.run(["activation", "--system", "--run-as", "root", "--directory", sandbox.root.file("shared"), "app.state",
                                        "--output", units + "/system", "--", cli, "respond", "--exit-when-idle", "30", "app.state", "--", "/bin/cat"])
        #expect(result.status == 0, "\(result.stderr)")

        let path = try String(contentsOfFile: units + "/user/wormhole-jobs.path", encoding: .utf8)
        #expect(path.contains("\nPathModified=\(sandbox.root.file("app-groups"))/group.test.activation/jobs.wormhole\n"), "\(path)")
        let service = try String(contentsOfFile: units + "/user/wormhole-jobs.service", encoding: .utf8)
        #expect(service.contains("\nExecStart=\"\(cli)\" \"listen\" \"--durable\" \"worker\" \"--history\" \"--exit-when-idle\" \"30\" \"jobs\"\n"), "\(service)")
        #expect(service.contains("\nEnvironment=\"WORMHOLE_GROUP=group.test.activation\"\n"))
        #expect(!service.contains("User="), "a user unit runs as its user")
        let system = try String(contentsOfFile: units + "/system/wormhole-app.state.service", encoding: .utf8)
        #expect(system.contains("\nUser=root\n") && system.contains("\nEnvironment=\"WORMHOLE_DIRECTORY=\(sandbox.root.file("shared"))\"\n"), "\(system)")

        let runtime = sandbox.root.file("xdg")
        #expect(mkdir(runtime, 0o700) == 0)
        for (flag, directory) in [("--user", "user/wormhole-jobs"), ("--system", "system/wormhole-app.state")] {
            let verify = try await sandbox.run([flag, "verify", units + "/" + directory + ".path", units + "/" + directory + ".service"],
                                               product: Self.analyzer, environment: ["XDG_RUNTIME_DIR": runtime])
            #expect(verify.status == 0 && verify.stderr.isEmpty && verify.output.isEmpty,
                    "systemd-analyze \(flag) verify: status \(verify.status): \(verify.output)\(verify.stderr)")
        }
    }

    @Test("hostile identifiers and command words: unit names as systemd-escape makes them, no line injected, verify accepts them",
          .enabled(if: hasAnalyzer, "needs systemd-analyze"))
    func hostileIdentifiers() async throws {
        let sandbox = Sandbox()
        let units = sandbox.root.file("units")
        let hostile = ["a-b c", "x%n$HOME", "q\"\\;", "é.ü-ß", "ends\\", "[Service]", "tab\u{2028}sep", "%%i %h"]
        let words = ["/bin/echo", "x\n[Service]\nUser=root", "$HOME", "%h", ";", "\"quoted\"", "back\\slash", "\t"]
        for identifier in hostile {
            let result = try await sandbox.run(["activation", "--group", "g", identifier, "--output", units, "--"] + words)
            #expect(result.status == 0, "\(identifier): \(result.stderr)")
            let escape = try await sandbox.run(["--", identifier], product: "/usr/bin/systemd-escape")
            let name = "wormhole-" + escape.output.trimmingCharacters(in: .newlines)
            for suffix in ["path", "service"] {
                let file = units + "/" + name + "." + suffix
                let text = try #require(try? String(contentsOfFile: file, encoding: .utf8), "\(identifier): no \(file)")
                let sections = text.split(separator: "\n").filter { $0.hasPrefix("[") }
                #expect(sections == (suffix == "path" ? ["[Unit]", "[Path]", "[Install]"] : ["[Unit]", "[Service]"]), "\(identifier): \(text)")
                #expect(!text.contains("\nUser="), "\(identifier): \(text)")
            }
            let service = try String(contentsOfFile: units + "/" + name + ".service", encoding: .utf8)
            let unit = try UnitCommand(serviceText: service, pathText: String(contentsOfFile: units + "/" + name + ".path", encoding: .utf8))
            #expect(unit.arguments == Array(words.dropFirst()) && unit.executable == words[0], "\(identifier): \(service)")
            #expect(unit.watched == sandbox.root.file("app-groups") + "/g/" + identifier + ".wormhole")
        }
        let names = try FileManager.default.contentsOfDirectory(atPath: units).map { units + "/" + $0 }
        #expect(names.count == 2 * hostile.count, "\(names)")
        let verify = try await sandbox.run(["--system", "verify"] + names, product: Self.analyzer)
        #expect(verify.status == 0 && verify.stderr.isEmpty, "\(verify.output)\(verify.stderr)")

        // What cannot be written is refused, naming the problem; nothing is written.
        let refused = sandbox.root.file("refused")
        let cases: [([String], String)] = [
            (["--group", "g", String(repeating: "é", count: 100)], "give a shorter one with --name"),
            (["--group", "g", "jobs", "--name", "evil\nExecStartPre=/bin/sh"], "--name"),
            (["--group", "g", "jobs", "--name", "a/b"], "--name"),
            (["--directory", "/tmp/x\n[Service]", "jobs"], "control character"),
            (["--group", "g", "bad/identifier"], "identifier"),
            (["--group", "g", "jobs", "--run-as", "root"], "--run-as"),
            (["--postgres", "postgres://db/x", "jobs"], "activation watches a log file in a container directory, which PostgreSQL does not have"),
        ]
        for (arguments, text) in cases {
            let result = try await sandbox.run(["activation"] + arguments + ["--output", refused, "--", "/bin/true"])
            #expect(result.status == 64 && result.stderr.contains(text), "\(arguments): status \(result.status): \(result.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: refused))
    }

    @Test("a system unit for a shared group runs as the given user with the group's Unix group; a group that is not shared is refused with another user",
          .enabled(if: hasAnalyzer && geteuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/sbin/useradd"),
                   "needs systemd-analyze, root and useradd"))
    func systemUnitForASharedGroup() async throws {
        let suffix = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        let (unixGroup, user, group) = ("wha\(suffix)", "whasvc\(suffix)", "group.test.activation-\(suffix)")
        let sandbox = Sandbox()
        defer {
            _ = try? SharedGroupTests.Deployment.system([Products.path("wormhole"), "share", group, "--revoke"])
            _ = try? SharedGroupTests.Deployment.system(["/usr/sbin/userdel", user])
            _ = try? SharedGroupTests.Deployment.system(["/usr/sbin/groupdel", unixGroup])
        }
        #expect(try SharedGroupTests.Deployment.system(["/usr/sbin/groupadd", unixGroup]) == 0)
        #expect(try SharedGroupTests.Deployment.system(["/usr/sbin/useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                                                        "--groups", unixGroup, user]) == 0)
        // Without the sandbox's override: a shared group's container is /run/wormhole/app-groups/<group>.
        var environment = sandbox.environment
        environment.removeValue(forKey: "WORMHOLE_APP_GROUPS_DIRECTORY")
        func run(_ arguments: [String]) async throws -> CommandResult {
            try await RunningCommand("wormhole", arguments, environment: environment, input: nil, in: sandbox.root).finish()
        }
        let shared = try await run(["share", group, "--unix-group", unixGroup])
        #expect(shared.status == 0, "\(shared.stderr)")
        let units = sandbox.root.file("units")
        let written = try await run(["activation", "--system", "--run-as", user, "--group", group, "jobs", "--output", units, "--",
                                     Products.path("wormhole"), "listen", "--queue", "workers", "--exit-when-idle", "60", "jobs"])
        #expect(written.status == 0, "\(written.stderr)")
        let service = try String(contentsOfFile: units + "/wormhole-jobs.service", encoding: .utf8)
        #expect(service.contains("\nUser=\(user)\nGroup=\(unixGroup)\n"), "\(service)")
        #expect(service.contains("\nEnvironment=\"WORMHOLE_GROUP=\(group)\"\n") && !service.contains("WORMHOLE_APP_GROUPS_DIRECTORY"), "\(service)")
        let path = try String(contentsOfFile: units + "/wormhole-jobs.path", encoding: .utf8)
        #expect(path.contains("\nPathModified=/run/wormhole/app-groups/\(group)/jobs.wormhole\n"), "\(path)")
        let verify = try await sandbox.run(["verify", units + "/wormhole-jobs.path", units + "/wormhole-jobs.service"], product: Self.analyzer)
        #expect(verify.status == 0 && verify.stderr.isEmpty && verify.output.isEmpty, "\(verify.output)\(verify.stderr)")

        // A group that is not shared: the user would find a container of its own.
        let refused = try await run(["activation", "--system", "--run-as", user, "--group", "group.test.not-shared-\(suffix)", "jobs",
                                     "--output", sandbox.root.file("refused"), "--", "/bin/true"])
        #expect(refused.status == 64 && refused.stderr.contains("depends on the user") && refused.stderr.contains("wormhole share"), "\(refused.stderr)")
        #expect(!FileManager.default.fileExists(atPath: sandbox.root.file("refused")))
    }

    // MARK: - Started on demand

    @Test("a durable listener started by a message gets what was passed while nothing ran, in order, exits 0 when idle, and resumes after it next time")
    func drainThenExit() async throws {
        let sandbox = Sandbox()
        let unit = try await UnitCommand.written(by: sandbox, identifier: "jobs",
                                                 command: ["listen", "--durable", "worker", "--history", "--exit-when-idle", "3", "jobs"])
        let standIn = try PathUnitStandIn(unit: unit, sandbox: sandbox)
        defer { standIn.stop() }
        // The log does not exist yet: the first message creates it, and that starts the service.
        #expect(!FileManager.default.fileExists(atPath: unit.watched))
        #expect(try await sandbox.run(["send", "--lines", "jobs"], input: Data("m1\nm2\nm3\n".utf8)).status == 0)
        let first = try #require(await standIn.service(number: 1), "the first message started no service")
        #expect(await first.waitForStandardOutput(containing: "m3"))
        #expect(first.process.isRunning, "it waits --exit-when-idle before it exits")
        #expect(try await sandbox.run(["send", "jobs", "m4"]).status == 0)
        let ended = await first.finish(seconds: 30)
        #expect(ended.status == 0 && !ended.signaled, "exit status \(ended.status): \(ended.stderr)")
        #expect(ended.lines == ["m1", "m2", "m3", "m4"], "\(ended.output)")

        // Passed while nothing runs: the next message starts it again, and it resumes after m4.
        #expect(try await sandbox.run(["send", "jobs", "m5"]).status == 0)
        #expect(try await sandbox.run(["send", "jobs", "m6"]).status == 0)
        let second = try #require(await standIn.service(number: 2), "the message after the exit started no service")
        let again = await second.finish(seconds: 30)
        #expect(again.status == 0 && again.lines == ["m5", "m6"], "status \(again.status): \(again.output)\(again.stderr)")
        #expect(standIn.startCount == 2)
    }

    @Test("a request passed while no responder runs is answered once the service it starts runs; the responder exits 0 when idle")
    func requestStartsTheResponder() async throws {
        let sandbox = Sandbox()
        let unit = try await UnitCommand.written(by: sandbox, identifier: "greet",
                                                 command: ["respond", "--exit-when-idle", "3", "greet", "--", "tr", "a-z", "A-Z"])
        let standIn = try PathUnitStandIn(unit: unit, sandbox: sandbox)
        defer { standIn.stop() }
        let reply = try await sandbox.run(["request", "--timeout", "30", "greet", "hello"])
        #expect(reply.status == 0 && reply.output == "HELLO\n", "status \(reply.status): \(reply.output)\(reply.stderr)")
        let first = try #require(await standIn.service(number: 1))
        let ended = await first.finish(seconds: 30)
        #expect(ended.status == 0 && !ended.signaled, "exit status \(ended.status): \(ended.stderr)")

        let second = try await sandbox.run(["request", "--timeout", "30", "greet", "again"])
        #expect(second.status == 0 && second.output == "AGAIN\n", "\(second.stderr)")
        #expect(standIn.startCount == 2)
        _ = await standIn.service(number: 2)?.finish(seconds: 30)
    }

    @Test("--exit-when-idle needs a durable name or a queue, and a positive number of seconds")
    func exitWhenIdleUsage() async throws {
        let sandbox = Sandbox()
        for arguments in [["listen", "--exit-when-idle", "1", "jobs"], ["listen", "--durable", "w", "--exit-when-idle", "0", "jobs"],
                          ["respond", "--exit-when-idle", "-1", "greet", "--", "cat"]] {
            let result = try await sandbox.run(arguments)
            #expect(result.status == 64 && result.stderr.contains("--exit-when-idle"), "\(arguments): \(result.stderr)")
        }
        // A work queue member ends when idle too, after the queue's backlog.
        #expect(try await sandbox.run(["send", "jobs", "q1"]).status == 0)
        let member = try await sandbox.run(["listen", "--queue", "workers", "--exit-when-idle", "3", "jobs"])
        #expect(member.status == 0 && member.lines == ["q1"], "\(member.status): \(member.stderr)")
    }
}

/// The command a written `.service` runs and the path its `.path` watches, read back
/// from the files as systemd reads them: `%%` is `%`, `$$` is `$`, the words in double
/// quotes with C escapes.
struct UnitCommand {
    var executable: String
    var arguments: [String]
    var environment: [String: String] = [:]
    var watched: String

    /// Writes the units of `identifier` in `sandbox`'s default group with `wormhole
    /// activation`, the service running `wormhole` with `command`, and reads them back.
    static func written(by sandbox: Sandbox, identifier: String, command: [String]) async throws -> UnitCommand {
        let units = sandbox.root.file("units")
        // The container exists (as after any use of the group); the log does not.
        #expect(try await sandbox.run(["path"]).status == 0)
        let result = try await sandbox.run(["activation", identifier, "--output", units, "--", Products.path("wormhole")] + command)
        try #require(result.status == 0, "\(result.stderr)")
        return try UnitCommand(serviceText: String(contentsOfFile: units + "/wormhole-\(identifier).service", encoding: .utf8),
                               pathText: String(contentsOfFile: units + "/wormhole-\(identifier).path", encoding: .utf8))
    }

    init(serviceText: String, pathText: String) throws {
        func value(_ key: String, in text: String) -> [String] {
            text.split(separator: "\n").filter { $0.hasPrefix(key + "=") }.map { String($0.dropFirst(key.count + 1)) }
        }
        let path = try #require(value("PathModified", in: pathText).first)
        watched = path.replacingOccurrences(of: "%%", with: "%")
        let words = try Self.words(try #require(value("ExecStart", in: serviceText).first), inCommand: true)
        executable = try #require(words.first)
        arguments = Array(words.dropFirst())
        for line in value("Environment", in: serviceText) {
            for word in try Self.words(line, inCommand: false) {
                let parts = word.split(separator: "=", maxSplits: 1).map(String.init)
                environment[parts[0]] = parts.count > 1 ? parts[1] : ""
            }
        }
    }

    struct Malformed: Error { let line: String }

    /// Splits `line` into double-quoted words as systemd does (the writer quotes every word).
    static func words(_ line: String, inCommand: Bool) throws -> [String] {
        var words: [String] = []
        var scalars = Array(line.replacingOccurrences(of: "%%", with: "%").unicodeScalars)[...]
        while let first = scalars.first {
            if first == " " { scalars.removeFirst(); continue }
            guard first == "\"" else { throw Malformed(line: line) }
            scalars.removeFirst()
            var bytes: [UInt8] = []
            while true {
                guard let scalar = scalars.popFirst() else { throw Malformed(line: line) }
                if scalar == "\"" { break }
                if scalar == "\\" {
                    guard let escaped = scalars.popFirst() else { throw Malformed(line: line) }
                    switch escaped {
                    case "n": bytes.append(0x0A)
                    case "t": bytes.append(0x09)
                    case "r": bytes.append(0x0D)
                    case "x":
                        guard scalars.count >= 2, let byte = UInt8(String(String.UnicodeScalarView(scalars.prefix(2))), radix: 16) else { throw Malformed(line: line) }
                        bytes.append(byte)
                        scalars.removeFirst(2)
                    default: bytes += Array(String(escaped).utf8)
                    }
                } else if scalar == "$", inCommand {
                    guard scalars.popFirst() == "$" else { throw Malformed(line: line) }
                    bytes.append(UInt8(ascii: "$"))
                } else {
                    bytes += Array(String(scalar).utf8)
                }
            }
            words.append(String(decoding: bytes, as: UTF8.self))
        }
        return words
    }
}

/// What systemd's path unit with `PathModified=` does, in the test: an inotify watch on
/// the log's directory (the log may not exist yet; systemd then watches the nearest
/// directory that does) for the log being created, written, moved in or closed after
/// writing; on such an event while the service does not run, it starts the service's
/// command with the service's environment. Events while the service runs are ignored,
/// as systemd does.
final class PathUnitStandIn: @unchecked Sendable {
    private let unit: UnitCommand
    private let sandbox: Sandbox
    private let descriptor: Int32
    private let services = Mutex<[RunningCommand]>([])
    private let stopped = Atomic<Bool>(false)
    private var thread: Thread?

    init(unit: UnitCommand, sandbox: Sandbox) throws {
        self.unit = unit
        self.sandbox = sandbox
        let directory = (unit.watched as NSString).deletingLastPathComponent
        descriptor = inotify_init1(Int32(IN_CLOEXEC | IN_NONBLOCK))
        try #require(descriptor >= 0)
        let mask = UInt32(IN_CREATE | IN_MODIFY | IN_MOVED_TO | IN_CLOSE_WRITE | IN_ATTRIB)
        try #require(inotify_add_watch(descriptor, directory, mask) >= 0)
        let name = (unit.watched as NSString).lastPathComponent
        let thread = Thread { [self] in watch(for: name) }
        self.thread = thread
        thread.start()
    }

    /// How many times the service was started.
    var startCount: Int { services.withLock { $0.count } }

    /// The `number`th start of the service, once it happened (within a minute).
    func service(number: Int) async -> RunningCommand? {
        var budget = Budget(seconds: 60)
        while !budget.isSpent {
            if let service = services.withLock({ $0.count >= number ? $0[number - 1] : nil }) { return service }
            await budget.pause()
        }
        return nil
    }

    func stop() {
        stopped.store(true, ordering: .sequentiallyConsistent)
        while thread?.isFinished == false { usleep(1000) }
        close(descriptor)
    }

    private func watch(for name: String) {
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while !stopped.load(ordering: .sequentiallyConsistent) {
            var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            // The timeout only lets stop() end the thread; events wake the poll.
            guard poll(&poller, 1, 100) > 0 else { continue }
            let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            guard count > 0 else { continue }
            var offset = 0
            var concerned = false
            while offset < count {
                let (length, eventName) = buffer.withUnsafeBytes { raw -> (Int, String) in
                    let event = raw.loadUnaligned(fromByteOffset: offset, as: inotify_event.self)
                    let nameBytes = raw[(offset + MemoryLayout<inotify_event>.size)...].prefix(Int(event.len)).prefix { $0 != 0 }
                    return (MemoryLayout<inotify_event>.size + Int(event.len), String(decoding: nameBytes, as: UTF8.self))
                }
                if eventName == name { concerned = true }
                offset += length
            }
            guard concerned else { continue }
            let running = services.withLock { $0.last?.process.isRunning ?? false }
            if !running, let started = try? RunningCommand(unit.executable, unit.arguments,
                                                           environment: sandbox.environment.merging(unit.environment) { $1 },
                                                           input: nil, in: sandbox.root) {
                services.withLock { $0.append(started) }
            }
        }
    }
}
