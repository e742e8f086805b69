import ArgumentParser
@_spi(Backend) import Wormhole

/// `wormhole post <name>...`: a bare, payload-free notification.
struct Post: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "post",
        abstract: "Post payload-free notifications, optionally setting a name's 64-bit state first.",
        discussion: """
            The Darwin notification analogue on its own: every observer of the name, in \
            any process using the same container, is woken. Nothing is stored but the \
            optional state value; posts in quick succession may reach an observer as one.

            Examples:
              wormhole post refresh
              wormhole post --state 42 battery
            """)

    @Argument(help: "The names to post.")
    var names: [String]

    @Option(name: .long, help: ArgumentHelp("Set the names' state value (an unsigned 64-bit integer) before posting.", valueName: "value"))
    var state: UInt64?

    @OptionGroup(title: "Container") var container: NotificationContainerOptions

    func validate() throws {
        if names.isEmpty {
            throw ValidationError("Name at least one notification to post, such as 'wormhole post refresh'.")
        }
    }

    func run() throws {
        try Failures.reported {
            let center = try container.makeNotificationCenter()
            for name in names {
                if let state { try center.setState(state, forName: name) }
                try center.post(name)
            }
        }
    }
}
