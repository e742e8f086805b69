import Foundation

/// One line of the results: a measurement on one file system. Latency fields come from
/// a paced run, rate fields from a burst; a row may have either or both.
struct Row: Sendable {
    var section: String
    var fileSystem: String
    var mechanism: String
    var listeners = 1
    var identifiers = 1
    var size = 16
    var messages = 0
    /// Microseconds.
    var p50: Double?
    var p90: Double?
    var p99: Double?
    var max: Double?
    /// Messages per second to every listener.
    var rate: Double?
    var megabytesPerSecond: Double?
    var lost: Int?
    var duplicates: Int?
    /// Sender time per message (mean of its pass calls), microseconds.
    var senderMicroseconds: Double?
    /// Listener CPU time per message in the burst, microseconds (a burst lets one
    /// wake-up read many messages of one identifier).
    var listenerMicroseconds: Double?
    /// Listener CPU time per message when paced (one wake-up per message), microseconds.
    var pacedListenerMicroseconds: Double?
    /// Sender time per pass when paced, microseconds.
    var pacedSenderMicroseconds: Double?
    var residentKiB: UInt64?
    /// The memory section: the listener's resident size (``residentKiB`` is the sender's).
    var listenerResidentKiB: UInt64?
    /// PostgreSQL only: the server's WAL flushes and commits per message passed.
    var walFlushesPerMessage: Double?
    var commitsPerMessage: Double?
    /// The syscalls section: which process ("sender", "listener", "dbus-daemon"), its
    /// system calls per message (strace) and user-space instructions per message
    /// (callgrind).
    var process: String?
    var systemCallsPerMessage: Double?
    var instructionsPerMessage: Double?
    var note = ""

    static let csvHeader = "section,filesystem,mechanism,listeners,identifiers,size_bytes,messages,p50_us,p90_us,p99_us,max_us,msgs_per_s,mb_per_s,lost,duplicates,sender_us_per_msg,listener_cpu_us_per_msg,paced_sender_us_per_msg,paced_listener_cpu_us_per_msg,rss_kib,wal_flushes_per_msg,commits_per_msg,process,syscalls_per_msg,instructions_per_msg,note"

    var csv: String {
        func number(_ value: Double?, _ digits: Int = 1) -> String { value.map { String(format: "%.\(digits)f", $0) } ?? "" }
        var cells: [String] = [section, csvQuoted(fileSystem), csvQuoted(mechanism), String(listeners), String(identifiers), String(size), String(messages)]
        cells += [number(p50), number(p90), number(p99), number(max), number(rate, 0), number(megabytesPerSecond)]
        cells.append(lost.map(String.init) ?? "")
        cells.append(duplicates.map(String.init) ?? "")
        cells += [number(senderMicroseconds, 2), number(listenerMicroseconds, 2)]
        cells += [number(pacedSenderMicroseconds, 2), number(pacedListenerMicroseconds, 2)]
        cells.append(residentKiB.map(String.init) ?? "")
        cells += [number(walFlushesPerMessage, 2), number(commitsPerMessage, 2)]
        cells += [process.map(csvQuoted) ?? "", number(systemCallsPerMessage, 2), number(instructionsPerMessage, 0)]
        cells.append(csvQuoted(note))
        return cells.joined(separator: ",")
    }

    /// Fills the latency fields from a paced outcome.
    mutating func latency(from outcome: Outcome) {
        let sorted = outcome.latencies
        p50 = Double(percentile(sorted, 50)) / 1000
        p90 = Double(percentile(sorted, 90)) / 1000
        p99 = Double(percentile(sorted, 99)) / 1000
        max = Double(sorted.last ?? 0) / 1000
        lost = (lost ?? 0) + outcome.lost
        duplicates = (duplicates ?? 0) + outcome.duplicates + outcome.outOfOrder
        pacedListenerMicroseconds = outcome.listenerMicrosecondsPerMessage
        pacedSenderMicroseconds = Double(outcome.sender.passMeanNanoseconds) / 1000
    }

