import Dispatch
@_spi(Backend) import WormholeCore
@_spi(Backend) import WormholeFiles

/// Work queues: each message of an identifier to one of several members, acknowledged
/// when its handler returns, handed out again when its member dies, moved to a
/// dead-letter identifier after too many tries. No daemon: the members share a state
/// file in the container (Protocol.md §18), or tables in the PostgreSQL back end's
/// database (Docs/Scaling.md).
extension Wormhole {
    /// Joins the work queue `name` of `identifier`: `listener` is called with messages
    /// that no other member of the queue (in any process) receives.
    ///
    /// Each message passed under `identifier` goes to exactly one live member. It counts
    /// as handled when `listener` returns (as a durable listener acknowledges); if
    /// `listener` throws, or the member's process ends while it runs, the message is
    /// handed out again (to this member or another), up to
    /// ``WorkQueueOptions/maximumDeliveries`` times, after which it goes to the queue's
    /// dead-letter identifier as a ``WormholeDeadLetter`` saying why. Members that join
    /// later get what nobody has handled yet; the queue keeps the messages it has not
    /// handed out from compaction, within the backlog cap
    /// (``WormholeConfiguration/maximumBacklogMessageCount``); past it `onError` receives
    /// a ``WormholeError/Code/messagesLost`` error saying how many the queue lost. Expired
    /// messages are skipped and counted (``WormholeWorkQueueStatus/expired``).
    ///
    /// A member takes one message at a time; run several members (in one process or
    /// several) to handle several at once.
    ///
    /// ```swift
    /// let worker = try wormhole.listenForMessage(withIdentifier: "jobs", as: Job.self, workQueue: "workers") { job in
    ///     try job.run()   // throws: tried again, then to "jobs.dead-letters"
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - identifier: The identifier whose messages the queue hands out.
    ///   - type: What to decode each message as.
    ///   - name: The queue's name; the members of one queue share its messages. The
    ///     name `responders` is reserved for the responders of requests
    ///     (``respondToRequests(withIdentifier:as:queue:onError:responder:)``): a member of it would take
    ///     requests and answer none.
    ///   - options: Deliveries before the dead letters, their identifier, and where a
    ///     new queue starts.
    ///   - queue: Where `listener` runs (a serial queue of the member's own by default).
    ///   - onError: Messages that could not be read or decoded (a message that does not
    ///     decode counts as a failed delivery), lost messages, and failures to store the
    ///     queue's state. Logged when `nil`.
    ///   - listener: Handles one message; throws when it could not.
    /// - Returns: The member; ``WorkQueueMember/cancel()`` leaves the queue.
    /// - Throws: ``WormholeError`` for an invalid identifier or name (`responders`
    ///   included: ``WormholeError/Code/invalidIdentifier``), a back end without
    ///   work queues (`FileTransiting` and the PostgreSQL back end have them), or a
    ///   container that cannot hold the queue (its files, or its rows).
    @discardableResult
    public func listenForMessage<Message: Decodable & Sendable>(
        withIdentifier identifier: String,
        as type: Message.Type = Message.self,
        workQueue name: String,
        options: WorkQueueOptions = WorkQueueOptions(),
        queue: DispatchQueue? = nil,
        onError: (@Sendable (WormholeError) -> Void)? = nil,
        listener: @escaping @Sendable (Message) throws -> Void
    ) throws(WormholeError) -> WorkQueueMember {
        try listenForRecords(withIdentifier: identifier, workQueue: name, options: options, queue: queue, onError: onError) { [jsonCoding] record, _ in
            try listener(try record.decode(as: Message.self, using: jsonCoding))
        }
    }

    /// ``listenForMessage(withIdentifier:as:workQueue:options:queue:onError:listener:)``
    /// with the records, and how many times each has been handed out (1 the first time).
    @discardableResult
    public func listenForRecords(
        withIdentifier identifier: String,
        workQueue name: String,
        options: WorkQueueOptions = WorkQueueOptions(),
        queue: DispatchQueue? = nil,
        onError: (@Sendable (WormholeError) -> Void)? = nil,
        listener: @escaping @Sendable (_ record: WormholeRecord, _ deliveries: Int) throws -> Void
    ) throws(WormholeError) -> WorkQueueMember {
        if name == Requests.respondersQueue { throw Requests.reservedQueue(identifier) }
        return try joinWorkQueue(identifier: identifier, name: name, options: options, queue: queue, drainsOnWakingThread: false,
                                 onError: onError, listener: listener)
    }

    /// A member of the work queue `name` of `identifier`; `drainsOnWakingThread` runs
    /// `listener` on the thread that was woken (with no `queue`), as a listener without a
    /// queue runs.
    func joinWorkQueue(
        identifier: String,
        name: String,
        options: WorkQueueOptions,
        queue: DispatchQueue?,
        drainsOnWakingThread: Bool,
        onError: (@Sendable (WormholeError) -> Void)?,
        listener: @escaping @Sendable (_ record: WormholeRecord, _ deliveries: Int) throws -> Void
    ) throws(WormholeError) -> WorkQueueMember {
        try Identifier.validate(identifier)
        try Identifier.validate(name, kind: "work queue name")
        let id = makeRegistrationID()
        let member = try WorkQueueMember(transiting: transiting, identifier: identifier, name: name, options: options, queue: queue,
                                         drainsOnWakingThread: drainsOnWakingThread,
                                         onError: onError ?? Self.logError, handler: handlingActivity.counting(listener),
                                         activity: handlingActivity, onCancel: { [weak self] in self?.unregister(id) })
        register(id, identifier) { member.cancel() }
        if member.isCancelled { unregister(id) }
        return member
    }

    /// The work queues of `identifier` (of every identifier when `nil`): members,
    /// pending and in-flight messages, and what was acknowledged, dead-lettered, expired
    /// and lost.
    public func workQueues(identifier: String? = nil) throws(WormholeError) -> [WormholeWorkQueueStatus] {
        if let identifier { try Identifier.validate(identifier) }
        return try transiting.workQueues(identifier: identifier)
    }
}
