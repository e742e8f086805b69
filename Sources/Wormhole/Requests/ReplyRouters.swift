@_spi(Backend) import WormholeCore
@_spi(Backend) import WormholeFiles
/// The reply routers of one wormhole, one per request identifier, made at its first
/// request.
///
/// A router's listener is started outside the lock (it opens the reply log and
/// subscribes to the inotify engine, or waits for a server): a lookup of another
/// identifier's router never waits for it. Of two started at the same moment for one
/// identifier, the first kept is used and the other stopped.
final class ReplyRouters: Sendable {
    private let routers = Locked<[String: ReplyRouter]>([:])

    func router(for identifier: String, in wormhole: Wormhole) throws(WormholeError) -> ReplyRouter {
        if let router = listening(identifier) { return router }
        let made = ReplyRouter(identifier: identifier, wormhole: wormhole)
        try made.start(wormhole)
        return keep(made)
    }

    /// The identifier's router, if it still listens.
    private func listening(_ identifier: String) -> ReplyRouter? {
        guard let router = routers.withLock({ $0[identifier] }), router.isListening else { return nil }
        return router
    }

    /// Keeps `made`, started, unless another router of its identifier that listens was
    /// kept meanwhile: then `made` is stopped and that one returned.
    private func keep(_ made: ReplyRouter) -> ReplyRouter {
        while true {
            let current = routers.withLock { $0[made.identifier] }
            // Whether the current one listens is asked outside the lock (its own lock).
            if let current, current !== made, current.isListening {
                made.stop()
                return current
            }
            let replaced = routers.withLock { routers -> Bool in
                guard routers[made.identifier] === current else { return false }
                routers[made.identifier] = made
                return true
            }
            if replaced { return made }
        }
    }
}