    /// Fills the latency fields from paced runs: the percentiles of all their messages.
    mutating func latency(from outcomes: [Outcome]) {
        guard var merged = outcomes.first else { return }
        merged.listeners = outcomes.flatMap(\.listeners)
        latency(from: merged)
        pacedListenerMicroseconds = median(outcomes.map(\.listenerMicrosecondsPerMessage))
        pacedSenderMicroseconds = median(outcomes.map { Double($0.sender.passMeanNanoseconds) / 1000 })
        server(from: outcomes)
    }

    /// The server's counters per message: the median over the runs that have them.
    mutating func server(from outcomes: [Outcome]) {
        let flushes = outcomes.compactMap(\.walFlushesPerMessage)
        let commits = outcomes.compactMap(\.commitsPerMessage)
        walFlushesPerMessage = flushes.isEmpty ? nil : median(flushes)
        commitsPerMessage = commits.isEmpty ? nil : median(commits)
    }

    /// Fills the rate fields from bursts: the median round, lost messages of all.
    mutating func rate(from outcomes: [Outcome]) {
        let sorted = outcomes.sorted { $0.throughput < $1.throughput }
        guard !sorted.isEmpty else { return }
        rate(from: sorted[sorted.count / 2])
        lost = outcomes.reduce(0) { $0 + $1.lost }
        duplicates = outcomes.reduce(0) { $0 + $1.duplicates + $1.outOfOrder }
        server(from: outcomes)
    }

    /// Fills the rate fields from a burst outcome.
    mutating func rate(from outcome: Outcome) {
        rate = outcome.throughput
        megabytesPerSecond = outcome.throughput * Double(outcome.scenario.size) / 1_048_576
        lost = (lost ?? 0) + outcome.lost
        duplicates = (duplicates ?? 0) + outcome.duplicates + outcome.outOfOrder
        senderMicroseconds = Double(outcome.sender.passMeanNanoseconds) / 1000
        listenerMicroseconds = outcome.listenerMicrosecondsPerMessage
        residentKiB = outcome.listeners.map(\.residentKiB).max()
    }
}

/// The middle value (the mean of the two middle ones for an even count); 0 when empty.
func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    guard !sorted.isEmpty else { return 0 }
    let middle = sorted.count / 2
    return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
}

/// `text` as one CSV field: in double quotes, with inner quotes doubled.
func csvQuoted(_ text: String) -> String {
    "\"" + text.replacingOccurrences(of: "\"", with: "\"\"") + "\""
}

/// A Markdown table.
struct Table {
    var title: String
    var columns: [String]
    var rows: [[String]] = []

    var markdown: String {
        var text = "#### \(title)\n\n"
        text += "| " + columns.joined(separator: " | ") + " |\n"
        text += "|" + columns.enumerated().map { $0.offset == 0 ? "---" : "---:" }.joined(separator: "|") + "|\n"
        for row in rows { text += "| " + row.joined(separator: " | ") + " |\n" }
        return text
    }
}

/// Formats for the tables.
enum Format {
    static func micro(_ value: Double?) -> String {
        guard let value else { return "" }
        if value >= 1000 { return String(format: "%.0f", value) }
        return value >= 100 ? String(format: "%.0f", value) : String(format: "%.1f", value)
    }
    static func rate(_ value: Double?) -> String {
        guard let value else { return "" }
        return grouped(Int(value.rounded()))
    }
    static func grouped(_ value: Int) -> String {
        let digits = String(value)
        var result = ""
        for (index, character) in digits.reversed().enumerated() {
            if index > 0 && index % 3 == 0 { result.append(",") }
            result.append(character)
        }
        return String(result.reversed())
    }
    static func size(_ bytes: Int) -> String {
        if bytes >= 1 << 20 { return "\(bytes >> 20) MiB" }
        if bytes >= 1 << 10 { return "\(bytes >> 10) KiB" }
        return "\(bytes) B"
    }
    static func integer(_ value: Int?) -> String { value.map(String.init) ?? "" }
}
