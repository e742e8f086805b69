#if Postgres
#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Logging
import NIOPosix
import PostgresNIO
import WormholePostgres

/// The PostgreSQL floor, without Wormhole: a sender that runs
/// `SELECT pg_notify(channel, '<stamp> <index>')` (one statement, so one transaction, per
/// message) and a listener that `LISTEN`s on the channel and reads the stamp from the
/// notification's payload. No table, no read after the wake-up: what is left of a
/// Wormhole pass when the message itself is not stored.
///
/// And what the server is, for the report (``serverSettings(url:)``).
enum PostgresRoles {
    /// PostgresNIO's diagnostics are not wanted in the harness's output.
    static let logger = Logger(label: "bench.postgres", factory: { _ in SwiftLogNoOpLogHandler() })

    /// A connection to the server of `url` (a URL as `PostgresServer` reads it).
    static func connect(_ url: String) throws -> PostgresConnection {
        let server = try PostgresServer(url: url)
        return try PostgresConnection.connect(
            on: MultiThreadedEventLoopGroup.singleton.next(), configuration: server.configuration, id: 1, logger: logger
        ).wait()
    }

    /// `notify-send --postgres URL --container CHANNEL [--count C] [--interval-ns I] [--handshake]`
    ///
    /// Warm-up notifications first (as many as a Wormhole sender's), then C, each stamped
    /// just before its statement is sent; the call returns when the server has committed.
    static func notifySend(_ options: Options) throws -> Int32 {
        let url = try options.string("postgres")
        let channel = try options.string("container")
        let count = try options.int("count", default: 2000)
        let interval = UInt64(try options.int("interval-ns", default: 0))
        let connection = try connect(url)
        defer { try? connection.close().wait() }

        func send(_ index: UInt64) throws {
            let payload = "\(Monotonic.now()) \(index)"
            _ = try connection.query("SELECT pg_notify(\(channel), \(payload))", logger: logger).wait()
        }

        for number in 0..<Frame.warmUpCount(identifiers: 1) {
            try send(Frame.warmUpBit | UInt64(number))
        }
        if options.flag("handshake") {
            emit("WARMED")
            _ = readLine()
        } else {
            Monotonic.sleep(seconds: 0.05)
        }
        Monotonic.sleep(seconds: 0.01)
        try sendPaced(count: count, interval: interval) { index in
            try send(UInt64(index))
        }
        return 0
    }

    /// `notify-listen --postgres URL --container CHANNEL [--count C]`
    ///
    /// Listens on the channel on a connection of its own and counts the notifications,
    /// timed when PostgresNIO hands them over (on its event loop).
    static func notifyListen(_ options: Options) throws -> Int32 {
        let url = try options.string("postgres")
        let channel = try options.string("container")
        let count = try options.int("count", default: 2000)
        let tally = SharedTally(Tally(count: count, identifiers: 1))
        let connection = try connect(url)
        defer { try? connection.close().wait() }
        connection.addListener(channel: channel) { _, notification in
            let now = Monotonic.now()
            let parts = notification.payload.split(separator: " ")
            guard parts.count == 2, let stamp = UInt64(parts[0]), let index = UInt64(parts[1]) else { return }
            tally.record(index: index, stamp: stamp, at: now)
        }
        // addListener queues its LISTEN; this statement completes after it, so listening
        // has begun when it returns (as in WormholePostgres's notifier).
        _ = try connection.query(PostgresQuery(unsafeSQL: "LISTEN \"\(channel)\""), logger: logger).wait()
        let start = ResourceUsage.current()
        emit("READY")
        tally.waitForEnd(idle: try options.double("idle-timeout", default: 3), start: 60)
        emit(tally.read { $0.report(since: start) })
        return 0
    }

