/// Limits that every process sharing a directory should agree on
/// (``Wormhole/Configuration``), and two tunings of the process's own that need no
/// agreement (``maximumOpenLogCount``, ``replySpinTime``).
///
/// It belongs to the store: back ends take it without knowing the ``Wormhole`` type.
///
/// ```swift
/// var configuration = Wormhole.Configuration()
/// configuration.retainedMessageCount = 100
/// let wormhole = try Wormhole(directory: path, configuration: configuration)
/// ```
public struct WormholeConfiguration: Sendable, Hashable {
    /// How many messages per identifier are kept for readers that start from
    /// history (``WormholeStartingPoint/history``). Default 1,000. Messages a live listener
    /// has not read yet are kept beyond this until it has read them.
    public var retainedMessageCount: Int = 1000
    /// How many payload bytes per identifier are kept for history. Default 16 MiB.
    /// The latest message is always kept, whatever its size.
    public var retainedByteCount: Int = 16 << 20
    /// The largest message ``Wormhole/passMessage(_:identifier:timeToLive:)-6gmz7`` accepts, in bytes.
    /// Default 8 MiB; at most 1 GiB.
    public var maximumMessageSize: Int = 8 << 20
    /// The most messages per identifier that are kept for live listeners that have not
    /// read them yet, beyond the retained history. Default 100,000. Past it the oldest
    /// unread messages are dropped, and each listener that loses some receives a
    /// ``WormholeError/Code/messagesLost`` error with the count, so that a stopped
    /// listener cannot fill the disk.
    public var maximumBacklogMessageCount: Int = 100_000
    /// The most payload bytes per identifier kept for live listeners, likewise.
    /// Default 64 MiB. A log file stays below about twice the larger of this and the
    /// retained history, plus one message.
    public var maximumBacklogByteCount: Int = 64 << 20
    /// How many logs a writer keeps open between passes, so that the next pass to the
    /// same identifier costs no `open` and `close`. `nil` (the default): an eighth of the
    /// process's descriptor limit when the first wormhole opens, between 2 and 1,024, so
    /// that the cache never takes the descriptors the program needs. A program that
    /// passes round-robin to more identifiers than that, and has raised its descriptor
    /// limit (`setrlimit(RLIMIT_NOFILE)`), can keep them all open: one descriptor each.
    /// A pass that finds no descriptor left (EMFILE) still closes the idle cached logs and
    /// tries once more.
    public var maximumOpenLogCount: Int?
    /// Seconds that a thread blocked in a request (the blocking `request` and
    /// `requestRecord`) polls for its reply before it sleeps, counted from the request's
    /// pass. Default 0.0001 (100 µs); 0 never polls; at most 0.01. On the shared directory
    /// only, and only where the process may run on more than one CPU.
    ///
    /// A reply that comes while the thread polls costs no wake-up, on either side. The
    /// thread polls only when the identifier's recent replies came within this time (a
    /// slow responder costs its requesters no polling) and the thread ran, rather than
    /// slept, since its last request of the identifier: requests back to back, or with
    /// work between them. There polling halves the round trip on a machine where waking a
    /// thread on another CPU is dear (a virtual machine that halts idle vCPUs), for at
    /// most this much CPU a request (when the reply comes quickly, about what the sleep
    /// and the wake-up it saves would cost); after a sleep it would not help
    /// (Performance.md, "Requests and work queues"). Asynchronous requests never poll:
    /// they suspend.
    public var replySpinTime: Double = 0.0001

    public init() {}

    /// Throws ``WormholeError/Code/messageTooLarge`` when a payload of `size` bytes for
    /// `identifier` is over ``maximumMessageSize``: the one size check of every back end.
    @_spi(Backend) public func checkMessageSize(_ size: Int, identifier: String) throws(WormholeError) {
        guard size <= maximumMessageSize else {
            throw WormholeError(.messageTooLarge,
                "message for '\(identifier)' is \(size) bytes; the limit is \(maximumMessageSize) bytes (Wormhole.Configuration.maximumMessageSize)")
        }
    }

    /// The configuration itself, or ``WormholeError/Code/invalidConfiguration``
    /// naming the value that is out of range. Back ends call it when they start.
    @_spi(Backend) public func validated() throws(WormholeError) -> WormholeConfiguration {
        guard retainedMessageCount >= 1 else {
            throw WormholeError(.invalidConfiguration, "retainedMessageCount must be at least 1, not \(retainedMessageCount)")
        }
        guard retainedByteCount >= 1 else {
            throw WormholeError(.invalidConfiguration, "retainedByteCount must be at least 1, not \(retainedByteCount)")
        }
        guard maximumBacklogMessageCount >= 1 else {
            throw WormholeError(.invalidConfiguration, "maximumBacklogMessageCount must be at least 1, not \(maximumBacklogMessageCount)")
        }
        guard maximumBacklogByteCount >= 1 else {
            throw WormholeError(.invalidConfiguration, "maximumBacklogByteCount must be at least 1, not \(maximumBacklogByteCount)")
        }
        if let maximumOpenLogCount, maximumOpenLogCount < 1 {
            throw WormholeError(.invalidConfiguration, "maximumOpenLogCount must be at least 1, not \(maximumOpenLogCount)")
        }
        guard replySpinTime >= 0, replySpinTime <= 0.01 else {
            throw WormholeError(.invalidConfiguration, "replySpinTime must be between 0 and 0.01 seconds, not \(replySpinTime)")
        }
        guard (1...(1 << 30)).contains(maximumMessageSize) else {
            throw WormholeError(.invalidConfiguration, "maximumMessageSize must be between 1 byte and 1 GiB, not \(maximumMessageSize)")
        }
        return self
    }
}

/// Where a listener starts reading (``Wormhole/StartingPoint``).
public enum WormholeStartingPoint: Sendable, Hashable {
    /// Only messages passed after listening starts. The default, as in MMWormhole.
    case now
    /// The latest retained message first (when there is one), then new ones: a
    /// widget's "show the current value at once, then keep up".
    case latest
    /// Every retained message first, oldest first, then new ones: catch-up after
    /// the process was not running.
    case history
    /// The retained messages with a sequence number above this one, then new ones:
    /// resume where a previous run stopped.
    case after(sequence: UInt64)
}
