import ArgumentParser
#if canImport(Glibc)
import Glibc
#endif

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
        subcommands: [Send.self, Listen.self, Read.self, Clear.self, List.self, Status.self, Forget.self, Doctor.self, Post.self, Observe.self, Path.self])

    /// Refuses arguments that are not UTF-8 before parsing: Swift would turn their bad
    /// bytes into U+FFFD, and `send $'a\xffb'` and `send $'a\xfeb'` would then write the
    /// same message (or name the same identifier).
    static func main() async {
        if let problem = invalidArgument(CommandLine.unsafeArgv, count: Int(CommandLine.argc)) {
            Output.error(problem)
            Glibc.exit(WormholeExitCode.usage.rawValue)
        }
        await main(nil)
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
