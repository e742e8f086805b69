#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
@_spi(Backend) import WormholeCore

extension WormholeRecord {
    /// A record read from a log.
    package init(identifier: String, sequence: UInt64, fields: LogFormat.RecordFields, payload: Data) {
        self.init(identifier: identifier, sequence: sequence, date: Date(nanosecondsSince1970: fields.nanoseconds),
                  processID: fields.processID, kind: fields.kind, payload: payload,
                  senderUID: fields.userID == LogFormat.unknownUserID ? nil : fields.userID,
                  role: fields.role, correlation: fields.correlation,
                  expires: fields.expires == 0 ? nil : Date(nanosecondsSince1970: fields.expires))
    }
}
