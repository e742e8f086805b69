import ArgumentParser
@_spi(Backend) import Wormhole

/// `wormhole read <identifier>`: prints the latest message.
struct Read: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "read",
        abstract: "Print the latest message of an identifier.",
        discussion: """
            Prints a text or JSON message as a line (a newline is added unless it ends \
            with one). Raw bytes (sent with --file, or as Data) go to a file or a pipe \
            exactly as they were sent; --raw writes any message's bytes exactly. Exits \
            with 2 when there is no message.

            Examples:
              wormhole read status
              wormhole read --raw photo > photo.jpg
              wormhole read --json status
            """)

    @Argument(help: "The identifier to read.")
    var identifier: String

    @Flag(name: .long, help: "Print one JSON object: identifier, sequence, time, pid and uid (of the sender), kind and payload.")
    var json = false

    @Flag(name: .long, help: "Write the payload exactly as it is, with no newline added.")
    var raw = false

    @OptionGroup(title: "Container") var container: ContainerOptions

    func validate() throws {
        if json && raw {
            throw ValidationError("--json and --raw choose the output format; give only one of them.")
        }
    }

    func run() throws {
        try Failures.reported {
            try Wormhole.validate(identifier: identifier)
            let wormhole = try container.existingWormhole(identifier: identifier)
            guard let record = try wormhole.record(withIdentifier: identifier) else {
                throw CommandFailure("no message under '\(identifier)' in \(wormhole.directory ?? "the container"); send one with '\(container.command("send", identifier, "..."))'",
                                     exitCode: WormholeExitCode.noMessage)
            }
            // Bytes come back as they were sent: a newline is added for a person reading
            // text, never to raw bytes going to a file or a pipe.
            let exact = raw || (record.kind == .data && !Output.outputIsTerminal)
            let format: RecordFormat = json ? .json : exact ? .raw : .lines(prefixIdentifier: false)
            Output.write(format.render(record, forTerminal: Output.outputIsTerminal))
        }
    }
}
