import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
@_spi(Backend) import Wormhole

/// `wormhole request <identifier> [message]`: asks the responders of an identifier.
struct Request: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "request",
        abstract: "Send a request to the responders of an identifier and print the reply.",
        discussion: """
            The request is the argument, the file given to --file, or standard input \
            when it is absent or '-'; text is sent as text, other bytes as data (as \
            with --file), and with --json it must be one JSON value. One responder (of however many serve the identifier, in any \
            process: 'wormhole respond', or a program using the library) answers it; \
            its reply is printed as 'listen' prints a message.

            Exit status: 0 with a reply; 2 when no reply came within --timeout (the \
            message says whether any responder serves the identifier); 1 when the \
            responder failed (its error is printed) or the request was not sent (the \
            message says why; no responder runs it).

            Every user of the machine can read a command's arguments (ps, \
            /proc/PID/cmdline): give an identifier or a request that others must not \
            learn with --identifier-file and --file, or on standard input.

            Examples:
              wormhole request app.state "current"
              wormhole request --timeout 0.5 --json math.add '[2, 3]'
              wormhole request --identifier-file ~/.payroll/service --file query.txt
              printf %s "$QUERY" | wormhole request --identifier-file ~/.payroll/service
            """)

    @Argument(help: "The identifier the responders serve (unless given with --identifier-file).")
    var identifier: String?

    @Argument(help: "The request. Read from standard input when absent or '-'.")
    var message: String?

    @Option(name: .long, help: ArgumentHelp("Send the bytes of this file as the request ('-' for standard input).", valueName: "path"))
    var file: String?

    @Option(name: .long, help: ArgumentHelp("Read the identifier from this file (one line; '-' for standard input), not from the command line, which every user can read.", valueName: "path"))
    var identifierFile: String?

    @Option(name: .shortAndLong, help: ArgumentHelp("Seconds to wait for the reply.", valueName: "seconds"))
    var timeout: Double = 5

    @Flag(name: .long, help: "Send the request as JSON (checked), and print the reply as a JSON object: identifier, sequence, time, pid, kind and payload.")
    var json = false

    @OptionGroup(title: "Container") var container: ContainerOptions

    /// The words given: with --identifier-file, the one argument is the request.
    var arguments: (identifier: String?, message: String?) {
        identifierFile == nil ? (identifier, message) : (nil, identifier)
    }

    func validate() throws {
        try Listen.validateTimeout(timeout)
        if identifierFile != nil && message != nil {
            throw ValidationError("Give the identifier as an argument or with --identifier-file, not both.")
        }
        if identifierFile == nil && identifier == nil {
            throw ValidationError("Name the identifier to ask, such as 'wormhole request app.state', or give it with --identifier-file.")
        }
        if file != nil, let message = arguments.message, message != "-" {
            throw ValidationError("Give the request as an argument or with --file, not both.")
        }
        if identifierFile == "-" && source == .standardInput {
            throw ValidationError("Standard input holds the identifier (--identifier-file -): give the request as an argument or with --file.")
        }
    }

    /// Where the request's bytes come from.
    var source: Send.Source {
        if let file { return file == "-" ? .standardInput : .file(file) }
        if let message = arguments.message, message != "-" { return .argument(message) }
        return .standardInput
    }

    func run() throws {
        try Failures.reported {
            let identifier = try arguments.identifier ?? IdentifierFile.read(identifierFile ?? "-")
            let (payload, kind) = try Send.readPayload(source, fromFile: file != nil, json: json)
            let wormhole = try container.makeWormhole()
            do {
                let reply = try wormhole.requestRecord(payload: payload, kind: kind, identifier: identifier, timeout: timeout)
                Output.write((json ? RecordFormat.json : .lines(prefixIdentifier: false)).render(reply, forTerminal: Output.outputIsTerminal))
            } catch let error as WormholeError where error.code == .timedOut {
                throw CommandFailure(error.description, exitCode: WormholeExitCode.noMessage)
            }
        }
    }
}

