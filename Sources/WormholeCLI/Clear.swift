import ArgumentParser
import Wormhole

/// `wormhole clear <identifier>...` or `wormhole clear --all`: removes messages.
struct Clear: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "clear",
        abstract: "Remove the messages of identifiers, or of all of them.",
        discussion: """
            After this, 'read' finds no message and listeners that start from history see \
            nothing older. Current listeners are not told; sequence numbers go on.

            Examples:
              wormhole clear chat
              wormhole clear --all
            """)

    @Argument(help: "The identifiers to clear.")
    var identifiers: [String] = []

    @Flag(name: .long, help: "Clear every identifier in the container.")
    var all = false

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
            if all {
                try wormhole.clearAllMessageContents()
            } else {
                for identifier in identifiers {
                    try wormhole.clearMessageContents(forIdentifier: identifier)
                }
            }
        }
    }
}
