#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import WormholeTestSupport

/// What a member of a shared container leaves when it is killed while it makes files:
/// the test agent makes everything a process makes in a container (a log, the claims
/// directories, a claim, a durable position, a work queue's directories, state and
/// member file, a notification file) with umask 077, as a service with `UMask=0077`, and
/// ends (as `kill -9`) right after each of its system calls in turn. Members of other
/// users can use only what has the group's mode (files 0660, directories 2770): after
/// every run, every file and directory at a name members use must have it. Needs root (a
/// shared container is root's).
@Suite("Shared containers: a member killed while it makes a file", .serialized,
       .enabled(if: geteuid() == 0, "needs root: a shared container is root's"))
struct SharedModeTests {
    /// A Unix group id for the container; no group needs to exist for it.
    static let groupID: gid_t = 4242

    /// Files and directories under `container`, at a name that members use, without the
    /// group's mode and group ("path mode group"). What is being made under a temporary
    /// name (`.<name>.<random>.making`) is used by nobody.
    static func wrongModes(_ container: String) -> [String] {
        var wrong: [String] = []
        let enumerator = FileManager.default.enumerator(atPath: container)
        while let name = enumerator?.nextObject() as? String {
            if (name as NSString).lastPathComponent.hasSuffix(".making") { continue }
            var status = stat()
            guard lstat(container + "/" + name, &status) == 0 else { continue }
            let wanted: mode_t = status.st_mode & S_IFMT == S_IFDIR ? 0o2770 : 0o660
            if status.st_mode & 0o7777 != wanted || status.st_gid != groupID {
                wrong.append("\(name) \(String(status.st_mode & 0o7777, radix: 8)) \(status.st_gid)")
            }
        }
        return wrong
    }

    @Test("a member (umask 077) killed right after any system call while it makes a log, claims, a durable position, a work queue and a notification file in a shared container leaves nothing at a name members use without the group's mode",
          .timeLimit(.minutes(10)))
    func killedMemberLeavesNoFileWithoutTheGroupsMode() async throws {
        // A shared container as 'wormhole share' makes one: root's, setgid, 2770, in a
        // parent of root's that only root may write to.
        let base = TemporaryDirectory("wormhole-shared-modes")
        let container = base.file("group")
        #expect(mkdir(container, 0o700) == 0 && chown(container, 0, Self.groupID) == 0 && chmod(container, 0o2770) == 0)
        let environment = ["WORMHOLE_AGENT_UMASK": "077"]

        let dry = try Agent.run(["fault", container, "make", "0", "exit"], environment: environment)
        let calls = try #require(dry.output.split(separator: "\n").first { $0.hasPrefix("calls ") }.flatMap { Int($0.dropFirst(6)) })
        #expect(dry.output.contains("\nok"), "\(dry.output)")
        #expect(Self.wrongModes(container).isEmpty, "a run that was not killed: \(Self.wrongModes(container))")
        #expect(calls > 20, "\(dry.output)")

        var violations: [String] = []
        for at in 1...calls {
            for name in (try? FileManager.default.contentsOfDirectory(atPath: container)) ?? [] {
                try? FileManager.default.removeItem(atPath: container + "/" + name)
            }
            let run = try Agent.run(["fault", container, "make", String(at), "exit"], environment: environment)
            for wrong in Self.wrongModes(container) {
                violations.append("killed after call \(at) of \(calls): \(wrong) (\(run.status))")
            }
        }
        #expect(violations.isEmpty, "\(violations.count) files or directories without the group's mode: \(violations.prefix(20).joined(separator: "; "))")
    }
}
