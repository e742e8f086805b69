import Dispatch
import WormholeCore
import WormholeFiles

/// Durable listeners: a listener with a name keeps its position in the container while
/// its process is not running, and resumes after the last message it handled.
extension Wormhole {
    /// Calls `listener` with every message of `identifier` that the durable listener
    /// `name` has not handled yet, then with each new one, until the token is cancelled.
    ///
    /// The position is kept in the container (`.listeners/<identifier>/durable-<name>`;
    /// the PostgreSQL back end keeps it in a table) and moves when `listener` returns:
    /// started again after its process was killed at any instant, the listener resumes
    /// after the last message it handled. No message is missed, and at most the one
    /// being handled when the process died is delivered again. The first time a name is
    /// used it starts at `start`.
    ///
    /// Messages it has not handled are kept while it is not running, up to the backlog
    /// cap (``WormholeConfiguration/maximumBacklogMessageCount`` and
    /// ``WormholeConfiguration/maximumBacklogByteCount``); past it the oldest go, and when it
    /// resumes `onError` first receives a ``WormholeError/Code/messagesLost`` error with
    /// ``WormholeError/missedMessageCount``. ``forgetDurableListener(named:identifier:)``
    /// releases what a name keeps.
    ///
    /// One process at a time uses a name: while one runs, another listener with the name
    /// (in any process) is refused with ``WormholeError/Code/durableNameInUse``.
    ///
    /// ```swift
    /// let token = try wormhole.listenForMessage(withIdentifier: "actions", as: Action.self,
    ///                                           durableName: "app", startingFrom: .history) { action in
    ///     apply(action)   // once, even if the app was not running when it was sent
    /// }
    /// ```
    @discardableResult
    public func listenForMessage<Message: Decodable & Sendable>(
        withIdentifier identifier: String,
        as type: Message.Type = Message.self,
        durableName name: String,
        startingFrom start: StartingPoint = .now,
        queue: DispatchQueue? = nil,
        onError: (@Sendable (WormholeError) -> Void)? = nil,
        listener: @escaping @Sendable (Message) -> Void
    ) throws(WormholeError) -> ListenerToken {
        let report = onError ?? Self.logError
        return try listenForRecords(withIdentifier: identifier, durableName: name, startingFrom: start, queue: queue, onError: report,
                                    listener: decoding(Message.self, listener, report: report))
    }

    /// ``listenForMessage(withIdentifier:as:durableName:startingFrom:queue:onError:listener:)``
    /// with the records: bytes, sequence number, date and sending process.
    @discardableResult
    public func listenForRecords(
        withIdentifier identifier: String,
        durableName name: String,
        startingFrom start: StartingPoint = .now,
        queue: DispatchQueue? = nil,
        onError: (@Sendable (WormholeError) -> Void)? = nil,
        listener: @escaping @Sendable (WormholeRecord) -> Void
    ) throws(WormholeError) -> ListenerToken {
        try Identifier.validate(name, kind: "durable listener name")
        return try makeListener(identifier: identifier, start: start, durableName: name, queue: queue,
                                onError: onError ?? Self.logError, listener: listener)
    }

    /// The messages the durable listener `name` has not handled yet, then each new one,
    /// as an asynchronous sequence. An element counts as handled when the next one is
    /// requested: the one in hand when the process dies (or the loop is left with
    /// `break`) is delivered again next time.
    public func messages<Message: Decodable & Sendable>(
        withIdentifier identifier: String,
        as type: Message.Type = Message.self,
        durableName name: String,
        startingFrom start: StartingPoint = .now,
        onError: (@Sendable (WormholeError) -> Void)? = nil
    ) -> WormholeMessages<Message> {
        WormholeMessages(wormhole: self, identifier: identifier, start: start, durableName: name, onError: onError ?? Self.logError) { [jsonCoding] record throws(WormholeError) in
            try record.decode(as: Message.self, using: jsonCoding)
        }
    }

    /// Who listens to `identifier` (every identifier when `nil`): each running listener,
    /// in any process, with its position and how far behind it is, and each durable
    /// name, running or not, with when it last handled a message. Work queue members are
    /// not listeners here: ``workQueues(identifier:)`` lists them, each in its queue.
    public func listeners(identifier: String? = nil) throws(WormholeError) -> [WormholeListenerStatus] {
        try transiting.listeners(identifier: identifier)
    }

    /// Removes the position of the durable listener `name` for `identifier` (for every
    /// identifier when `nil`), and with it what was kept for it. Returns how many
    /// positions were removed; refused with ``WormholeError/Code/durableNameInUse``
    /// while the listener runs.
    @discardableResult
    public func forgetDurableListener(named name: String, identifier: String? = nil) throws(WormholeError) -> Int {
        try transiting.forgetDurableListener(named: name, identifier: identifier)
    }
}
