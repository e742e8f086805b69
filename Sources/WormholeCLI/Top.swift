#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Synchronization
@_spi(Backend) import Wormhole

/// `wormhole top`: each identifier's traffic, listeners, queue members and lag, at
/// intervals.
struct Top: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "top",
        abstract: "Show each identifier's traffic at intervals: messages and bytes per second, listeners, queue members, pending messages, how far behind.",
        discussion: """
            Listens to every identifier of the container (those created later included) \
            and, every --interval seconds, shows per identifier the messages and payload \
            bytes passed per second in that interval, the listeners running (its own \
            aside), how far behind the slowest of them is, the live members of its work \
            queues (responders included) and the messages those queues have not handed \
            out yet; then one line per work queue: its members, pending and in-flight \
            messages. On a terminal the tables are redrawn in place; into a pipe (or with \
            --json) it writes one JSON object per interval and line. It never creates \
            the container.

            Examples:
              wormhole top
              wormhole top --interval 5 --count 12 --json > traffic.jsonl
              wormhole top --count 1 --json
            """)

    @Option(name: .shortAndLong, help: ArgumentHelp("Seconds between two reports.", valueName: "seconds"))
    var interval: Double = 1

    @Option(name: .shortAndLong, help: "Stop after this many reports.")
    var count: Int?

    @Flag(name: .long, help: "One JSON object per interval and line, even on a terminal.")
    var json = false

    @OptionGroup(title: "Container") var container: ContainerOptions

    func validate() throws {
        if !(interval >= 0.05 && interval <= 86_400) {
            throw ValidationError("--interval must be between 0.05 and 86400 seconds, not \(interval).")
        }
        if let count, count < 1 {
            throw ValidationError("--count must be at least 1, not \(count).")
        }
    }

    /// One identifier's figures for an interval.
    struct Row: Equatable {
        var identifier: String
        var messagesPerSecond: Double
        var bytesPerSecond: Double
        var listeners: Int
        var behind: UInt64
        /// The live members of the identifier's work queues (responders included).
        var members: Int = 0
        /// Messages its work queues have not handed out yet (passed after a queue's
        /// position, given back, or held by a member that ended).
        var pending: UInt64 = 0
    }

    /// One work queue's figures for an interval.
    struct QueueRow: Equatable {
        var identifier: String
        var queue: String
        var members: Int
        var pending: UInt64
        var inFlight: Int
        var isDamaged: Bool
    }

    func run() throws {
        try Failures.reported {
            let session = try ListeningSession(limit: nil)
            let wormhole = try container.existingWormhole()
            let traffic = Mutex<[String: (messages: Int, bytes: Int)]>([:])
            let tap = try wormhole.listenForAllRecords(queue: session.queue, onError: { Output.error($0.description) }) { record in
                traffic.withLock { $0[record.identifier, default: (0, 0)].messages += 1; $0[record.identifier, default: (0, 0)].bytes += record.payload.count }
            }
            defer { tap.cancel() }
            let redraw = Output.outputIsTerminal && !json
            let place = container.place(of: wormhole)
            var reports = 0
            var start = ContinuousClock.now
            while session.outcome(within: interval) == nil {
                session.queue.sync {}
                let now = ContinuousClock.now
                let elapsed = max(1e-3, Self.seconds(now - start))
                start = now
                let counted = traffic.withLock { counted in defer { counted = [:] }; return counted }
                let queues = Self.queueRows((try? wormhole.workQueues()) ?? [])
                let rows = Self.rows(counted: counted, elapsed: elapsed, identifiers: tap.identifiers,
                                     listeners: (try? wormhole.listeners()) ?? [], queues: queues)
                if redraw {
                    Output.write(Data(("\u{1B}[H\u{1B}[2J" + Self.screen(rows, queues: queues, place: place, interval: interval)).utf8))
                } else {
                    Output.line(Self.jsonLine(rows, queues: queues, date: Date(), interval: elapsed))
                }
                reports += 1
                if let count, reports >= count { return }
            }
            if case .interrupted(let signal)? = session.outcome(within: 0) {
                tap.cancel()
                ListeningSession.endBySignal(signal)
            }
        }
    }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    /// The figures of one interval, one row per identifier that had traffic, listeners,
    /// a work queue or a log, sorted by identifier. This process's own listeners (the
    /// tap) are not counted. Queue members are counted apart from the listeners: they hold
    /// no listener claim (Protocol.md §18), so `listeners()` never lists them.
    static func rows(counted: [String: (messages: Int, bytes: Int)], elapsed: Double, identifiers: [String],
                     listeners: [WormholeListenerStatus], queues: [QueueRow] = []) -> [Row] {
        let others = listeners.filter { $0.isRunning && !($0.processID == getpid() && $0.isInThisPIDNamespace) }
        let names = Set(counted.keys).union(identifiers).union(others.map(\.identifier)).union(queues.map(\.identifier))
        return names.sorted().map { name in
            let traffic = counted[name] ?? (0, 0)
            let mine = others.filter { $0.identifier == name }
            let itsQueues = queues.filter { $0.identifier == name }
            return Row(identifier: name, messagesPerSecond: Double(traffic.messages) / elapsed,
                       bytesPerSecond: Double(traffic.bytes) / elapsed, listeners: mine.count,
                       behind: mine.map(\.behind).max() ?? 0,
                       members: itsQueues.map(\.members).reduce(0, +), pending: itsQueues.map(\.pending).reduce(0, +))
        }
    }

    /// One row per work queue, sorted by identifier and name; a damaged queue state
    /// counts its members and nothing pending.
    static func queueRows(_ queues: [WormholeWorkQueueStatus]) -> [QueueRow] {
        queues.map { queue in
            QueueRow(identifier: queue.identifier, queue: queue.name, members: queue.members.count,
                     pending: queue.isDamaged ? 0 : queue.pending, inFlight: queue.inFlight, isDamaged: queue.isDamaged)
        }.sorted { ($0.identifier, $0.queue) < ($1.identifier, $1.queue) }
    }

    static func screen(_ rows: [Row], queues: [QueueRow] = [], place: String, interval: Double) -> String {
        let header = ["IDENTIFIER", "MSG/S", "BYTES/S", "LISTENERS", "BEHIND", "MEMBERS", "PENDING"]
        let table = rows.map { row in
            [row.identifier, TextFormatting.decimal(row.messagesPerSecond, places: 1),
             TextFormatting.decimal(row.bytesPerSecond, places: 0), String(row.listeners), String(row.behind),
             String(row.members), String(row.pending)]
        }
        var screen = "wormhole top: \(place), every \(Listen.seconds(interval)); Ctrl-C stops\n\n" + Columns.format([header] + table)
        if !queues.isEmpty {
            let queueHeader = ["IDENTIFIER", "QUEUE", "MEMBERS", "PENDING", "IN FLIGHT"]
            let queueTable = queues.map { queue in
                [queue.identifier, queue.queue, String(queue.members), queue.isDamaged ? "damaged" : String(queue.pending), String(queue.inFlight)]
            }
            screen += "\n" + Columns.format([queueHeader] + queueTable)
        }
        return screen
    }

    static func jsonLine(_ rows: [Row], queues: [QueueRow] = [], date: Date, interval: Double) -> String {
        let objects = rows.map { row in
            let itsQueues = queues.filter { $0.identifier == row.identifier }.map { queue in
                "{\"queue\":\(RecordFormat.quoted(queue.queue)),\"members\":\(queue.members),\"pending\":\(queue.pending),"
                    + "\"inFlight\":\(queue.inFlight),\"damaged\":\(queue.isDamaged)}"
            }
            return "{\"identifier\":\(RecordFormat.quoted(row.identifier)),\"messagesPerSecond\":\(TextFormatting.decimal(row.messagesPerSecond, places: 3)),"
                + "\"bytesPerSecond\":\(TextFormatting.decimal(row.bytesPerSecond, places: 1)),\"listeners\":\(row.listeners),\"behind\":\(row.behind),"
                + "\"members\":\(row.members),\"pending\":\(row.pending),\"queues\":[\(itsQueues.joined(separator: ","))]}"
        }
        return "{\"time\":\(RecordFormat.quoted(RecordFormat.timestamp(date))),\"interval\":\(TextFormatting.decimal(interval, places: 3)),\"identifiers\":[\(objects.joined(separator: ","))]}"
    }
}
