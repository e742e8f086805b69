import ArgumentParser
import Testing
@testable import WormholeCLI
@_spi(Backend) import Wormhole

@Suite("Argument parsing")
struct ArgumentParsingTests {
    /// The exit status argument-parser gives a parse or validation error.
    func exitStatus(_ arguments: [String]) -> Int32? {
        do {
            _ = try WormholeCommand.parseAsRoot(arguments)
            return nil
        } catch {
            return WormholeCommand.exitCode(for: error).rawValue
        }
    }

    /// Help and completions list `--postgres` where it can be used: in a build with the
    /// `Postgres` trait, for every command but `post`, `observe` and `activation`, which
    /// need a directory (a systemd path unit watches a file), and `share`, which takes no
    /// container options (it makes a group's shared container).
    @Test func helpListsPostgresOnlyWhereThisBuildAcceptsIt() throws {
        let directoryOnly = [ObjectIdentifier(Post.self), ObjectIdentifier(Observe.self), ObjectIdentifier(Activation.self)]
        for command in WormholeCommand.configuration.subcommands where ObjectIdentifier(command) != ObjectIdentifier(Share.self) {
            let help = WormholeCommand.helpMessage(for: command)
            let name = command.configuration.commandName ?? "?"
            #if Postgres
            let expected = !directoryOnly.contains(ObjectIdentifier(command))
            #else
            let expected = false
            #endif
            #expect(help.contains("--postgres") == expected, "wormhole \(name) --help: \(help)")
            #expect(help.contains("--group"), "wormhole \(name) --help")
        }
        #expect(WormholeCommand.completionScript(for: .bash).contains("--postgres") == postgresIsBuiltIn)
    }

    /// Whether this build has the PostgreSQL back end.
    var postgresIsBuiltIn: Bool {
        #if Postgres
        true
        #else
        false
        #endif
    }

    @Test(arguments: ["post", "observe"]) func postAndObserveRefusePostgresWithTheReason(command: String) throws {
        #expect(exitStatus([command, "--postgres", "postgres://u@h/d", "ping"]) == 64)
        let error = try #require(throws: (any Error).self) { try WormholeCommand.parseAsRoot([command, "--postgres", "postgres://u@h/d", "ping"]) }
        #expect(WormholeCommand.message(for: error).contains("use send and listen to talk through a database"))
    }

    @Test func sendTakesTheMessageFromTheArgument() throws {
        let send = try Send.parse(["chat", "hello there"])
        #expect(send.identifier == "chat")
        #expect(send.source == .argument("hello there"))
        #expect(!send.json)
    }

    @Test func sendReadsStandardInputWhenTheMessageIsAbsentOrADash() throws {
        #expect(try Send.parse(["chat"]).source == .standardInput)
        #expect(try Send.parse(["chat", "-"]).source == .standardInput)
        #expect(try Send.parse(["--file", "-", "chat"]).source == .standardInput)
    }

    /// `send`'s plain forms are run without argument-parser (``Send/plainForm(_:)``):
    /// argument-parser must read each of them as the plain reading does.
    @Test(arguments: [
        ["chat", "hello there"], ["chat"], ["chat", ""], ["", "x"], ["help", "x"], ["help"], ["../etc", "x"], ["chat", "help"],
        ["send", "x"], ["chat", "a -b"], ["chat", "x y"], ["é", "ü"],
        ["--directory", "/tmp/x", "chat", "hi"], ["chat", "--group", "g", "hi"], ["chat", "hi", "--postgres", "postgres://u@h/d"],
        ["--optional-directory", "sub", "chat"], ["--group", "g", "--optional-directory", "sub", "chat", "hi"],
        ["--postgres", "postgres://u@h/d", "--group", "g", "chat", "hi"], ["--group", "", "chat", "hi"],
    ])
    func thePlainFormsOfSendMeanWhatArgumentParserReads(arguments: [String]) throws {
        let plain = try #require(Send.plainForm(["send"] + arguments), "\(arguments) is a plain form")
        let parsed = try #require(try Send.parseAsRoot(arguments) as? Send)
        #expect(parsed.identifier == plain.identifier)
        #expect(parsed.source == (plain.message.map { .argument($0) } ?? .standardInput))
        #expect(parsed.file == nil && !parsed.json && !parsed.printSequence)
        #expect(parsed.container.choice == plain.container)
    }

