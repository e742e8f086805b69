import ArgumentParser
@_spi(Backend) import Wormhole

/// `wormhole clear <identifier>...` or `wormhole clear --all`: removes messages, and says
/// which.
struct Clear: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "clear",
        abstract: "Remove the messages of identifiers, or of all of them.",
        discussion: """
            After this, 'read' finds no message and listeners that start from history see \
            nothing older. Current listeners are not told; sequence numbers go on.

            It prints a line for each identifier whose messages it removed, with how many. \
            Other programs may keep their identifiers in the same container: on a \
            terminal, 'clear --all' in the default group's container lists what it would \
            remove and asks first (--yes does not ask).

            Examples:
              wormhole clear chat
              wormhole clear --all --group group.com.example.notes
            """)

    @Argument(help: "The identifiers to clear.")
    var identifiers: [String] = []

    @Flag(name: .long, help: "Clear every identifier in the container.")
    var all = false

    @Flag(name: .shortAndLong, help: "With --all, do not ask first (it asks only on a terminal, in the default group's container).")
    var yes = false

    @OptionGroup(title: "Container") var container: ContainerOptions

    func validate() throws {
        if all && !identifiers.isEmpty {
            throw ValidationError("Give identifiers or --all, not both.")
        }
        if !all && identifiers.isEmpty {
            throw ValidationError("Name the identifiers to clear, or pass --all to clear every one.")
        }
    }

    func run() throws {
        try Failures.reported {
            let wormhole = try container.makeWormhole()
            for identifier in identifiers { try Wormhole.validate(identifier: identifier) }
            // What there is to remove, said before (when asking) and after.
            let counts = Dictionary(try wormhole.summaries().map { ($0.identifier, $0.messageCount) }) { first, _ in first }
            let cleared = (all ? counts.keys.sorted() : identifiers).map { (identifier: $0, messages: counts[$0] ?? 0) }
            if all {
                let nonEmpty = cleared.filter { $0.messages > 0 }
                guard !nonEmpty.isEmpty else {
                    Output.line("nothing to clear: no identifier has messages in \(container.place(of: wormhole))")
                    return
                }
                if try mustAsk(), !confirmed(Self.listing(nonEmpty), in: container.place(of: wormhole)) {
                    throw CommandFailure("nothing was cleared")
                }
                try wormhole.clearAllMessageContents()
            } else {
                for identifier in identifiers {
                    try wormhole.clearMessageContents(forIdentifier: identifier)
                }
            }
            for (identifier, messages) in cleared where !all || messages > 0 {
                Output.line(messages == 0 ? "'\(identifier)' had no messages" : "cleared '\(identifier)': \(Self.count(messages))")
            }
        }
    }

    /// Whether to ask before clearing every identifier: on a terminal, in the default
    /// group's container, which other programs are the likeliest to share.
    private func mustAsk() throws -> Bool {
        guard !yes, Output.inputIsTerminal, Output.errorIsTerminal else { return false }
        return try container.location().isDefaultGroup
    }

    /// Asks on standard error, reads the answer from standard input: yes only for `y` or
    /// `yes`.
    private func confirmed(_ listing: String, in place: String) -> Bool {
        Output.prompt("clear every identifier in \(place), the default group's container, which other programs may share? It holds \(listing). [y/N] ")
        let answer = (readLine() ?? "").lowercased().filter { !$0.isWhitespace }
        return answer == "y" || answer == "yes"
    }

    /// `'chat' (3 messages), 'note' (1 message)`.
    static func listing(_ cleared: [(identifier: String, messages: Int)]) -> String {
        cleared.map { "'\($0.identifier)' (\(count($0.messages)))" }.joined(separator: ", ")
    }

    /// `1 message`, `3 messages`.
    static func count(_ messages: Int) -> String {
        messages == 1 ? "1 message" : "\(messages) messages"
    }
}
