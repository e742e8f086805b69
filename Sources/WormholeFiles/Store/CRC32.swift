@_spi(Backend) import WormholeCore
/// CRC-32 as zlib computes it (reflected polynomial 0xEDB88320, initial value and final
/// XOR 0xFFFFFFFF), so that `zlib.crc32` in another language checks the same records.
///
/// Slicing-by-16: sixteen table lookups per sixteen bytes, from one flat table of
/// 16 x 256 entries that is built once and never freed, read without bounds checks
/// (every index is a byte, so it is always in range). It runs at about a byte per cycle,
/// which matters for messages of megabytes: the writer and every reader check each one.
package enum CRC32 {
    /// `table[k * 256 + b]`: the CRC of byte `b` followed by `k` zero bytes.
    private nonisolated(unsafe) static let table: UnsafePointer<UInt32> = {
        let table = UnsafeMutablePointer<UInt32>.allocate(capacity: 16 * 256)
        for byte in 0..<256 {
            var crc = UInt32(byte)
            for _ in 0..<8 { crc = (crc & 1) != 0 ? (crc >> 1) ^ 0xEDB8_8320 : crc >> 1 }
            table[byte] = crc
        }
        for slice in 1..<16 {
            for byte in 0..<256 {
                let previous = table[(slice - 1) * 256 + byte]
                table[slice * 256 + byte] = (previous >> 8) ^ table[Int(previous & 0xFF)]
            }
        }
        return UnsafePointer(table)
    }()

    /// Continues a checksum over `bytes`; start with `crc` 0.
    package static func update(_ crc: UInt32, _ bytes: UnsafeRawBufferPointer) -> UInt32 {
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return crc }
        let t = table
        var crc = ~crc
        var index = 0
        let count = bytes.count
        @inline(__always) func lookup(_ slice: Int, _ byte: UInt32) -> UInt32 {
            t[slice &* 256 &+ Int(byte & 0xFF)]
        }
        while index &+ 16 <= count {
            let first = UInt64(littleEndian: base.loadUnaligned(fromByteOffset: index, as: UInt64.self))
            let second = UInt64(littleEndian: base.loadUnaligned(fromByteOffset: index &+ 8, as: UInt64.self))
            let low = UInt32(truncatingIfNeeded: first) ^ crc
            let high = UInt32(truncatingIfNeeded: first >> 32)
            let third = UInt32(truncatingIfNeeded: second)
            let fourth = UInt32(truncatingIfNeeded: second >> 32)
            crc = lookup(15, low) ^ lookup(14, low >> 8) ^ lookup(13, low >> 16) ^ lookup(12, low >> 24)
                ^ lookup(11, high) ^ lookup(10, high >> 8) ^ lookup(9, high >> 16) ^ lookup(8, high >> 24)
                ^ lookup(7, third) ^ lookup(6, third >> 8) ^ lookup(5, third >> 16) ^ lookup(4, third >> 24)
                ^ lookup(3, fourth) ^ lookup(2, fourth >> 8) ^ lookup(1, fourth >> 16) ^ lookup(0, fourth >> 24)
            index &+= 16
        }
        while index < count {
            crc = (crc >> 8) ^ lookup(0, crc ^ UInt32(base.load(fromByteOffset: index, as: UInt8.self)))
            index &+= 1
        }
        return ~crc
    }
}
