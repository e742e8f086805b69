#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
@_spi(Backend) import Wormhole

/// `wormhole status [identifier]...`: who listens, and how far behind.
struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show who listens to each identifier: running listeners and durable names, with how far behind they are.",
        discussion: """
            One line per listener: the identifier, the durable name ('-' for a listener \
            without one), whether it runs, its process and user, the sequence number of the last \
            message it read (a durable one: handled), how many were passed after it, and \
            when a durable listener last handled one.

            Then one line per work queue (when there are any): the identifier, the \
            queue, its live members (process ids; '*' marks one handling a message), \
            messages pending (not handed out yet, or held by a member that ended), in \
            flight (handed to a live member, not yet acknowledged), acknowledged, moved \
            to the dead letters, expired and lost. A queue member is listed there, \
            not among the listeners. With --json each queue is an object with a \
            "queue" key.

            Examples:
              wormhole status
              wormhole status chat
              wormhole status --json
            """)

    @Argument(help: "The identifiers to show (every identifier with a listener when none).")
    var identifiers: [String] = []

    @Flag(name: .long, help: "Print one JSON object per listener and line.")
    var json = false

    @OptionGroup(title: "Container") var container: ContainerOptions

    func run() throws {
        try Failures.reported {
            for identifier in identifiers { try Wormhole.validate(identifier: identifier) }
            let wormhole = try container.existingWormhole()
            var statuses: [WormholeListenerStatus] = []
            if identifiers.isEmpty {
                statuses = try wormhole.listeners()
            } else {
                for identifier in identifiers { statuses += try wormhole.listeners(identifier: identifier) }
            }
            var queues: [WormholeWorkQueueStatus] = []
            if identifiers.isEmpty {
                queues = try wormhole.workQueues()
            } else {
                for identifier in identifiers { queues += try wormhole.workQueues(identifier: identifier) }
            }
            if json {
                for status in statuses { Output.line(Self.jsonObject(status)) }
                for queue in queues { Output.line(Self.jsonObject(queue)) }
            } else {
                // The listeners' table, unless only queues have something to show (its
                // header alone says that nobody listens).
                if !statuses.isEmpty || queues.isEmpty { Output.write(Data(Self.table(statuses).utf8)) }
                if !queues.isEmpty { Output.write(Data(((statuses.isEmpty ? "" : "\n") + Self.table(queues)).utf8)) }
            }
        }
    }

    static func jsonObject(_ status: WormholeListenerStatus) -> String {
        let name = status.durableName.map(RecordFormat.quoted) ?? "null"
        let seen = status.lastSeen.map { RecordFormat.quoted(RecordFormat.timestamp($0)) } ?? "null"
        let pid = status.processID.map(String.init) ?? "null"
        let namespace = status.pidNamespace.map(String.init) ?? "null"
        let uid = status.userID.map(String.init) ?? "null"
        return "{\"identifier\":\(RecordFormat.quoted(status.identifier)),\"durable\":\(name),\"running\":\(status.isRunning),"
            + "\"pid\":\(pid),\"pidNamespace\":\(namespace),\"samePIDNamespace\":\(status.isInThisPIDNamespace),\"uid\":\(uid),"
            + "\"position\":\(status.position),\"behind\":\(status.behind),\"lastSeen\":\(seen)}"
    }

    static func jsonObject(_ queue: WormholeWorkQueueStatus) -> String {
        let members = queue.members.map { member in
            "{\"pid\":\(member.processID),\"pidNamespace\":\(member.pidNamespace.map(String.init) ?? "null"),\"handling\":\(member.isHandling)}"
        }.joined(separator: ",")
        return "{\"identifier\":\(RecordFormat.quoted(queue.identifier)),\"queue\":\(RecordFormat.quoted(queue.name)),\"members\":[\(members)],"
            + "\"pending\":\(queue.pending),\"inFlight\":\(queue.inFlight),\"acknowledged\":\(queue.acknowledged),"
            + "\"deadLettered\":\(queue.deadLettered),\"expired\":\(queue.expired),\"lost\":\(queue.lost),\"damaged\":\(queue.isDamaged)}"
    }

    static func table(_ queues: [WormholeWorkQueueStatus]) -> String {
        let header = ["IDENTIFIER", "QUEUE", "MEMBERS", "PENDING", "IN FLIGHT", "ACKED", "DEAD", "EXPIRED", "LOST"]
        let rows = queues.map { queue in
            [queue.identifier, queue.name,
             queue.members.isEmpty ? "-" : queue.members.map { String($0.processID) + ($0.isHandling ? "*" : "") }.joined(separator: ","),
             queue.isDamaged ? "damaged" : String(queue.pending), String(queue.inFlight), String(queue.acknowledged),
             String(queue.deadLettered), String(queue.expired), String(queue.lost)]
        }
        return Columns.format([header] + rows)
    }

    static func table(_ statuses: [WormholeListenerStatus]) -> String {
        let header = ["IDENTIFIER", "DURABLE", "RUNNING", "PID", "USER", "POSITION", "BEHIND", "LAST SEEN"]
        let rows = statuses.map { status in
            [status.identifier, status.durableName ?? "-",
             status.isRunning ? "yes" : "no", pid(status), user(status),
             String(status.position), String(status.behind), status.lastSeen.map(RecordFormat.timestamp) ?? "-"]
        }
        return Columns.format([header] + rows)
    }

    /// The listener's user: its name, or its uid when this system has no name for it.
    static func user(_ status: WormholeListenerStatus) -> String {
        guard let uid = status.userID else { return "-" }
        return getpwuid(uid_t(uid)).map { String(cString: $0.pointee.pw_name) } ?? String(uid)
    }

    /// The process id as this process can use it: a process of another PID namespace
    /// (a container sharing the directory) is marked, since its number names another
    /// process here, or none.
    static func pid(_ status: WormholeListenerStatus) -> String {
        guard let pid = status.processID else { return "-" }
        return status.isInThisPIDNamespace ? String(pid) : "\(pid) (other PID ns)"
    }
}

/// `wormhole forget <name> [identifier]...`: removes a durable listener's position.
struct Forget: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "forget",
        abstract: "Remove the position of a durable listener, and what was kept for it.",
        discussion: """
            Exit status 2 when the name has no position; 1 while its listener runs.

            Examples:
              wormhole forget archiver
              wormhole forget archiver chat
            """)

    @Argument(help: "The durable listener's name.")
    var name: String

    @Argument(help: "The identifiers to forget it for (every identifier when none).")
    var identifiers: [String] = []

    @OptionGroup(title: "Container") var container: ContainerOptions

    func run() throws {
        try Failures.reported {
            let noName = CommandFailure("no durable listener named '\(name)' here; '\(container.command("status"))' lists them", exitCode: WormholeExitCode.noMessage)
            let wormhole: Wormhole
            do {
                wormhole = try container.existingWormhole()
            } catch let failure as CommandFailure where failure.exitCode == WormholeExitCode.noMessage {
                throw noName
            }
            var removed = 0
            if identifiers.isEmpty {
                removed = try wormhole.forgetDurableListener(named: name)
            } else {
                for identifier in identifiers { removed += try wormhole.forgetDurableListener(named: name, identifier: identifier) }
            }
            if removed == 0 { throw noName }
            Output.error("forgot the durable listener '\(name)' (\(removed) identifier\(removed == 1 ? "" : "s"))")
        }
    }
}
