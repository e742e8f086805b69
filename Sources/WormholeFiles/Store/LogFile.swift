#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
@_spi(Backend) import WormholeCore

/// One open message log: its descriptor, its identity and its header, with the reads
/// that the writer, the readers and compaction share. Every read is bounded by the
/// format: whatever a file's size or a forged header claims, a read allocates at most
/// one chunk or one record of the reader's maximum message size.
package struct LogFile {
    package let fd: FileDescriptor
    /// `<dir>/<id>.wormhole`, for messages.
    package let path: String
    package let device: UInt64
    package let inode: UInt64
    /// `nil` while the file is empty: a writer holding the lock is creating it.
    package var header: LogFormat.Header?

    package static func name(_ identifier: String) -> String { identifier + LogFormat.fileSuffix }

    /// Opens the log of `identifier` in `container`; `nil` when there is none and
    /// `create` is false.
    package static func open(_ identifier: String, in container: ContainerDirectory, access: ContainerDirectory.Access,
                     create: Bool) throws(WormholeError) -> LogFile? {
        let name = name(identifier)
        guard let (fd, status) = try container.openFile(name, access, create: create) else { return nil }
        var log = LogFile(fd: fd, path: container.filePath(name), device: UInt64(status.deviceID.rawValue),
                          inode: UInt64(status.inode.rawValue), header: nil)
        if status.size > 0 {
            do throws(WormholeError) {
                log.header = try log.readHeader()
            } catch {
                try? fd.close()
                throw error
            }
        }
        return log
    }

    package func close() { try? fd.close() }

    /// Runs `body` with the file locked against every other writer (`flock(LOCK_EX)`),
    /// and unlocks it in this one place, whatever `body` does. `body` must not close the
    /// file: its descriptor number could be another file's by the time it is unlocked.
    package func whileLocked<T>(_ body: () throws(WormholeError) -> T) throws(WormholeError) -> T {
        try Syscalls.lock(fd).orThrow("lock", path: path)
        defer { Syscalls.unlock(fd) }
        return try body()
    }

    /// Reads and checks the header; `nil` for an empty file.
    package func readHeader() throws(WormholeError) -> LogFormat.Header? {
        let path = self.path
        let fd = self.fd
        return try withUnsafeTemporaryAllocation(byteCount: LogFormat.headerSize, alignment: 8) { bytes -> Result<LogFormat.Header?, WormholeError> in
            switch Syscalls.read(fd, into: bytes, at: 0) {
            case .success(let count):
                return Result { () throws(WormholeError) in
                    try LogFormat.Header.decode(UnsafeRawBufferPointer(rebasing: bytes[..<count]), path: path)
                }
            case .failure(let errno):
                return .failure(WormholeError.system("read the header of", errno, path: path))
            }
        }.get()
    }

    /// The file's size and link count.
    package func status() throws(WormholeError) -> Stat {
        try Syscalls.status(fd).orThrow("inspect", path: path)
    }

    // MARK: - The tail

    /// Where the whole records end, and the last one.
    package struct Tail: Equatable {
        /// Offset just past the last whole record (128 when there is none). Bytes after
        /// it are a record being written, or a torn one that the next writer cuts.
        package var end: Int
        /// The last whole record's sequence number, or the header's base when none.
        package var lastSequence: UInt64
        /// Where the last whole record starts, when there is one.
        package var lastRecordOffset: Int?
        /// Where the last damage met by the walk that found this tail starts.
        package var lastDamageOffset: Int?

        /// After a walk that ended at `end`: past the last whole record means a damaged
        /// record, whole, ended the file; it took the next number (a reader skipped it),
        /// which is not given again.
        package mutating func includeDamagedEnd(_ end: Int) {
            guard end > self.end else { return }
            self.end = end
            lastSequence += 1
            lastRecordOffset = lastDamageOffset
        }

        /// Moves past a whole record met by ``walk(from:header:maximumPayload:buffer:_:)``
        /// (one too large for the walker counts: it is whole, just not read).
        package mutating func advance(past item: Item) {
            switch item {
            case .record(let frame, _, _, let offset, let length):
                self = Tail(end: offset + length, lastSequence: max(lastSequence, frame.sequence), lastRecordOffset: offset)
            case .tooLarge(let sequence, let offset, let length):
                self = Tail(end: offset + length, lastSequence: max(lastSequence, sequence), lastRecordOffset: offset)
            case .corrupt(_, let offset):
                lastDamageOffset = offset
            }
        }
    }

    /// Finds the tail of a file of `size` bytes: first from its end (the last 4 bytes
    /// give the last record's length, and that record is checked whole), and when that
    /// fails (a torn or damaged end) by walking the records from the start.
    package func findTail(size: Int, header: LogFormat.Header, maximumPayload: Int, buffer: ReadBuffer) throws(WormholeError) -> Tail {
        let empty = Tail(end: LogFormat.headerSize, lastSequence: header.baseSequence, lastRecordOffset: nil)
        guard size > LogFormat.headerSize else { return empty }
        let layout = header.layout
        if size - LogFormat.headerSize >= layout.overhead {
            var trailer: UInt32 = 0
            let got = withUnsafeMutableBytes(of: &trailer) { Syscalls.read(fd, into: $0, at: Int64(size - 4)) }
            if case .success(4) = got {
                let length = layout.overhead + Int(UInt32(littleEndian: trailer))
                let start = size - length
                if start >= LogFormat.headerSize {
                    // A record larger than this process accepts is recognised by its
                    // header and trailer alone, without reading (or allocating) it.
                    let count = length - layout.overhead <= maximumPayload ? length : layout.headerSize
                    let bytes = try buffer.read(fd, from: start, count: count, path: path)
                    switch LogFormat.parse(bytes, at: 0, logID: header.logID, layout: layout, maximumPayload: maximumPayload) {
                    case .record(let frame, length) where frame.sequence > header.baseSequence:
                        return Tail(end: size, lastSequence: frame.sequence, lastRecordOffset: start)
                    case .tooLarge(let sequence, length) where sequence > header.baseSequence:
                        return Tail(end: size, lastSequence: sequence, lastRecordOffset: start)
                    default:
                        break
                    }
                }
            }
        }
        var tail = empty
        let end = try walk(from: LogFormat.headerSize, header: header, maximumPayload: maximumPayload, buffer: buffer) { item in
            tail.advance(past: item)
            return true
        }
        tail.includeDamagedEnd(end)
        return tail
    }

    // MARK: - Walking the records

    /// One thing ``walk(from:header:maximumPayload:buffer:_:)`` met.
    package enum Item {
        /// A whole, valid record; its bytes are `bytes[local..<local + length]`, valid only
        /// during the call.
        case record(LogFormat.Frame, bytes: UnsafeRawBufferPointer, local: Int, offset: Int, length: Int)
        /// Damaged bytes at `offset`.
        case corrupt(String, offset: Int)
        /// A record larger than the reader accepts, skipped unread.
        case tooLarge(sequence: UInt64, offset: Int, length: Int)
    }

    /// Visits the records from `offset` on, reading at most one buffer (or one record)
    /// at a time, until `visit` returns `false`, the file ends, or a record is incomplete.
    /// Returns the offset just past the last whole record (or skipped damage followed by
    /// one): never past bytes a writer may still cut.
    ///
    /// A record that runs past the end of the file is incomplete (being written, or torn
    /// by a killed writer) only while nothing whole follows it: a writer appends at the
    /// end and cuts a torn tail before it appends, so a valid record after it proves that
    /// its length field is damaged (Protocol.md §9.3). It is then skipped as damage, and
    /// the walk resynchronises on the next whole record, instead of stopping there (which
    /// would hide every record after it, and let the next writer cut them as a torn tail).
    package func walk(from offset: Int, header: LogFormat.Header, maximumPayload: Int, buffer: ReadBuffer,
              _ visit: (Item) -> Bool) throws(WormholeError) -> Int {
        var walk = Walk(position: offset, committed: offset, lastSequence: header.baseSequence,
                        header: header, maximumPayload: maximumPayload)
        outer: while true {
            let request = buffer.capacity
            let bytes = try buffer.read(fd, from: walk.position, count: request, path: path)
            if bytes.isEmpty { return walk.committed }
            let atEnd = bytes.count < request
            var local = 0
            scan: while local < bytes.count {
                switch try step(&walk, bytes, at: local, atEnd: atEnd, request: request, buffer: buffer, visit) {
                case .scan(let next):
                    local = next
                case .read:
                    continue outer
                case .readAfter(let next):
                    local = next
                    break scan
                case .finish(let end):
                    return end
                }
            }
            walk.position += local
            // A short read reached the end of the file: nothing more to read now (reading
            // again would cost a `pread` that returns nothing).
            if atEnd && local >= bytes.count { return walk.committed }
        }
    }

    /// Where a ``walk(from:header:maximumPayload:buffer:_:)`` is, between two items.
    private struct Walk {
        /// The file offset of the buffer being scanned.
        var position: Int
        /// Just past the last whole record (or skipped damage followed by one).
        var committed: Int
        /// Damage met and not reported yet: reported before the next whole record.
        var pendingDamage: (String, Int)?
        /// The last whole record's sequence: a record that proves damage before it must be
        /// above it (a copy of an earlier record inside a payload proves nothing).
        var lastSequence: UInt64
        /// A record running past the end at this offset, with a whole record after it:
        /// read once more (it may have been completed, or cut and written again,
        /// meanwhile), then skipped as damage.
        var provenDamage = -1
        let header: LogFormat.Header
        let maximumPayload: Int

        init(position: Int, committed: Int, lastSequence: UInt64, header: LogFormat.Header, maximumPayload: Int) {
            self.position = position
            self.committed = committed
            self.lastSequence = lastSequence
            self.header = header
            self.maximumPayload = maximumPayload
        }

        /// Reports the pending damage, if any; `false` when `visit` says to stop.
        mutating func reportDamage(_ visit: (Item) -> Bool) -> Bool {
            guard let (detail, at) = pendingDamage else { return true }
            pendingDamage = nil
            return visit(.corrupt(detail, offset: at))
        }
    }

    /// What a walk does after one item of a buffer.
    private enum WalkStep {
        /// Goes on in the same buffer, at this offset in it.
        case scan(Int)
        /// Reads a buffer from the walk's position, which the step set.
        case read
        /// Reads a buffer from this offset in the current one.
        case readAfter(Int)
        /// Ends the walk, returning this offset.
        case finish(Int)
    }

    /// Decides what the item at `local` of `bytes` (read at the walk's position; `atEnd`
    /// when the read was short) is and what the walk does next, visiting it. (Inlined into
    /// the walk's loop, as it was before it was a function of its own: a call per record
    /// cost compaction's walk 2.4 times the instructions.)
    @inline(__always)
    private func step(_ walk: inout Walk, _ bytes: UnsafeRawBufferPointer, at local: Int, atEnd: Bool, request: Int,
                      buffer: ReadBuffer, _ visit: (Item) -> Bool) throws(WormholeError) -> WalkStep {
        let header = walk.header
        let offset = walk.position + local
        var parsed = LogFormat.parse(bytes, at: local, logID: header.logID, layout: header.layout, maximumPayload: walk.maximumPayload)
        if case .incomplete = parsed, atEnd, bytes.count - local >= 16 {
            if try runsPastTheEnd(at: offset, walk: &walk) {
                let length: UInt32 = LogFormat.get(bytes, local + 4)
                parsed = .corrupt("a record declares \(length) bytes, which run past the end of the file although whole records follow it (its length is damaged)", length: nil)
            } else if walk.provenDamage == offset {
                walk.position = offset
                return .read
            }
        }
        switch parsed {
        case .record(let frame, let length):
            guard walk.reportDamage(visit) else { return .finish(walk.committed) }
            let keepGoing = visit(.record(frame, bytes: bytes, local: local, offset: offset, length: length))
            walk.lastSequence = max(walk.lastSequence, frame.sequence)
            walk.committed = offset + length
            return keepGoing ? .scan(local + length) : .finish(walk.committed)
        case .incomplete(let needed):
            if atEnd { return .finish(walk.committed) }
            guard local == 0 else { return .readAfter(local) }
            // Longer than the buffer: read this record whole in the next round.
            buffer.reserve(needed ?? request * 2)
            return .read
        case .tooLarge(let sequence, let length):
            return try stepTooLarge(&walk, bytes, at: local, atEnd: atEnd, sequence: sequence, length: length, visit)
        case .corrupt(let detail, let length):
            if walk.pendingDamage == nil { walk.pendingDamage = (detail, offset) }
            if let length, local + length == bytes.count, atEnd {
                // The last record, whole (its trailer repeats its length) but damaged
                // (Protocol.md §9.3): damage to report and skip, not a torn tail to wait
                // on or cut. It took a number: ``Tail`` counts it.
                _ = walk.reportDamage(visit)
                return .finish(offset + length)
            }
            if let length, local + length < bytes.count, LogFormat.peek(bytes, at: local + length, layout: header.layout) != nil {
                return .scan(local + length)
            }
            return resynchronise(walk, bytes, after: local, atEnd: atEnd)
        }
    }

    /// Decides what a record too large to read, at `local` of `bytes`, is: whole (its
    /// trailer repeats its length: visited, unread), damage (skipped), or not yet written
    /// (the walk waits, as for any incomplete record).
    private func stepTooLarge(_ walk: inout Walk, _ bytes: UnsafeRawBufferPointer, at local: Int, atEnd: Bool,
                              sequence: UInt64, length: Int, _ visit: (Item) -> Bool) throws(WormholeError) -> WalkStep {
        let layout = walk.header.layout
        let offset = walk.position + local
        var ending = try trailer(at: offset, length: length, layout: layout)
        if ending == .notYetWritten {
            if try runsPastTheEnd(at: offset, walk: &walk) {
                ending = .mismatch
            } else if walk.provenDamage == offset {
                walk.position = offset
                return .read
            }
        }
        switch ending {
        case .notYetWritten:
            return .finish(walk.committed)
        case .mismatch:
            // All its bytes are there but they do not end as it says: damage, skipped
            // like any other (Protocol.md §9.3), not waited on.
            if walk.pendingDamage == nil { walk.pendingDamage = ("a record of \(length - layout.overhead) bytes whose trailer does not repeat its length", offset) }
            return resynchronise(walk, bytes, after: local, atEnd: atEnd)
        case .matches:
            break
        }
        guard walk.reportDamage(visit) else { return .finish(walk.committed) }
        let keepGoing = visit(.tooLarge(sequence: sequence, offset: offset, length: length))
        walk.lastSequence = max(walk.lastSequence, sequence)
        walk.position = offset + length
        walk.committed = walk.position
        return keepGoing ? .read : .finish(walk.committed)
    }

    /// After damage at `local` of `bytes`: the next record marker in the buffer, or, if
    /// none, the next read after it (keeping the last 3 bytes, which may start one); at
    /// the end of the file, the walk ends.
    private func resynchronise(_ walk: Walk, _ bytes: UnsafeRawBufferPointer, after local: Int, atEnd: Bool) -> WalkStep {
        if let next = LogFormat.nextMarker(in: bytes, after: local, layout: walk.header.layout) { return .scan(next) }
        if atEnd { return .finish(walk.committed) }
        return .readAfter(max(local + 1, bytes.count - 3))
    }

    /// Whether the record at `offset`, which runs past the end of the file, is damage: on
    /// the first look, a whole record after it sends the walk back to read it again.
    private func runsPastTheEnd(at offset: Int, walk: inout Walk) throws(WormholeError) -> Bool {
        if walk.provenDamage == offset { return true }
        if try wholeRecordFollows(offset, above: walk.lastSequence, header: walk.header, maximumPayload: walk.maximumPayload) {
            walk.provenDamage = offset
        }
        return false
    }

    /// What ends a record of `length` bytes at `offset`.
    fileprivate enum Trailer {
        /// Its 4 last bytes repeat its payload length: written whole.
        case matches
        /// They are there and do not: damage.
        case mismatch
        /// The file does not reach them (yet): being written, or torn.
        case notYetWritten
    }

    fileprivate func trailer(at offset: Int, length: Int, layout: LogFormat.RecordLayout) throws(WormholeError) -> Trailer {
        guard offset <= Int.max - length else { return .mismatch }
        var trailer: UInt32 = 0
        let got = withUnsafeMutableBytes(of: &trailer) { Syscalls.read(fd, into: $0, at: Int64(offset + length - 4)) }
        guard case .success(4) = got else { return .notYetWritten }
        return Int(UInt32(littleEndian: trailer)) == length - layout.overhead ? .matches : .mismatch
    }
}

