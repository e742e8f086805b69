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
        #expect(result.lines == ["m3", "m4"], "--history applies only the first time a name is used")

        let status = try await sandbox.run(["status"])
        #expect(status.status == 0)
        #expect(status.lines.first?.split(separator: " ").map(String.init) == ["IDENTIFIER", "DURABLE", "RUNNING", "PID", "POSITION", "BEHIND", "LAST", "SEEN"],
                "\(status.output)")
        let row = try #require(status.lines.first { $0.contains("archiver") })
        let cells = row.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
        #expect(Array(cells.prefix(3)) == ["chat", "archiver", "no"] && cells[4] == "4" && cells[5] == "0", "\(row)")
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
}
