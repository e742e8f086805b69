#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// How a message's bytes are meant to be read. Stored in each record so that another
/// program (or the `wormhole` CLI) knows what it holds.
public enum WormholePayloadKind: UInt8, Sendable, Hashable, CustomStringConvertible {
    /// Raw bytes, passed as `Data`.
    case data = 0
    /// UTF-8 text, passed as `String`.
    case text = 1
    /// A JSON document, passed as any other `Encodable` type.
    case json = 2

    public var description: String {
        switch self {
        case .data: "data"
        case .text: "text"
        case .json: "json"
        }
    }
}

/// What a record is for: a message (every record passed by ``Wormhole/passMessage(_:identifier:timeToLive:)-6gmz7``),
/// or a part of a request and its reply.
public enum WormholeRecordRole: UInt8, Sendable, Hashable, CustomStringConvertible {
    /// A message, for every listener.
    case message = 0
    /// A request: answered by one responder.
    case request = 1
    /// A reply to the request whose correlation number it carries.
    case reply = 2
    /// A reply that reports the responder's failure instead of an answer.
    case errorReply = 3

    public var description: String {
        switch self {
        case .message: "message"
        case .request: "request"
        case .reply: "reply"
        case .errorReply: "error reply"
        }
    }
}

/// One message as the store keeps it: its bytes and what the store knows about it.
///
/// Listen for records (``Wormhole/listenForRecords(withIdentifier:durableName:startingFrom:queue:onError:listener:)``)
/// when you need the sequence number, the time or the sending process as well as the
/// message.
public struct WormholeRecord: Sendable, Hashable {
    /// The identifier the message was passed under.
    public let identifier: String
    /// Its position in the identifier's one order, from 1, agreed by every listener.
    public let sequence: UInt64
    /// When the sender passed it.
    public let date: Date
    /// The sending process, as numbered in the sender's PID namespace.
    public let processID: Int32
    /// The sending process's effective user id; `nil` when not known (a message stored
    /// by an earlier version, or by the PostgreSQL back end).
    public let senderUID: UInt32?
    /// How its bytes are meant to be read.
    public let kind: WormholePayloadKind
    /// What it is for: a message, a request or a reply.
    public let role: WormholeRecordRole
    /// A request's identity, repeated by its reply; 0 for a message.
    package let correlation: UInt64
    /// When it expires: after this date it is not delivered to a listener that starts,
    /// resumes or takes it from a queue. `nil`: never.
    public let expires: Date?
    /// The message's bytes, exactly as passed.
    public let payload: Data

    @_spi(Backend) public init(identifier: String, sequence: UInt64, date: Date, processID: Int32, kind: WormholePayloadKind, payload: Data,
                senderUID: UInt32? = nil, role: WormholeRecordRole = .message, correlation: UInt64 = 0, expires: Date? = nil) {
        self.identifier = identifier
        self.sequence = sequence
        self.date = date
        self.processID = processID
        self.senderUID = senderUID
        self.kind = kind
        self.role = role
        self.correlation = correlation
        self.expires = expires
        self.payload = payload
    }

}

/// What a record carries besides its message, given when it is passed: the back end
/// fills in the sequence number, the date, the process and the user.
@_spi(Backend) public struct WormholeRecordAttributes: Sendable, Hashable {
    /// What the record is for.
    public var role: WormholeRecordRole
    /// A request's identity (0 for a message).
    public var correlation: UInt64
    /// When it expires (`nil`: never).
    public var expires: Date?

    public init(role: WormholeRecordRole = .message, correlation: UInt64 = 0, expires: Date? = nil) {
        self.role = role
        self.correlation = correlation
        self.expires = expires
    }

    /// A message for every listener, that never expires.
    public static let message = WormholeRecordAttributes()
}

extension Date {
    /// A date from nanoseconds since 1970 (a record's form).
    package init(nanosecondsSince1970 nanoseconds: Int64) {
        self.init(timeIntervalSince1970: Double(nanoseconds) / 1_000_000_000)
    }

    /// Nanoseconds since 1970, clamped to what a record holds; at least 1 (0 means "none").
    package var nanosecondsSince1970: Int64 {
        let value = (timeIntervalSince1970 * 1_000_000_000).rounded()
        if value >= Double(Int64.max) { return .max }
        return max(1, Int64(exactly: value) ?? 1)
    }
}

/// Retained contents of one identifier, as ``Wormhole/summaries()-on3z`` lists them.
public struct WormholeIdentifierSummary: Sendable, Hashable {
    /// The identifier.
    public let identifier: String
    /// How many messages are retained for it.
    public let messageCount: Int
    /// Their total payload size in bytes.
    public let byteCount: Int
    /// The sequence number of the latest message ever passed (0 if none).
    public let lastSequence: UInt64
    /// When the latest retained message was passed.
    public let lastUpdate: Date?

    @_spi(Backend) public init(identifier: String, messageCount: Int, byteCount: Int, lastSequence: UInt64, lastUpdate: Date?) {
        self.identifier = identifier
        self.messageCount = messageCount
        self.byteCount = byteCount
        self.lastSequence = lastSequence
        self.lastUpdate = lastUpdate
    }
}

/// One listener of an identifier, as ``Wormhole/listeners(identifier:)`` reports it: a
/// live listener (running now, in some process) or a durable name (running or not).
public struct WormholeListenerStatus: Sendable, Hashable {
    /// The identifier listened to.
    public let identifier: String
    /// The durable listener's name; `nil` for a listener without one.
    public let durableName: String?
    /// The process of a running listener (for a durable name, of the last one that ran),
    /// as numbered in the PID namespace `pidNamespace`.
    public let processID: Int32?
    /// The PID namespace of ``processID`` (the inode number of the process's
    /// `/proc/self/ns/pid`); `nil` when unknown (written by an older version, or by the
    /// PostgreSQL back end, which has no such notion). A process id means a process of
    /// the caller's only when ``isInThisPIDNamespace``.
    package let pidNamespace: UInt64?
    /// Whether a listener runs now (a durable name's listener may not).
    public let isRunning: Bool
    /// The sequence number of the last message it read (a durable one: handled).
    public let position: UInt64
    /// How many messages were passed after its position.
    public let behind: UInt64
    /// When a durable listener last handled a message (or was started).
    public let lastSeen: Date?
    /// The user of the listener's process. For a running listener, the effective user of
    /// the process that holds its claim locked, as the kernel lists it (`/proc/locks`):
    /// no process can forge it. When that process cannot be seen from here (another PID
    /// namespace), and for a durable name whose listener does not run, the owner of its
    /// claim or position file: the user that created that file, which in a shared group
    /// a member can make another's by renaming another member's file into its place.
    /// `nil` when unknown: a file with several hard links (a member's link of another's
    /// file), or the PostgreSQL back end.
    package let userID: UInt32?

    /// Whether ``processID`` numbers a process of the caller's PID namespace (or the
    /// namespace is not known).
    package var isInThisPIDNamespace: Bool {
        pidNamespace == nil || pidNamespace == 0 || Syscalls.pidNamespace == 0 || pidNamespace == Syscalls.pidNamespace
    }

    @_spi(Backend) public init(identifier: String, durableName: String?, processID: Int32?, isRunning: Bool,
                position: UInt64, behind: UInt64, lastSeen: Date?, pidNamespace: UInt64? = nil, userID: UInt32? = nil) {
        self.identifier = identifier
        self.durableName = durableName
        self.processID = processID
        self.pidNamespace = pidNamespace
        self.isRunning = isRunning
        self.position = position
        self.behind = behind
        self.lastSeen = lastSeen
        self.userID = userID
    }
}
