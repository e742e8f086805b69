import ArgumentParser
@_spi(Backend) import Wormhole

/// `wormhole path`: where the messages live.
struct Path: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "path",
        abstract: "Print the container directory that the options select (creating it if needed), or the PostgreSQL container.",
        discussion: """
            Examples:
              wormhole path
              wormhole path --group group.com.example.notes
            """)

    @OptionGroup(title: "Container") var container: ContainerOptions

    func run() throws {
        try Failures.reported {
            let wormhole = try container.makeWormhole()
            Output.line(try wormhole.directory ?? container.location().description)
        }
    }
}
