#if Postgres
import Foundation
import Logging
import NIOCore
import NIOPosix
import PostgresNIO
import Synchronization
@_spi(Backend) import Wormhole

/// One connection to the server, shared by every call of one ``PostgresTransiting``,
/// opened on first use and again after it was lost.
///
/// The synchronous ``Wormhole`` API waits for each statement: a call blocks its thread
/// for one round trip, as a file-system call blocks it for a write. Statements from
/// several threads are queued on the connection and run one after another; each is a
/// single statement, so each is its own transaction and none can interleave with another.
/// Passes go through ``PostgresPassQueue``, which gathers those that come together into
/// one statement.
final class PostgresSession: Sendable {
    let server: PostgresServer
    let logger: Logger
    private let connection = Mutex<PostgresConnection?>(nil)
    /// Connecting, by one thread at a time, holding no lock while the server answers.
    private let connecting = SingleAttempt<PostgresConnection>()
    private let connectionIDs = Atomic<Int>(1)
    private let closed = Atomic<Bool>(false)
    /// Called with each new connection before it is used (re-establishing state that
    /// lived in the old connection's session).
    /// The statement a new connection runs first, if any, and what it does (for errors).
    private let onConnect: Mutex<(@Sendable () -> (PostgresQuery, String)?)?> = Mutex(nil)

    static var eventLoopGroup: MultiThreadedEventLoopGroup { .singleton }

    init(server: PostgresServer, logger: Logger) {
        self.server = server
        self.logger = logger
    }

    func setOnConnect(_ body: @escaping @Sendable () -> (PostgresQuery, String)?) {
        onConnect.withLock { $0 = body }
    }

    /// The open connection, connecting first when there is none.
    func open() throws(WormholeError) -> PostgresConnection {
        if closed.load(ordering: .acquiring) { throw closedError }
        if let current = connection.withLock({ $0 }), !current.isClosed { return current }
        // Threads that need a connection at the same moment wait for one instead of
        // opening one each. No lock is held while waiting for the server: callbacks on
        // the connection's event loop may need `connection` meanwhile, and ``close()``
        // ends the others' wait.
        return try connecting.run { () throws(WormholeError) -> PostgresConnection in
            if let current = connection.withLock({ $0 }), !current.isClosed { return current }
            let fresh = try connect()
            if let (setUp, doing) = onConnect.withLock({ $0 })?() {
                do {
                    _ = try fresh.query(setUp, logger: logger).wait()
                } catch {
                    try? fresh.close().wait()
                    throw Self.describe(error, doing: doing)
                }
            }
            // Kept unless the session was closed meanwhile (close() marks it closed
            // before it takes the connection).
            let kept = connection.withLock { current -> Bool in
                guard !closed.load(ordering: .acquiring) else { return false }
                current = fresh
                return true
            }
            guard kept else {
                Self.closeConnection(fresh)
                throw closedError
            }
            return fresh
        }
    }

    private var closedError: WormholeError {
        WormholeError(.databaseError, "the PostgreSQL back end for \(server) was closed")
    }

    /// A new connection of its own (the notifier's LISTEN connection uses one).
    func connect() throws(WormholeError) -> PostgresConnection {
        let id = connectionIDs.add(1, ordering: .relaxed).oldValue
        do {
            return try PostgresConnection.connect(
                on: Self.eventLoopGroup.next(), configuration: server.configuration, id: id, logger: logger
            ).wait()
        } catch {
            throw Self.describe(error, doing: "connect to \(server)")
        }
    }

    /// ``connect()`` for asynchronous callers: suspends instead of blocking the thread.
    func connect() async throws(WormholeError) -> PostgresConnection {
        let id = connectionIDs.add(1, ordering: .relaxed).oldValue
        do {
            return try await PostgresConnection.connect(
                on: Self.eventLoopGroup.next(), configuration: server.configuration, id: id, logger: logger
            ).get()
        } catch {
            throw Self.describe(error, doing: "connect to \(server)")
        }
    }

    /// Runs one statement and returns its rows.
    @discardableResult
    func query(_ query: PostgresQuery, _ doing: @autoclosure () -> String) throws(WormholeError) -> [PostgresRow] {
        let connection = try open()
        do {
            return Array(try connection.query(query, logger: logger).wait().rows)
        } catch {
            throw Self.describe(error, doing: doing())
        }
    }

