#if Postgres
import Dispatch
import Foundation
import Logging
import PostgresNIO
import Synchronization
@_spi(Backend) import Wormhole

/// The LISTEN side: one connection of its own per ``PostgresTransiting``, listening on
/// the container's channel, waking the observers of the identifier each notification
/// names.
///
/// A notification's payload is `<sequence> <identifier>`, never the message: the
/// observers read the messages from the table. When the connection is lost, the notifier
/// connects again (retrying with a growing pause, up to 2 s) and then wakes every
/// observer, which reads whatever was passed meanwhile; nothing is lost, because the
/// messages are in the table and each reader knows its position.
final class PostgresNotifier: Sendable {
    typealias Handler = @Sendable (WormholeTransitingEvent) -> Void

    let channel: String
    private let session: PostgresSession

    private struct State {
        var connection: PostgresConnection?
        var observers: [String: [UInt64: Handler]] = [:]
        var nextID: UInt64 = 1
        var closed = false
        var reconnecting = false
    }
    private let state = Mutex(State())
    /// Connecting and issuing LISTEN, by one thread at a time, holding no lock while the
    /// server answers (the notification handler, on the connection's event loop, never
    /// waits for it).
    private let connecting = SingleAttempt<Void>()
    /// Counts the notifications received (and the reconnections): a reader whose last
    /// read found fewer rows than it asked for needs no new query while this count has
    /// not moved, since whatever commits later is notified later (see
    /// ``PostgresReader``).
    private let notifications = Atomic<UInt64>(0)

    init(session: PostgresSession, channel: String) {
        self.session = session
        self.channel = channel
    }

    /// Registers `handler` for `identifier`, listening first when not yet: when this
    /// returns, every pass committed from now on wakes the handler.
    func subscribe(_ identifier: String, handler: @escaping Handler) throws(WormholeError) -> UInt64 {
        try ensureListening()
        return register(identifier, handler)
    }

    /// Makes `connection` (listening) the notifier's, unless another thread installed one
    /// meanwhile: then this one is closed.
    private func install(_ connection: PostgresConnection) {
        let installed = state.withLock { state -> Bool in
            // Closed meanwhile: close() has taken what it found, so this one is closed here.
            if state.closed { return false }
            if let current = state.connection, !current.isClosed { return false }
            state.connection = connection
            return true
        }
        if installed {
            connection.closeFuture.whenComplete { [weak self] _ in self?.lost(connection) }
        } else {
            PostgresSession.closeConnection(connection)
        }
    }

    private func register(_ identifier: String, _ handler: @escaping Handler) -> UInt64 {
        state.withLock { state in
            let id = state.nextID
            state.nextID += 1
            state.observers[identifier, default: [:]][id] = handler
            return id
        }
    }

    func unsubscribe(_ identifier: String, _ id: UInt64) {
        state.withLock { state in
            state.observers[identifier]?[id] = nil
            if state.observers[identifier]?.isEmpty == true { state.observers[identifier] = nil }
        }
    }

    func close() {
        let connection = state.withLock { state -> PostgresConnection? in
            state.closed = true
            state.observers = [:]
            defer { state.connection = nil }
            return state.connection
        }
        connecting.abandon(WormholeError(.databaseError, "the PostgreSQL back end for \(session.server) was closed"))
        PostgresSession.closeConnection(connection)
    }

    private func ensureListening() throws(WormholeError) {
        try connecting.run { () throws(WormholeError) in
            let (closed, current) = state.withLock { ($0.closed, $0.connection) }
            if closed { throw WormholeError(.databaseError, "the PostgreSQL back end for \(session.server) was closed") }
            if let current, !current.isClosed { return }
            let connection = try session.connect()
            connection.addListener(channel: channel) { [weak self] _, notification in
                self?.deliver(notification.payload)
            }
            do {
                // addListener queues its LISTEN on the connection; this one completes
                // after it, so listening has begun when it returns.
                _ = try connection.query(PostgresQuery(unsafeSQL: "LISTEN \"\(channel)\""), logger: session.logger).wait()
            } catch {
                try? connection.close().wait()
                throw PostgresSession.describe(error, doing: "LISTEN on \(session.server)")
            }
            install(connection)
        }
    }

    /// The count of notifications received, or `nil` when not listening (no connection
    /// yet, or the connection was lost): then nothing may be concluded from it.
    var generation: UInt64? {
        let listening = state.withLock { state in state.connection.map { !$0.isClosed } ?? false }
        return listening ? notifications.load(ordering: .acquiring) : nil
    }

    /// Listeners read (a query) when woken: never on the event loop that delivered the
    /// notification, but on a queue of their own, in the order the notifications came.
    private let wakeQueue = DispatchQueue(label: "WormholePostgres.wake")

    private func wake(_ handlers: [Handler]) {
        guard !handlers.isEmpty else { return }
        wakeQueue.async { for handler in handlers { handler(.wake) } }
    }

    private func deliver(_ payload: String) {
        notifications.add(1, ordering: .releasing)
        guard let space = payload.firstIndex(of: " ") else { return }
        let identifier = String(payload[payload.index(after: space)...])
        let handlers = state.withLock { state in state.observers[identifier].map { Array($0.values) } ?? [] }
        wake(handlers)
    }

    /// The LISTEN connection closed: unless the notifier was closed, connect again on a
    /// thread of its own (connecting waits; the event loop must not).
    private func lost(_ connection: PostgresConnection) {
        let start = state.withLock { state -> Bool in
            guard !state.closed, state.connection === connection, !state.reconnecting else { return false }
            state.connection = nil
            state.reconnecting = true
            return true
        }
        guard start else { return }
        Thread.detachNewThread { [self] in reconnect(pause: 0.05, warned: false) }
    }

    /// One attempt to listen again (on a thread that may wait for the server); after a
    /// failure, the next is `pause` seconds later, on the library's one timer service
    /// (no thread sleeps meanwhile), twice as long each time, up to 2 s.
    private func reconnect(pause: Double, warned: Bool) {
        if !state.withLock({ $0.closed }) {
            do throws(WormholeError) {
                try ensureListening()
            } catch {
                if !warned {
                    session.logger.warning("lost the LISTEN connection to \(session.server); reconnecting: \(error)")
                }
                RetryClock.shared.schedule(after: pause) { [self] in
                    // Off the clock's thread: connecting waits.
                    Thread.detachNewThread { [self] in reconnect(pause: min(pause * 2, 2), warned: true) }
                }
                return
            }
        }
        notifications.add(1, ordering: .releasing)
        let handlers = state.withLock { state in
            state.reconnecting = false
            return state.observers.values.flatMap(\.values)
        }
        // Whatever was passed while nobody listened is in the table: read it.
        self.wake(handlers)
    }

    /// The channel of a container: `wormhole_` and a 64-bit FNV-1a hash of its name in
    /// hexadecimal (channel names are at most 63 bytes; container names may be longer).
    /// Two containers that shared a channel would only wake each other's observers for
    /// nothing: the payload's identifier is looked up in this container alone.
    static func channel(for container: String) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in container.utf8 {
            hash ^= UInt64(byte)
            hash &*= 0x0000_0100_0000_01b3
        }
        let hex = String(hash, radix: 16)
        return "wormhole_" + String(repeating: "0", count: 16 - hex.count) + hex
    }
}
#endif
