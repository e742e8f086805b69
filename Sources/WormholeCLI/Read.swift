import ArgumentParser
import Wormhole

/// `wormhole read <identifier>`: prints the latest message.
struct Read: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print the latest message of an identifier.",
        discussion: """
            Prints the payload, then a newline unless it ends with one; --raw writes the \
            bytes exactly as they were sent. Exits with 2 when there is no message.

            Examples:
              wormhole read status
              wormhole read --raw photo > photo.jpg
              wormhole read --json status
            """)

    @Argument(help: "The identifier to read.")
    var identifier: String

    @Flag(name: .long, help: "Print one JSON object: identifier, sequence, time, pid (of the sender), kind and payload.")
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
            let wormhole = try container.makeWormhole()
            guard let record = try wormhole.record(withIdentifier: identifier) else {
                throw CommandFailure("no message under '\(identifier)' in \(wormhole.directory ?? "the container"); send one with 'wormhole send \(identifier) ...'",
                                     exitCode: WormholeExitCode.noMessage)
            }
            let format: RecordFormat = json ? .json : raw ? .raw : .lines(prefixIdentifier: false)
            Output.write(format.render(record))
        }
    }
}
