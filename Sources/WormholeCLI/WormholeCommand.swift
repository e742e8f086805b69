import ArgumentParser
@_spi(Backend) import Wormhole
#if canImport(Glibc)
import Glibc
#endif

/// The `wormhole` command: real-time messages between processes through a shared
/// directory, from the shell.
struct WormholeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "wormhole",
        abstract: "Real-time messages between processes through a shared directory.",
        discussion: """
            Processes that name the same container exchange messages under identifiers. \
            With no options every command uses the container of the application group \
            group.wormhole.default, so two terminals talk with no set-up:

              terminal 1:  wormhole listen chat
              terminal 2:  wormhole send chat "hello"

            Choose another container with --group, --directory, or the environment \
            variables WORMHOLE_GROUP, WORMHOLE_DIRECTORY and WORMHOLE_APP_GROUPS_DIRECTORY.

            Exit status: 0 success; 1 runtime failure; 2 no message (listen or observe \
            timed out, read found nothing); 64 usage error.
            """,
        version: Wormhole.version,
        subcommands: [Send.self, Listen.self, Request.self, Respond.self, Read.self, Clear.self, List.self, Status.self, Forget.self, Doctor.self, Share.self, Top.self, Post.self, Observe.self, Path.self, Activation.self])

    /// The names of the subcommands, in their order. Each names itself in its
    /// configuration: without a name there, argument-parser derives one from the type's
    /// name by reflection, which searches the binary's protocol conformances (a fifth
    /// of the time `wormhole send` took to start; a test checks that none is missing).
    static var commandNames: [String] { configuration.subcommands.compactMap { $0.configuration.commandName } }

    /// Runs the command the arguments name, on this thread: every command is synchronous,
    /// and those that wait (`listen`, `observe`) block this thread until they end, so
    /// the process never starts Swift concurrency's threads or Dispatch's pool monitor
    /// (which would wake an idle listener once a second). Arguments that are not UTF-8
    /// are refused before parsing: Swift would turn their bad bytes into U+FFFD, and
    /// `send $'a\xffb'` and `send $'a\xfeb'` would then write the same message (or name
    /// the same identifier). `send`'s plain forms are run without argument-parser
    /// (``Send/plainForm(_:)``).
    static func start() -> Never {
        let arguments = Array(CommandLine.arguments.dropFirst())
        if let problem = invalidArgument(CommandLine.unsafeArgv, count: Int(CommandLine.argc)) ?? unknownCommand(arguments) {
            Output.error(problem)
            Glibc.exit(WormholeExitCode.usage.rawValue)
        }
        if let plain = Send.plainForm(arguments) {
            runToTheEnd {
                try Send.pass(identifier: plain.identifier, source: plain.message.map { .argument($0) } ?? .standardInput,
                              fromFile: false, json: false, printSequence: false, container: plain.container)
            }
        }
        var command: any ParsableCommand
        do {
            command = try parseQuickly(arguments) ?? parseAsRoot()
        } catch {
            exit(withError: error)
        }
        runToTheEnd { try command.run() }
    }

    /// Runs `body` on this thread and exits: 0, or as its error says.
    private static func runToTheEnd(_ body: () throws -> Void) -> Never {
        do {
            try body()
            Glibc.exit(0)
        } catch {
            exit(withError: error)
        }
    }

    /// The subcommand the first argument names, parsed on its own, or `nil`: parsed from
    /// the root, argument-parser first builds the tables of all eleven commands (a
    /// tenth of the time `wormhole send` takes). Whatever the subcommand does not accept
    /// as it stands (`--help`, a mistake) is `nil` here and parsed again from the root,
    /// so that help and errors name `wormhole <command>` as usual.
    static func parseQuickly(_ arguments: [String]) -> (any ParsableCommand)? {
        guard let name = arguments.first,
              let type = configuration.subcommands.first(where: { $0.configuration.commandName == name }) else { return nil }
        // Help comes back as a command of its own: the root's parser gives it.
        guard let command = try? type.parseAsRoot(Array(arguments.dropFirst())),
              ObjectIdentifier(Swift.type(of: command)) == ObjectIdentifier(type) else { return nil }
        return command
    }

    /// A sentence saying that the first argument is not a command, with the nearest
    /// command, or `nil` when it is one (or an option). `wormhole` itself takes no
    /// argument, so the first word that is not an option must name a command; without
    /// this check `wormhole sned chat hi` would only say "3 unexpected arguments".
    static func unknownCommand(_ arguments: [String]) -> String? {
        guard let word = arguments.first, !word.hasPrefix("-") else { return nil }
        let names = commandNames + ["help"]
        if names.contains(word) { return nil }
        let nearest = names.map { (name: $0, distance: editDistance(word, $0)) }.min { $0.distance < $1.distance }
        let list = commandNames.joined(separator: ", ")
        if let nearest, nearest.distance <= max(1, min(word.count, nearest.name.count) / 3 + 1) {
            return "'\(word)' is not a command; did you mean '\(nearest.name)'? ('wormhole \(nearest.name) --help' shows how to use it)"
        }
        return "'\(word)' is not a command; the commands are \(list) ('wormhole --help' says what each does)"
    }

    /// How many single-character insertions, deletions, substitutions or swaps of two
    /// neighbours turn `a` into `b` (the optimal string alignment distance).
    static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a), b = Array(b)
        if a.isEmpty || b.isEmpty { return max(a.count, b.count) }
        var table = [[Int]](repeating: [Int](repeating: 0, count: b.count + 1), count: a.count + 1)
        for i in 0...a.count { table[i][0] = i }
        for j in 0...b.count { table[0][j] = j }
        for i in 1...a.count {
            for j in 1...b.count {
                let cost = a[i - 1] == b[j - 1] ? 0 : 1
                table[i][j] = min(table[i - 1][j] + 1, table[i][j - 1] + 1, table[i - 1][j - 1] + cost)
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
                    table[i][j] = min(table[i][j], table[i - 2][j - 2] + 1)
                }
            }
        }
        return table[a.count][b.count]
    }

    /// A sentence naming the first argument that is not valid UTF-8, or `nil`.
    static func invalidArgument(_ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>, count: Int) -> String? {
        for index in 1..<max(count, 1) {
            guard let raw = argv[index], String(validatingCString: raw) == nil else { continue }
            let bytes = UnsafeBufferPointer(start: UnsafeRawPointer(raw).assumingMemoryBound(to: UInt8.self), count: strlen(raw))
            let shown = bytes.map { $0 >= 0x20 && $0 < 0x7F ? String(UnicodeScalar($0)) : "\\x" + String($0, radix: 16) }.joined()
            return "argument \(index) ('\(shown)') is not valid UTF-8; identifiers and messages given as arguments must be UTF-8 text. Send other bytes with --file"
        }
        return nil
    }
}
