#if canImport(Glibc)
import Glibc
#endif
import Logging
import SystemPackage
@_spi(Backend) import WormholeCore

/// Rewrites a log with only what must be kept, under the writer's lock.
///
/// Kept: the retained history (the newest ``WormholeConfiguration/retainedMessageCount``
/// messages within ``WormholeConfiguration/retainedByteCount``, the latest always, none
/// that was cleared) and every record a live listener has not read yet, up to the backlog
/// cap; past the cap the oldest unread go, and their listeners are told when they read on.
/// The records are copied unchanged, after a new header, into a temporary file created
/// exclusively, which then replaces the log by `renameat`: readers holding the old file
/// read it to its end, learn of the replacement from inotify, and go on in the new one.
///
/// A compaction of a log of an earlier version (version 2) also converts it: each kept
/// record is written again in this version's layout, with its sequence number, date,
/// process and kind, and no user, expiry or correlation; one whose checksum fails is
/// dropped as damage. The log keeps its identity, so claims and durable positions stay valid.
///
/// The next compaction is due when the file has grown to twice what was kept (or twice
/// the retention, if more), so a listener that holds a large backlog does not make every
/// pass rewrite it: each record is copied a bounded number of times on average.
package struct LogCompaction {
    package let container: ContainerDirectory
    package let identifier: String
    package let policy: CompactionPolicy
    package var configuration: WormholeConfiguration { policy.configuration }

    /// Compacts `log` (locked, tail `tail`); `clearing` also marks every message so far
    /// as cleared. Returns the new file, opened and unlocked, with its tail, or throws and
    /// leaves the log as it was.
    package func compact(_ log: LogFile, header: LogFormat.Header, tail: LogFile.Tail, clearing: Bool, buffer: ReadBuffer) throws(WormholeError) -> (LogFile, LogFile.Tail) {
        // Where each whole record starts, its sequence number and size.
        var entries: [(offset: Int, sequence: UInt64, length: Int)] = []
        // Records larger than this process reads are copied too, unread: the walk
        // recognises them by header and trailer, so memory stays bounded whatever the file.
        _ = try log.walk(from: LogFormat.headerSize, header: header, maximumPayload: configuration.maximumMessageSize, buffer: buffer) { item in
            switch item {
            case .record(let frame, _, _, let offset, let length) where offset + length <= tail.end:
                entries.append((offset, frame.sequence, length))
            case .tooLarge(let sequence, let offset, let length) where offset + length <= tail.end:
                entries.append((offset, sequence, length))
            default:
                break
            }
            return true
        }
        buffer.shrink()
        let layout = header.layout
        var newHeader = header
        newHeader.version = LogFormat.version
        if clearing { newHeader.clearedThrough = tail.lastSequence }

        // The retained history: newest first, within both limits, the latest always.
        var keepFrom = tail.lastSequence + 1
        var keptCount = 0
        var keptBytes = 0
        for entry in entries.reversed() where entry.sequence > newHeader.clearedThrough {
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
        if let claim = try ListenerCursor.lowestLiveClaim(container: container, identifier: identifier, logID: header.logID),
           case (let next, false) = claim.addingReportingOverflow(1), next < keepFrom {
            var count = 0
            var bytes = 0
            var capped = keepFrom
            var overCap = false
            for entry in entries.reversed() where entry.sequence >= next {
                count += 1
                bytes += entry.length - layout.overhead
                if count > max(configuration.maximumBacklogMessageCount, configuration.retainedMessageCount)
                    || bytes > max(configuration.maximumBacklogByteCount, configuration.retainedByteCount) {
                    overCap = true
                    break
                }
                capped = entry.sequence
            }
            keepFrom = min(keepFrom, max(next, capped))
            lowestKept = overCap ? keepFrom : min(keepFrom, next)
        }
        let firstKept = entries.firstIndex { $0.sequence >= keepFrom } ?? entries.count
        let kept = entries[firstKept...]
        let copiedBytes = kept.reduce(0) { $0 + $1.length + LogFormat.recordOverhead - layout.overhead }
        newHeader.baseSequence = kept.first.map { max(header.baseSequence, min($0.sequence, lowestKept) - 1) } ?? tail.lastSequence
        (newHeader.compactionByteThreshold, newHeader.compactionRecordThreshold) = policy.thresholds(keptCount: kept.count, keptBytes: copiedBytes)

        let temporaryName = "." + identifier + LogFormat.fileSuffix + ".compacting"
        let temporaryPath = container.filePath(temporaryName)
        let fd = try container.createExclusive(temporaryName)
        do throws(WormholeError) {
            let encoded = newHeader.encoded()
            try encoded.withUnsafeBytes { Syscalls.write(fd, $0, at: 0) }.orThrow("write compacted log", path: temporaryPath)
            var target = LogFormat.headerSize
            var lastKeptOffset: Int?
            if layout != LogFormat.layout {
                for entry in kept {
                    if try convert(entry, of: log, header: header, to: fd, at: target, path: temporaryPath, buffer: buffer) {
                        lastKeptOffset = target
                        target += entry.length - layout.overhead + LogFormat.recordOverhead
                    }
                }
            }
            // Copy the kept records as runs of adjacent bytes, a buffer at a time.
            var index = layout == LogFormat.layout ? kept.startIndex : kept.endIndex
            if index < kept.endIndex { lastKeptOffset = kept.last.map { target + copiedBytes - $0.length } }
            while index < kept.endIndex {
                let runStart = kept[index].offset
                var runEnd = runStart + kept[index].length
                index += 1
                while index < kept.endIndex, kept[index].offset == runEnd {
                    runEnd += kept[index].length
                    index += 1
                }
                var from = runStart
                while from < runEnd {
                    let bytes = try buffer.read(log.fd, from: from, count: min(buffer.capacity, runEnd - from), path: log.path)
                    guard !bytes.isEmpty else {
                        throw WormholeError(.corruptRecord, "'\(log.path)' ended while it was being compacted", path: log.path)
                    }
                    try Syscalls.write(fd, bytes, at: Int64(target)).orThrow("write compacted log", path: temporaryPath)
                    from += bytes.count
                    target += bytes.count
                }
            }
            // Locked before it has its name, until this pass knows its tail: a writer that
            // opens it waits for that.
            try Syscalls.lock(fd).orThrow("lock", path: temporaryPath)
            defer { Syscalls.unlock(fd) }
            try container.rename(temporaryName, to: LogFile.name(identifier)).orThrow("replace", path: log.path)
            let status = try LogFile(fd: fd, path: log.path, device: 0, inode: 0, header: nil).status()
            let newLog = LogFile(fd: fd, path: log.path, device: UInt64(status.deviceID.rawValue), inode: UInt64(status.inode.rawValue), header: newHeader)
            let newTail = LogFile.Tail(end: target, lastSequence: tail.lastSequence, lastRecordOffset: lastKeptOffset)
            return (newLog, newTail)
        } catch {
            _ = container.remove(temporaryName)
            try? fd.close()
            throw error
        }
    }

    /// Writes the record `entry` of a log of another version at `target` of `fd` in this
    /// version's layout, its payload read and checked a buffer at a time. Returns `false`,
    /// writing nothing, when the record fails its checksum (damage, dropped).
    private func convert(_ entry: (offset: Int, sequence: UInt64, length: Int), of log: LogFile, header: LogFormat.Header,
                         to fd: FileDescriptor, at target: Int, path: String, buffer: ReadBuffer) throws(WormholeError) -> Bool {
        let layout = header.layout
        let length = entry.length - layout.overhead
        let old = try buffer.read(log.fd, from: entry.offset, count: layout.headerSize, path: log.path)
        guard old.count == layout.headerSize, let kind = WormholePayloadKind(rawValue: old[layout.kindOffset]) else { return false }
        let stored: UInt32 = LogFormat.get(old, layout.checksumOffset)
        var oldChecksum = withUnsafeBytes(of: header.logID.littleEndian) { CRC32.update(0, $0) }
        oldChecksum = CRC32.update(oldChecksum, UnsafeRawBufferPointer(rebasing: old[0..<layout.checksumOffset]))
        let fields = LogFormat.RecordFields(nanoseconds: LogFormat.get(old, 16), processID: LogFormat.get(old, layout.processOffset),
                                            userID: LogFormat.unknownUserID, kind: kind)
        // The new header, whose checksum is then carried on over the payload as it is copied.
        var frame = [UInt8](repeating: 0, count: LogFormat.recordHeaderSize)
        var crc: UInt32 = 0
        frame.withUnsafeMutableBytes { head in
            LogFormat.writeRecordHeader(into: head, logID: header.logID, sequence: entry.sequence, fields: fields, length: length) { prefix in
                crc = prefix
                return prefix
            }
        }
        var copied = 0
        while copied < length {
            let bytes = try buffer.read(log.fd, from: entry.offset + layout.headerSize + copied,
                                        count: min(buffer.capacity, length - copied), path: log.path)
            guard !bytes.isEmpty else {
                throw WormholeError(.corruptRecord, "'\(log.path)' ended while it was being converted", path: log.path)
            }
            oldChecksum = CRC32.update(oldChecksum, bytes)
            crc = CRC32.update(crc, bytes)
            try Syscalls.write(fd, bytes, at: Int64(target + LogFormat.recordHeaderSize + copied)).orThrow("write converted log", path: path)
            copied += bytes.count
        }
        frame.withUnsafeMutableBytes { $0.storeBytes(of: crc.littleEndian, toByteOffset: LogFormat.layout.checksumOffset, as: UInt32.self) }
        guard oldChecksum == stored else {
            Logger(label: "Wormhole").warning("record \(entry.sequence) of '\(log.path)' fails its checksum: dropped when the log was converted to version \(LogFormat.version)")
            return false
        }
        try frame.withUnsafeBytes { Syscalls.write(fd, $0, at: Int64(target)) }.orThrow("write converted log", path: path)
        try withUnsafeBytes(of: UInt32(length).littleEndian) { Syscalls.write(fd, $0, at: Int64(target + LogFormat.recordHeaderSize + length)) }
            .orThrow("write converted log", path: path)
        return true
    }
}
