#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
@_spi(Backend) import Wormhole

/// `wormhole listen` at the edges of the process's limits: descriptors (`ulimit -n`) and
/// inotify watches (a user namespace's own `max_inotify_watches`, so that the rest of the
/// machine keeps its limits).
@Suite("Resource limits")
struct ResourceLimitTests {
    /// `sh -c 'ulimit -n N; exec wormhole ARGUMENTS'`.
    private func underDescriptorLimit(_ limit: Int, _ arguments: [String]) -> [String] {
        ["-c", "ulimit -n \(limit) && exec \"$0\" \"$@\"", Products.path("wormhole")] + arguments
    }

    @Test("with 'ulimit -n 32', listening to 15 identifiers refuses to start and says what to raise; nothing is half-listened")
    func tooLowADescriptorLimitRefusesToStart() async throws {
        let sandbox = Sandbox()
        let identifiers = (1...15).map { "id\($0)" }
        let result = try await sandbox.run(underDescriptorLimit(32, ["listen"] + identifiers + ["--timeout", "5"]), product: "/bin/sh")
        #expect(result.status == 1)
        #expect(result.stderr.contains("listening to 15 identifiers needs about"), "\(result.stderr)")
        #expect(result.stderr.contains("may open only 32 ('ulimit -n')"), "\(result.stderr)")
        #expect(result.stdout.isEmpty)
    }

    @Test("at a descriptor limit just large enough: every message arrives, and SIGINT, SIGTERM and SIGHUP each end the command by that signal",
          arguments: [SIGINT, SIGTERM, SIGHUP])
    func atTheDescriptorLimitSignalsStillWork(signal: Int32) async throws {
        let sandbox = Sandbox()
        let identifiers = (1...11).map { "id\($0)" }
        let listener = try sandbox.start(underDescriptorLimit(40, ["listen", "-v"] + identifiers), product: "/bin/sh")
        #expect(await listener.waitForStandardError(containing: "listening to"), "\(listener.stderr)")
        for identifier in identifiers {
            #expect(try await sandbox.run(["send", identifier, "to \(identifier)"]).status == 0)
        }
        #expect(await listener.waitForStandardOutput(containing: "to id11"))
        listener.send(signal)
        let result = await listener.finish(seconds: 20)
        #expect(result.signaled && result.status == signal, "status \(result.status), \(result.stderr)")
        #expect(Set(result.lines) == Set(identifiers.map { "to \($0)" }))
        #expect(!result.stderr.contains("Too many open files"), "\(result.stderr)")
    }

    @Test("under 'ulimit -n 256', listen --all hears every message of a container of 1,500 identifiers and top counts every identifier, each holding a few descriptors, not one per identifier",
          .timeLimit(.minutes(4)))
    func listenAllAndTopFollowEveryIdentifierUnderALowDescriptorLimit() async throws {
        let sandbox = Sandbox()
        let identifiers = (1...1500).map { "id\($0)" }
        do {
            let wormhole = try Wormhole(directory: sandbox.defaultContainer)
            for identifier in identifiers { try await wormhole.passMessage("before", identifier: identifier) }
        }
        let tap = try sandbox.start(underDescriptorLimit(256, ["listen", "--all", "--count", "7", "--timeout", "60", "--verbose"]), product: "/bin/sh")
        let top = try sandbox.start(underDescriptorLimit(256, ["top", "--json", "--interval", "0.5"]), product: "/bin/sh")
        #expect(await tap.waitForStandardError(containing: "listening to every identifier"), "\(tap.stderr)")
        #expect(await top.waitForStandardOutput(containing: "\"identifiers\""), "\(top.stderr)")
        // Held while both follow 1,500 identifiers (`sh` has exec'd them: the same pid).
        let open = { (pid: Int32) in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count) ?? -1 }
        #expect((0..<64).contains(open(tap.pid)), "listen --all holds \(open(tap.pid)) descriptors")
        #expect((0..<64).contains(open(top.pid)), "top holds \(open(top.pid)) descriptors")

        let chosen = [0, 249, 499, 749, 999, 1249, 1499].map { identifiers[$0] }
        let wormhole = try Wormhole(directory: sandbox.defaultContainer)
        for (index, identifier) in chosen.enumerated() { try await wormhole.passMessage("m\(index)", identifier: identifier) }
        let heard = await tap.finish(seconds: 90)
        #expect(heard.status == 0, "\(heard.stderr.prefix(2000))")
        #expect(Set(heard.lines) == Set(chosen.enumerated().map { "\($0.element): m\($0.offset)" }), "\(heard.lines)")
        #expect(!heard.stderr.contains("Too many open files"), "\(heard.stderr.prefix(2000))")

        // top: every identifier in its reports, and traffic under each chosen one.
        var listed = 0
        var busy = Set<String>()
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline && (listed < identifiers.count || !busy.isSuperset(of: chosen)) {
            let lines = String(decoding: top.stdout, as: UTF8.self).split(separator: "\n")
            for line in lines {
                guard let report = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                      let rows = report["identifiers"] as? [[String: Any]] else { continue }
                listed = max(listed, rows.count)
                for row in rows where (row["messagesPerSecond"] as? Double ?? 0) > 0 { busy.insert(row["identifier"] as? String ?? "") }
            }
            if !top.process.isRunning { break }
            try await Task.sleep(for: .milliseconds(200))
        }
        top.send(SIGINT)
        let counted = await top.finish(seconds: 30)
        #expect(listed == identifiers.count, "top listed at most \(listed) identifiers: \(counted.stderr.prefix(2000))")
        #expect(busy.isSuperset(of: chosen), "top saw traffic under \(busy.sorted())")
        #expect(!counted.stderr.contains("Too many open files"), "\(counted.stderr.prefix(2000))")
    }

    /// Whether this machine lets an unprivileged user namespace set its own inotify limits.
    static let userNamespaces: Bool = {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/unshare")
        process.arguments = ["-U", "-r", "sh", "-c", "echo 5 > /proc/sys/user/max_inotify_watches"]
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return false }
        process.waitUntilExit()
        return process.terminationStatus == 0
    }()

    @Test("out of inotify watches (user.max_inotify_watches = 1 in a user namespace): listen fails at once, quoting the limit in force and the sysctl to raise",
          .enabled(if: userNamespaces, "needs unshare -U -r and a writable /proc/sys/user"))
    func outOfWatchesIsAnErrorQuotingTheLimit() async throws {
        let sandbox = Sandbox()
        let script = "echo 1 > /proc/sys/user/max_inotify_watches && exec \"$0\" \"$@\""
        let result = try await sandbox.run(["-U", "-r", "sh", "-c", script, Products.path("wormhole"), "listen", "x", "--timeout", "5"],
                                           product: "/usr/bin/unshare", seconds: 30)
        #expect(result.status == 1, "\(result.stderr)")
        #expect(result.stderr.contains("reached the limit of inotify watches (user.max_inotify_watches = 1; raise it with 'sysctl -w user.max_inotify_watches=N')"),
                "\(result.stderr)")
    }
}
