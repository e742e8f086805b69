import ArgumentParser
import Synchronization
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
@_spi(Backend) import Wormhole

/// `wormhole listen <identifier>...`: prints messages as they arrive.
struct Listen: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "listen",
        abstract: "Print each message passed under the identifiers, as it arrives.",
        discussion: """
            Each message is printed as it arrives and written out at once, so the output \
            can feed a pipeline: the payload, then a newline unless it ends with one. \
            Without --count or --timeout it listens until interrupted (Ctrl-C).

            With --history it prints the messages kept from before, oldest first, then \
            goes on with new ones; add --no-follow to stop after what is already there \
            (with --history, --latest or --durable), as 'cat' does where 'tail -f' would \
            go on.

            On a terminal it says on standard error where it listens; --verbose says so \
            in any case, which rule chose the container, and for each message the \
            process and user that passed it.

            Exit status: 0 when --count messages arrived, --no-follow printed what was \
            there (or on a plain end); 2 when --timeout passed first (fewer than --count \
            messages, or none at all), or --no-follow found nothing to print.

            With --all it listens to every identifier of the container, those created \
            later included, each line prefixed by its identifier (with --json, the \
            object names it): a tap on all the traffic, for operators.

            Examples:
              wormhole listen chat
              wormhole listen --all
              wormhole listen --count 1 --timeout 10 reply
              wormhole listen --history --json chat status
              wormhole listen --history --no-follow chat
              wormhole listen chat | grep --line-buffered error
              wormhole listen --durable archiver --history chat
              wormhole listen --queue workers jobs
              wormhole listen --identifier-file ~/.payroll/identifiers

            With --queue NAME the listener joins the work queue NAME of each \
            identifier: each message goes to one member of the queue, in whatever \
            process, and counts as handled once printed; a member killed before it \
            printed a message leaves it to another. A new queue starts with the \
            retained history. A message whose member ended before printing it is \
            handed out again after --retry-delay seconds (1 by default), doubled at \
            each further failure up to --max-retry-delay (300). After \
            --max-deliveries tries it goes to the \
            dead-letter identifier (--dead-letters, default ID.dead-letters). \
            'wormhole status' shows each queue's members, pending and in-flight \
            messages.

            With --durable NAME the listener keeps its position in the container: \
            started again (after Ctrl-C, a crash or a reboot of the program), it \
            prints what was passed since it last ran, from after the last message it \
            printed, then new ones. The first time a name is used it starts as \
            --history or --latest say (default: new messages only). One process at a \
            time uses a name. 'wormhole status' shows the names; 'wormhole forget NAME' \
            removes one.

            With --exit-when-idle SECONDS (and --durable or --queue) it exits with \
            status 0 once no message has arrived for that long: a service that a \
            systemd path unit starts when a message arrives ('wormhole activation') \
            prints what was passed while it did not run, then ends when idle.
            """)

    @Argument(help: "The identifiers to listen to.")
    var identifiers: [String] = []

    @Option(name: .long, help: ArgumentHelp("Listen to the identifiers in this file too, one a line ('-' for standard input), not on the command line, which every user can read.", valueName: "path"))
    var identifierFile: String?

    @Flag(name: .long, help: "Listen to every identifier of the container, those created later included; each line is prefixed by its identifier.")
    var all = false

    @Option(name: .shortAndLong, help: "Exit after this many messages (across all identifiers).")
    var count: Int?

    @Option(name: .shortAndLong, help: ArgumentHelp("Stop listening after this many seconds; exit 2 if the messages waited for did not all arrive.", valueName: "seconds"))
    var timeout: Double?

    @Flag(name: .long, help: "Start from the retained history: print the messages kept from before, oldest first, then new ones (with --no-follow, then stop).")
    var history = false

    @Flag(name: .long, help: "Start with the latest message, when there is one, then new ones.")
    var latest = false

    @Option(name: .long, help: ArgumentHelp("Listen as the durable listener NAME: resume after the last message printed under that name.", valueName: "name"))
    var durable: String?

    @Option(name: .long, help: ArgumentHelp("Join the work queue NAME of the identifiers: each message to one member of the queue.", valueName: "name"))
    var queue: String?

    @Option(name: .long, help: ArgumentHelp("With --queue: how many times a message is handed out before it goes to the dead letters.", valueName: "count"))
    var maxDeliveries: Int = 5

    @Option(name: .long, help: ArgumentHelp("With --queue: where messages the queue gave up on go (default: ID.dead-letters).", valueName: "identifier"))
    var deadLetters: String?

    @Option(name: .long, help: ArgumentHelp("With --durable or --queue: exit (status 0) once no message has arrived for this many seconds, after what was passed while it did not run (for a service started on demand).", valueName: "seconds"))
    var exitWhenIdle: Double?

    @Option(name: .long, help: ArgumentHelp("With --queue: seconds before a message that failed (not printed: its member ended) is handed out again, doubled at each further failure; 0: at once.", valueName: "seconds"))
    var retryDelay: Double = 1

    @Option(name: .long, help: ArgumentHelp("With --queue: the longest wait before a message that failed is handed out again, in seconds.", valueName: "seconds"))
    var maxRetryDelay: Double = 300

    @Flag(name: .long, help: "Stop after the messages already there (the history, the latest, or what a durable name has not printed yet) instead of following new ones.")
    var noFollow = false

    @Flag(name: .long, help: "Print one JSON object per line: identifier, sequence, time, pid and uid (of the sender), kind and payload.")
    var json = false

    @Flag(name: .long, help: "Prefix each line with the identifier and ': '.")
    var prefix = false

    @Flag(name: .long, help: "Write each payload exactly as it is, with no newline added (for one binary message with --count 1).")
    var raw = false

    @Flag(name: .shortAndLong, help: "Say on standard error where it listens, once it listens (scripts can wait for that line).")
    var verbose = false

    @OptionGroup(title: "Container") var container: ContainerOptions

    func validate() throws {
        if all && !identifiers.isEmpty {
            throw ValidationError("--all listens to every identifier; name none with it.")
        }
        if all && (durable != nil || history || latest || noFollow) {
            throw ValidationError("--all hears the messages passed from now on; --durable, --history, --latest and --no-follow need named identifiers.")
        }
        if all && identifierFile != nil {
            throw ValidationError("--all listens to every identifier; give no --identifier-file with it.")
        }
        if identifiers.isEmpty && !all && identifierFile == nil {
            throw ValidationError("Name at least one identifier to listen to, such as 'wormhole listen chat', or listen to all with --all.")
        }
        if let count, count < 1 {
            throw ValidationError("--count must be at least 1, not \(count).")
        }
        try Self.validateTimeout(timeout)
        if history && latest {
            throw ValidationError("--history and --latest choose where to start; give only one of them.")
        }
        if noFollow && !history && !latest && durable == nil {
            throw ValidationError("--no-follow stops after the messages already there, so it needs --history, --latest or --durable (without them, listen starts with new messages only).")
        }
        if queue != nil && (durable != nil || latest || noFollow) {
            throw ValidationError("--queue takes messages from a work queue; it cannot be combined with --durable, --latest or --no-follow.")
        }
        if queue == nil && (deadLetters != nil || maxDeliveries != 5 || retryDelay != 1 || maxRetryDelay != 300) {
            throw ValidationError("--max-deliveries, --dead-letters, --retry-delay and --max-retry-delay apply to a work queue; add --queue NAME.")
        }
        for (name, value) in [("--retry-delay", retryDelay), ("--max-retry-delay", maxRetryDelay)] where !(value >= 0 && value <= 2_000_000) {
            throw ValidationError("\(name) must be between 0 and 2000000 seconds, not \(value).")
        }
        if maxRetryDelay < retryDelay {
            throw ValidationError("--max-retry-delay (\(maxRetryDelay)) must be at least --retry-delay (\(retryDelay)).")
        }
        if maxDeliveries < 1 {
            throw ValidationError("--max-deliveries must be at least 1, not \(maxDeliveries).")
        }
        try Self.validateIdle(exitWhenIdle)
        if exitWhenIdle != nil && durable == nil && queue == nil {
            throw ValidationError("--exit-when-idle needs --durable NAME or --queue NAME: a plain listener started on demand would not hear what was passed before it started.")
        }
        if [json, raw, prefix].filter({ $0 }).count > 1 {
            throw ValidationError("--json, --raw and --prefix choose the output format; give only one of them.")
        }
    }

    static func validateIdle(_ seconds: Double?) throws {
        if let seconds, !(seconds > 0 && seconds.isFinite && seconds < 1e9) {
            throw ValidationError("--exit-when-idle must be a positive number of seconds, not \(seconds).")
        }
    }

    static func validateTimeout(_ timeout: Double?) throws {
        if let timeout, !(timeout > 0 && timeout.isFinite && timeout < 1e9) {
            throw ValidationError("--timeout must be a positive number of seconds, not \(timeout).")
        }
    }

    var startingPoint: Wormhole.StartingPoint {
        history ? .history : latest ? .latest : .now
    }

    var format: RecordFormat {
        json ? .json : raw ? .raw : .lines(prefixIdentifier: prefix || all)
    }

    func run() throws {
        if let identifierFile {
            var resolved = self
            resolved.identifierFile = nil
            resolved.identifiers += try Failures.reported { try IdentifierFile.readLines(identifierFile) }
            return try resolved.run()
        }
        if all { return try listenToAll() }
        try Failures.reported {
            // Signals first: a process out of descriptors must still stop on Ctrl-C.
            let session = try ListeningSession(limit: count)
            try DescriptorBudget.reserve(listeners: Set(identifiers).count)
            let wormhole = try container.makeWormhole()
            let format = self.format
            let terminal = Output.outputIsTerminal
            if let queue {
                try listen(queue: queue, wormhole: wormhole, session: session, format: format, terminal: terminal)
                return
            }
            // With --no-follow: the last message of each identifier now, where printing stops.
            let listeners = Listeners(remaining: noFollow ? try lastMessages(in: wormhole) : [:])
            defer { listeners.cancelAll() }
            if noFollow && listeners.remaining.withLock({ $0.isEmpty }) {
                throw CommandFailure("no message to print under \(Self.names(identifiers)): \(durable == nil ? "none is kept" : "the durable listener '\(durable!)' has printed every one")",
                                     exitCode: WormholeExitCode.noMessage)
            }
            // No message is handled until every listener is registered: a listener that
            // starts with a backlog (--history, --durable) would otherwise be called before
            // its token is in `tokens`, and one it does not print (--count reached) could
            // not cancel it, so a durable name would count that message as handled.
            session.queue.suspend()
            var suspended = true
            defer { if suspended { session.queue.resume() } }
            // Each identifier once: naming one twice must not print its messages twice.
            var seen = Set<String>()
            for identifier in identifiers where seen.insert(identifier).inserted {
                let token = try listen(to: identifier, wormhole: wormhole, session: session, listeners: listeners,
                                       format: format, terminal: terminal)
                listeners.tokens.withLock { $0.append(token) }
            }
            session.queue.resume()
            suspended = false
            try session.finishWhenIdle(wormhole, after: exitWhenIdle)
            announce(Self.names(identifiers), in: wormhole)
            try session.finish(count: count, timeout: timeout, what: "messages", names: Self.names(identifiers)) {
                listeners.cancelAll()
            }
            // Reached the end with nothing printed: every message there had expired (or
            // could not be read), each reported above.
            if noFollow && session.received == 0 {
                throw CommandFailure("no message to print under \(Self.names(identifiers)): those there have expired or could not be read",
                                     exitCode: WormholeExitCode.noMessage)
            }
        }
    }

    /// The listeners of one run and, with --no-follow, the last message of each identifier
    /// that printing has not reached yet.
    private final class Listeners: Sendable {
        let tokens = Mutex<[ListenerToken]>([])
        let remaining: Mutex<[String: UInt64]>

        init(remaining: [String: UInt64]) { self.remaining = Mutex(remaining) }

        func cancelAll() { tokens.withLock { $0 }.forEach { $0.cancel() } }
    }

    /// Starts listening to `identifier` on the session's queue: what arrives is printed
    /// until the session ends; a listener that stops ends the session.
    private func listen(to identifier: String, wormhole: Wormhole, session: ListeningSession, listeners: Listeners,
                        format: RecordFormat, terminal: Bool) throws -> ListenerToken {
        let noFollow = self.noFollow, verbose = self.verbose
        let onError: @Sendable (WormholeError) -> Void = { error in
            // A listener that stopped (nothing can wake it any more) ends the
            // command; anything else is reported and listening goes on.
            if listeners.tokens.withLock({ $0 }).contains(where: { $0.identifier == identifier && $0.isCancelled }) {
                session.finish(.failed("stopped listening to '\(identifier)': \(error.description)"))
            } else {
                Output.error(error.description)
                // With --no-follow, a message reported instead of printed (too
                // large for this reader, or expired: the report names the
                // newest of those it stands for) is passed all the same.
                if noFollow, let sequence = error.sequence, Self.passed(identifier, sequence, in: listeners.remaining) {
                    session.finish(.reachedCount)
                }
            }
        }
        // A durable listener's position moves once the message was written out. One
        // that arrives after the end (--count reached, a signal) is not printed: the
        // listeners stop before this call returns, so it is not counted as handled.
        let listener: @Sendable (WormholeRecord) -> Void = { record in
            if !session.admit({ Self.print(record, format: format, terminal: terminal, verbose: verbose) }) {
                listeners.cancelAll()
            } else if noFollow, Self.passed(identifier, record.sequence, in: listeners.remaining) {
                session.finish(.reachedCount)
            }
        }
        if let durable {
            return try wormhole.listenForRecords(withIdentifier: identifier, durableName: durable, startingFrom: startingPoint,
                                                 queue: session.queue, onError: onError, listener: listener)
        }
        return try wormhole.listenForRecords(withIdentifier: identifier, startingFrom: startingPoint,
                                             queue: session.queue, onError: onError, listener: listener)
    }

    /// For --no-follow: notes that `identifier`'s listener got (or reported) message
    /// `sequence`; whether every identifier has now reached its last message.
    static func passed(_ identifier: String, _ sequence: UInt64, in remaining: borrowing Mutex<[String: UInt64]>) -> Bool {
        remaining.withLock { remaining -> Bool in
            guard let last = remaining[identifier] else { return false }
            if sequence >= last { remaining[identifier] = nil }
            return remaining.isEmpty
        }
    }

    /// A person at a terminal sees where it listens; a script asks with --verbose, which
    /// also says which rule chose the container.
    func announce(_ what: String, in wormhole: Wormhole) {
        let place = container.place(of: wormhole)
        if verbose {
            Output.error("listening to \(what) in \(place)")
            Output.error("  chosen by: \(container.reason())")
        } else if Output.errorIsTerminal && !noFollow {
            Output.error("listening to \(what) in \(place); Ctrl-C stops")
        }
    }

    /// Writes `record` out; with --verbose, says on standard error who passed it.
    static func print(_ record: WormholeRecord, format: RecordFormat, terminal: Bool, verbose: Bool) {
        if verbose { Output.error("'\(record.identifier)' #\(record.sequence) from \(RecordFormat.sender(record))") }
        Output.write(format.render(record, forTerminal: terminal))
    }

    /// --all: every identifier, those created later included, until --count, --timeout
    /// or a signal.
    func listenToAll() throws {
        try Failures.reported {
            let session = try ListeningSession(limit: count)
            let wormhole = try container.makeWormhole()
            let format = self.format
            let terminal = Output.outputIsTerminal
            let tap = Mutex<WormholeTap?>(nil)
            session.queue.suspend()
            var suspended = true
            defer { if suspended { session.queue.resume() } }
            let verbose = self.verbose
            let started = try wormhole.listenForAllRecords(queue: session.queue, onError: { error in
                // A tap that stopped (its shared container was revoked) ends the command.
                if tap.withLock({ $0 })?.isCancelled == true {
                    session.finish(.failed("stopped listening to every identifier: \(error.description)"))
                } else {
                    Output.error(error.description)
                }
            }) { record in
                if !session.admit({ Self.print(record, format: format, terminal: terminal, verbose: verbose) }) {
                    tap.withLock { $0 }?.cancel()
                }
            }
            tap.withLock { $0 = started }
            defer { started.cancel() }
            session.queue.resume()
            suspended = false
            announce("every identifier", in: wormhole)
            try session.finish(count: count, timeout: timeout, what: "messages", names: "any identifier") {
                started.cancel()
            }
        }
    }

    /// --queue: one member of the queue per identifier. A message counts as handled once
    /// written out; one that arrives after the end (--count reached) goes back to the queue.
    func listen(queue name: String, wormhole: Wormhole, session: ListeningSession, format: RecordFormat, terminal: Bool) throws {
        struct Declined: Error, CustomStringConvertible {
            var description: String { "the listener had stopped (--count reached)" }
        }
        let members = Mutex<[WorkQueueMember]>([])
        defer { members.withLock { $0 }.forEach { $0.cancel() } }
        let options = WorkQueueOptions(maximumDeliveries: maxDeliveries, deadLetterIdentifier: deadLetters,
                                       retryDelay: retryDelay, maximumRetryDelay: maxRetryDelay)
        // No message is handled until every member is registered: one taken before (the
        // queue's backlog) and not printed (--count reached) could not cancel its member,
        // which would take it again and again, declining it each time, until the dead
        // letters (found under load: "the handler threw ... --count reached", 5 deliveries).
        session.queue.suspend()
        var suspended = true
        defer { if suspended { session.queue.resume() } }
        for identifier in Set(identifiers).sorted() {
            let member = try wormhole.listenForRecords(withIdentifier: identifier, workQueue: name, options: options, queue: session.queue,
                                                       onError: { error in
                // A member that left the queue on its own (its shared container was
                // revoked) ends the command; anything else is reported.
                if members.withLock({ $0 }).contains(where: { $0.identifier == identifier && $0.isCancelled }) {
                    session.finish(.failed("stopped taking messages of '\(identifier)': \(error.description)"))
                } else {
                    Output.error(error.description)
                }
            }) { record, _ in
                guard session.admit({ Output.write(format.render(record, forTerminal: terminal)) }) else {
                    members.withLock { $0 }.forEach { $0.cancel() }
                    throw Declined()
                }
            }
            members.withLock { $0.append(member) }
        }
        session.queue.resume()
        suspended = false
        try session.finishWhenIdle(wormhole, after: exitWhenIdle)
        if verbose || Output.errorIsTerminal {
            Output.error("taking messages of \(Self.names(identifiers)) from the work queue '\(name)' in \(container.place(of: wormhole))\(verbose ? "" : "; Ctrl-C stops")")
        }
        try session.finish(count: count, timeout: timeout, what: "messages", names: Self.names(identifiers)) {
            members.withLock { $0 }.forEach { $0.cancel() }
        }
    }

    /// For --no-follow: the sequence number of the last message of each identifier that
    /// there is something to print for (its latest, unless the durable name printed it).
    /// Read from the summaries, which do not read the message: one too large for this
    /// reader, or damaged, still marks where printing stops.
    func lastMessages(in wormhole: Wormhole) throws -> [String: UInt64] {
        var last: [String: UInt64] = [:]
        let summaries = try wormhole.summaries()
        for identifier in Set(identifiers) {
            guard let summary = summaries.first(where: { $0.identifier == identifier }), summary.messageCount > 0 else { continue }
            let newest = summary.lastSequence
            if let durable {
                // A name used before resumes after its position; a new one starts as
                // --history or --latest say, or with new messages only (nothing to print).
                let status = try wormhole.listeners(identifier: identifier).first { $0.durableName == durable }
                if let status, status.position >= newest { continue }
                if status == nil && !history && !latest { continue }
            }
            last[identifier] = newest
        }
        return last
    }

    static func seconds(_ value: Double?) -> String {
        guard let value else { return "" }
        let text = value == value.rounded() ? String(Int(value)) : String(value)
        return value == 1 ? "1 second" : "\(text) seconds"
    }

    static func names(_ identifiers: [String]) -> String {
        identifiers.map { "'\($0)'" }.joined(separator: ", ")
    }
}
