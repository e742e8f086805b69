#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing

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
