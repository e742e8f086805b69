#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
@_spi(Backend) import WormholeCore
@_spi(Backend) import WormholeFiles

extension Wormhole {
    /// Passes a request or a reply: the version 3 record's role, correlation and expiry.
    @discardableResult
    func passRecord(_ payload: Data, kind: WormholePayloadKind, identifier: String, role: WormholeRecordRole,
                    correlation: UInt64, expires: Date?) throws(WormholeError) -> UInt64 {
        try transiting.append(payload, kind: kind, identifier: identifier,
                              attributes: WormholeRecordAttributes(role: role, correlation: correlation, expires: expires)).sequence
    }

    /// ``passRecord(_:kind:identifier:role:correlation:expires:)`` for asynchronous callers,
    /// on a thread of ``BlockingWork``'s.
    @discardableResult
    func passRecord(_ payload: Data, kind: WormholePayloadKind, identifier: String, role: WormholeRecordRole,
                    correlation: UInt64, expires: Date?) async throws(WormholeError) -> UInt64 {
        try await BlockingWork.run { [self] () throws(WormholeError) in
            try passRecord(payload, kind: kind, identifier: identifier, role: role, correlation: correlation, expires: expires)
        }
    }
}
