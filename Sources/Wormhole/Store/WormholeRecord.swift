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

/// One message as the store keeps it: its bytes and what the store knows about it.
///
/// Listen for records (``Wormhole/listenForRecords(withIdentifier:startingFrom:queue:onError:listener:)``)
/// when you need the sequence number, the time or the sending process as well as the
/// message.
public struct WormholeRecord: Sendable, Hashable {
    /// The identifier the message was passed under.
    public let identifier: String
    /// Its position in the identifier's one order, from 1, agreed by every listener.
    public let sequence: UInt64
    /// When the sender passed it.
    public let date: Date
    /// The sending process.
    public let processID: Int32
    /// How its bytes are meant to be read.
    public let kind: WormholePayloadKind
    /// The message's bytes, exactly as passed.
    public let payload: Data

    public init(identifier: String, sequence: UInt64, date: Date, processID: Int32, kind: WormholePayloadKind, payload: Data) {
        self.identifier = identifier
        self.sequence = sequence
        self.date = date
        self.processID = processID
        self.kind = kind
        self.payload = payload
    }
}

/// Retained contents of one identifier, as ``WormholeTransiting/summaries()-342tx`` lists them.
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

    public init(identifier: String, messageCount: Int, byteCount: Int, lastSequence: UInt64, lastUpdate: Date?) {
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
    /// as numbered in the PID namespace ``pidNamespace``.
    public let processID: Int32?
    /// The PID namespace of ``processID`` (the inode number of the process's
    /// `/proc/self/ns/pid`); `nil` when unknown (written by an older version, or by the
    /// PostgreSQL back end, which has no such notion). A process id means a process of
    /// the caller's only when ``isInThisPIDNamespace``.
    public let pidNamespace: UInt64?
    /// Whether a listener runs now (a durable name's listener may not).
    public let isRunning: Bool
    /// The sequence number of the last message it read (a durable one: handled).
    public let position: UInt64
    /// How many messages were passed after its position.
    public let behind: UInt64
    /// When a durable listener last handled a message (or was started).
    public let lastSeen: Date?

    /// Whether ``processID`` numbers a process of the caller's PID namespace (or the
    /// namespace is not known).
    public var isInThisPIDNamespace: Bool {
        pidNamespace == nil || pidNamespace == 0 || Syscalls.pidNamespace == 0 || pidNamespace == Syscalls.pidNamespace
    }

    public init(identifier: String, durableName: String?, processID: Int32?, isRunning: Bool,
                position: UInt64, behind: UInt64, lastSeen: Date?, pidNamespace: UInt64? = nil) {
        self.identifier = identifier
        self.durableName = durableName
        self.processID = processID
        self.pidNamespace = pidNamespace
        self.isRunning = isRunning
        self.position = position
        self.behind = behind
        self.lastSeen = lastSeen
    }
}