/// `wormhole respond <identifier> -- <command> [arguments]`: answers requests by running a command.
struct Respond: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "respond",
        abstract: "Answer the requests of an identifier by running a command for each.",
        discussion: """
            For each request this responder receives, the command runs with the request \
            on its standard input; what it writes on standard output is the reply (text \
            when it is UTF-8, data otherwise). A command that fails (status other than \
            0, or killed) sends an error reply instead, with its status and standard \
            error; the requester reports it. No shell is involved: give the command and \
            its arguments after '--'. Several responders may serve one identifier, in \
            any processes: each request goes to one of them, and to another if its \
            responder dies before answering. Runs until interrupted, or with \
            --exit-when-idle SECONDS until no request has arrived for that long (exit \
            status 0): a responder started on demand ('wormhole activation') answers \
            the requests passed while it did not run, then ends when idle.

            A reply holds at most the container's message size limit (8 MiB by \
            default): a command that writes more is not read further, and an error \
            reply says so. The command starts with every signal at its default action \
            and none blocked, as a shell starts it.

            Every user of the machine can read a command's arguments (ps, \
            /proc/PID/cmdline), the command after '--' included: give an identifier \
            that others must not learn with --identifier-file.

            Examples:
              wormhole respond app.state -- cat /run/app/state.json
              wormhole respond math.add -- python3 -c 'import json,sys; print(sum(json.load(sys.stdin)))'
              wormhole respond --identifier-file ~/.payroll/service -- ./answer
            """)

    @Argument(help: "The identifier to serve (unless given with --identifier-file).")
    var identifier: String?

    @Option(name: .long, help: ArgumentHelp("Read the identifier from this file (one line; '-' for standard input), not from the command line, which every user can read.", valueName: "path"))
    var identifierFile: String?

    @Argument(parsing: .postTerminator, help: "The command to run for each request, after '--'.")
    var command: [String] = []

    @Option(name: .shortAndLong, help: "Exit after answering this many requests.")
    var count: Int?

    @Option(name: .long, help: ArgumentHelp("Exit (status 0) once no request has arrived for this many seconds, after those passed while it did not run (for a responder started on demand).", valueName: "seconds"))
    var exitWhenIdle: Double?

    @Flag(name: .shortAndLong, help: "Say on standard error when it serves, and each request's outcome.")
    var verbose = false

    @OptionGroup(title: "Container") var container: ContainerOptions

    func validate() throws {
        if identifier != nil && identifierFile != nil {
            throw ValidationError("Give the identifier as an argument or with --identifier-file, not both.")
        }
        if identifier == nil && identifierFile == nil {
            throw ValidationError("Name the identifier to serve, such as 'wormhole respond app.state -- cat', or give it with --identifier-file.")
        }
        if command.isEmpty {
            throw ValidationError("Name the command to run for each request after '--', such as 'wormhole respond \(identifier ?? "ID") -- cat'.")
        }
        if let count, count < 1 { throw ValidationError("--count must be at least 1, not \(count).") }
        try Listen.validateIdle(exitWhenIdle)
    }

    func run() throws {
        try Failures.reported {
            let identifier = try self.identifier ?? IdentifierFile.read(identifierFile ?? "-")
            let session = try ListeningSession(limit: count)
            let wormhole = try container.makeWormhole()
            let command = self.command, verbose = self.verbose
            let replyLimit = wormhole.transiting.configuration.maximumMessageSize
            struct Failed: Error, CustomStringConvertible { let description: String }
            let responder = try wormhole.respondToRecords(withIdentifier: identifier, queue: session.queue,
                                                          onError: { Output.error($0.description) }) { request in
                var outcome: Result<ChildCommand.Outcome, CommandFailure>?
                guard session.admit({ outcome = ChildCommand.run(command, input: Array(request.payload), outputLimit: replyLimit) }),
                      let outcome else {
                    throw Failed(description: "the responder was stopping")
                }
                let result = try outcome.get()
                if verbose { Output.error("request \(request.sequence) from process \(request.processID): '\(command[0])' \(result.ending)") }
                // Checked first: a command cut off there may then die of SIGPIPE.
                guard !result.outputExceeded else {
                    throw Failed(description: "'\(command.joined(separator: " "))' wrote more than \(replyLimit) bytes, the most a reply may hold; its output was not read further")
                }
                guard result.succeeded else {
                    let message = String(decoding: result.error, as: UTF8.self).split(whereSeparator: \.isNewline).joined(separator: " / ")
                    throw Failed(description: "'\(command.joined(separator: " "))' \(result.ending)" + (message.isEmpty ? "" : ": \(message)"))
                }
                let text = String(validating: result.output, as: UTF8.self)
                return (Data(result.output), text == nil ? .data : .text)
            }
            try session.finishWhenIdle(wormhole, after: exitWhenIdle)
            if verbose || Output.errorIsTerminal {
                Output.error("answering requests to '\(identifier)' with '\(command.joined(separator: " "))' in \(container.place(of: wormhole))\(verbose ? "" : "; Ctrl-C stops")")
            }
            try session.finish(count: count, timeout: nil, what: "requests", names: "'\(identifier)'") {
                responder.cancel()
            }
        }
    }
}
