import Foundation
import Testing
@testable import WormholeCLI

/// `--postgres` and `WORMHOLE_POSTGRES_URL`: choosing a PostgreSQL container, and using
/// it from separate processes, each with connections of its own.
@Suite("PostgreSQL from the command line", .timeLimit(.minutes(10)))
struct PostgresOptionTests {
    static let url = "postgres://app:secret@db.example.com:5432/app"

    @Test func thePostgresOptionOrItsVariableChoosesTheDatabaseAndTheGroupNamesTheContainer() throws {
        #expect(try ContainerOptions.parse(["--postgres", Self.url]).location(environment: [:])
                == .postgres(url: Self.url, group: "group.wormhole.default", optionalDirectory: nil))
        #expect(try ContainerOptions.parse(["--postgres", Self.url, "--group", "g", "--optional-directory", "s"]).location(environment: [:])
                == .postgres(url: Self.url, group: "g", optionalDirectory: "s"))
        #expect(try ContainerOptions.parse([]).location(environment: ["WORMHOLE_POSTGRES_URL": Self.url, "WORMHOLE_GROUP": "group.env"])
                == .postgres(url: Self.url, group: "group.env", optionalDirectory: nil))
        #expect(try ContainerOptions.parse(["--group", "g"]).location(environment: ["WORMHOLE_POSTGRES_URL": Self.url])
                == .postgres(url: Self.url, group: "g", optionalDirectory: nil))
        // An explicit directory beats the variable; an explicit URL beats WORMHOLE_DIRECTORY.
        #expect(try ContainerOptions.parse(["--directory", "/tmp/d"]).location(environment: ["WORMHOLE_POSTGRES_URL": Self.url])
                == .directory("/tmp/d"))
        #expect(try ContainerOptions.parse(["--postgres", Self.url]).location(environment: ["WORMHOLE_DIRECTORY": "/tmp/d"])
                == .postgres(url: Self.url, group: "group.wormhole.default", optionalDirectory: nil))
        // The description never shows the URL, which may hold a password.
        #expect(!(try ContainerOptions.parse(["--postgres", Self.url]).location(environment: [:])).description.contains("secret"))
    }

    @Test("conflicting or empty PostgreSQL options are usage errors", arguments: [
        ["--postgres", url, "--directory", "/tmp/x"],
        ["--postgres", ""],
    ])
    func conflictingOptionsAreUsageErrors(arguments: [String]) {
        do {
            _ = try WormholeCommand.parseAsRoot(["read", "x"] + arguments)
            Issue.record("\(arguments) parsed")
        } catch {
            #expect(WormholeCommand.exitCode(for: error).rawValue == 64)
        }
    }

    @Test func bothVariablesSetIsAUsageErrorThatNamesThem() {
        do {
            _ = try ContainerOptions.parse([]).location(environment: ["WORMHOLE_POSTGRES_URL": Self.url, "WORMHOLE_DIRECTORY": "/tmp/d"])
            Issue.record("both variables were accepted")
        } catch let failure as CommandFailure {
            #expect(failure.exitCode.rawValue == 64)
            #expect(failure.description.contains("WORMHOLE_DIRECTORY") && failure.description.contains("WORMHOLE_POSTGRES_URL"))
        } catch {
            Issue.record("unexpected \(error)")
        }
    }

    @Test func aURLThatIsNotAPostgreSQLOneIsAUsageErrorThatShowsTheForm() async throws {
        let sandbox = Sandbox()
        let result = try await sandbox.run(["read", "x", "--postgres", "mysql://u:hidden@h/db"])
        #if Postgres
        #expect(result.status == 64)
        #expect(result.stderr.contains("mysql") && result.stderr.contains("postgres://user:password@host:port/database"))
        #expect(!result.stderr.contains("hidden"), "the password is not printed")
        #else
        #expect(result.status == 1)
        #expect(result.stderr.contains("--traits Postgres"))
        #endif
    }

    #if Postgres
    /// The server the test run started (Scripts/test), and a group of this test's own.
    func serverArguments() throws -> [String] {
        let url = try #require(ProcessInfo.processInfo.environment["WORMHOLE_TEST_POSTGRES_URL"],
                               "WORMHOLE_TEST_POSTGRES_URL is not set: run Scripts/test, which starts a throwaway cluster")
        return ["--postgres", url, "--group", "group.cli-test-\(UUID().uuidString.lowercased())"]
    }

    @Test func aListenerAndThreeSendersInSeparateProcessesExchangeMessagesThroughTheDatabase() async throws {
        let sandbox = Sandbox()
        let server = try serverArguments()
        let listener = try sandbox.start(["listen", "chat", "--count", "3", "--json", "--verbose"] + server)
        let ready = await listener.waitForStandardError(containing: "listening to")
        try #require(ready, "the listener did not start: \(listener.stderr)")
        let first = try await sandbox.run(["send", "chat", "one"] + server)
        let second = try await sandbox.run(["send", "chat", "two"] + server, input: nil)
        let third = try await sandbox.run(["send", "--json", "chat", #"{"n": 3}"#] + server)
        for sent in [first, second, third] { #expect(sent.status == 0, "\(sent.stderr)") }
        let result = await listener.finish()
        #expect(result.status == 0, "\(result.stderr)")
        let objects = try result.lines.map { line in
            try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        }
        #expect(objects.map { $0["sequence"] as? Int } == [1, 2, 3])
        #expect(objects.map { $0["payload"] as? String }.prefix(2) == ["one", "two"])
        #expect((objects.last?["payload"] as? [String: Any])?["n"] as? Int == 3)
        #expect(Set(objects.compactMap { $0["pid"] as? Int }).count == 3, "three sending processes")
        // Nothing was written to the directory containers.
        #expect(!FileManager.default.fileExists(atPath: sandbox.defaultContainer + "/chat.wormhole"))
        let read = try await sandbox.run(["read", "chat"] + server)
        #expect(read.status == 0)
        #expect(read.output == #"{"n": 3}"# + "\n")
        let list = try await sandbox.run(["list"] + server)
        #expect(list.output.contains("chat") && list.output.contains("3"))
    }

    @Test func synchronousCommitInTheURLIsTakenAndABadValueIsAUsageErrorThatNamesIt() async throws {
        let sandbox = Sandbox()
        let server = try serverArguments()
        let separator = server[1].contains("?") ? "&" : "?"
        let bad = try await sandbox.run(["send", "x", "hi", "--postgres", server[1] + separator + "synchronous_commit=maybe", "--group", server[3]])
        #expect(bad.status == 64)
        #expect(bad.stderr.contains("synchronous_commit 'maybe'") && bad.stderr.contains("remote_apply"), "\(bad.stderr)")
        let off = ["--postgres", server[1] + separator + "synchronous_commit=off", "--group", server[3]]
        let sent = try await sandbox.run(["send", "x", "hi"] + off)
        #expect(sent.status == 0, "\(sent.stderr)")
        #expect(try await sandbox.run(["read", "x"] + server).output == "hi\n")
    }

    @Test func theVariableAloneIsEnoughAndReadSaysWhenThereIsNothing() async throws {
        let server = try serverArguments()
        let sandbox = Sandbox(extra: ["WORMHOLE_POSTGRES_URL": server[1], "WORMHOLE_GROUP": server[3]])
        let sent = try await sandbox.run(["send", "state", "ready"])
        #expect(sent.status == 0, "\(sent.stderr)")
        #expect(try await sandbox.run(["read", "state"]).output == "ready\n")
        #expect(try await sandbox.run(["read", "nothing-here"]).status == 2)
        let cleared = try await sandbox.run(["clear", "state"])
        #expect(cleared.status == 0)
        #expect(try await sandbox.run(["read", "state"]).status == 2)
    }

    @Test func anUnreachableServerOrAWrongPasswordIsARuntimeFailureThatSaysSo() async throws {
        let sandbox = Sandbox()
        let unreachable = try await sandbox.run(["send", "x", "hi", "--postgres", "postgres://u:pw@127.0.0.1:1/db?sslmode=disable"])
        #expect(unreachable.status == 1)
        #expect(unreachable.stderr.contains("is the server running"), "\(unreachable.stderr)")
        #expect(!unreachable.stderr.contains(":pw@"))
        let server = try serverArguments()
        let wrong = server[1].replacingOccurrences(of: "postgres://wormhole:", with: "postgres://wormhole:wrong")
        let refused = try await sandbox.run(["send", "x", "hi", "--postgres", wrong])
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("password"), "\(refused.stderr)")
    }

    @Test func requestAndRespondWorkThroughTheDatabase() async throws {
        try await RequestCommandTests.requestAndRespond(Sandbox(), container: try serverArguments())
    }

    @Test func listenQueueMembersShareMessagesThroughTheDatabase() async throws {
        try await RequestCommandTests.queueMembersShareMessages(Sandbox(), container: try serverArguments())
    }

    @Test func postAndObserveExplainThatTheyNeedADirectory() async throws {
        let sandbox = Sandbox()
        let result = try await sandbox.run(["post", "ping"] + serverArguments())
        #expect(result.status == 64)
        #expect(result.stderr.contains("send and listen"))
    }
    #endif
}
