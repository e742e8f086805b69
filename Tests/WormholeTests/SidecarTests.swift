import Foundation
import Testing
@_spi(Backend) @testable import Wormhole
@_spi(Backend) @testable import WormholeCore
@_spi(Backend) @testable import WormholeFiles
import WormholeTestSupport

/// A container and its sidecar: two processes in PID and mount namespaces of their own
/// (each with a /dev/shm of its own, as two containers have), sharing one volume.
@Suite("Containers and sidecars")
struct SidecarTests {
    @Test("two namespaces sharing a volume pass messages both ways to durable listeners while passes compact: nothing lost, nothing twice, status truthful",
          .enabled(if: geteuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/unshare"), "unshare --pid --mount needs root"),
          .timeLimit(.minutes(3)))
    func sidecarPairSharesAVolume() async throws {
        let volume = TemporaryDirectory()
        let container = volume.file("app-groups/group.test.sidecar")
        try FileManager.default.createDirectory(atPath: container, withIntermediateDirectories: true)
        let count = scaled(400)
        let retain = 4
        let app = try Self.inNamespaces(["sidecar", container, "app", "to-app", "to-sidecar", String(count), volume.file("app.out"), String(retain)])
        let sidecar = try Self.inNamespaces(["sidecar", container, "sidecar", "to-sidecar", "to-app", String(count), volume.file("sidecar.out"), String(retain)])
        #expect(await waitForFile(volume.file("app.out.ready")))
        #expect(await waitForFile(volume.file("sidecar.out.ready")))

        // Status here: both durable listeners run, in PID namespaces that are not ours.
        let wormhole = try Wormhole(directory: container)
        let listeners = try wormhole.listeners().filter { $0.durableName != nil }
        #expect(Set(listeners.compactMap(\.durableName)) == ["app", "sidecar"], "\(listeners)")
        #expect(listeners.allSatisfy { $0.isRunning && !$0.isInThisPIDNamespace }, "\(listeners)")
        for side in ["app", "sidecar"] { _ = FileManager.default.createFile(atPath: volume.file("\(side).out.go"), contents: nil) }

        func received(_ file: String) -> [String] {
            ((try? String(contentsOfFile: volume.file(file), encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
        }
        for _ in 0..<600 where received("app.out").count < count || received("sidecar.out").count < count {
            try await Task.sleep(for: .milliseconds(100))
        }
        // Caught up: each is 0 behind, at the last message of its identifier.
        let caughtUp = try wormhole.listeners().filter { $0.durableName != nil }
        #expect(caughtUp.allSatisfy { $0.behind == 0 }, "\(caughtUp)")
        try await wormhole.passMessage("end", identifier: "to-app")
        try await wormhole.passMessage("end", identifier: "to-sidecar")
        #expect(await waitForExit(app, seconds: 60) == 0)
        #expect(await waitForExit(sidecar, seconds: 60) == 0)

        for (file, sender) in [("app.out", "sidecar"), ("sidecar.out", "app")] {
            let lines = received(file)
            let payloads = lines.map { $0.split(separator: " ", maxSplits: 1).last.map(String.init) ?? "" }
            #expect(payloads == (1...count).map { "\(sender) \($0)" }, "\(file): every message once, in order: \(lines.prefix(5))... \(lines.count) lines")
            #expect(!lines.contains { $0.hasPrefix("lost") || $0.hasPrefix("error") })
        }
        // The passes compacted: far fewer messages are kept than were passed.
        let kept = try await wormhole.summaries().filter { $0.identifier.hasPrefix("to-") }
        #expect(kept.count == 2 && kept.allSatisfy { $0.messageCount < count / 2 }, "\(kept)")
        print("sidecar pair: \(count) messages each way through \(container), \(kept.map { "\($0.identifier) keeps \($0.messageCount)" })")
    }

    /// The test agent in PID and mount namespaces of its own, with its own /proc and
    /// a /dev/shm of its own (a tmpfs mounted there), as a container has.
    private static func inNamespaces(_ arguments: [String]) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/unshare")
        process.arguments = ["--pid", "--fork", "--kill-child", "--mount", "--mount-proc", "--propagation", "private",
                             "/bin/sh", "-c", "mount -t tmpfs tmpfs /dev/shm && exec \"$0\" \"$@\"", Agent.path] + arguments
        try process.run()
        return process
    }
}
