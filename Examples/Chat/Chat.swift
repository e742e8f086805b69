#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
import ExampleSupport
import Foundation
import Synchronization
import Wormhole

/// A chat between any number of processes: each participant runs this with a name.
///
/// Every line typed is passed to the room's identifier; every participant listens to it.
/// A newcomer first sees the room's recent history, read back from the store; someone
/// who comes back sees what was said since they last left.
@main
struct Chat: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "wormhole-chat",
        abstract: "Chat with other processes through a wormhole.",
        discussion: """
            Run it in several terminals with different names. Type a line and press \
            Enter to say it; Ctrl-D or /quit leaves. With standard input from a pipe or \
            a file, each line is said in turn and the chat ends with the input.

            Examples (after swift build, from .build/debug):
              wormhole-chat alice
              wormhole-chat bob
              printf 'hello\\nbye\\n' | wormhole-chat carol
            """)

    @Argument(help: "Your name in the chat.")
    var name: String

    @Option(help: "The room: the identifier the chat's messages are passed under.")
    var room = "room"

    @Option(help: ArgumentHelp("How many recent events a newcomer is shown.", valueName: "count"))
    var history = 20

    @Option(help: ArgumentHelp("The application group whose container holds the chat.", valueName: "application-group-identifier"))
    var group = "group.example.chat"

    @Option(help: ArgumentHelp("Use this directory instead of the group's container.", valueName: "path"))
    var directory: String?

    func validate() throws {
        if name.trimmingCharacters(in: .whitespaces).isEmpty {
            throw ValidationError("Give a name, such as 'wormhole-chat alice'.")
        }
        if history < 0 {
            throw ValidationError("--history must be 0 or more, not \(history).")
        }
    }

    func run() async throws {
        do {
            try await chat()
        } catch let error as WormholeError {
            FileHandle.standardError.write(Data("wormhole-chat: \(error)\n".utf8))
            throw ExitCode.failure
        }
    }

    func chat() async throws {
        let wormhole = try directory.map { try Wormhole(directory: $0) }
            ?? Wormhole(applicationGroupIdentifier: group)
        let name = self.name, room = self.room
        let me = getpid()
        let typing = Terminal.inputIsTerminal

        // Each participant listens as the durable listener "chat-<name>": someone who
        // comes back is shown what was said since they last left (their position was kept
        // in the container meanwhile). A newcomer sees the recent history: the events
        // after (latest - history). Then everything live.
        let latest = try await wormhole.record(withIdentifier: room)?.sequence ?? 0
        let durableName = "chat-\(name)"
        let lastLeft = (try? wormhole.listeners(identifier: room))?.first { $0.durableName == durableName && !$0.isRunning }?.position
        let start = lastLeft ?? (latest > UInt64(history) ? latest - UInt64(history) : 0)
        if typing {
            Terminal.say("Room '\(room)' in \(wormhole.directory ?? "?") as \(name). Type and press Enter to talk; Ctrl-D or /quit leaves.")
        }
        let seen = Atomic<UInt64>(0)
        let show: @Sendable (WormholeRecord) -> Void = { record in
            defer { seen.store(record.sequence, ordering: .releasing) }
            if let event = try? record.decode(as: ChatEvent.self) {
                // Your own typing is already on the screen.
                let echo = typing && record.processID == me && event.kind == .message && record.sequence > latest
                if !echo { Terminal.say(event.line(at: record.date)) }
            }
            if record.sequence == latest && latest > start {
                let what = lastLeft == nil ? "recent history" : "said since you last left"
                Terminal.say("-- \(what) above (\(latest - start) event\(latest - start == 1 ? "" : "s")); live from here --")
            }
        }
        let onError: @Sendable (WormholeError) -> Void = { error in
            if let missed = error.missedMessageCount {
                Terminal.say("-- \(missed) earlier event\(missed == 1 ? " is" : "s are") no longer kept --")
            }
        }
        let token = try Self.listen(wormhole, room: room, durableName: durableName, after: start, onError: onError, show: show)

        // Ctrl-C is caught before the room hears of us: typed as soon as "joined" shows,
        // it still ends the chat with a goodbye.
        let ending = Ending()
        let say: @Sendable (String) -> Bool = { line in
            let text = line.trimmingCharacters(in: .whitespaces)
            if text == "/quit" { return false }
            guard !text.isEmpty else { return true }
            do {
                try wormhole.passMessage(ChatEvent.message(name, text), identifier: room)
            } catch {
                FileHandle.standardError.write(Data("wormhole-chat: \(error)\n".utf8))
            }
            return true
        }
        // Joined before anything is read: the first line said comes after the join.
        try await wormhole.passMessage(ChatEvent.join(name), identifier: room)
        // At a terminal the chat keeps the line being typed itself, so that a message
        // arriving meanwhile is shown above it rather than in the middle of it.
        if !(typing && Terminal.editor.start(line: say, end: { ending.end() })) {
            Terminal.readLines(say, end: { ending.end() })
        }
        defer { Terminal.editor.stop() }
        // Ctrl-C at a terminal shows "^C" where the cursor was: end that line first.
        let signal = await ending.wait()
        if signal == SIGINT && Terminal.editor.isActive {
            Terminal.editor.interrupted()
        } else if signal != nil && typing {
            Terminal.say("")
        }

        // Show everything up to our own leaving before going: with piped input the chat
        // may end before the history was printed.
        let last = try await wormhole.passMessage(ChatEvent.leave(name), identifier: room)
        let deadline = ContinuousClock.now + .seconds(5)
        while seen.load(ordering: .acquiring) < last && ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(10))
        }
        token.cancel()
    }

    /// Listens as `durableName`; when that name is in the chat in another terminal
    /// already (or cannot name a file), without keeping a position. (A synchronous
    /// function of its own: a typed `catch where` inside an async one crashes the
    /// Swift 6.3 compiler.)
    static func listen(_ wormhole: Wormhole, room: String, durableName: String, after start: UInt64,
                       onError: @escaping @Sendable (WormholeError) -> Void,
                       show: @escaping @Sendable (WormholeRecord) -> Void) throws(WormholeError) -> ListenerToken {
        do {
            return try wormhole.listenForRecords(withIdentifier: room, durableName: durableName, startingFrom: .after(sequence: start),
                                                 onError: onError, listener: show)
        } catch where error.code == .durableNameInUse || error.code == .invalidIdentifier {
            return try wormhole.listenForRecords(withIdentifier: room, startingFrom: .after(sequence: start), onError: onError, listener: show)
        }
    }
}
