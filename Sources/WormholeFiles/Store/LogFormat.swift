#if canImport(Glibc)
import Glibc
#endif
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
@_spi(Backend) import WormholeCore

/// Version 3 of the on-disk message log (and version 2, which it reads): the byte layout
/// that `Docs/Protocol.md` specifies. Every integer is little-endian.
///
/// A log is a 128-byte header followed by records. The header is written when the file
/// is created and when compaction writes its replacement, never by an append. A record
/// carries its length at both ends, its sequence number and a checksum seeded with the
/// log's identity, so the append that writes it is its commit: a reader tells a whole
/// record from one still being written (or torn by a killed writer) from the bytes alone.
package enum LogFormat {
    package static let magic: [UInt8] = Array("WORMHOLE".utf8)
    /// The version this library writes. It reads version 2 logs as well, and converts one
    /// to this version under its lock before it appends to it (Protocol.md §2).
    package static let version: UInt32 = 3
    /// The earliest version this library reads.
    package static let earliestReadableVersion: UInt32 = 2
    package static let headerSize = 128
    /// The records this library writes.
    package static let layout = RecordLayout.version3
    /// The first byte of every version's record marker ("WHR"), for resynchronising with `memchr`.
    package static let recordMarkerFirstByte = UInt8(ascii: "W")
    /// A version 3 record's header: marker, length, sequence, date, expiry, correlation,
    /// process, user, kind, role, reserved, checksum.
    package static let recordHeaderSize = layout.headerSize
    /// The payload length again, after the payload: written last, so a record whose
    /// trailer is in place was written whole.
    package static let recordTrailerSize = 4
    package static let recordOverhead = layout.overhead
    package static let fileSuffix = ".wormhole"
    /// The format's one limit on a record: no payload is longer than 1 GiB. Readers also
    /// refuse, without reading them, records longer than their own configured
    /// `maximumMessageSize`.
    package static let maximumPayloadLength = 1 << 30
    /// The user id a record converted from version 2 carries: not known.
    package static let unknownUserID: UInt32 = .max

    /// Where a version's record keeps its fields. Version 2's records (36-byte header)
    /// have no expiry, correlation, user or role; version 3's have all of them.
    package struct RecordLayout: Equatable, Sendable {
        package let version: UInt32
        /// "WHR2" or "WHR3" read as a little-endian `UInt32`.
        package let marker: UInt32
        package let headerSize: Int
        /// The checksum's offset: the bytes before it are what it covers of the header.
        package let checksumOffset: Int
        package let processOffset: Int
        package let kindOffset: Int
        package var overhead: Int { headerSize + LogFormat.recordTrailerSize }

        package static let version2 = RecordLayout(version: 2, marker: 0x3252_4857, headerSize: 36, checksumOffset: 32, processOffset: 24, kindOffset: 28)
        package static let version3 = RecordLayout(version: 3, marker: 0x3352_4857, headerSize: 56, checksumOffset: 52, processOffset: 40, kindOffset: 48)

        package static func forVersion(_ version: UInt32) -> RecordLayout { version == 2 ? .version2 : .version3 }
    }

    /// The file's fixed part: written at creation and by compaction only.
    package struct Header: Equatable, Sendable {
        /// Random, non-zero identity of this log; kept by compaction, new when the file is
        /// created again, so that readers know sequence numbers started over. It seeds
        /// every record's checksum.
        package var logID: UInt64 = 0
        /// The log's format version: the layout of its records.
        package var version: UInt32 = LogFormat.version
        /// Records in this file have sequence numbers above this one; an empty file's next
        /// record is `baseSequence + 1`.
        package var baseSequence: UInt64 = 0
        /// Messages with a sequence number at or below this were cleared: no reader
        /// delivers them and none counts them as lost.
        package var clearedThrough: UInt64 = 0
        /// A writer compacts when the file is larger than this...
        package var compactionByteThreshold: UInt64 = 0
        /// ...or holds more than this many sequence numbers above `baseSequence`.
        package var compactionRecordThreshold: UInt64 = 0

        package func encode(into bytes: UnsafeMutableRawBufferPointer) {
            precondition(bytes.count >= LogFormat.headerSize)
            let base = bytes.baseAddress!
            base.initializeMemory(as: UInt8.self, repeating: 0, count: LogFormat.headerSize)
            for (index, byte) in LogFormat.magic.enumerated() { base.storeBytes(of: byte, toByteOffset: index, as: UInt8.self) }
            base.storeBytes(of: version.littleEndian, toByteOffset: 8, as: UInt32.self)
            base.storeBytes(of: UInt32(LogFormat.headerSize).littleEndian, toByteOffset: 12, as: UInt32.self)
            base.storeBytes(of: logID.littleEndian, toByteOffset: 16, as: UInt64.self)
            base.storeBytes(of: baseSequence.littleEndian, toByteOffset: 24, as: UInt64.self)
            base.storeBytes(of: clearedThrough.littleEndian, toByteOffset: 32, as: UInt64.self)
            base.storeBytes(of: compactionByteThreshold.littleEndian, toByteOffset: 40, as: UInt64.self)
            base.storeBytes(of: compactionRecordThreshold.littleEndian, toByteOffset: 48, as: UInt64.self)
            let crc = CRC32.update(0, UnsafeRawBufferPointer(start: base, count: 124))
            base.storeBytes(of: crc.littleEndian, toByteOffset: 124, as: UInt32.self)
        }

        /// The layout of this log's records.
        package var layout: RecordLayout { .forVersion(version) }

        package func encoded() -> [UInt8] {
            [UInt8](unsafeUninitializedCapacity: LogFormat.headerSize) { buffer, count in
                encode(into: UnsafeMutableRawBufferPointer(buffer))
                count = LogFormat.headerSize
            }
        }

        /// Reads a header; `nil` when the file is empty (a log being created by a writer
        /// that holds its lock).
        package static func decode(_ bytes: UnsafeRawBufferPointer, path: String) throws(WormholeError) -> Header? {
            if bytes.isEmpty { return nil }
            guard bytes.count >= 12, bytes.prefix(8).elementsEqual(LogFormat.magic) else {
                throw WormholeError(.unsupportedFormat,
                    "'\(path)' is not a Wormhole message log (it does not start with 'WORMHOLE'); move it out of the container or delete it",
                    path: path)
            }
            let version: UInt32 = get(bytes, 8)
            guard (LogFormat.earliestReadableVersion...LogFormat.version).contains(version) else {
                let advice = version < LogFormat.earliestReadableVersion
                    ? "it was written by an earlier Wormhole, whose messages this version does not read or change. Read what you need with that version, then delete the file; the next message starts a version \(LogFormat.version) log"
                    : "it was written by a newer Wormhole; use that version"
                throw WormholeError(.unsupportedFormat,
                    "'\(path)' is a version \(version) message log and this library reads versions \(LogFormat.earliestReadableVersion) and \(LogFormat.version): \(advice)",
                    path: path)
            }
            guard bytes.count >= LogFormat.headerSize else {
                throw WormholeError(.unsupportedFormat, "'\(path)' has a damaged header (the file is \(bytes.count) bytes long)", path: path)
            }
            let stored: UInt32 = get(bytes, 124)
            guard stored == CRC32.update(0, UnsafeRawBufferPointer(rebasing: bytes[0..<124])) else {
                throw WormholeError(.unsupportedFormat, "'\(path)' has a damaged header (its checksum does not match); move it out of the container or delete it", path: path)
            }
            var header = Header()
            header.version = version
            header.logID = get(bytes, 16)
            header.baseSequence = get(bytes, 24)
            header.clearedThrough = get(bytes, 32)
            header.compactionByteThreshold = get(bytes, 40)
            header.compactionRecordThreshold = get(bytes, 48)
            return header
        }
    }

    /// The checksum of a record: CRC-32 of the log's identity (8 bytes), the record's
    /// header up to its checksum field and its payload. Seeding with the identity makes a
    /// record copied out of another log (inside a message's payload, say) invalid in this one.
    package static func checksum(logID: UInt64, header: UnsafeRawBufferPointer, layout: RecordLayout, payload: UnsafeRawBufferPointer) -> UInt32 {
        var crc = withUnsafeBytes(of: logID.littleEndian) { CRC32.update(0, $0) }
        crc = CRC32.update(crc, UnsafeRawBufferPointer(rebasing: header[0..<layout.checksumOffset]))
        return CRC32.update(crc, payload)
    }

    /// What a record says besides its sequence number and payload.
    package struct RecordFields: Equatable, Sendable {
        package var nanoseconds: Int64
        package var processID: Int32
        package var userID: UInt32
        package var kind: WormholePayloadKind
        package var expires: Int64 = 0
        package var correlation: UInt64 = 0
        package var role: WormholeRecordRole = .message
    }

    /// Writes the version 3 header of the record that carries `payload` into `header`,
    /// with the checksum `crc` when given (a copy whose payload is not in memory), and its
    /// 4-byte trailer into `trailer`. The record is header, payload, trailer: one
    /// `pwritev` of three pieces, no copy of the message.
    package static func writeRecordFrame(into header: UnsafeMutableRawBufferPointer, trailer: UnsafeMutableRawBufferPointer,
                                 logID: UInt64, sequence: UInt64, fields: RecordFields, payload: UnsafeRawBufferPointer) {
        writeRecordHeader(into: header, logID: logID, sequence: sequence, fields: fields, length: payload.count) { crc in
            CRC32.update(crc, payload)
        }
        trailer.baseAddress!.storeBytes(of: UInt32(payload.count).littleEndian, as: UInt32.self)
    }

    /// Writes a version 3 record header for a payload of `length` bytes; `checksumPayload`
    /// continues the checksum over the payload (read in pieces by a conversion).
    package static func writeRecordHeader<Failure: Error>(into header: UnsafeMutableRawBufferPointer, logID: UInt64, sequence: UInt64, fields: RecordFields,
                                                  length: Int, checksumPayload: (UInt32) throws(Failure) -> UInt32) throws(Failure) {
        let layout = LogFormat.layout
        precondition(header.count >= layout.headerSize)
        let base = header.baseAddress!
        base.initializeMemory(as: UInt8.self, repeating: 0, count: layout.headerSize)
        base.storeBytes(of: layout.marker.littleEndian, toByteOffset: 0, as: UInt32.self)
        base.storeBytes(of: UInt32(length).littleEndian, toByteOffset: 4, as: UInt32.self)
        base.storeBytes(of: sequence.littleEndian, toByteOffset: 8, as: UInt64.self)
        base.storeBytes(of: fields.nanoseconds.littleEndian, toByteOffset: 16, as: Int64.self)
        base.storeBytes(of: fields.expires.littleEndian, toByteOffset: 24, as: Int64.self)
        base.storeBytes(of: fields.correlation.littleEndian, toByteOffset: 32, as: UInt64.self)
        base.storeBytes(of: fields.processID.littleEndian, toByteOffset: 40, as: Int32.self)
        base.storeBytes(of: fields.userID.littleEndian, toByteOffset: 44, as: UInt32.self)
        base.storeBytes(of: fields.kind.rawValue, toByteOffset: 48, as: UInt8.self)
        base.storeBytes(of: fields.role.rawValue, toByteOffset: 49, as: UInt8.self)
        var crc = withUnsafeBytes(of: logID.littleEndian) { CRC32.update(0, $0) }
        crc = CRC32.update(crc, UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(header)[0..<layout.checksumOffset]))
        crc = try checksumPayload(crc)
        base.storeBytes(of: crc.littleEndian, toByteOffset: layout.checksumOffset, as: UInt32.self)
    }

    /// A version 3 record's whole bytes, for tests and tools that build logs in memory.
    package static func recordBytes(logID: UInt64, sequence: UInt64, fields: RecordFields, payload: [UInt8]) -> [UInt8] {
        var header = [UInt8](repeating: 0, count: recordHeaderSize)
        var trailer = [UInt8](repeating: 0, count: recordTrailerSize)
        payload.withUnsafeBytes { payload in
            header.withUnsafeMutableBytes { header in
                trailer.withUnsafeMutableBytes { trailer in
                    writeRecordFrame(into: header, trailer: trailer, logID: logID, sequence: sequence, fields: fields, payload: payload)
                }
            }
        }
        return header + payload + trailer
    }

    /// A version 3 record's whole bytes, for tests that need no particular fields.
    package static func recordBytes(logID: UInt64, sequence: UInt64, nanoseconds: Int64, processID: Int32,
                            kind: WormholePayloadKind, payload: [UInt8]) -> [UInt8] {
        recordBytes(logID: logID, sequence: sequence,
                    fields: RecordFields(nanoseconds: nanoseconds, processID: processID, userID: Syscalls.effectiveUserID, kind: kind),
                    payload: payload)
    }

    /// A version 2 record's whole bytes, for tests of reading and converting version 2 logs.
    package static func version2RecordBytes(logID: UInt64, sequence: UInt64, nanoseconds: Int64, processID: Int32,
                                    kind: WormholePayloadKind, payload: [UInt8]) -> [UInt8] {
        let layout = RecordLayout.version2
        var header = [UInt8](repeating: 0, count: layout.headerSize)
        header.withUnsafeMutableBytes { header in
            let base = header.baseAddress!
            base.storeBytes(of: layout.marker.littleEndian, toByteOffset: 0, as: UInt32.self)
            base.storeBytes(of: UInt32(payload.count).littleEndian, toByteOffset: 4, as: UInt32.self)
            base.storeBytes(of: sequence.littleEndian, toByteOffset: 8, as: UInt64.self)
            base.storeBytes(of: nanoseconds.littleEndian, toByteOffset: 16, as: Int64.self)
            base.storeBytes(of: processID.littleEndian, toByteOffset: 24, as: Int32.self)
            base.storeBytes(of: kind.rawValue, toByteOffset: 28, as: UInt8.self)
            let crc = payload.withUnsafeBytes { checksum(logID: logID, header: UnsafeRawBufferPointer(header), layout: layout, payload: $0) }
            base.storeBytes(of: crc.littleEndian, toByteOffset: layout.checksumOffset, as: UInt32.self)
        }
        return header + payload + withUnsafeBytes(of: UInt32(payload.count).littleEndian, Array.init)
    }

    /// What ``parse(_:at:logID:layout:maximumPayload:)`` found at an offset of a buffer.
    package enum Parsed {
        /// A whole, valid record of `length` bytes: payload at `offset + layout.headerSize`.
        case record(Frame, length: Int)
        /// The buffer ends before the record does: read more (or it is still being
        /// written, or was torn by a killed writer and waits for the next writer to cut it).
        case incomplete(needed: Int?)
        /// A record whose declared length ends inside the buffer but that is not valid.
        /// `length` is the declared length when skipping it lands on a plausible record.
        case corrupt(String, length: Int?)
        /// A record longer than the reader accepts: skipped without reading it.
        case tooLarge(sequence: UInt64, length: Int)
    }

    /// A valid record's fixed fields; the payload stays in the buffer.
    package struct Frame {
        package let sequence: UInt64
        package let fields: RecordFields
        package let payloadLength: Int
        /// Where its payload starts, from the record's start.
        package let payloadOffset: Int
        package var kind: WormholePayloadKind { fields.kind }
    }

    /// Parses the record at `offset` of `bytes`, written in `layout`.
    package static func parse(_ bytes: UnsafeRawBufferPointer, at offset: Int, logID: UInt64, layout: RecordLayout, maximumPayload: Int) -> Parsed {
        let available = bytes.count - offset
        guard available >= 8 else { return .incomplete(needed: nil) }
        guard get(bytes, offset) as UInt32 == layout.marker else {
            return .corrupt("no record marker at this offset", length: nil)
        }
        let payloadLength = Int(get(bytes, offset + 4) as UInt32)
        guard payloadLength <= maximumPayloadLength else {
            return .corrupt("a record declares \(payloadLength) bytes, more than the format allows", length: nil)
        }
        let length = layout.overhead + payloadLength
        if payloadLength > maximumPayload {
            guard available >= 16 else { return .incomplete(needed: 16) }
            return .tooLarge(sequence: get(bytes, offset + 8), length: length)
        }
        guard available >= length else { return .incomplete(needed: length) }
        let record = UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + length])
        let sequence: UInt64 = get(record, 8)
        guard get(record, length - recordTrailerSize) as UInt32 == UInt32(payloadLength) else {
            return .corrupt("record \(sequence) does not end where its length says", length: nil)
        }
        let payload = UnsafeRawBufferPointer(rebasing: record[layout.headerSize..<(length - recordTrailerSize)])
        guard get(record, layout.checksumOffset) as UInt32 == checksum(logID: logID, header: record, layout: layout, payload: payload) else {
            return .corrupt("record \(sequence) fails its checksum", length: length)
        }
        guard let kind = WormholePayloadKind(rawValue: record[layout.kindOffset]) else {
            return .corrupt("record \(sequence) has unknown kind \(record[layout.kindOffset])", length: length)
        }
        var fields = RecordFields(nanoseconds: get(record, 16), processID: get(record, layout.processOffset),
                                  userID: unknownUserID, kind: kind)
        if layout.version >= 3 {
            guard let role = WormholeRecordRole(rawValue: record[49]) else {
                return .corrupt("record \(sequence) has unknown role \(record[49])", length: length)
            }
            fields.role = role
            fields.expires = get(record, 24)
            fields.correlation = get(record, 32)
            fields.userID = get(record, 44)
        }
        return .record(Frame(sequence: sequence, fields: fields, payloadLength: payloadLength, payloadOffset: layout.headerSize), length: length)
    }

    /// The record's sequence number and length from its first 16 bytes, unchecked.
    package static func peek(_ bytes: UnsafeRawBufferPointer, at offset: Int, layout: RecordLayout) -> (sequence: UInt64, length: Int)? {
        guard offset >= 0, bytes.count - offset >= 16, get(bytes, offset) as UInt32 == layout.marker else { return nil }
        let payloadLength = Int(get(bytes, offset + 4) as UInt32)
        guard payloadLength <= maximumPayloadLength else { return nil }
        return (get(bytes, offset + 8), layout.overhead + payloadLength)
    }

    /// The offset of the next record marker after `offset`, for resynchronising after a
    /// damaged record; `nil` when the buffer has none.
    package static func nextMarker(in bytes: UnsafeRawBufferPointer, after offset: Int, layout: RecordLayout) -> Int? {
        var index = offset + 1
        guard let base = bytes.baseAddress else { return nil }
        while index + 4 <= bytes.count {
            guard let found = memchr(base + index, Int32(recordMarkerFirstByte), bytes.count - index) else { return nil }
            index = base.distance(to: UnsafeRawPointer(found))
            if index + 4 <= bytes.count, get(bytes, index) as UInt32 == layout.marker { return index }
            index += 1
        }
        return nil
    }

    package static func record(_ frame: Frame, in bytes: UnsafeRawBufferPointer, at offset: Int, identifier: String) -> WormholeRecord {
        let start = offset + frame.payloadOffset
        return WormholeRecord(identifier: identifier, sequence: frame.sequence, fields: frame.fields,
                              payload: Data(UnsafeRawBufferPointer(rebasing: bytes[start..<start + frame.payloadLength])))
    }

    @inline(__always)
    package static func get<T: FixedWidthInteger>(_ bytes: UnsafeRawBufferPointer, _ offset: Int) -> T {
        T(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: T.self))
    }
}