extension LogFile {
    /// Whether a whole, valid record with a sequence number above `sequence` starts
    /// somewhere after `offset`: the proof that the record at `offset`, which runs past
    /// the end of the file, is not one being written or torn (those are always last) but
    /// one whose length field is damaged.
    ///
    /// Every record marker after `offset` is a candidate; one is checked whole only when
    /// its trailer repeats its length, so a payload full of markers costs a 4-byte read
    /// each. Memory: one chunk, and one record of at most `maximumPayload` bytes (a longer
    /// one is recognised by its header and trailer, unread, as the walk does).
    package func wholeRecordFollows(_ offset: Int, above sequence: UInt64, header: LogFormat.Header,
                            maximumPayload: Int) throws(WormholeError) -> Bool {
        let size = Int(try status().size)
        let layout = header.layout
        let chunk = ReadBuffer()
        let record = ReadBuffer()
        var position = offset + 1
        while position + layout.overhead <= size {
            let bytes = try chunk.read(fd, from: position, count: min(chunk.capacity, size - position), path: path)
            guard bytes.count >= 4 else { return false }
            var local = -1
            while let next = LogFormat.nextMarker(in: bytes, after: local, layout: layout) {
                local = next
                let at = position + next
                var head = [UInt8](repeating: 0, count: 16)
                let got = head.withUnsafeMutableBytes { Syscalls.read(fd, into: $0, at: Int64(at)) }
                guard case .success(16) = got,
                      let (candidate, length) = head.withUnsafeBytes({ LogFormat.peek($0, at: 0, layout: layout) }),
                      candidate > sequence, at + length <= size,
                      try trailer(at: at, length: length, layout: layout) == .matches else { continue }
                if length - layout.overhead > maximumPayload { return true }
                let whole = try record.read(fd, from: at, count: length, path: path)
                if case .record(let frame, _) = LogFormat.parse(whole, at: 0, logID: header.logID, layout: layout, maximumPayload: maximumPayload),
                   frame.sequence > sequence {
                    return true
                }
            }
            // The last 3 bytes of a chunk may start a marker: the next chunk starts there.
            position += max(1, bytes.count - 3)
        }
        return false
    }
}