    @Test(arguments: [
        ["send"], ["send", "chat", "hi", "there"], ["send", "chat", "-"], ["send", "-v", "chat"], ["send", "--json", "chat", "{}"],
        ["send", "chat", "--print-sequence"], ["send", "--help"], ["send", "chat", "-5"],
        ["read", "chat"], ["listen", "chat"], [],
        ["send", "--group", "g", "--directory", "/d", "chat", "x"], ["send", "--directory", "", "chat", "x"],
        ["send", "--postgres", "", "chat"], ["send", "chat", "--group"], ["send", "--group", "-x", "chat"],
        ["send", "--group=g", "chat", "x"], ["send", "--group", "a", "--group", "b", "chat", "x"],
        ["send", "--directory", "/d", "--optional-directory", "s", "chat"],
    ])
    func everythingElseGoesToArgumentParser(arguments: [String]) {
        #expect(Send.plainForm(arguments) == nil)
    }

    @Test func sendReadsAFileWithTheFileOption() throws {
        let send = try Send.parse(["--file", "/tmp/photo.jpg", "photo", "--json"])
        #expect(send.source == .file("/tmp/photo.jpg"))
        #expect(send.json)
    }

    @Test func sendRejectsAMessageArgumentTogetherWithAFile() {
        #expect(exitStatus(["send", "--file", "x", "chat", "hi"]) == 64)
    }

    @Test func listenParsesItsIdentifiersAndOptions() throws {
        let listen = try Listen.parse(["a", "b", "--count", "3", "--timeout", "2.5", "--history", "--json"])
        #expect(listen.identifiers == ["a", "b"])
        #expect(listen.count == 3)
        #expect(listen.timeout == 2.5)
        #expect(listen.startingPoint == .history)
        guard case .json = listen.format else {
            Issue.record("expected the JSON format, got \(listen.format)")
            return
        }
    }

    @Test func listenStartsNowByDefaultAndLatestOnRequest() throws {
        #expect(try Listen.parse(["a"]).startingPoint == .now)
        #expect(try Listen.parse(["a", "--latest"]).startingPoint == .latest)
        guard case .lines(prefixIdentifier: true) = try Listen.parse(["a", "--prefix"]).format else {
            Issue.record("--prefix should prefix the identifier")
            return
        }
    }

    @Test("listen rejects bad values with the usage status 64", arguments: [
        ["listen"],
        ["listen", "a", "--count", "0"],
        ["listen", "a", "--count", "x"],
        ["listen", "a", "--timeout", "-1"],
        ["listen", "a", "--timeout", "nan"],
        ["listen", "a", "--history", "--latest"],
        ["listen", "a", "--json", "--raw"],
    ])
    func listenRejectsBadValues(arguments: [String]) {
        #expect(exitStatus(arguments) == 64)
    }

    @Test func clearNeedsIdentifiersOrAllButNotBoth() throws {
        #expect(exitStatus(["clear"]) == 64)
        #expect(exitStatus(["clear", "--all", "chat"]) == 64)
        #expect(try Clear.parse(["--all"]).all)
        #expect(try Clear.parse(["a", "b"]).identifiers == ["a", "b"])
    }

    @Test func postAndObserveNeedANameAndParseTheState() throws {
        #expect(exitStatus(["post"]) == 64)
        #expect(exitStatus(["observe"]) == 64)
        #expect(exitStatus(["post", "--state", "-1", "x"]) == 64)
        #expect(try Post.parse(["--state", "18446744073709551615", "x"]).state == UInt64.max)
        let observe = try Observe.parse(["x", "y", "--count", "2", "--state"])
        #expect(observe.names == ["x", "y"])
        #expect(observe.count == 2)
        #expect(observe.state)
    }

    @Test func unknownCommandsAndOptionsAreUsageErrors() {
        #expect(exitStatus(["shout", "chat"]) == 64)
        #expect(exitStatus(["send", "--loud", "chat", "hi"]) == 64)
        #expect(exitStatus(["read"]) == 64)
    }

