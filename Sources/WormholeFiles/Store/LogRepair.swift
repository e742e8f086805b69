#if canImport(Glibc)
import Glibc
#endif
import Logging
import SystemPackage
@_spi(Backend) import WormholeCore

/// What a writer does, under the log's lock, when the log was changed by a program that
/// does not follow the protocol: emptied (`: > id.wormhole`, logrotate's
/// `copytruncate`), cut, or its header overwritten.
///
/// The rule is that a sequence number is never handed out twice in one log: a listener
/// that has passed it would skip the new message. So numbering goes on after the highest
/// number known to have been handed out, which is the larger of what this process wrote
/// last and what the listeners' positions in the log say (a listener has read that far).
/// The messages between the file's last record and that number are gone: the listeners
/// that had not read them are told how many at their next record (a gap, §11.4 of
/// `Docs/Protocol.md`). What the writer did is logged once.
package struct LogRepair {
    package let log: LogFile
    package let identifier: String
    package let container: ContainerDirectory
    package let maximumPayload: Int
    package let buffer: ReadBuffer

    private static let logger = Logger(label: "Wormhole")

    /// The log is shorter than this process left it (`knownTail`, under `known`). Keeps
    /// the records that are still whole; with no valid header left, writes one again with
    /// the same identity and `baseSequence` at the highest number handed out. Returns the
    /// header and tail to go on from.
    ///
    /// - Throws: ``WormholeError/Code/unsupportedFormat`` when the file now holds another
    ///   version's log (never changed); a failed write.
    package func repairShrunk(known: LogFormat.Header, knownTail: LogFile.Tail?, size: Int) throws(WormholeError) -> (header: LogFormat.Header, tail: LogFile.Tail) {
        let handedOut = max(knownTail?.lastSequence ?? known.baseSequence,
                            ListenerCursor.highestPosition(container: container, identifier: identifier, logID: known.logID) ?? 0)
        let previousEnd = knownTail?.end ?? LogFormat.headerSize
        if let onDisk = try readHeaderIfOurs(), onDisk.logID == known.logID {
            var tail = try log.findTail(size: size, header: onDisk, maximumPayload: maximumPayload, buffer: buffer)
            let gone = handedOut > tail.lastSequence ? handedOut - tail.lastSequence : 0
            tail.lastSequence = max(tail.lastSequence, handedOut)
            Self.logger.warning("""
                '\(log.path)' was cut by another program, from \(previousEnd) to \(size) bytes: \(gone) message\(gone == 1 ? "" : "s") of '\(identifier)' \
                are gone (listeners that had not read them are told); the next message is number \(handedOut + 1)
                """)
            return (onDisk, tail)
        }
        var header = known
        header.baseSequence = handedOut
        let encoded = header.encoded()
        try encoded.withUnsafeBytes { Syscalls.write(log.fd, $0, at: 0) }.orThrow("write the header of", path: log.path)
        try Syscalls.truncate(log.fd, to: Int64(LogFormat.headerSize)).orThrow("cut", path: log.path)
        Self.logger.warning("""
            '\(log.path)' was emptied or overwritten by another program (\(size) bytes where \(previousEnd) were): its header is written again; \
            the messages of '\(identifier)' up to \(handedOut) are gone (listeners that had not read them are told); the next message is number \(handedOut + 1)
            """)
        return (header, LogFile.Tail(end: LogFormat.headerSize, lastSequence: handedOut, lastRecordOffset: nil))
    }

    /// A writer that opened the log without knowing it: if the listeners' positions in
    /// this log are above its last record, the log was cut, and numbering goes on above
    /// them. Costs a look at the claims directory (one `openat` when nobody listens).
    package func noticeCut(header: LogFormat.Header, tail: inout LogFile.Tail) {
        guard let highest = ListenerCursor.highestPosition(container: container, identifier: identifier, logID: header.logID),
              highest > tail.lastSequence else { return }
        Self.logger.warning("""
            '\(log.path)' ends at message \(tail.lastSequence) but listeners of '\(identifier)' have read up to \(highest): it was cut by another program; \
            the next message is number \(highest + 1)
            """)
        tail.lastSequence = highest
    }

    /// The header in the file, when it is a valid header of a version this library reads; `nil` when there is
    /// none (empty, short, not a header, damaged). Another version's valid header throws:
    /// that file is never changed.
    private func readHeaderIfOurs() throws(WormholeError) -> LogFormat.Header? {
        var start: (UInt64, UInt32) = (0, 0)
        let count = (try? withUnsafeMutableBytes(of: &start) { Syscalls.read(log.fd, into: UnsafeMutableRawBufferPointer(rebasing: $0[0..<12]), at: 0) }.get()) ?? 0
        let magic = withUnsafeBytes(of: start.0) { $0.elementsEqual(LogFormat.magic) }
        if count == 12, magic, !(LogFormat.earliestReadableVersion...LogFormat.version).contains(UInt32(littleEndian: start.1)) {
            // Another version's log now: refused with the usual message, never changed.
            return try log.readHeader()
        }
        return try? log.readHeader()
    }
}
