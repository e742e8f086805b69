/// One work queue, as ``Wormhole/workQueues(identifier:)`` and `wormhole status` report it.
public struct WormholeWorkQueueStatus: Sendable, Hashable {
    /// A live member: a process that holds its member file's lock now (or, in
    /// PostgreSQL, whose database session is connected).
    public struct Member: Sendable, Hashable {
        /// Its process id, as numbered in the PID namespace `pidNamespace` (in
        /// PostgreSQL, on the member's machine).
        public let processID: Int32
        /// The PID namespace of ``processID``; `nil` when unknown.
        package let pidNamespace: UInt64?
        /// Whether it is handling a message now.
        public let isHandling: Bool

        @_spi(Backend) public init(processID: Int32, pidNamespace: UInt64?, isHandling: Bool) {
            self.processID = processID
            self.pidNamespace = pidNamespace
            self.isHandling = isHandling
        }
    }

    /// The identifier whose messages the queue hands out.
    public let identifier: String
    /// The queue's name.
    public let name: String
    /// The live members.
    public let members: [Member]
    /// Messages waiting to be handed out: passed after the queue's position, or held by a
    /// member that ended (or gave them back).
    public let pending: UInt64
    /// Messages handed to a live member and not yet acknowledged.
    public let inFlight: Int
    /// How many messages members acknowledged.
    public let acknowledged: UInt64
    /// How many went to the dead-letter identifier.
    public let deadLettered: UInt64
    /// How many expired before a member took them.
    public let expired: UInt64
    /// How many were lost before a member took them (cleared, or dropped by the backlog cap).
    public let lost: UInt64
    /// Whether the queue's state file is damaged (nothing above is known then).
    public let isDamaged: Bool

    @_spi(Backend) public init(identifier: String, name: String, members: [Member], pending: UInt64, inFlight: Int,
                acknowledged: UInt64, deadLettered: UInt64, expired: UInt64, lost: UInt64, isDamaged: Bool = false) {
        self.identifier = identifier
        self.name = name
        self.members = members
        self.pending = pending
        self.inFlight = inFlight
        self.acknowledged = acknowledged
        self.deadLettered = deadLettered
        self.expired = expired
        self.lost = lost
        self.isDamaged = isDamaged
    }

}
