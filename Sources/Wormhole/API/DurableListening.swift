import Dispatch
@_spi(Backend) import WormholeCore
@_spi(Backend) import WormholeFiles

/// Durable listeners (a listener with a name keeps its position in the container while
/// its process is not running, and resumes after the last message it handled: the
/// `durableName` of ``Wormhole/listenForMessage(withIdentifier:as:durableName:startingFrom:queue:onError:listener:)``),
/// and who listens.
extension Wormhole {
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