    /// One line about the server: version, durability settings, where its data is and
    /// how this process reached it. Read from the server, not assumed.
    static func serverSettings(url: String) throws -> String {
        let connection = try connect(url)
        defer { try? connection.close().wait() }
        let rows = try connection.query("""
            SELECT split_part(version(), ' on ', 1), current_setting('fsync'), current_setting('synchronous_commit'),
                   current_setting('wal_sync_method'), current_setting('full_page_writes'),
                   coalesce(host(inet_server_addr()), 'a Unix socket'),
                   coalesce((SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()), false)
            """, logger: logger).wait()
        var text = "?"
        for row in rows {
            let (version, fsync, synchronousCommit, syncMethod, fullPageWrites, address, tls) =
                try row.decode((String, String, String, String, String, String, Bool).self)
            let via = address == "a Unix socket" ? address : "TCP to \(address)"
            text = "\(version); fsync=\(fsync), synchronous_commit=\(synchronousCommit), wal_sync_method=\(syncMethod), full_page_writes=\(fullPageWrites); clients connect by \(via)\(tls ? " with TLS" : " without TLS")"
        }
        // Only a superuser (or pg_read_all_settings) may see where the data is.
        if let rows = try? connection.query("SELECT current_setting('data_directory')", logger: logger).wait(),
           let directory = rows.first.flatMap({ try? $0.decode(String.self) }) {
            text += "; data directory on \(fileSystemName(directory)) (\(directory))"
        }
        return text
    }
}

/// The server's own counters, read by the harness around each PostgreSQL scenario: WAL
/// flushes (`pg_stat_wal.wal_sync`, the `fdatasync` calls that make commits durable) and
/// committed transactions of the database (`pg_stat_database.xact_commit`).
///
/// A server process publishes its counters when its client leaves at the latest, so the
/// harness reads them after every child has exited and the server has ended their
/// sessions.
final class ServerCounters {
    struct Snapshot {
        var walFlushes: Int64
        var commits: Int64
    }

    private let connection: PostgresConnection

    init(url: String) throws {
        connection = try PostgresRoles.connect(url)
    }

    deinit { try? connection.close().wait() }

    func read() -> Snapshot? {
        guard let rows = try? connection.query("""
            SELECT (SELECT wal_sync FROM pg_stat_wal),
                   (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database())
            """, logger: PostgresRoles.logger).wait(),
              let (flushes, commits) = rows.first.flatMap({ try? $0.decode((Int64, Int64).self) }) else { return nil }
        return Snapshot(walFlushes: flushes, commits: commits)
    }

    /// Waits until no other session is connected to the database (the children's have
    /// ended and published their counters), `timeout` seconds at most.
    func waitForOtherSessionsToEnd(timeout: Double) {
        let deadline = Monotonic.now() + UInt64(timeout * 1e9)
        while Monotonic.now() < deadline {
            let rows = try? connection.query("""
                SELECT count(*) FROM pg_stat_activity
                WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'
                """, logger: PostgresRoles.logger).wait()
            if let count = rows?.first.flatMap({ try? $0.decode(Int64.self) }), count == 0 { break }
            Monotonic.sleep(seconds: 0.02)
        }
        // Sessions leave pg_stat_activity while they shut down: a moment more.
        Monotonic.sleep(seconds: 0.1)
    }
}
#else
import Foundation

/// Without the `Postgres` trait (`Benchmarks/run` without `--postgres`) nothing of the
/// PostgreSQL client is built: the postgres section is skipped with a note (``Suite``),
/// and its roles say how to build them.
enum PostgresRoles {
    static let missing = BenchError("this harness was built without PostgreSQL support: run Benchmarks/run --postgres")
    static func notifySend(_ options: Options) throws -> Int32 { throw missing }
    static func notifyListen(_ options: Options) throws -> Int32 { throw missing }
    static func serverSettings(url: String) throws -> String { throw missing }
}

/// The server's counters (see the `Postgres` build): none without a server.
final class ServerCounters {
    struct Snapshot {
        var walFlushes: Int64
        var commits: Int64
    }

    init(url: String) throws { throw PostgresRoles.missing }
    func read() -> Snapshot? { nil }
    func waitForOtherSessionsToEnd(timeout: Double) {}
}
#endif
