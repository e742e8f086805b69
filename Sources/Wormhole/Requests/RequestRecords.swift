#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import WormholeCore
import WormholeFiles

extension Wormhole {
    /// Passes a request or a reply: the version 3 record's role, correlation and expiry.
    @discardableResult
    func passRecord(_ payload: Data, kind: WormholePayloadKind, identifier: String, role: WormholeRecordRole,
                    correlation: UInt64, expires: Date?) throws(WormholeError) -> UInt64 {
        try transiting.append(payload, kind: kind, identifier: identifier,
                              attributes: WormholeRecordAttributes(role: role, correlation: correlation, expires: expires)).sequence
    }

    /// ``passRecord(_:kind:identifier:role:correlation:expires:)`` for asynchronous callers.
    @discardableResult
    func passRecord(_ payload: Data, kind: WormholePayloadKind, identifier: String, role: WormholeRecordRole,
                    correlation: UInt64, expires: Date?) async throws(WormholeError) -> UInt64 {
        try await transiting.append(payload, kind: kind, identifier: identifier,
                                    attributes: WormholeRecordAttributes(role: role, correlation: correlation, expires: expires)).sequence
    }
}
