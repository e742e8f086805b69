#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
@_spi(Backend) import WormholeCore
@_spi(Backend) import WormholeFiles

/// Messages with a time to live (the `timeToLive` of
/// ``Wormhole/passMessage(_:identifier:timeToLive:)-2bd1y``), and reading what is kept.
extension Wormhole {
    /// The attributes of a message for every listener, expiring after `timeToLive`
    /// seconds when it is given.
    static func attributes(timeToLive: Double?) throws(WormholeError) -> WormholeRecordAttributes {
        guard let timeToLive else { return .message }
        guard timeToLive > 0, timeToLive.isFinite, timeToLive < 1e9 else {
            throw WormholeError(.invalidConfiguration, "a time to live must be a positive number of seconds, not \(timeToLive)")
        }
        return WormholeRecordAttributes(expires: Date().addingTimeInterval(timeToLive))
    }

    /// Every message kept for `identifier` now, oldest first (at most
    /// ``WormholeConfiguration/retainedMessageCount``, more while a listener has not read
    /// them), without listening: the history a window shows when it opens. Expired
    /// messages and records that cannot be read are left out.
    public func retainedRecords(withIdentifier identifier: String) throws(WormholeError) -> [WormholeRecord] {
        try Identifier.validate(identifier)
        let reader = try transiting.makeTapReader(identifier: identifier, startingFrom: .history)
        defer { reader.close() }
        var records: [WormholeRecord] = []
        while true {
            let batch = try reader.read(maximumCount: 1_000)
            if batch.isEmpty && !reader.mayHaveMore { return records }
            let now = Syscalls.wallClockNanoseconds()
            records += batch.compactMap { try? $0.get() }.filter { !$0.isExpired(at: now) }
        }
    }
}
