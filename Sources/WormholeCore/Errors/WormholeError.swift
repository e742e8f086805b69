import SystemPackage

/// The one error type of the Wormhole library.
///
/// Switch on ``code`` to decide what to do; show ``description`` to a person. It names
/// the problem and, where there is one, the fix:
///
/// ```swift
/// do {
///     try wormhole.passMessage("hi", identifier: "../notes")
/// } catch let error as WormholeError where error.code == .invalidIdentifier {
///     print(error)   // identifier '../notes' may not contain '/' ...
/// }
/// ```
public struct WormholeError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What kind of problem occurred.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }
        /// The code's name, as in ``WormholeError/Code/invalidIdentifier``: `invalidIdentifier`.
        public var description: String { name }

        /// An identifier, notification name or group identifier that cannot name a file
        /// inside the container (empty, too long, `/`, NUL, control characters, `.`, `..`,
        /// or a leading `.`), or that would display as another name (not in Unicode NFC,
        /// bidirectional formatting characters).
        public static let invalidIdentifier = Code("invalidIdentifier")
        /// A message larger than the configured ``WormholeConfiguration/maximumMessageSize``.
        public static let messageTooLarge = Code("messageTooLarge")
        /// A record in a message log failed its checksum or framing. The listener that met
        /// it reports it and goes on with the next record.
        public static let corruptRecord = Code("corruptRecord")
        /// A file where a message log should be is not one (wrong magic number) or has a
        /// format version this library does not read.
        public static let unsupportedFormat = Code("unsupportedFormat")
        /// A message's bytes could not be decoded as the type asked for.
        public static let decodingFailed = Code("decodingFailed")
        /// A message could not be encoded.
        public static let encodingFailed = Code("encodingFailed")
        /// The container directory is unsafe to use: a symbolic link, not a directory,
        /// owned by another user, or writable by other users.
        public static let containerInsecure = Code("containerInsecure")
        /// The container directory could not be found or created.
        public static let containerUnavailable = Code("containerUnavailable")
        /// The kernel's inotify limits (instances or watches per user) are exhausted.
        public static let notificationLimitReached = Code("notificationLimitReached")
        /// A configuration value is out of range.
        public static let invalidConfiguration = Code("invalidConfiguration")
        /// A listener missed messages: they were dropped before it read them (the backlog
        /// cap of ``WormholeConfiguration/maximumBacklogMessageCount`` and
        /// ``WormholeConfiguration/maximumBacklogByteCount``), or it asked to start before
        /// the oldest message kept. ``WormholeError/missedMessageCount`` says how many;
        /// it arrives once, in order, before the first message after the gap.
        public static let messagesLost = Code("messagesLost")
        /// A durable listener's name is in use by a running listener of the identifier
        /// (in this process or another): one listener at a time resumes a durable name.
        public static let durableNameInUse = Code("durableNameInUse")
        /// A message log was changed by a program that does not follow the protocol:
        /// emptied (`: > id.wormhole`, logrotate's `copytruncate`), cut, or its header
        /// overwritten. Reported once by each process that notices it, with what was lost
        /// when that is known (``WormholeError/missedMessageCount``); the log is repaired
        /// and numbering goes on after the highest sequence number known to have been
        /// handed out, so that no number is used twice for different messages.
        public static let logChangedOutsideWormhole = Code("logChangedOutsideWormhole")
        /// A request (``Wormhole/request(_:identifier:as:timeout:)-1vwec``) had no reply within its
        /// timeout; the message says whether any responder serves its identifier.
        public static let timedOut = Code("timedOut")
        /// A responder answered a request with an error: the message carries what it said.
        public static let requestFailed = Code("requestFailed")
        /// Messages passed with a time to live expired before the listener read them:
        /// they are not delivered. ``WormholeError/missedMessageCount`` says how many; it
        /// arrives in their place.
        public static let messagesExpired = Code("messagesExpired")
        /// A system call failed; ``WormholeError/errno`` holds the reason.
        public static let systemError = Code("systemError")
        /// A database back end (the PostgreSQL one) could not be reached, refused the
        /// credentials, or failed a statement; the message says which and what to do.
        public static let databaseError = Code("databaseError")
    }

    /// What kind of problem occurred.
    public let code: Code
    /// A sentence a person can act on.
    public let message: String
    /// The file or directory involved, when there is one.
    public let path: String?
    /// The underlying system error, when a system call failed.
    public let errno: Errno?
    /// For ``Code/messagesLost``: how many messages the listener missed.
    public let missedMessageCount: UInt64?
    /// For an error about one message that could not be delivered (``Code/messageTooLarge``
    /// for this reader): its sequence number, so that a listener knows it has passed it.
    /// For ``Code/messagesExpired``: the newest of the messages it stands for.
    public let sequence: UInt64?

    /// An error with `code` and a sentence a person can act on: how back ends of your own
    /// report problems as the library does.
    ///
    /// ```swift
    /// throw WormholeError(.databaseError, "cannot reach the server at db.example.com: connection refused")
    /// ```
    @_spi(Backend) public init(_ code: Code, _ message: String, path: String? = nil, errno: Errno? = nil, missedMessageCount: UInt64? = nil,
                sequence: UInt64? = nil) {
        self.code = code
        self.message = message
        self.path = path
        self.errno = errno
        self.missedMessageCount = missedMessageCount
        self.sequence = sequence
    }

    /// The message, followed by the system error when it does not name it already.
    public var description: String {
        var text = message
        if let errno, !message.contains(errno.description) {
            text += " (\(errno.description))"
        }
        return text
    }
}

extension WormholeError {
    /// A failed system call, worded as "cannot <operation> '<path>': <reason>".
    /// Whether the failure is for want of a resource that may free up (descriptors,
    /// memory), not because of the file: trying again later can succeed.
    package var isOutOfResources: Bool {
        errno == .tooManyOpenFiles || errno == .tooManyOpenFilesInSystem || errno == .noMemory
    }

    @usableFromInline package static func system(_ operation: String, _ errno: Errno, path: String? = nil) -> WormholeError {
        let subject = path.map { " '\($0)'" } ?? ""
        return WormholeError(.systemError, "cannot \(operation)\(subject): \(errno.description)", path: path, errno: errno)
    }

    package static func corrupt(_ detail: String, path: String) -> WormholeError {
        WormholeError(.corruptRecord, "corrupt record in '\(path)': \(detail)", path: path)
    }
}
