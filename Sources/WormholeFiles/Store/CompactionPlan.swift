@_spi(Backend) import WormholeCore

/// What a compaction keeps of a log, decided from what its walk found and the lowest live
/// claim, before any byte is written: the records kept (the retained history, and the
/// unread records of live listeners within the backlog cap) and the new file's header.
package struct CompactionPlan {
    /// A whole record of the log: where it starts, its sequence number and its size.
    package struct Entry: Equatable {
        package var offset: Int
        package var sequence: UInt64
        package var length: Int
    }

    /// The records to copy, oldest first.
    package let kept: [Entry]
    /// The header of the new file (this version's, with its base sequence and thresholds).
    package let header: LogFormat.Header
    /// The bytes the kept records take in this version's layout.
    package let copiedBytes: Int

    /// Decides what to keep of `entries` (the whole records of the log of `header`, up to
    /// its tail, whose last sequence is `lastSequence`), given the lowest sequence a live
    /// listener has read (`claim`; `nil` when none); `clearing` marks every message so far
    /// as cleared.
    package init(entries: [Entry], header old: LogFormat.Header, lastSequence: UInt64, clearing: Bool,
         claim: UInt64?, policy: CompactionPolicy) {
        let configuration = policy.configuration
        let layout = old.layout
        var header = old
        header.version = LogFormat.version
        if clearing { header.clearedThrough = lastSequence }
        // The retained history: newest first, within both limits, the latest always.
        var keepFrom = lastSequence + 1
        var keptCount = 0
        var keptBytes = 0
        for entry in entries.reversed() where entry.sequence > header.clearedThrough {
            let payload = entry.length - layout.overhead
            if keptCount > 0 && (keptCount >= configuration.retainedMessageCount || keptBytes + payload > configuration.retainedByteCount) { break }
            keepFrom = entry.sequence
            keptCount += 1
            keptBytes += payload
        }
        // The lowest number kept for a reader: below the first kept record when records
        // after it are missing (damaged, dropped by an earlier compaction as damage), so
        // that readers are told those are missing, not that they fell behind (§10.2 C6).
        var lowestKept = keepFrom
        // Live listeners' unread records, within the backlog cap. A claim is another
        // process's file: any value must be safe here.
        if let claim, case (let next, false) = claim.addingReportingOverflow(1), next < keepFrom {
            let (capped, overCap) = Self.backlog(of: entries, from: next, layout: layout, configuration: configuration)
            keepFrom = min(keepFrom, max(next, capped ?? keepFrom))
            lowestKept = overCap ? keepFrom : min(keepFrom, next)
        }
        let kept = Array(entries.drop { $0.sequence < keepFrom })
        let copiedBytes = kept.reduce(0) { $0 + $1.length + LogFormat.recordOverhead - layout.overhead }
        header.baseSequence = kept.first.map { max(old.baseSequence, min($0.sequence, lowestKept) - 1) } ?? lastSequence
        (header.compactionByteThreshold, header.compactionRecordThreshold) = policy.thresholds(keptCount: kept.count, keptBytes: copiedBytes)
        self.kept = kept
        self.header = header
        self.copiedBytes = copiedBytes
    }

    /// Decides how far back the unread records from `next` are kept: the oldest sequence
    /// within the backlog cap (newest first; `nil` if not even the newest fits) and
    /// whether the cap cut some of them.
    private static func backlog(of entries: [Entry], from next: UInt64, layout: LogFormat.RecordLayout,
                                configuration: WormholeConfiguration) -> (capped: UInt64?, overCap: Bool) {
        var count = 0
        var bytes = 0
        var capped: UInt64?
        for entry in entries.reversed() where entry.sequence >= next {
            count += 1
            bytes += entry.length - layout.overhead
            if count > max(configuration.maximumBacklogMessageCount, configuration.retainedMessageCount)
                || bytes > max(configuration.maximumBacklogByteCount, configuration.retainedByteCount) {
                return (capped, true)
            }
            capped = entry.sequence
        }
        return (capped, false)
    }
}