/// A reusable read buffer: 64 KiB, grown for a large record and shrunk again after it.
package final class ReadBuffer {
    package static let standardCapacity = 64 << 10
    private(set) var capacity: Int
    private var storage: UnsafeMutableRawPointer

    package init(capacity: Int = ReadBuffer.standardCapacity) {
        self.capacity = capacity
        storage = .allocate(byteCount: capacity, alignment: 16)
    }

    deinit { storage.deallocate() }

    /// Makes room for at least `count` bytes (for one record).
    package func reserve(_ count: Int) {
        guard count > capacity else { return }
        storage.deallocate()
        capacity = count
        storage = .allocate(byteCount: count, alignment: 16)
    }

    /// Back to the standard size after a large record.
    package func shrink() {
        guard capacity > Self.standardCapacity else { return }
        storage.deallocate()
        capacity = Self.standardCapacity
        storage = .allocate(byteCount: capacity, alignment: 16)
    }

    /// Reads up to `count` bytes at `offset` (fewer at the end of the file) with one
    /// `pread`, into the buffer; the result is valid until the next read.
    package func read(_ fd: FileDescriptor, from offset: Int, count: Int, path: String) throws(WormholeError) -> UnsafeRawBufferPointer {
        reserve(count)
        let target = UnsafeMutableRawBufferPointer(start: storage, count: count)
        let result = Syscalls.retrying("pread") { pread(fd.rawValue, target.baseAddress!, count, off_t(offset)) }
        switch result {
        case .success(let got): return UnsafeRawBufferPointer(start: storage, count: got)
        case .failure(let errno): throw WormholeError.system("read", errno, path: path)
        }
    }
}
