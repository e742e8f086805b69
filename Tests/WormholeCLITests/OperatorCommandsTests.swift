import Foundation
import Testing

/// What an operator watches: `listen --all`, `top`, and `status` of live listeners.
@Suite("Operator commands")
struct OperatorCommandsTests {
    @Test("listen --all hears every identifier, those created after it started included, each line prefixed by its identifier; --json names it",
          .timeLimit(.minutes(1)))
    func listenAllHearsEveryIdentifier() async throws {
        let sandbox = Sandbox()
        #expect(try await sandbox.run(["send", "old", "before"]).status == 0)
        let tap = try sandbox.start(["listen", "--all", "--count", "4", "--timeout", "30", "--verbose"])
        let json = try sandbox.start(["listen", "--all", "--json", "--count", "4", "--timeout", "30", "--verbose"])
        #expect(await tap.waitForStandardError(containing: "listening to every identifier"))
        #expect(await json.waitForStandardError(containing: "listening to every identifier"))
        for (identifier, text) in [("old", "y"), ("new1", "a"), ("new2", "b"), ("new1", "c")] {
            #expect(try await sandbox.run(["send", identifier, text]).status == 0)
        }
        let lines = await tap.finish()
        #expect(lines.status == 0, "\(lines.stderr)")
        #expect(Set(lines.lines) == ["old: y", "new1: a", "new2: b", "new1: c"], "'before' was passed before it started: \(lines.lines)")
        #expect(lines.lines.firstIndex(of: "new1: a")! < lines.lines.firstIndex(of: "new1: c")!)
        let objects = await json.finish().lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        #expect(objects.count == 4)
        #expect(Set(objects.compactMap { "\($0["identifier"] ?? "")=\($0["payload"] ?? "")" }) == ["old=y", "new1=a", "new2=b", "new1=c"])
    }

    @Test("listen --all refuses identifiers and options that need named ones")
    func listenAllRefusesNamedOptions() async throws {
        let sandbox = Sandbox()
        for arguments in [["listen", "--all", "chat"], ["listen", "--all", "--durable", "x"], ["listen", "--all", "--history"], ["listen"]] {
            let result = try await sandbox.run(arguments)
            #expect(result.status == 64, "\(arguments): \(result.stderr)")
        }
    }

