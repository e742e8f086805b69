#if canImport(Glibc)
import Glibc
#endif
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

    /// The commands and their output in CLI.md's block after `marker`: each `$ wormhole`
    /// line's arguments, and the lines it prints.
    static func documentedSession(after marker: String) throws -> [(arguments: [String], lines: [String])] {
        let document = try String(contentsOfFile: DocumentationTests.root + "/Docs/CLI.md", encoding: .utf8)
        let afterMarker = try #require(document.range(of: marker), "\(marker) is not in CLI.md").upperBound
        let open = try #require(document.range(of: "```\n", range: afterMarker..<document.endIndex)).upperBound
        let close = try #require(document.range(of: "```", range: open..<document.endIndex)).lowerBound
        var session: [(arguments: [String], lines: [String])] = []
        for line in document[open..<close].split(separator: "\n") {
            if line.hasPrefix("$ wormhole ") {
                session.append((line.dropFirst("$ wormhole ".count).split(separator: " ").map(String.init), []))
            } else {
                try #require(!session.isEmpty, "output before a command: \(line)")
                session[session.count - 1].lines.append(String(line))
            }
        }
        return session
    }

    @Test("CLI.md's clear on a full filesystem, run as written: the log is emptied in place, the clear succeeds and numbering goes on",
          .enabled(if: geteuid() == 0, "mounting a small tmpfs needs root"))
    func clearOnAFullFilesystemIsWhatCLIMdShows() async throws {
        let session = try Self.documentedSession(after: "<!-- clear-full-filesystem -->")
        try #require(session.count == 2)
        let sandbox = Sandbox()
        let mountPoint = sandbox.root.file("tiny")
        try #require(mkdir(mountPoint, 0o700) == 0)
        try #require(mount("tmpfs", mountPoint, "tmpfs", 0, "size=256k,nr_inodes=64,mode=0700") == 0, "mount: \(String(cString: strerror(errno)))")
        defer { umount2(mountPoint, Int32(MNT_DETACH)) }
        let container = mountPoint + "/c"
        for message in ["one", "two", "three"] {
            try #require(try await sandbox.run(["send", "note", message, "--directory", container]).status == 0)
        }
        let log = container + "/note.wormhole"
        let identity = try [UInt8](Data(contentsOf: URL(fileURLWithPath: log)))[16..<24]
        // No inode and no block left for a cleared copy of the log.
        var inodes = 0
        while FileManager.default.createFile(atPath: mountPoint + "/inode-\(inodes)", contents: nil) { inodes += 1 }
        unlink(mountPoint + "/inode-0")
        let handle = try #require(FileHandle(forWritingAtPath: mountPoint + "/inode-1"))
        while (try? handle.write(contentsOf: Data(count: 4096))) != nil {}
        try? handle.close()
        try #require(FileManager.default.createFile(atPath: mountPoint + "/inode-0", contents: nil))
        var space = statvfs()
        statvfs(mountPoint, &space)
        try #require(space.f_bavail == 0 && space.f_favail == 0, "the filesystem is not full: \(space.f_bavail) blocks, \(space.f_favail) inodes")

        for (arguments, lines) in session {
            let result = try await sandbox.run(arguments + ["--directory", container])
            #expect(result.status == 0, "wormhole \(arguments.joined(separator: " ")): \(result.stderr)")
            #expect(result.lines == lines, "wormhole \(arguments.joined(separator: " "))")
        }
        // Emptied in place: the same log, its identity kept.
        let after = try [UInt8](Data(contentsOf: URL(fileURLWithPath: log)))
        #expect(after[16..<24] == identity)
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
