#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import WormholeTestSupport

/// Which container a command uses, from the environments processes really start in.
@Suite("Container resolution from the command line")
struct ContainerResolutionCommandTests {
    /// `wormhole` with WORMHOLE_APP_GROUPS_DIRECTORY removed and `variables` set, so that
    /// the group resolves as it does for a user's processes.
    static func unsandboxed(_ sandbox: Sandbox, _ variables: [String], _ arguments: [String]) throws -> RunningCommand {
        try sandbox.start(["-u", "WORMHOLE_APP_GROUPS_DIRECTORY", "-u", "XDG_RUNTIME_DIR"] + variables + [Products.path("wormhole")] + arguments,
                          product: "/usr/bin/env")
    }

    @Test("the silent split of issue 20: a listener started with XDG_RUNTIME_DIR=/tmp/x hears a plain send; doctor with an override names the other container and who listens there, and is not well",
          .timeLimit(.minutes(2)))
    func listenerWithAnotherRuntimeDirectoryHearsAPlainSend() async throws {
        let sandbox = Sandbox()
        let runtime = TemporaryDirectory()
        let group = "group.test.split-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let resolved = try await Self.unsandboxed(sandbox, [], ["path", "--group", group]).finish()
        let container = resolved.output.trimmingCharacters(in: .newlines)
        defer { try? FileManager.default.removeItem(atPath: container) }
        #expect(resolved.status == 0 && container.hasSuffix("/" + group), "\(resolved.stderr)")

        let listener = try Self.unsandboxed(sandbox, ["XDG_RUNTIME_DIR=\(runtime.path)"], ["listen", "--group", group, "--count", "1", "--timeout", "30", "--verbose", "svc"])
        #expect(await listener.waitForStandardError(containing: "listening to"))
        #expect(try await Self.unsandboxed(sandbox, [], ["send", "--group", group, "svc", "hi"]).finish().status == 0)
        let heard = await listener.finish()
        #expect(heard.status == 0 && heard.lines == ["hi"], "\(heard.stderr)")
        #expect(heard.stderr.contains("listening to 'svc' in \(container)"))
        #expect(!FileManager.default.fileExists(atPath: runtime.path + "/app-groups"))

        // An override still wins, and then doctor says so and finds the group's own
        // container, with its listener.
        let live = try Self.unsandboxed(sandbox, [], ["listen", "--group", group, "--timeout", "30", "--verbose", "svc"])
        #expect(await live.waitForStandardError(containing: "listening to"))
        let override = "WORMHOLE_APP_GROUPS_DIRECTORY=\(sandbox.root.file("elsewhere"))"
        #expect(try await Self.unsandboxed(sandbox, [override], ["send", "--group", group, "svc", "lost"]).finish().status == 0)
        let doctor = try await Self.unsandboxed(sandbox, [override], ["doctor", "--group", group]).finish()
        #expect(doctor.status == 1, "\(doctor.output)")
        #expect(doctor.output.contains("under WORMHOLE_APP_GROUPS_DIRECTORY (an override"), "\(doctor.output)")
        #expect(doctor.output.contains("also: \(container) (") && doctor.output.contains("1 listener(s) running on 'svc' in process(es) \(live.pid)"), "\(doctor.output)")
        #expect(doctor.stderr.contains("group \(group) has 2 containers"), "\(doctor.stderr)")
        live.send(SIGINT)
        _ = await live.finish()
    }

    @Test("read, list and status of a group that does not exist: exit 2, nothing created, the group a typo away named")
    func readOnlyCommandsCreateNothing() async throws {
        let sandbox = Sandbox()
        #expect(try await sandbox.run(["send", "--group", "group.com.example.thermo", "state", "20"]).status == 0)
        for command in [["read", "state"], ["list"], ["status"]] {
            let result = try await sandbox.run(command + ["--group", "group.com.exmaple.thermo"])
            #expect(result.status == 2, "\(command): \(result.stderr)")
            #expect(result.stderr.contains("no container for group 'group.com.exmaple.thermo'") && result.stderr.contains("did you mean 'group.com.example.thermo'?"), "\(result.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: sandbox.root.file("app-groups/group.com.exmaple.thermo")))
        let missing = try await sandbox.run(["read", "--directory", sandbox.root.file("nowhere"), "state"])
        #expect(missing.status == 2 && missing.stderr.contains("no container at"), "\(missing.stderr)")
        #expect(!FileManager.default.fileExists(atPath: sandbox.root.file("nowhere")))
    }
}
