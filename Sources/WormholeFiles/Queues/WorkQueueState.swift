#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
@_spi(Backend) import WormholeCore

/// What a work queue's `state` file holds (Protocol.md §18): how far the queue has taken
/// from its identifier's log, the messages handed out and not yet acknowledged, and
/// counters. Changed only under `flock(LOCK_EX)` on the file; read without the lock by
/// compaction and `status`, which check its CRC.
///
/// Layout, little-endian: `magic` u32 (`WHQ1`), `count` u32 (entries), `taken` u64 (the
/// highest sequence number the queue has taken from the log: handed out, expired or
/// lost), `acknowledged`, `deadLettered`, `expired`, `lost` (u64 counters), `logID` (u64:
/// the log `taken` and the entries belong to; 0 before the queue saw one), then `count`
/// entries of 32 bytes (`sequence` u64, `member` u64 (0: waiting for redelivery),
/// `deliveries` u32, `retryDelay` u32 (ms after `delivered` before an entry held by
/// nobody is handed out again; 0: at once; revision 3.1), `delivered` i64 ns since 1970),
/// then a CRC-32 of everything before it.
package struct WorkQueueState: Equatable {
    package static let magic: UInt32 = 0x3151_4857 // "WHQ1"
    package static let headerSize = 56
    package static let entrySize = 32
    /// At most this many messages in flight at once (one per member): the file stays
    /// within one page, written by one `pwrite`.
    package static let maximumEntries = 120
    package static var maximumSize: Int { headerSize + maximumEntries * entrySize + 4 }

    /// A message handed out and not yet acknowledged.
    package struct Entry: Equatable {
        package var sequence: UInt64
        /// The member's token; 0 when nobody holds it (its member died or gave it back).
        package var member: UInt64
        package var deliveries: UInt32
        /// While nobody holds it: milliseconds after ``delivered`` before it is handed out
        /// again (the back-off of a message that failed); 0, at once. Written 0 when it is
        /// handed out. A member of protocol revision 3.0 writes 0 here (the field was
        /// reserved): the entry is then only retried sooner.
        package var retryDelay: UInt32 = 0
        package var delivered: Int64

        /// Whether it may be handed out again at `now` (ns since 1970). Before
        /// ``delivered`` it is: the wall clock was set back, and the entry is not held
        /// for as long as the step.
        package func isDue(at now: Int64) -> Bool {
            retryDelay == 0 || now < delivered || now >= delivered &+ Int64(retryDelay) * 1_000_000
        }

        /// When it may be handed out again (ns since 1970).
        package var due: Int64 { delivered &+ Int64(retryDelay) * 1_000_000 }

        /// Makes it wait `delay` seconds from `now` before it is handed out again: the
        /// delay is counted from ``delivered`` (what the file can hold), rounded up to a
        /// millisecond, at most `UInt32.max` ms after it.
        package mutating func waitBeforeRedelivery(_ delay: Double, now: Int64) {
            guard delay > 0 else { retryDelay = 0; return }
            let fromDelivered = Double(max(0, now &- delivered)) / 1e6 + delay * 1000
            retryDelay = UInt32(min(Double(UInt32.max), max(1, fromDelivered.rounded(.up))))
        }
    }

    package var taken: UInt64 = 0
    package var acknowledged: UInt64 = 0
    package var deadLettered: UInt64 = 0
    package var expired: UInt64 = 0
    package var lost: UInt64 = 0
    package var logID: UInt64 = 0
    package var entries: [Entry] = []

    /// What compaction of the log `log` must keep: every message after this sequence
    /// number (all of a log the queue has not seen).
    package func lowestUnhandled(in log: UInt64) -> UInt64 {
        guard logID == 0 || logID == log else { return 0 }
        return entries.map { $0.sequence &- 1 }.min().map { min($0, taken) } ?? taken
    }

    package func encoded() -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: Self.headerSize + entries.count * Self.entrySize + 4)
        bytes.withUnsafeMutableBytes { base in
            base.storeBytes(of: Self.magic.littleEndian, toByteOffset: 0, as: UInt32.self)
            base.storeBytes(of: UInt32(entries.count).littleEndian, toByteOffset: 4, as: UInt32.self)
            for (index, value) in [taken, acknowledged, deadLettered, expired, lost, logID].enumerated() {
                base.storeBytes(of: value.littleEndian, toByteOffset: 8 + 8 * index, as: UInt64.self)
            }
            for (index, entry) in entries.enumerated() {
                let offset = Self.headerSize + index * Self.entrySize
                base.storeBytes(of: entry.sequence.littleEndian, toByteOffset: offset, as: UInt64.self)
                base.storeBytes(of: entry.member.littleEndian, toByteOffset: offset + 8, as: UInt64.self)
                base.storeBytes(of: entry.deliveries.littleEndian, toByteOffset: offset + 16, as: UInt32.self)
                base.storeBytes(of: entry.retryDelay.littleEndian, toByteOffset: offset + 20, as: UInt32.self)
                base.storeBytes(of: entry.delivered.littleEndian, toByteOffset: offset + 24, as: Int64.self)
            }
            let end = base.count - 4
            let crc = CRC32.update(0, UnsafeRawBufferPointer(rebasing: base[0..<end]))
            base.storeBytes(of: crc.littleEndian, toByteOffset: end, as: UInt32.self)
        }
        return bytes
    }

    /// The state in `bytes` (what a read of the file returned), or `nil` when it is not a
    /// whole, valid one.
    package static func decode(_ bytes: UnsafeRawBufferPointer) -> WorkQueueState? {
        guard bytes.count >= headerSize + 4,
              UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: 0, as: UInt32.self)) == magic else { return nil }
        let count = Int(UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: 4, as: UInt32.self)))
        guard count <= maximumEntries else { return nil }
        let end = headerSize + count * entrySize
        guard bytes.count >= end + 4,
              UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: end, as: UInt32.self))
                == CRC32.update(0, UnsafeRawBufferPointer(rebasing: bytes[0..<end])) else { return nil }
        func u64(_ offset: Int) -> UInt64 { UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self)) }
        var state = WorkQueueState(taken: u64(8), acknowledged: u64(16), deadLettered: u64(24), expired: u64(32), lost: u64(40), logID: u64(48))
        for index in 0..<count {
            let offset = headerSize + index * entrySize
            state.entries.append(Entry(
                sequence: u64(offset), member: u64(offset + 8),
                deliveries: UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: offset + 16, as: UInt32.self)),
                retryDelay: UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: offset + 20, as: UInt32.self)),
                delivered: Int64(littleEndian: bytes.loadUnaligned(fromByteOffset: offset + 24, as: Int64.self))))
        }
        return state
    }
}
