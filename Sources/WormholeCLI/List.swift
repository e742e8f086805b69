import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
@_spi(Backend) import Wormhole

/// `wormhole list`: the identifiers in the container.
struct List: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list",
        abstract: "List the identifiers that have messages: count, bytes and last update.",
        discussion: """
            An identifier whose messages were cleared has no message and is left out; \
            --all lists it too (with 0 messages): its sequence numbers go on from where \
            they were.

            Examples:
              wormhole list
              wormhole list --json
              wormhole list --all
            """)

    @Flag(name: .long, help: "Print one JSON object per identifier and line.")
    var json = false

    @Flag(name: .long, help: "Also list the identifiers whose messages were cleared (0 messages).")
    var all = false

    @OptionGroup(title: "Container") var container: ContainerOptions

    func run() throws {
        try Failures.reported {
            let wormhole = try container.existingWormhole()
            let every = try wormhole.summaries()
            let summaries = every
                .filter { all || $0.messageCount > 0 }
                .sorted { $0.identifier < $1.identifier }
            if json {
                for summary in summaries { Output.line(Self.jsonObject(summary)) }
            } else {
                Output.write(.init(Self.table(summaries).utf8))
                // A person at a terminal is told why the table is empty; a script gets
                // the header alone, as before.
                if summaries.isEmpty && Output.outputIsTerminal {
                    let place = container.place(of: wormhole)
                    let cleared = every.count
                    Output.error("no identifier has messages in \(place)"
                                 + (cleared > 0 ? "; 'wormhole list --all' also shows the \(cleared) cleared" : ""))
                }
            }
        }
    }

    static func jsonObject(_ summary: WormholeIdentifierSummary) -> String {
        let update = summary.lastUpdate.map { RecordFormat.quoted(RecordFormat.timestamp($0)) } ?? "null"
        return "{\"identifier\":\(RecordFormat.quoted(summary.identifier)),\"messages\":\(summary.messageCount),"
            + "\"bytes\":\(summary.byteCount),\"lastSequence\":\(summary.lastSequence),\"lastUpdate\":\(update)}"
    }

    /// Aligned columns with a header; only the header when there is nothing.
    static func table(_ summaries: [WormholeIdentifierSummary]) -> String {
        let header = ["IDENTIFIER", "MESSAGES", "BYTES", "LAST UPDATE"]
        let rows = summaries.map { summary in
            [summary.identifier, String(summary.messageCount), String(summary.byteCount),
             summary.lastUpdate.map(RecordFormat.timestamp) ?? "-"]
        }
        return Columns.format([header] + rows)
    }
}

/// Aligned columns, two spaces apart; the first row is the header.
enum Columns {
    static func format(_ all: [[String]]) -> String {
        guard let header = all.first else { return "" }
        let widths = (0..<header.count).map { column in all.map { $0[column].count }.max() ?? 0 }
        return all.map { row in
            row.enumerated().map { column, cell in
                column == row.count - 1 ? cell : cell + String(repeating: " ", count: max(0, widths[column] - cell.count))
            }.joined(separator: "  ")
        }.joined(separator: "\n") + "\n"
    }
}
