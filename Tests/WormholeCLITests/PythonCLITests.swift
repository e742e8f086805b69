#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing

/// The `wormhole` command and the Python package (`Python/`, through
/// `Tests/Interop/python_peer.py`) in one application group: the Python side resolves the
/// group as the Swift library does, and each hears the other, byte for byte.
@Suite("The command and the Python package", .timeLimit(.minutes(5)))
struct PythonCLITests {
    static let peer = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Interop/python_peer.py").path
    /// The group the command uses when told none (``Sandbox/defaultContainer``).
    static let group = "group:group.wormhole.default"

    func python(_ sandbox: Sandbox, _ arguments: [String]) throws -> RunningCommand {
        try sandbox.start(["python3", Self.peer] + arguments, product: "/usr/bin/env")
    }

    @Test func aPythonListenerHearsWormholeSendByteForByte() async throws {
        let sandbox = Sandbox()
        let out = sandbox.root.file("python.out")
        let listener = try python(sandbox, ["listen", Self.group, "note", "3", out])
        try #require(await waitUntil { FileManager.default.fileExists(atPath: out + ".ready") }, "\(listener.stderr)")
        let text = "héllo ✓ from the shell"
        let blob = Data((0...255).map { UInt8($0) })
        let blobPath = sandbox.root.file("blob")
        try blob.write(to: URL(fileURLWithPath: blobPath))
        for arguments in [["send", "note", text], ["send", "--json", "note", #"{"b":1,"a":[true,null]}"#],
                          ["send", "--file", blobPath, "note"]] {
            let sent = try await sandbox.run(arguments)
            #expect(sent.status == 0, "\(sent.stderr)")
        }
        let finished = await listener.finish()
        #expect(finished.status == 0, "\(finished.stderr)")
        let lines = try String(contentsOfFile: out, encoding: .utf8).split(separator: "\n").map { $0.split(separator: " ") }
        try #require(lines.count == 3, "\(lines)")
        #expect(lines.map { String($0[0]) } == ["1", "2", "3"])
        #expect(lines.map { String($0[1]) } == ["text", "json", "data"])
        #expect(Data(base64Encoded: String(lines[0][4])) == Data(text.utf8))
        let json = try JSONSerialization.jsonObject(with: try #require(Data(base64Encoded: String(lines[1][4])))) as? [String: Any]
        #expect(json?["b"] as? Int == 1)
        #expect(Data(base64Encoded: String(lines[2][4])) == blob)
        #expect(lines.allSatisfy { $0[3] == "\(geteuid())" }, "version 3 records carry the sender's uid")
    }

    @Test func wormholeListenHearsAPythonSender() async throws {
        let sandbox = Sandbox()
        let listener = try sandbox.start(["listen", "--verbose", "--json", "note", "--count", "2"])
        try #require(await listener.waitForStandardError(containing: "listening to"), "\(listener.stderr)")
        let text = "from Python ✓"
        for (kind, payload) in [("text", Data(text.utf8)), ("json", Data(#"{"n":1}"#.utf8))] {
            let sent = await (try python(sandbox, ["send", Self.group, "note", kind, payload.base64EncodedString()])).finish()
            #expect(sent.status == 0, "\(sent.stderr)")
        }
        let result = await listener.finish()
        #expect(result.status == 0, "\(result.stderr)")
        try #require(result.lines.count == 2, "\(result.output)")
        let objects = try result.lines.map { try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        #expect(objects.map { $0?["sequence"] as? Int } == [1, 2])
        #expect(objects.map { $0?["kind"] as? String } == ["text", "json"])
        #expect(objects[0]?["payload"] as? String == text)
        #expect((objects[1]?["payload"] as? [String: Any])?["n"] as? Int == 1)
        let read = try await sandbox.run(["read", "--raw", "note"])
        #expect(read.output == #"{"n":1}"#)
    }

    @Test("wormhole request is answered by a Python responder, and a Python requester by wormhole respond; failures cross as the responder's words, work queues as one")
    func requestsBetweenTheCommandAndPython() async throws {
        let sandbox = Sandbox()
        let answered = sandbox.root.file("responder.out")
        let responder = try python(sandbox, ["respond", Self.group, "py.svc", "python", answered, "--fail", "broken"])
        try #require(await waitUntil { FileManager.default.fileExists(atPath: answered + ".ready") }, "\(responder.stderr)")
        let reply = try await sandbox.run(["request", "--timeout", "10", "py.svc", "hello"])
        #expect(reply.status == 0 && reply.lines == ["python:hello"], "\(reply.stderr)")
        let refused = try await sandbox.run(["request", "--timeout", "10", "py.svc", "broken"])
        #expect(refused.status == 1 && refused.stderr.contains("the responder of 'py.svc' failed: cannot answer broken"), "\(refused.stderr)")
        responder.send(SIGKILL)
        _ = await responder.finish()

        let command = try sandbox.start(["respond", "-v", "cli.svc", "--", "tr", "a-z", "A-Z"])
        #expect(await command.waitForStandardError(containing: "answering requests to 'cli.svc'"))
        let asked = sandbox.root.file("requests.out")
        let requester = await (try python(sandbox, ["request", Self.group, "cli.svc", "3", "q", asked, "--timeout", "10"])).finish()
        #expect(requester.status == 0, "\(requester.stderr)")
        let lines = try String(contentsOfFile: asked, encoding: .utf8).split(separator: "\n").map { $0.split(separator: " ").prefix(3).joined(separator: " ") }
        #expect(lines == ["1 ok Q:1", "2 ok Q:2", "3 ok Q:3"], "\(lines)")
        command.send(SIGINT)
        _ = await command.finish()

        // listen --queue and a Python member take turns at one queue: each job once.
        let out = sandbox.root.file("worker.out")
        let worker = try python(sandbox, ["work", Self.group, "jobs", "w", out])
        try #require(await waitUntil { FileManager.default.fileExists(atPath: out + ".ready") }, "\(worker.stderr)")
        for index in 1...20 { #expect(try await sandbox.run(["send", "jobs", "job \(index)"]).status == 0) }
        var acknowledged = false
        for _ in 0..<300 where !acknowledged {
            acknowledged = try await sandbox.run(["status", "--json", "jobs"]).output.contains(#""acknowledged":20,"#)
            if !acknowledged { try await Task.sleep(for: .milliseconds(100)) }
        }
        #expect(acknowledged, "the Python member acknowledged the 20 jobs")
        worker.send(SIGKILL)
        _ = await worker.finish()
        let byPython = try String(contentsOfFile: out, encoding: .utf8).split(separator: "\n").map { $0.split(separator: " ", maxSplits: 2)[2] }
        #expect(byPython == (1...20).map { "job \($0)"[...] }, "\(byPython)")
        for index in 21...23 { #expect(try await sandbox.run(["send", "jobs", "job \(index)"]).status == 0) }
        let byCommand = try await sandbox.run(["listen", "--queue", "w", "--count", "3", "jobs"])
        #expect(byCommand.lines == ["job 21", "job 22", "job 23"], "the command's member takes what the Python one left: \(byCommand.lines)")
    }

    private func waitUntil(seconds: Double = 30, _ condition: () -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + .seconds(seconds)
        while ContinuousClock.now < deadline {
            if condition() { return true }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return condition()
    }
}