    /// ``query(_:_:)`` for asynchronous callers: it suspends for the round trip instead
    /// of blocking the thread. Opening a connection (only when there is none) runs on a
    /// dispatch thread, never on the caller's.
    @discardableResult
    func query(_ query: PostgresQuery, _ doing: @autoclosure () -> String) async throws(WormholeError) -> [PostgresRow] {
        let connection = try await openWithoutBlocking()
        do {
            return Array(try await connection.query(query, logger: logger).get().rows)
        } catch {
            throw Self.describe(error, doing: doing())
        }
    }

    /// The connection when one is open, without waiting for anything.
    var openConnection: PostgresConnection? {
        guard !closed.load(ordering: .acquiring), let current = connection.withLock({ $0 }), !current.isClosed else { return nil }
        return current
    }

    /// The open connection; when there is none, one is made while the caller is
    /// suspended (no thread waits for the server). Two callers at the same moment may
    /// both connect: the second to finish closes its own and uses the first's.
    func openWithoutBlocking() async throws(WormholeError) -> PostgresConnection {
        if closed.load(ordering: .acquiring) {
            throw WormholeError(.databaseError, "the PostgreSQL back end for \(server) was closed")
        }
        if let current = connection.withLock({ $0 }), !current.isClosed { return current }
        let fresh = try await connect()
        if let (setUp, doing) = onConnect.withLock({ $0 })?() {
            do {
                _ = try await fresh.query(setUp, logger: logger).get()
            } catch {
                Self.closeWithoutWaiting(fresh)
                throw Self.describe(error, doing: doing)
            }
        }
        let other = connection.withLock { current -> PostgresConnection? in
            if let current, !current.isClosed { return current }
            current = fresh
            return nil
        }
        if let other {
            Self.closeWithoutWaiting(fresh)
            return other
        }
        return fresh
    }

    /// Starts closing `connection`; nothing waits for it.
    private static func closeWithoutWaiting(_ connection: PostgresConnection) {
        let closing: EventLoopFuture<Void> = connection.close()
        _ = closing
    }

    /// Runs one statement without waiting for it (releasing a claim, say); a failure is
    /// logged.
    func send(_ query: PostgresQuery, _ doing: String) {
        guard let connection = connection.withLock({ $0 }), !connection.isClosed else { return }
        let logger = logger
        connection.query(query, logger: logger).whenFailure { error in
            logger.debug("could not \(doing): \(Self.describe(error, doing: doing))")
        }
    }

    func close() {
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let current = connection.withLock { current -> PostgresConnection? in
            defer { current = nil }
            return current
        }
        // Threads waiting for a connection being made return now; the one making it
        // closes it when it comes.
        connecting.abandon(closedError)
        Self.closeConnection(current)
    }

    /// Closes `connection`, waiting for it unless this thread is an event loop's (a
    /// wormhole released in a callback there), which must never wait.
    static func closeConnection(_ connection: PostgresConnection?) {
        guard let connection else { return }
        if MultiThreadedEventLoopGroup.currentEventLoop == nil {
            try? connection.close().wait()
        } else {
            let closing: EventLoopFuture<Void> = connection.close()
            _ = closing
        }
    }

    /// A sentence naming what failed, the server's reason and, for the usual causes,
    /// what to do.
    static func describe(_ error: any Error, doing: String) -> WormholeError {
        if let error = error as? WormholeError { return error }
        guard let error = error as? PSQLError else {
            return WormholeError(.databaseError, "cannot \(doing): \(error)")
        }
        if let fields = error.serverInfo {
            let message = fields[.message] ?? "the server refused it"
            let state = fields[.sqlState].map { " (SQLSTATE \($0))" } ?? ""
            var hint = ""
            switch fields[.sqlState] {
            case "28P01", "28000": hint = ": check the user and password in the URL (or PGPASSWORD)"
            case "3D000": hint = ": create the database first (createdb), or name another in the URL"
            case "42501": hint = ": the user needs the CREATE privilege on the database the first time (Wormhole creates its schema), then USAGE on the schema wormhole and SELECT, INSERT, UPDATE, DELETE on its tables"
            default: break
            }
            return WormholeError(.databaseError, "cannot \(doing): \(message)\(state)\(hint)")
        }
        switch error.code {
        case .connectionError, .serverClosedConnection, .uncleanShutdown, .clientClosedConnection:
            let cause = error.underlying.map { ": \($0)" } ?? ""
            return WormholeError(.databaseError, "cannot \(doing): the connection failed\(cause); is the server running and reachable?")
        case .sslUnsupported:
            return WormholeError(.databaseError, "cannot \(doing): the server does not offer TLS; use sslmode=disable or prefer")
        default:
            return WormholeError(.databaseError, "cannot \(doing): \(String(reflecting: error))")
        }
    }
}
#endif