    @Test func theRootCommandDispatchesToEachSubcommand() throws {
        #expect(try WormholeCommand.parseAsRoot(["send", "chat", "hi"]) is Send)
        #expect(try WormholeCommand.parseAsRoot(["listen", "chat"]) is Listen)
        #expect(try WormholeCommand.parseAsRoot(["read", "chat"]) is Read)
        #expect(try WormholeCommand.parseAsRoot(["clear", "--all"]) is Clear)
        #expect(try WormholeCommand.parseAsRoot(["list"]) is List)
        #expect(try WormholeCommand.parseAsRoot(["post", "x"]) is Post)
        #expect(try WormholeCommand.parseAsRoot(["observe", "x"]) is Observe)
        #expect(try WormholeCommand.parseAsRoot(["path"]) is Path)
    }
}

@Suite("A word that is not a command")
struct UnknownCommandTests {
    @Test func aTypoIsRefusedWithTheNearestCommand() {
        #expect(WormholeCommand.unknownCommand(["sned", "chat", "hi"]) == "'sned' is not a command; did you mean 'send'? ('wormhole send --help' shows how to use it)")
        #expect(WormholeCommand.unknownCommand(["lisen", "chat"])?.contains("did you mean 'listen'?") == true)
        #expect(WormholeCommand.unknownCommand(["staus"])?.contains("did you mean 'status'?") == true)
        #expect(WormholeCommand.unknownCommand(["docter"])?.contains("did you mean 'doctor'?") == true)
    }

    @Test func aWordNearNoCommandListsThemAll() throws {
        let problem = try #require(WormholeCommand.unknownCommand(["frobnicate"]))
        #expect(problem.hasPrefix("'frobnicate' is not a command; the commands are send, listen, request, respond, read, clear, list,"))
    }

    @Test func commandsOptionsAndNothingPassThrough() {
        for arguments in [["send", "chat", "hi"], ["help", "send"], ["--help"], ["--version"], [], ["--generate-completion-script", "bash"]] {
            #expect(WormholeCommand.unknownCommand(arguments) == nil, "\(arguments)")
        }
    }

    @Test func editDistanceCountsASwapOfNeighboursAsOne() {
        #expect(WormholeCommand.editDistance("sned", "send") == 1)
        #expect(WormholeCommand.editDistance("send", "send") == 0)
        #expect(WormholeCommand.editDistance("", "read") == 4)
        #expect(WormholeCommand.editDistance("clera", "clear") == 1)
        #expect(WormholeCommand.editDistance("list", "listen") == 2)
    }

    @Test func theCommandExitsSixtyFourSayingSo() async throws {
        let result = try await Sandbox().run(["sned", "chat", "hi"])
        #expect(result.status == 64)
        #expect(result.stderr == "wormhole: 'sned' is not a command; did you mean 'send'? ('wormhole send --help' shows how to use it)\n")
    }
}

@Suite("How each command runs")
struct CommandDispatchTests {
    @Test func everySubcommandNamesItself() {
        #expect(WormholeCommand.commandNames.count == WormholeCommand.configuration.subcommands.count)
        #expect(WormholeCommand.commandNames == WormholeCommand.configuration.subcommands.map { $0._commandName })
    }

    @Test func aSubcommandParsedOnItsOwnIsWhatTheRootParses() throws {
        let arguments = ["send", "--directory", "/tmp/x", "--json", "status", #"{"a": 1}"#]
        let quick = try #require(WormholeCommand.parseQuickly(arguments) as? Send)
        let full = try #require(try WormholeCommand.parseAsRoot(arguments) as? Send)
        #expect(quick.identifier == full.identifier && quick.message == full.message && quick.json == full.json)
        #expect(quick.container.directory == "/tmp/x")
        // Help, mistakes and what the subcommand refuses go to the root's parser.
        for refused in [["send", "--help"], ["send", "-h"], ["help", "send"], ["send"], ["send", "--count", "1", "x"], ["listen", "x", "--count", "0"], ["sned"], []] {
            #expect(WormholeCommand.parseQuickly(refused) == nil, "\(refused)")
        }
    }

    /// The entry point runs every command synchronously on the main thread: a command
    /// whose `run` were `async` would never be run.
    @Test func noCommandRunsAsynchronously() {
        for type in WormholeCommand.configuration.subcommands {
            #expect(!(type is any AsyncParsableCommand.Type), "\(type._commandName)")
        }
    }
}
