import SystemPackage

/// A listener's position in one identifier's log.
///
/// It reads without locks: the header's commit offset says how far the records are
/// whole. When the file it holds was replaced (compaction) or deleted, it first reads
/// that file to its final end, then opens the new one and skips what it has already
/// delivered, so a record is delivered once however often the file changes.
final class FileLogReader: WormholeTransitingReader {
    private let identifier: String
    private let path: String
    private let directory: String
    private var fd: FileDescriptor?
    /// Offset of the next record to look at in `fd`.
    private var offset = LogFormat.headerSize
    /// The log this position belongs to; a new one restarts its sequence numbers.
    private var logID: UInt64?
    /// The sequence number of the last record delivered (or skipped by the start).
    private var delivered: UInt64 = 0
    private var cursor: ListenerCursor?
    /// What the claim will say at the next read: the records up to it were returned,
    /// and a claim must never pass what was delivered.
    private var pendingClaim: UInt64?
    private var sawUnlinked = false
    /// Set when this reader moved to a new file (after a compaction): the file begins
    /// with retained records it has delivered already.
    private var mayStartWithDelivered = false
    /// Delivered records at least this long are skipped by their header alone.
    static let largeRecord = 64 << 10
    private var reportedForeignFile = false
    private var closed = false

    init(transiting: FileTransiting, identifier: String, start: Wormhole.StartingPoint) throws(WormholeError) {
        self.identifier = identifier
        self.path = transiting.logPath(identifier)
        self.directory = transiting.directory
        // Claim first (0: keep everything), then look: nothing can be compacted away
        // between looking and claiming.
        let cursor = try ListenerCursor(container: transiting.directory, identifier: identifier)
        self.cursor = cursor
        if case .after(let sequence) = start { delivered = sequence }
        if let fd = try openLog(), let header = try? FileTransiting.readHeaderUnlocked(fd, path: path) {
            logID = header.logID
            switch start {
            case .now:
                delivered = header.lastSequence
                offset = Int(header.committedEnd)
            case .latest:
                delivered = max(header.clearedThrough, header.lastSequence == 0 ? 0 : header.lastSequence - 1)
                if header.lastRecordOffset >= UInt64(LogFormat.headerSize) { offset = Int(header.lastRecordOffset) }
            case .history:
                // The retained history: at most the configured number of messages.
                let retained = UInt64(transiting.configuration.retainedMessageCount)
                delivered = max(header.clearedThrough, header.lastSequence > retained ? header.lastSequence - retained : 0)
            case .after(let sequence):
                delivered = max(sequence, header.clearedThrough)
            }
        }
        cursor.update(delivered)
    }

    deinit { close() }

    func close() {
        closed = true
        try? fd?.close()
        fd = nil
        cursor?.close()
        cursor = nil
    }

