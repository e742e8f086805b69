import Foundation

/// Version 1 of the on-disk message log: the byte layout that `Docs/Protocol.md`
/// specifies. Every integer is little-endian.
///
/// A log is a 128-byte header followed by records. The header's `committedEnd` is the
/// commit point: bytes past it are not part of the log, whatever the file size says.
enum LogFormat {
    static let magic: [UInt8] = Array("WORMHOLE".utf8)
    static let version: UInt32 = 1
    static let headerSize = 128
    static let recordMagic: [UInt8] = Array("WHR1".utf8)
    /// "WHR1" read as a little-endian `UInt32`: one comparison instead of four.
    static let recordMarker: UInt32 = 0x3152_4857

    /// Whether a record marker starts at `offset` (which must leave 4 bytes).
    @inline(__always)
    static func hasMarker(_ bytes: UnsafeRawBufferPointer, at offset: Int) -> Bool {
        UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self)) == recordMarker
    }
    static let recordHeaderSize = 36
    static let fileSuffix = ".wormhole"
    /// No record declares a larger payload: the largest configurable message.
    static let maximumPayloadLength = 1 << 30
    /// No log is larger: a commit offset past this is damage.
    static let maximumLogSize: UInt64 = 1 << 40

    struct Header: Equatable {
        /// Offset just past the last committed record.
        var committedEnd: UInt64 = UInt64(LogFormat.headerSize)
        /// Sequence number of the last record ever appended (0: none yet).
        var lastSequence: UInt64 = 0
        /// Records with a sequence number at or below this were cleared: no reader that
        /// starts from history sees them.
        var clearedThrough: UInt64 = 0
        /// Random identity of this log; kept by compaction, new when the file is created
        /// again, so that readers know sequence numbers started over.
        var logID: UInt64 = 0
        /// How many records the file holds.
        var recordCount: UInt32 = 0
        /// Compact when `recordCount` exceeds this...
        var compactionRecordThreshold: UInt32 = 0
        /// ...or `committedEnd` exceeds this.
        var compactionByteThreshold: UInt64 = 0
        /// Offset of the last record (0: the file holds none), so the latest message is
        /// one read away.
        var lastRecordOffset: UInt64 = 0

        func encoded() -> [UInt8] {
            [UInt8](unsafeUninitializedCapacity: LogFormat.headerSize) { buffer, count in
                encode(into: UnsafeMutableRawBufferPointer(buffer))
                count = LogFormat.headerSize
            }
        }

        /// Writes the 128 bytes of the header at the start of `bytes` (which must hold
        /// them), reserved bytes zero. The writer's hot path uses this with a buffer on
        /// the stack, so that a pass allocates nothing for the header.
        func encode(into bytes: UnsafeMutableRawBufferPointer) {
            precondition(bytes.count >= LogFormat.headerSize)
            let base = bytes.baseAddress!
            base.initializeMemory(as: UInt8.self, repeating: 0, count: LogFormat.headerSize)
            for (index, byte) in LogFormat.magic.enumerated() { base.storeBytes(of: byte, toByteOffset: index, as: UInt8.self) }
            base.storeBytes(of: LogFormat.version.littleEndian, toByteOffset: 8, as: UInt32.self)
            base.storeBytes(of: UInt32(LogFormat.headerSize).littleEndian, toByteOffset: 12, as: UInt32.self)
            base.storeBytes(of: committedEnd.littleEndian, toByteOffset: 16, as: UInt64.self)
            base.storeBytes(of: lastSequence.littleEndian, toByteOffset: 24, as: UInt64.self)
            base.storeBytes(of: clearedThrough.littleEndian, toByteOffset: 32, as: UInt64.self)
            base.storeBytes(of: logID.littleEndian, toByteOffset: 40, as: UInt64.self)
            base.storeBytes(of: recordCount.littleEndian, toByteOffset: 48, as: UInt32.self)
            base.storeBytes(of: compactionRecordThreshold.littleEndian, toByteOffset: 52, as: UInt32.self)
            base.storeBytes(of: compactionByteThreshold.littleEndian, toByteOffset: 56, as: UInt64.self)
            base.storeBytes(of: lastRecordOffset.littleEndian, toByteOffset: 64, as: UInt64.self)
        }

        /// Reads a header; `nil` when the file is empty (a log being created).
        static func decode(_ bytes: UnsafeRawBufferPointer, path: String) throws(WormholeError) -> Header? {
            // An empty file is a log being created: its creator writes the whole header
            // in one call under the lock. Anything else must be a whole, valid header.
            if bytes.isEmpty { return nil }
            guard bytes.count >= LogFormat.headerSize, bytes.prefix(8).elementsEqual(LogFormat.magic) else {
                throw WormholeError(.unsupportedFormat,
                    "'\(path)' is not a Wormhole message log (it does not start with 'WORMHOLE'); move it out of the container or delete it",
                    path: path)
            }
            let version: UInt32 = get(bytes, 8)
            guard version == LogFormat.version else {
                throw WormholeError(.unsupportedFormat,
                    "'\(path)' is a version \(version) message log; this library reads version \(LogFormat.version)",
                    path: path)
            }
            var header = Header()
            header.committedEnd = get(bytes, 16)
            header.lastSequence = get(bytes, 24)
            header.clearedThrough = get(bytes, 32)
            header.logID = get(bytes, 40)
            header.recordCount = get(bytes, 48)
            header.compactionRecordThreshold = get(bytes, 52)
            header.compactionByteThreshold = get(bytes, 56)
            header.lastRecordOffset = get(bytes, 64)
            // Offsets come from a file anyone in the container can write: bound them before
            // any arithmetic or allocation uses them.
            guard (UInt64(LogFormat.headerSize)...LogFormat.maximumLogSize).contains(header.committedEnd) else {
                throw WormholeError(.unsupportedFormat, "'\(path)' has a damaged header (commit offset \(header.committedEnd))", path: path)
            }
            guard header.lastRecordOffset == 0
                || (UInt64(LogFormat.headerSize)..<header.committedEnd).contains(header.lastRecordOffset) else {
                throw WormholeError(.unsupportedFormat, "'\(path)' has a damaged header (last record at \(header.lastRecordOffset))", path: path)
            }
            return header
        }
    }

    /// Appends a record's bytes to `buffer`.
    static func appendRecord(to buffer: inout [UInt8], sequence: UInt64, date: Date, processID: Int32, kind: WormholePayloadKind, payload: Data) {
        let nanoseconds = Int64((date.timeIntervalSince1970 * 1_000_000_000).rounded())
        var header = [UInt8](repeating: 0, count: recordHeaderSize)
        payload.withUnsafeBytes { payload in
            header.withUnsafeMutableBytes { header in
                writeRecordHeader(into: header, sequence: sequence, nanoseconds: nanoseconds,
                                  processID: processID, kind: kind, payload: payload)
            }
        }
        buffer.reserveCapacity(buffer.count + recordHeaderSize + payload.count)
        buffer.append(contentsOf: header)
        buffer.append(contentsOf: payload)
    }

    /// Writes the 36-byte header of the record that carries `payload`, its CRC included,
    /// at the start of `header`. The record is that header followed by the payload, so a
    /// writer can send both with one `pwritev` without copying the payload.
    static func writeRecordHeader(into header: UnsafeMutableRawBufferPointer, sequence: UInt64, nanoseconds: Int64,
                                  processID: Int32, kind: WormholePayloadKind, payload: UnsafeRawBufferPointer) {
        precondition(header.count >= recordHeaderSize)
        let base = header.baseAddress!
        base.initializeMemory(as: UInt8.self, repeating: 0, count: recordHeaderSize)
        for (index, byte) in recordMagic.enumerated() { base.storeBytes(of: byte, toByteOffset: index, as: UInt8.self) }
        base.storeBytes(of: UInt32(payload.count).littleEndian, toByteOffset: 4, as: UInt32.self)
        base.storeBytes(of: sequence.littleEndian, toByteOffset: 8, as: UInt64.self)
        base.storeBytes(of: nanoseconds.littleEndian, toByteOffset: 16, as: Int64.self)
        base.storeBytes(of: processID.littleEndian, toByteOffset: 24, as: Int32.self)
        base.storeBytes(of: kind.rawValue, toByteOffset: 28, as: UInt8.self)
        let crc = CRC32.update(CRC32.update(0, UnsafeRawBufferPointer(start: base, count: 32)), payload)
        base.storeBytes(of: crc.littleEndian, toByteOffset: 32, as: UInt32.self)
    }

    /// What ``parseRecord(_:at:identifier:)`` found at an offset.
    enum Parsed {
        /// A whole, valid record `length` bytes long.
        case record(WormholeRecord, length: Int)
        /// The bytes end before the record does.
        case incomplete
        /// Not a valid record; `length` is its declared length when that is plausible.
        case corrupt(String, length: Int?)
    }

    /// The sequence number and length of the record at `offset`, without checking it;
    /// used to skip records a reader has already seen.
    static func peek(_ bytes: UnsafeRawBufferPointer, at offset: Int) -> (sequence: UInt64, length: Int)? {
        guard offset >= 0, offset + recordHeaderSize <= bytes.count, hasMarker(bytes, at: offset) else { return nil }
        let length: UInt32 = get(bytes, offset + 4)
        return (get(bytes, offset + 8), recordHeaderSize + Int(length))
    }

    static func parseRecord(_ bytes: UnsafeRawBufferPointer, at offset: Int, identifier: String) -> Parsed {
        guard offset + recordHeaderSize <= bytes.count else { return .incomplete }
        guard hasMarker(bytes, at: offset) else {
            return .corrupt("no record marker at offset \(offset)", length: nil)
        }
        let payloadLength = Int(get(bytes, offset + 4) as UInt32)
        guard payloadLength <= maximumPayloadLength else {
            return .corrupt("the record at offset \(offset) declares \(payloadLength) bytes, more than any message may have", length: nil)
        }
        let length = recordHeaderSize + payloadLength
        guard offset + length <= bytes.count else { return .incomplete }
        let record = UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + length])
        let stored: UInt32 = get(record, 32)
        let computed = CRC32.update(CRC32.update(0, UnsafeRawBufferPointer(rebasing: record[0..<32])),
                                    UnsafeRawBufferPointer(rebasing: record[recordHeaderSize...]))
        let sequence: UInt64 = get(record, 8)
        guard stored == computed else {
            return .corrupt("record \(sequence) at offset \(offset) fails its checksum", length: length)
        }
        guard let kind = WormholePayloadKind(rawValue: record[28]) else {
            return .corrupt("record \(sequence) at offset \(offset) has unknown kind \(record[28])", length: length)
        }
        let nanoseconds: Int64 = get(record, 16)
        let processID: Int32 = get(record, 24)
        let payload = Data(UnsafeRawBufferPointer(rebasing: record[recordHeaderSize...]))
        return .record(
            WormholeRecord(identifier: identifier, sequence: sequence,
                           date: Date(timeIntervalSince1970: Double(nanoseconds) / 1_000_000_000),
                           processID: processID, kind: kind, payload: payload),
            length: length)
    }

    /// Every record in `bytes` (the part of a log after its header, up to the commit
    /// offset), each either valid or the reason it is not. After a damaged record the scan
    /// goes on at the next record marker, so one bad record costs only itself.
    static func scan(_ bytes: UnsafeRawBufferPointer, identifier: String, path: String) -> [Result<WormholeRecord, WormholeError>] {
        var results: [Result<WormholeRecord, WormholeError>] = []
        var offset = 0
        while offset < bytes.count {
            switch parseRecord(bytes, at: offset, identifier: identifier) {
            case .record(let record, let length):
                results.append(.success(record))
                offset += length
            case .incomplete:
                results.append(.failure(.corrupt("the record at offset \(offset) runs past the commit offset", path: path)))
                offset = nextMarker(in: bytes, after: offset) ?? bytes.count
            case .corrupt(let detail, _):
                results.append(.failure(.corrupt(detail, path: path)))
                offset = nextMarker(in: bytes, after: offset) ?? bytes.count
            }
        }
        return results
    }

    /// The offset of the next record marker after `offset`, for resynchronising after a
    /// corrupt record.
    static func nextMarker(in bytes: UnsafeRawBufferPointer, after offset: Int) -> Int? {
        var index = offset + 1
        while index + 4 <= bytes.count {
            if bytes[index] == recordMagic[0] && hasMarker(bytes, at: index) { return index }
            index += 1
        }
        return nil
    }

    static func get<T: FixedWidthInteger>(_ bytes: UnsafeRawBufferPointer, _ offset: Int) -> T {
        T(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: T.self))
    }

    static func put<T: FixedWidthInteger>(_ value: T, at offset: Int, in bytes: inout [UInt8]) {
        bytes.withUnsafeMutableBytes { $0.storeBytes(of: value.littleEndian, toByteOffset: offset, as: T.self) }
    }
}
