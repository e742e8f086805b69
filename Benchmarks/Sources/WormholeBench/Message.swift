import Foundation

/// The bytes every mechanism carries: the sender's `CLOCK_MONOTONIC` stamp, the message's
/// index, then padding up to the message size (at least 16 bytes).
///
/// Warm-up messages (sent first, so that files exist and code is paged in) have the top
/// bit of the index set; listeners do not count them.
enum Frame {
    static let minimumSize = 16
    static let warmUpBit: UInt64 = 1 << 63

    /// How many warm-up messages a Wormhole sender passes: one per identifier, 20 at least.
    static func warmUpCount(identifiers: Int) -> Int { max(20, identifiers) }

    @inline(__always)
    static func write(stamp: UInt64, index: UInt64, into bytes: UnsafeMutableRawPointer) {
        bytes.storeBytes(of: stamp.littleEndian, toByteOffset: 0, as: UInt64.self)
        bytes.storeBytes(of: index.littleEndian, toByteOffset: 8, as: UInt64.self)
    }

    @inline(__always)
    static func read(_ bytes: UnsafeRawPointer) -> (stamp: UInt64, index: UInt64) {
        (UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: 0, as: UInt64.self)),
         UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: 8, as: UInt64.self)))
    }
}

/// The Codable message of the "codable" mode: a small struct, as an app would pass.
struct BenchMessage: Codable, Sendable {
    var stamp: UInt64
    var index: UInt64
    var text: String
}

/// Identifier number `index` of `count` in use.
func identifierName(_ index: Int, of count: Int) -> String {
    count == 1 ? "bench" : "bench-\(index)"
}

/// The number of the identifier that message `index` is sent to, of `count` in use.
/// Consecutive messages go to identifiers far apart (7919 is a prime that divides no
/// count used), so that even fewer messages than identifiers spread over all of them.
func identifierNumber(forMessage index: Int, of count: Int) -> Int {
    count <= 1 ? 0 : (index % count) * 7919 % count
}
