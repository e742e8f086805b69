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
        let entries = try wholeRecords(of: log, header: header, tail: tail, buffer: buffer)
        let claim = try ListenerCursor.lowestLiveClaim(container: container, identifier: identifier, logID: header.logID)
        let plan = CompactionPlan(entries: entries, header: header, lastSequence: tail.lastSequence, clearing: clearing,
                                  claim: claim, policy: policy)
        let temporaryName = "." + identifier + LogFormat.fileSuffix + ".compacting"
        let temporaryPath = container.filePath(temporaryName)
        let fd = try container.createExclusive(temporaryName)
        do throws(WormholeError) {
            let encoded = plan.header.encoded()
            try encoded.withUnsafeBytes { Syscalls.write(fd, $0, at: 0) }.orThrow("write compacted log", path: temporaryPath)
            let (end, lastKeptOffset) = try copy(plan, of: log, header: header, to: fd, path: temporaryPath, buffer: buffer)
            // Locked before it has its name, until this pass knows its tail: a writer that
            // opens it waits for that.
            try Syscalls.lock(fd).orThrow("lock", path: temporaryPath)
            defer { Syscalls.unlock(fd) }
            try container.rename(temporaryName, to: LogFile.name(identifier)).orThrow("replace", path: log.path)
            let status = try LogFile(fd: fd, path: log.path, device: 0, inode: 0, header: nil).status()
            let newLog = LogFile(fd: fd, path: log.path, device: UInt64(status.deviceID.rawValue), inode: UInt64(status.inode.rawValue), header: plan.header)
            let newTail = LogFile.Tail(end: end, lastSequence: tail.lastSequence, lastRecordOffset: lastKeptOffset)
            return (newLog, newTail)
        } catch {
            _ = container.remove(temporaryName)
            try? fd.close()
            throw error
        }
    }

    /// Where each whole record of `log` up to `tail` starts, its sequence number and size.
    /// Records larger than this process reads are listed too, unread: the walk recognises
    /// them by header and trailer, so memory stays bounded whatever the file.
    private func wholeRecords(of log: LogFile, header: LogFormat.Header, tail: LogFile.Tail,
                              buffer: ReadBuffer) throws(WormholeError) -> [CompactionPlan.Entry] {
        var entries: [CompactionPlan.Entry] = []
        _ = try log.walk(from: LogFormat.headerSize, header: header, maximumPayload: configuration.maximumMessageSize, buffer: buffer) { item in
            switch item {
            case .record(let frame, _, _, let offset, let length) where offset + length <= tail.end:
                entries.append(.init(offset: offset, sequence: frame.sequence, length: length))
            case .tooLarge(let sequence, let offset, let length) where offset + length <= tail.end:
                entries.append(.init(offset: offset, sequence: sequence, length: length))
            default:
                break
            }
            return true
        }
        buffer.shrink()
        return entries
    }

    /// Writes the records `plan` keeps after the header of `fd`: converted one by one from
    /// a log of another version, copied unchanged as runs of adjacent bytes, a buffer at a
    /// time, from one of this version. Returns the end of what it wrote and where the last
    /// record starts.
    private func copy(_ plan: CompactionPlan, of log: LogFile, header: LogFormat.Header, to fd: FileDescriptor,
                      path temporaryPath: String, buffer: ReadBuffer) throws(WormholeError) -> (end: Int, lastRecordOffset: Int?) {
        let kept = plan.kept
        var target = LogFormat.headerSize
        guard header.layout == LogFormat.layout else {
            var lastKeptOffset: Int?
            for entry in kept {
                guard try convert(entry, of: log, header: header, to: fd, at: target, path: temporaryPath, buffer: buffer) else { continue }
                lastKeptOffset = target
                target += entry.length - header.layout.overhead + LogFormat.recordOverhead
            }
            return (target, lastKeptOffset)
        }
        let lastKeptOffset = kept.last.map { target + plan.copiedBytes - $0.length }
        var index = kept.startIndex
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
        return (target, lastKeptOffset)
    }

    /// Writes the record `entry` of a log of another version at `target` of `fd` in this
    /// version's layout, its payload read and checked a buffer at a time. Returns `false`,
    /// writing nothing, when the record fails its checksum (damage, dropped).
    private func convert(_ entry: CompactionPlan.Entry, of log: LogFile, header: LogFormat.Header,
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
