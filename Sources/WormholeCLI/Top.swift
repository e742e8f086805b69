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
import Wormhole

/// `wormhole top`: each identifier's traffic, listeners and lag, at intervals.
struct Top: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "top",
        abstract: "Show each identifier's traffic at intervals: messages and bytes per second, listeners, how far behind.",
        discussion: """
            Listens to every identifier of the container (those created later included) \
            and, every --interval seconds, shows per identifier the messages and payload \
            bytes passed per second in that interval, the listeners running (its own \
            aside) and how far behind the slowest of them is. On a terminal the table is \
            redrawn in place; into a pipe (or with --json) it writes one JSON object per \
            interval and line. It never creates the container.

            Examples:
              wormhole top
              wormhole top --interval 5 --count 12 --json > traffic.jsonl
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
                let rows = Self.rows(counted: counted, elapsed: elapsed, identifiers: tap.identifiers,
                                     listeners: (try? wormhole.listeners()) ?? [])
                if redraw {
                    Output.write(Data(("\u{1B}[H\u{1B}[2J" + Self.screen(rows, place: place, interval: interval)).utf8))
                } else {
                    Output.line(Self.jsonLine(rows, date: Date(), interval: elapsed))
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

    /// The figures of one interval, one row per identifier that had traffic, listeners
    /// or a log, sorted by identifier. This process's own listeners (the tap) are not
    /// counted.
    static func rows(counted: [String: (messages: Int, bytes: Int)], elapsed: Double, identifiers: [String],
                     listeners: [WormholeListenerStatus]) -> [Row] {
        let others = listeners.filter { $0.isRunning && !($0.processID == getpid() && $0.isInThisPIDNamespace) }
        let names = Set(counted.keys).union(identifiers).union(others.map(\.identifier))
        return names.sorted().map { name in
            let traffic = counted[name] ?? (0, 0)
            let mine = others.filter { $0.identifier == name }
            return Row(identifier: name, messagesPerSecond: Double(traffic.messages) / elapsed,
                       bytesPerSecond: Double(traffic.bytes) / elapsed, listeners: mine.count,
                       behind: mine.map(\.behind).max() ?? 0)
        }
    }

    static func screen(_ rows: [Row], place: String, interval: Double) -> String {
        let header = ["IDENTIFIER", "MSG/S", "BYTES/S", "LISTENERS", "BEHIND"]
        let table = rows.map { row in
            [row.identifier, TextFormatting.decimal(row.messagesPerSecond, places: 1),
             TextFormatting.decimal(row.bytesPerSecond, places: 0), String(row.listeners), String(row.behind)]
        }
        return "wormhole top: \(place), every \(Listen.seconds(interval)); Ctrl-C stops\n\n" + Columns.format([header] + table)
    }

    static func jsonLine(_ rows: [Row], date: Date, interval: Double) -> String {
        let objects = rows.map { row in
            "{\"identifier\":\(RecordFormat.quoted(row.identifier)),\"messagesPerSecond\":\(TextFormatting.decimal(row.messagesPerSecond, places: 3)),"
                + "\"bytesPerSecond\":\(TextFormatting.decimal(row.bytesPerSecond, places: 1)),\"listeners\":\(row.listeners),\"behind\":\(row.behind)}"
        }
        return "{\"time\":\(RecordFormat.quoted(RecordFormat.timestamp(date))),\"interval\":\(TextFormatting.decimal(interval, places: 3)),\"identifiers\":[\(objects.joined(separator: ","))]}"
    }
}