    @Test("two caught-up live listeners: status shows their exact position and 0 behind",
          .timeLimit(.minutes(1)))
    func statusOfCaughtUpLiveListenersIsExact() async throws {
        let sandbox = Sandbox()
        #expect(try await sandbox.run(["send", "chat", "first"]).status == 0)
        let first = try sandbox.start(["listen", "--verbose", "--count", "4", "--timeout", "30", "chat"])
        let second = try sandbox.start(["listen", "--verbose", "--count", "4", "--timeout", "30", "chat"])
        #expect(await first.waitForStandardError(containing: "listening to"))
        #expect(await second.waitForStandardError(containing: "listening to"))
        for n in 1...3 { #expect(try await sandbox.run(["send", "chat", "m\(n)"]).status == 0) }
        #expect(await first.waitForStandardOutput(containing: "m3"))
        #expect(await second.waitForStandardOutput(containing: "m3"))
        var rows: [String] = []
        for _ in 0..<50 {
            rows = try await sandbox.run(["status", "chat"]).lines.dropFirst().map { $0.split(separator: " ", omittingEmptySubsequences: true).map(String.init).joined(separator: " ") }
            if rows.count == 2 && rows.allSatisfy({ $0.contains(" 4 0 ") }) { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(rows.count == 2 && rows.allSatisfy { $0.contains("yes") && $0.contains(" 4 0 ") }, "POSITION 4 BEHIND 0 for both: \(rows)")
        first.send(SIGINT)
        second.send(SIGINT)
        _ = await first.finish()
        _ = await second.finish()
    }

    @Test("top into a pipe: one JSON line per interval, messages and bytes counted exactly, listeners of other processes, how far behind",
          .timeLimit(.minutes(1)))
    func topIntoAPipeWritesJSONLines() async throws {
        let sandbox = Sandbox()
        #expect(try await sandbox.run(["send", "metrics", "0"]).status == 0)
        let listener = try sandbox.start(["listen", "--verbose", "metrics"])
        #expect(await listener.waitForStandardError(containing: "listening to"))
        // Reports every 0.5 s until the test has seen all ten counted, however slowly the
        // sends go (other tests load the machine), then Ctrl-C.
        let top = try sandbox.start(["top", "--interval", "0.5"])
        // Its first report: top has taken its starting counts, so every send below falls
        // in an interval it reports.
        #expect(await top.waitForStandardOutput(containing: "\"interval\"", seconds: 60))
        for n in 1...10 { #expect(try await sandbox.run(["send", "metrics", "message \(n)"]).status == 0) }
        func totals(_ output: String) -> (reports: Int, messages: Double, bytes: Double, last: [String: Any]) {
            let reports = output.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            var messages = 0.0, bytes = 0.0
            var last: [String: Any] = [:]
            for report in reports {
                let interval = report["interval"] as? Double ?? 0
                for row in report["identifiers"] as? [[String: Any]] ?? [] where row["identifier"] as? String == "metrics" {
                    messages += (row["messagesPerSecond"] as? Double ?? 0) * interval
                    bytes += (row["bytesPerSecond"] as? Double ?? 0) * interval
                    last = row
                }
            }
            return (reports.count, messages, bytes, last)
        }
        #expect(await top.waitForStandardOutput(containing: "\"behind\":0", seconds: 60))
        for _ in 0..<600 where totals(String(decoding: top.stdout, as: UTF8.self)).messages.rounded() < 10 {
            try await Task.sleep(for: .milliseconds(100))
        }
        // One report more, after the one that counted the last message, then Ctrl-C.
        let counted = totals(String(decoding: top.stdout, as: UTF8.self)).reports
        for _ in 0..<600 where totals(String(decoding: top.stdout, as: UTF8.self)).reports <= counted {
            try await Task.sleep(for: .milliseconds(100))
        }
        top.send(SIGINT)
        let result = await top.finish()
        let seen = totals(result.output)
        #expect(seen.reports >= 2 && result.lines.count == seen.reports, "one JSON object per line: \(result.output)")
        #expect(seen.messages.rounded() == 10, "\(result.output)")
        #expect(seen.bytes.rounded() == Double((1...10).map { "message \($0)".utf8.count }.reduce(0, +)), "\(result.output)")
        #expect(seen.last["listeners"] as? Int == 1 && seen.last["behind"] as? Int == 0, "top's own listener is not counted: \(seen.last)")
        listener.send(SIGINT)
        _ = await listener.finish()
    }

    @Test("top --count 1 counts work queue members and responders, apart from listeners, and each queue's pending messages",
          .timeLimit(.minutes(1)))
    func topCountsQueueMembersAndPendingMessages() async throws {
        let sandbox = Sandbox()
        // A queue whose only member took one message and ended: two more wait for it.
        #expect(try await sandbox.run(["send", "batch", "first"]).status == 0)
        let taken = try await sandbox.run(["listen", "--queue", "nightly", "--count", "1", "--timeout", "30", "batch"])
        #expect(taken.status == 0 && taken.lines == ["first"], "\(taken.stderr)")
        for n in 2...3 { #expect(try await sandbox.run(["send", "batch", "message \(n)"]).status == 0) }
        let member = try sandbox.start(["listen", "--queue", "workers", "--verbose", "jobs"])
        let responder = try sandbox.start(["respond", "-v", "app.state", "--", "cat"])
        #expect(await member.waitForStandardError(containing: "from the work queue 'workers'"))
        #expect(await responder.waitForStandardError(containing: "answering requests to 'app.state'"))
        let top = try await sandbox.run(["top", "--count", "1", "--interval", "0.1", "--json"])
        #expect(top.status == 0, "\(top.stderr)")
        let report = try #require(top.lines.count == 1 ? try? JSONSerialization.jsonObject(with: Data(top.lines[0].utf8)) as? [String: Any] : nil, "\(top.output)")
        let rows = Dictionary(uniqueKeysWithValues: (report["identifiers"] as? [[String: Any]] ?? []).map { ($0["identifier"] as? String ?? "", $0) })
        func queues(_ identifier: String) -> [String: [String: Any]] {
            Dictionary(uniqueKeysWithValues: (rows[identifier]?["queues"] as? [[String: Any]] ?? []).map { ($0["queue"] as? String ?? "", $0) })
        }
        #expect(rows["jobs"]?["members"] as? Int == 1 && rows["jobs"]?["listeners"] as? Int == 0, "\(top.output)")
        #expect(queues("jobs")["workers"]?["members"] as? Int == 1 && queues("jobs")["workers"]?["pending"] as? Int == 0, "\(top.output)")
        #expect(rows["app.state"]?["members"] as? Int == 1, "a responder is a member of the queue 'responders': \(top.output)")
        #expect(queues("app.state")["responders"]?["members"] as? Int == 1, "\(top.output)")
        #expect(rows["batch"]?["members"] as? Int == 0 && rows["batch"]?["pending"] as? Int == 2, "\(top.output)")
        #expect(queues("batch")["nightly"]?["pending"] as? Int == 2 && queues("batch")["nightly"]?["inFlight"] as? Int == 0, "\(top.output)")
        member.send(SIGINT)
        responder.send(SIGINT)
        _ = await member.finish()
        _ = await responder.finish()
    }
}
