import ArgumentParser
#if canImport(Glibc)
import Glibc
#endif
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
@_spi(Backend) import Wormhole

/// `wormhole send <identifier> [message]`: passes one message.
struct Send: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "send",
        abstract: "Pass a message to every listener of an identifier.",
        discussion: """
            The message is the argument, or standard input when the argument is absent or \
            '-', or the bytes of --file. It is stored in the container, so 'read' and \
            listeners that start from history see it later too. Text (a UTF-8 argument or \
            input) is stored as text, other bytes unchanged as data; --json checks that \
            the message is exactly one RFC 8259 JSON value (naming the problem and where) \
            and stores it as a JSON message.

            Examples:
              wormhole send chat "hello"
              echo hello | wormhole send chat
              wormhole send --json status '{"battery": 87}'
              wormhole send --file photo.jpg photo
              wormhole send --ttl 30 presence "here"
              seq 100000 | wormhole send --lines numbers
              wormhole send --identifier-file ~/.payroll/events --file event.json

            With --lines, each line of standard input (without its newline) is a \
            message of its own, passed in batches: one lock and one write for up to 1,024 \
            lines, each still a separate message to listeners.
            """)

    @Argument(help: "The identifier to pass the message under, such as 'chat' (unless given with --identifier-file).")
    var identifier: String?

    @Argument(help: "The message. Read from standard input when absent or '-'.")
    var message: String?

    @Option(name: .long, help: ArgumentHelp("Send the bytes of this file, unchanged ('-' for standard input).", valueName: "path"))
    var file: String?

    @Option(name: .long, help: ArgumentHelp("Read the identifier from this file (one line; '-' for standard input), not from the command line, which every user can read.", valueName: "path"))
    var identifierFile: String?

    @Flag(name: .long, help: "Check that the message is JSON and store it as a JSON message.")
    var json = false

    @Flag(name: .long, help: "Pass each line of standard input as a message of its own, in batches.")
    var lines = false

    @Option(name: .long, help: ArgumentHelp("Let the message expire after this many seconds: listeners that start or resume later, and work queues, skip it and count it.", valueName: "seconds"))
    var ttl: Double?

    @Flag(name: .long, help: "Print the message's sequence number in the identifier's order (with --lines: the first and last, 'A-B').")
    var printSequence = false

    @OptionGroup(title: "Container") var container: ContainerOptions

    func validate() throws {
        // With --identifier-file the one argument is the message.
        if identifierFile != nil {
            if message != nil { throw ValidationError("Give the identifier as an argument or with --identifier-file, not both.") }
            var shifted = self
            (shifted.identifier, shifted.message, shifted.identifierFile) = ("-", identifier, nil)
            try shifted.validate()
            if identifierFile == "-" && (shifted.source == .standardInput || lines) {
                throw ValidationError("Standard input holds the identifier (--identifier-file -): give the message as an argument or with --file.")
            }
            return
        }
        if identifier == nil {
            throw ValidationError("Name the identifier to pass the message under, such as 'wormhole send chat hello', or give it with --identifier-file.")
        }
        if let ttl, !(ttl > 0 && ttl.isFinite && ttl < 1e9) {
            throw ValidationError("--ttl must be a positive number of seconds, not \(ttl).")
        }
        if file != nil, let message, message != "-" {
            throw ValidationError("Give the message as an argument or with --file, not both.")
        }
        if lines, (message.map { $0 != "-" } ?? false) || (file.map { $0 != "-" } ?? false) {
            throw ValidationError("--lines reads its messages from standard input: give no message argument and no --file.")
        }
        if lines && ttl != nil {
            throw ValidationError("--ttl applies to one message; --lines passes its lines in batches, which do not expire.")
        }
    }

    /// Where the message's bytes come from.
    enum Source: Equatable {
        case argument(String)
        case standardInput
        case file(String)
    }

    var source: Source {
        if let file { return file == "-" ? .standardInput : .file(file) }
        if let message, message != "-" { return .argument(message) }
        return .standardInput
    }

    func run() throws {
        if let identifierFile {
            var resolved = self
            resolved.identifierFile = nil
            resolved.message = identifier
            resolved.identifier = try Failures.reported { try IdentifierFile.read(identifierFile) }
            return try resolved.run()
        }
        guard let identifier else { throw ValidationError("Name the identifier to pass the message under.") }
        if lines {
            return try SendLines.pass(identifier: identifier, json: json, printSequence: printSequence, container: container.choice)
        }
        try Self.pass(identifier: identifier, source: source, fromFile: file != nil, json: json,
                      printSequence: printSequence, container: container.choice, timeToLive: ttl)
    }

    /// The plain forms, `send IDENTIFIER MESSAGE` and `send IDENTIFIER`, with any of the
    /// container options (`--group G`, `--directory D`, `--optional-directory O`,
    /// `--postgres URL`, each at most once, its value a separate word), when `arguments`
    /// (the command line after `wormhole`) is one of them. ``WormholeCommand/start()``
    /// runs them without argument-parser, whose parsing of `send` reflects the command's
    /// properties: 1.8 ms of the 5.5 ms an installed `wormhole send` took as a whole
    /// process. Anything else (another option, a word starting with '-', options that
    /// contradict each other) is `nil` and goes to argument-parser, which also words
    /// the errors; a test checks that both read every plain form alike.
    static func plainForm(_ arguments: [String]) -> (identifier: String, message: String?, container: ContainerOptions.Choice)? {
        guard arguments.first == configuration.commandName else { return nil }
        var words: [String] = []
        var container = ContainerOptions.Choice()
        var rest = arguments.dropFirst()[...]
        while let word = rest.popFirst() {
            guard word.hasPrefix("-") else {
                words.append(word)
                continue
            }
            let option: WritableKeyPath<ContainerOptions.Choice, String?>
            switch word {
            case "--group": option = \.group
            case "--directory": option = \.directory
            case "--optional-directory": option = \.optionalDirectory
            case "--postgres": option = \.postgres
            default: return nil
            }
            guard container[keyPath: option] == nil, let value = rest.popFirst(), !value.hasPrefix("-") else { return nil }
            container[keyPath: option] = value
        }
        guard words.count == 1 || words.count == 2, (try? container.validate()) != nil else { return nil }
        return (words[0], words.count == 2 ? words[1] : nil, container)
    }

    /// Reads the message from `source` and passes it: what `send` does once its
    /// arguments are read.
    static func pass(identifier: String, source: Source, fromFile: Bool, json: Bool, printSequence: Bool,
                     container: ContainerOptions.Choice, timeToLive: Double? = nil) throws {
        try Failures.reported {
            let (payload, kind) = try readPayload(source, fromFile: fromFile, json: json)
            let wormhole = try container.makeWormhole()
            let sequence = if let timeToLive {
                try wormhole.passPayload(payload, kind: kind, identifier: identifier, timeToLive: timeToLive)
            } else {
                try wormhole.passPayload(payload, kind: kind, identifier: identifier)
            }
            if printSequence { Output.line(String(sequence)) }
        }
    }

    /// The message's bytes and how they are to be stored.
    static func readPayload(_ source: Source, fromFile: Bool, json: Bool) throws -> (Data, WormholePayloadKind) {
        let payload: Data
        var kind: WormholePayloadKind
        switch source {
        case .argument(let text):
            payload = Data(text.utf8)
            kind = .text
        case .file(let path):
            payload = try Self.readFile(path)
            kind = .data
        case .standardInput:
            if Output.inputIsTerminal {
                Output.error("reading the message from standard input; end it with Ctrl-D")
            }
            payload = try Self.readStandardInput()
            kind = !fromFile && String(data: payload, encoding: .utf8) != nil ? .text : .data
        }
        if json {
            if let problem = Self.jsonProblem(payload) {
                throw CommandFailure("the message is not JSON (\(problem)); fix it, or send it without --json as text")
            }
            kind = .json
        }
        return (payload, kind)
    }

    /// The largest message: what the library accepts by default.
    static var limit: Int { Wormhole.Configuration().maximumMessageSize }

    /// The bytes of `path`: any readable file, a pipe or a device included (`/dev/stdin`,
    /// `<(command)`), read up to the message size limit and no further.
    static func readFile(_ path: String) throws -> Data {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            switch errno {
            case ENOENT: throw CommandFailure("cannot read '\(path)': no such file; check the path given to --file")
            case EACCES: throw CommandFailure("cannot read '\(path)': permission denied; check the file's permissions")
            default: throw CommandFailure("cannot read '\(path)': \(String(cString: strerror(errno)))")
            }
        }
        defer { close(fd) }
        return try readBounded(fd, naming: "'\(path)'")
    }

    static func readStandardInput() throws -> Data {
        try readBounded(STDIN_FILENO, naming: "standard input")
    }

    /// Reads `fd` to its end, 64 KiB at a time, refusing (before reading more than one
    /// byte past it) input longer than a message may be: `yes | wormhole send x` stops at
    /// once instead of filling the memory.
    static func readBounded(_ fd: Int32, naming what: String) throws -> Data {
        var data = Data()
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                if errno == EISDIR { throw CommandFailure("cannot read \(what): it is a directory; pass a file to --file") }
                throw CommandFailure("cannot read \(what): \(String(cString: strerror(errno)))")
            }
            if count == 0 { return data }
            data.append(contentsOf: chunk[..<count])
            if data.count > limit {
                throw CommandFailure("\(what) holds more than \(limit) bytes, the largest message (Wormhole.Configuration.maximumMessageSize); nothing was sent")
            }
        }
    }

    /// Why `data` is not exactly one RFC 8259 JSON value, with where, or `nil` when it is.
    static func jsonProblem(_ data: Data) -> String? {
        StrictJSON.problem(in: data)?.description
    }
}