    func read(maximumCount: Int) throws(WormholeError) -> [Result<WormholeRecord, WormholeError>] {
        guard !closed else { return [] }
        if let pendingClaim {
            cursor?.update(pendingClaim)
            self.pendingClaim = nil
        }
        var results: [Result<WormholeRecord, WormholeError>] = []
        var retriedHeader = false
        readLoop: while results.count < maximumCount {
            let fd: FileDescriptor
            if let open = self.fd {
                fd = open
            } else if let opened = try openLog() {
                fd = opened
            } else {
                break
            }
            let header: LogFormat.Header
            do throws(WormholeError) {
                guard let read = try FileTransiting.readHeaderUnlocked(fd, path: path) else { break readLoop }
                header = read
            } catch where error.code == .unsupportedFormat {
                if !reportedForeignFile { results.append(.failure(error)) }
                reportedForeignFile = true
                break
            }
            reportedForeignFile = false
            if logID != header.logID {
                if logID != nil {
                    // The log was deleted and created again: its numbers start over, and
                    // the claim, if it went with the directory, is made again.
                    delivered = 0
                    offset = LogFormat.headerSize
                    if let renewed = try? ListenerCursor(container: directory, identifier: identifier) {
                        cursor?.close()
                        cursor = renewed
                    }
                }
                logID = header.logID
            }
            let end = Int(header.committedEnd)
            if offset >= end {
                // Caught up with this file. If it is no longer the log, read it once
                // more to its final end, then move on to the file now at the path.
                let status = try Syscalls.fileStatus(fd).orThrow("inspect", path: path)
                guard status.st_nlink == 0 else { break }
                if !sawUnlinked {
                    sawUnlinked = true
                    continue
                }
                try? fd.close()
                self.fd = nil
                offset = LogFormat.headerSize
                sawUnlinked = false
                mayStartWithDelivered = true
                continue
            }
            if mayStartWithDelivered {
                mayStartWithDelivered = false
                skipDeliveredLargeRecords(fd, end: end)
                if offset >= end { continue }
            }
            let chunkEnd = min(end, offset + max(1 << 20, LogFormat.recordHeaderSize))
            var bytes = try LogSnapshot.read(fd, from: offset, to: chunkEnd, path: path)
            // A record longer than the chunk: read all of it.
            if let (_, length) = bytes.withUnsafeBytes({ LogFormat.peek($0, at: 0) }), length > bytes.count, offset + length <= end {
                bytes = try LogSnapshot.read(fd, from: offset, to: offset + length, path: path)
            }
            var position = 0
            var retry = false
            bytes.withUnsafeBytes { buffer in
                while position < buffer.count && results.count < maximumCount {
                    if let (sequence, length) = LogFormat.peek(buffer, at: position), sequence <= delivered,
                       position + length <= buffer.count {
                        position += length
                        continue
                    }
                    switch LogFormat.parseRecord(buffer, at: position, identifier: identifier) {
                    case .record(let record, let length):
                        results.append(.success(record))
                        delivered = record.sequence
                        position += length
                    case .incomplete:
                        let atCommit = offset + buffer.count >= end
                        // At a chunk boundary: go on from here in the next round.
                        if !atCommit && position > 0 { return }
                        // The committed bytes end inside this record: either the header
                        // was read torn (look again once) or the record is damaged.
                        if !retriedHeader {
                            retry = true
                            return
                        }
                        results.append(.failure(.corrupt("the record at offset \(offset + position) runs past the commit offset", path: path)))
                        position = LogFormat.nextMarker(in: buffer, after: position) ?? buffer.count
                    case .corrupt(let detail, let length):
                        if !retriedHeader {
                            retry = true
                            return
                        }
                        results.append(.failure(.corrupt(detail, path: path)))
                        if let length, position + length <= buffer.count,
                           position + length == buffer.count || LogFormat.peek(buffer, at: position + length) != nil {
                            position += length
                        } else {
                            position = LogFormat.nextMarker(in: buffer, after: position) ?? buffer.count
                        }
                    }
                }
            }
            offset += position
            if retry {
                retriedHeader = true
                continue
            }
            retriedHeader = false
            if position == 0 { break }
            // Caught up with the commit offset this read saw: hand these records over
            // now. Whether more were committed since, or the file was replaced, is the
            // next read's question (a listener asks it after delivering these), so that
            // the first record reaches its listener after two reads and nothing else.
            if offset >= end && !results.isEmpty { break }
        }
        // The claim moves at the next read, once the caller has delivered these.
        if !results.isEmpty { pendingClaim = delivered }
        return results
    }

    /// Moves past the records at the start of a new file that were delivered already
    /// and are large, reading only their 36-byte headers: after a compaction the file
    /// begins with the retained history, up to 16 MiB by default, and reading it only to
    /// skip it would cost more than the message that woke the reader. Small records are
    /// left to the chunked read, which skips them by their headers in memory.
    private func skipDeliveredLargeRecords(_ fd: FileDescriptor, end: Int) {
        while offset + LogFormat.recordHeaderSize <= end {
            let peeked = withUnsafeTemporaryAllocation(byteCount: LogFormat.recordHeaderSize, alignment: 8) { buffer -> (sequence: UInt64, length: Int)? in
                guard case .success(LogFormat.recordHeaderSize) = Syscalls.read(fd, into: buffer, at: Int64(offset)) else { return nil }
                return LogFormat.peek(UnsafeRawBufferPointer(buffer), at: 0)
            }
            guard let (sequence, length) = peeked, sequence <= delivered, length >= Self.largeRecord, offset + length <= end else { return }
            offset += length
        }
    }

    private func openLog() throws(WormholeError) -> FileDescriptor? {
        do {
            let fd = try FileDescriptor.open(FilePath(path), .readOnly, options: [.noFollow, .closeOnExec])
            self.fd = fd
            sawUnlinked = false
            return fd
        } catch {
            let errno = (error as? Errno) ?? .ioError
            if errno == .noSuchFileOrDirectory { return nil }
            throw WormholeError.system("open", errno, path: path)
        }
    }
}
