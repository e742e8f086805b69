import ArgumentParser

/// The `wormhole` command: real-time messages between processes through a shared
/// directory, from the shell.
@main
struct WormholeCommand: AsyncParsableCommand {
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
        version: "0.1.0",
        subcommands: [Send.self, Listen.self, Read.self, Clear.self, List.self, Post.self, Observe.self, Path.self])
}
