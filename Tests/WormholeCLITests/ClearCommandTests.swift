import Foundation
import Testing

/// `wormhole clear` says what it removed, and asks before clearing every identifier of
/// the default group's container at a terminal.
@Suite("clear says what it removes", .timeLimit(.minutes(10)))
struct ClearCommandTests {
    static let hasScript = FileManager.default.isExecutableFile(atPath: "/usr/bin/script")

    /// A sandbox whose default container holds 'chat' (2 messages), 'note' (1) and
    /// 'empty' (cleared: no message).
    func sandboxWithMessages() async throws -> Sandbox {
        let sandbox = Sandbox()
        for (identifier, message) in [("chat", "one"), ("chat", "two"), ("note", "buy milk"), ("empty", "gone")] {
            try #require(try await sandbox.run(["send", identifier, message]).status == 0)
        }
        try #require(try await sandbox.run(["clear", "empty"]).status == 0)
        return sandbox
    }

    @Test func clearingIdentifiersSaysHowManyMessagesEachHad() async throws {
        let sandbox = try await sandboxWithMessages()
        let result = try await sandbox.run(["clear", "chat", "empty", "never-used"])
        #expect(result.status == 0)
        #expect(result.lines == ["cleared 'chat': 2 messages", "'empty' had no messages", "'never-used' had no messages"])
        #expect(try await sandbox.run(["read", "chat"]).status == 2)
    }

    @Test func clearingAllInAPipeDoesNotAskAndListsWhatItRemoved() async throws {
        let sandbox = try await sandboxWithMessages()
        let result = try await sandbox.run(["clear", "--all"], input: Data("n\n".utf8))
        #expect(result.status == 0)
        #expect(result.lines == ["cleared 'chat': 2 messages", "cleared 'note': 1 message"])
        #expect(result.stderr.isEmpty)
        #expect(try await sandbox.run(["read", "note"]).status == 2)
        let again = try await sandbox.run(["clear", "--all"])
        #expect(again.lines == ["nothing to clear: no identifier has messages in \(sandbox.defaultContainer)"])
    }

    @Test(.enabled(if: hasScript)) func onATerminalClearingAllOfTheDefaultGroupAsksFirstAndNoKeepsEverything() async throws {
        let sandbox = try await sandboxWithMessages()
        let terminal = try sandbox.startOnTerminal(["clear", "--all"])
        #expect(await terminal.waitForStandardOutput(containing: "[y/N]"), "\(String(decoding: terminal.stdout, as: UTF8.self))")
        let question = String(decoding: terminal.stdout, as: UTF8.self)
        #expect(question.contains("wormhole: clear every identifier in \(sandbox.defaultContainer), the default group's container, which other programs may share? It holds 'chat' (2 messages), 'note' (1 message). [y/N] "),
                "\(question)")
        try terminal.type("n\n")
        let result = await terminal.finish()
        #expect(result.status == 1)
        #expect(result.output.contains("wormhole: nothing was cleared"), "\(result.output)")
        #expect(try await sandbox.run(["read", "note"]).output == "buy milk\n")
    }

    @Test(.enabled(if: hasScript)) func onATerminalYesClearsAndSaysWhat() async throws {
        let sandbox = try await sandboxWithMessages()
        let terminal = try sandbox.startOnTerminal(["clear", "--all"])
        #expect(await terminal.waitForStandardOutput(containing: "[y/N]"))
        try terminal.type("y\n")
        let result = await terminal.finish()
        #expect(result.status == 0)
        #expect(result.output.contains("cleared 'chat': 2 messages\r\ncleared 'note': 1 message\r\n"), "\(result.output)")
        #expect(try await sandbox.run(["read", "chat"]).status == 2)
    }

    @Test(.enabled(if: hasScript)) func onATerminalYesOrAnotherGroupDoesNotAsk() async throws {
        let sandbox = try await sandboxWithMessages()
        #expect(try await sandbox.run(["send", "--group", "group.com.example.notes", "note", "mine"]).status == 0)
        for arguments in [["clear", "--all", "--group", "group.com.example.notes"], ["clear", "--all", "--yes"]] {
            let result = try await sandbox.startOnTerminal(arguments).finish()
            #expect(result.status == 0, "\(arguments)")
            #expect(!result.output.contains("[y/N]"), "\(arguments): \(result.output)")
            #expect(result.output.contains("cleared 'note': 1 message"), "\(arguments): \(result.output)")
        }
    }
}
