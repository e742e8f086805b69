#if Postgres
import Foundation
import Logging
import PostgresNIO
import Testing
@_spi(Backend) @testable import Wormhole
@_spi(Backend) @testable import WormholeCore
@_spi(Backend) @testable import WormholeFiles
@_spi(Backend) @testable import WormholePostgres
import WormholeTestSupport

/// What only the PostgreSQL back end has to get right: its connections. The guarantees
/// shared with the file back end are tested on both by the suites that take a `Backend`.
@Suite("PostgreSQL back end")
struct PostgresBackendTests {
    /// A new transiting on the container of `store` whose connections carry the
    /// application name `name`: the server's count of them is this test's alone, whatever
    /// runs beside it.
    func transiting(_ store: TestStore, named name: String) throws -> PostgresTransiting {
        let url = try #require(ProcessInfo.processInfo.environment[AgentLocation.urlVariable])
        return try PostgresTransiting(url: url + (url.contains("?") ? "&" : "?") + "application_name=" + name,
                                      container: String(store.location.dropFirst(AgentLocation.postgresPrefix.count)))
    }

    /// The number of sessions connected to the test database with the application name
    /// `name`.
    func sessions(_ probe: PostgresTransiting, named name: String) throws -> Int {
        let rows = try probe.session.query(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = \(name)", "count sessions")
        return Int(rows.first.flatMap { try? $0.decode(Int64.self) } ?? -1)
    }

    @Test("a PostgreSQL URL's parameters and sslmode are checked as libpq's: each refusal names the parameter and shows the form, the password hidden")
    func urlParametersAreChecked() throws {
        let refused: [(String, String)] = [
            ("postgres://u:secret@h/db?sslmode", "has the parameter 'sslmode' without a value"),
            ("postgres://u:secret@h/db?colour=blue", "has the parameter 'colour', which is not one of application_name, connect_timeout"),
            ("postgres://u:secret@h/db?sslmode=always", "has sslmode 'always', not disable, prefer, require or verify-full"),
            ("mysql://u@h/db", "has the scheme 'mysql'"),
        ]
        for (url, message) in refused {
            do {
                _ = try PostgresServer(url: url)
                Issue.record("accepted \(url)")
            } catch {
                #expect(error.code == .invalidConfiguration && error.message.contains(message), "\(error.message)")
                #expect(!error.message.contains("secret"))
            }
        }
        let server = try PostgresServer(url: "postgres://u:secret@db.example.com:6543/app?sslmode=disable&application_name=probe")
        #expect(server.configuration.username == "u" && server.configuration.database == "app")
        #expect(server.configuration.options.additionalStartupParameters.contains { $0 == ("application_name", "probe") })
        #expect(server.description == "postgres://u:***@db.example.com:6543/app?sslmode=disable&application_name=probe")
    }

    /// Docs/Scaling.md, "No torn reads": once a pass's statement has reached the server,
    /// the server runs it to its end and commits it, though its sender was killed. The
    /// test holds the identifier's row so that a writer's statement waits on the server,
    /// kills the writer, then lets the statement go.
    @Test("a pass whose statement reached the server is stored whole after its writer was killed",
          .timeLimit(.minutes(1)))
    func aPassThatReachedTheServerOutlivesItsKilledWriter() async throws {
        let store = try Backend.postgres.makeStore()
        let wormhole = try store.wormhole()
        #expect(try await wormhole.passMessage("before", identifier: "late") == 1)
        let holder = try store.postgresTransiting()
        let container = String(store.location.dropFirst(AgentLocation.postgresPrefix.count))
        _ = try await holder.session.query("BEGIN", "begin")
        _ = try await holder.session.query(
            "SELECT last_sequence FROM wormhole.identifiers WHERE container = \(container) AND identifier = 'late' FOR UPDATE", "hold the row")
        let holderPID = try #require(try await holder.session.query("SELECT pg_backend_pid()", "pid").first?.decode(Int32.self))
        let writer = try Agent.start(["write", store.location, "late", "1", "killed", "100"])
        // The writer's statement has reached the server once it waits for the held row.
        // (Asked on another connection: inside a transaction, pg_stat_activity stays as
        // it was when the transaction first read it.)
        let probe = try store.postgresTransiting()
        let waiting = await eventually(seconds: 30) {
            let rows = try probe.session.query(
                "SELECT count(*) FROM pg_stat_activity WHERE \(holderPID)::int = ANY(pg_blocking_pids(pid))", "count waiters")
            return (rows.first.flatMap { try? $0.decode(Int64.self) } ?? 0) > 0
        }
        try #require(waiting, "the writer's statement never waited for the held row")
        kill(writer.processIdentifier, SIGKILL)
        _ = await waitForExit(writer, seconds: 10)
        await #expect(try wormhole.record(withIdentifier: "late")?.sequence == 1, "nothing passes while the row is held")
        _ = try await holder.session.query("COMMIT", "commit")
        #expect(await eventually(seconds: 30) { try wormhole.record(withIdentifier: "late")?.sequence == 2 },
                "the killed writer's statement was not committed")
        let late = try #require(try await wormhole.record(withIdentifier: "late"))
        #expect(late.payload.starts(with: Data("killed:1:".utf8)) && Agent.isWhole(late.payload), "\(late.payload.count) bytes")
    }

    @Test("a connection being made to a server that does not answer holds no lock: another thread waiting for a connection of the session returns once the session is closed, not when the server answers",
          .timeLimit(.minutes(1)))
    func closeEndsTheWaitForASilentServer() async throws {
        // A server that takes connections (the kernel queues them) and never answers.
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        try #require(listener >= 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, length) == 0 && listen(listener, 8) == 0 && getsockname(listener, $0, &length) == 0 }
        }
        try #require(bound)
        var closedListener = false
        defer { if !closedListener { close(listener) } }
        let port = UInt16(bigEndian: address.sin_port)
        // A connect timeout longer than the test: on a loaded machine the first attempt's
        // default 10 s could end before the checks below, and the test would see it done.
        let session = PostgresSession(server: try PostgresServer(url: "postgres://nobody@127.0.0.1:\(port)/none?sslmode=disable&connect_timeout=120"),
                                      logger: Logger(label: "silent"))
        /// Opens a connection on a thread of its own, started at once (not from a task: with
        /// the cooperative pool's threads held by tests beside this one, the connection was
        /// not made within the 10 s below); `done` is signalled when it returns, and
        /// `failure` is set before.
        struct Opening {
            let done = MonotonicEvent()
            let failure = Locked<WormholeError?>(nil)
            /// Whether it returned within `seconds`, and its error; waited for on a thread.
            func outcome(within seconds: Double) async -> (returned: Bool, failure: WormholeError?) {
                await withCheckedContinuation { continuation in
                    Thread {
                        let returned = done.wait(timeout: seconds)
                        continuation.resume(returning: (returned, failure.withLock { $0 }))
                    }.start()
                }
            }
        }
        func opening() -> Opening {
            let opening = Opening()
            Thread {
                do throws(WormholeError) { _ = try session.open() } catch { opening.failure.withLock { $0 = error } }
                opening.done.signal()
            }.start()
            return opening
        }
        let first = opening()
        // The first has connected (the server's queue holds it) and waits for an answer.
        var pending = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
        try #require(poll(&pending, 1, 10_000) == 1)
        let second = opening()
        // A window in which nothing may happen: neither gets a connection.
        try await Task.sleep(for: .milliseconds(300))
        #expect(!first.done.wait(timeout: 0) && !second.done.wait(timeout: 0))
        session.close()
        let secondOutcome = await second.outcome(within: 5)
        #expect(secondOutcome.returned, "the second waited for the first's connection after the session was closed")
        // The server goes: the first's connection is reset.
        close(listener)
        closedListener = true
        #expect(secondOutcome.failure?.message.contains("was closed") == true, "\(String(describing: secondOutcome.failure))")
        let firstOutcome = await first.outcome(within: 30)
        #expect(firstOutcome.returned && firstOutcome.failure != nil, "the first: \(firstOutcome)")
    }

    @Test("released wormholes close their connections", .timeLimit(.minutes(1)))
    func releasedWormholesCloseTheirConnections() async throws {
        let store = try Backend.postgres.makeStore()
        let probe = try store.postgresTransiting()
        let name = "released-" + UUID().uuidString.lowercased()
        let sessions = { () throws -> Int in try self.sessions(probe, named: name) }
        let before = try sessions()
        #expect(before == 0)
        do {
            var wormholes: [Wormhole] = []
            var tokens: [ListenerToken] = []
            for _ in 0..<10 {
                let wormhole = Wormhole(transiting: try transiting(store, named: name))
                tokens.append(try wormhole.listenForMessage(withIdentifier: "n", as: String.self) { _ in })
                wormholes.append(wormhole)
            }
            #expect(try sessions() == before + 20, "a statement and a LISTEN connection each")
            for token in tokens { token.cancel() }
        }
        var now = try sessions()
        let deadline = ContinuousClock.now + .seconds(10)
        while now != before && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
            now = try sessions()
        }
        #expect(now == before, "sessions \(before) -> \(now)")
    }

    @Test("a listener whose connections are cut by the server reconnects and loses nothing",
          .timeLimit(.minutes(1)))
    func aListenerWhoseConnectionsAreCutLosesNothing() async throws {
        let store = try Backend.postgres.makeStore()
        let listening = try store.postgresTransiting()
        let sending = Wormhole(transiting: try store.postgresTransiting())
        let received = Collector<Int>()
        let errors = Collector<WormholeError>()
        let listener = Wormhole(transiting: listening)
        let token = try listener.listenForMessage(
            withIdentifier: "n", as: Int.self, onError: { errors.append($0) }) { received.append($0) }
        for value in 1...10 { try await sending.passMessage(value, identifier: "n") }
        #expect(await received.wait(for: 10) == Array(1...10))

        // The server ends both of the listener's sessions, as a restart or an
        // administrator would: its statement connection and its LISTEN connection.
        let own = try await listening.session.query("SELECT pg_backend_pid()", "own pid").first.flatMap { try? $0.decode(Int32.self) }
        let cut = try await (sending.transiting as! PostgresTransiting).session.query(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE pid = \(try #require(own)) OR query = \("LISTEN \"\(listening.channel)\"")",
            "terminate the listener's sessions")
        #expect(cut.first.flatMap { try? $0.decode(Int64.self) } == 2)

        for value in 11...20 { try await sending.passMessage(value, identifier: "n") }
        #expect(await received.wait(for: 20, seconds: 20) == Array(1...20), "every message once, in order, across the reconnection")
        #expect(errors.all.allSatisfy { $0.code == .databaseError }, "\(errors.all)")
        token.cancel()
    }

    @Test("a stalled listener's backlog is pruned at doublings, not at every pass, by every writer; once read, the retention comes back",
          .timeLimit(.minutes(1)))
    func aBacklogIsPrunedAtDoublingsNotAtEveryPass() async throws {
        let store = try Backend.postgres.makeStore()
        var configuration = Wormhole.Configuration()
        configuration.retainedMessageCount = 10
        let sending = try store.postgresTransiting(configuration: configuration)
        let wormhole = Wormhole(transiting: sending)
        let stalled = try StalledListener(wormhole, identifier: "n")
        let total = 2000
        for value in 1...total { try await wormhole.passMessage(value, identifier: "n") }
        // The claim keeps everything, so a pruning deletes nothing and reads every row. Due
        // at each pass past twice the retention, that was 1,979 prunings, each reading up
        // to 2,000 rows; due at twice what the last one kept: 21, 43, 87, ..., 1,407.
        let whileStalled = sending.prunes.load(ordering: .relaxed)
        #expect(whileStalled >= 6 && whileStalled <= 8, "prunings while the listener was stalled: \(whileStalled)")
        // A writer that comes later (another process, each `wormhole send`) knows it too:
        // the next pruning is due at 2,814 messages, past its 500 passes.
        let later = try store.postgresTransiting(configuration: configuration)
        let laterWormhole = Wormhole(transiting: later)
        for value in (total + 1)...(total + 500) { try await laterWormhole.passMessage(value, identifier: "n") }
        #expect(later.prunes.load(ordering: .relaxed) == 0, "prunings by a later writer behind the backlog")
        stalled.gate.signal()
        #expect(await stalled.received.wait(for: total + 500, seconds: 30) == Array(1...(total + 500)))
        stalled.token.cancel()
        // Read, the backlog goes at the next pruning, and the retention is what it was.
        var passed = total + 500
        while sending.prunes.load(ordering: .relaxed) == whileStalled && passed < 4 * total {
            passed += 1
            try await wormhole.passMessage(passed, identifier: "n")
        }
        let rows = try await sending.session.query(
            "SELECT retained_count FROM wormhole.identifiers WHERE container = \(sending.container) AND identifier = 'n'", "count")
        let retained = try #require(rows.first.map { try $0.decode(Int64.self) })
        #expect(retained <= 20, "messages kept after the backlog was read and pruned: \(retained) (after \(passed) passes)")
    }

    /// The rows of this test's two identifiers are held, not the table: tests running
    /// beside it whose synchronous calls waited on a held table would hold the pool's
    /// threads, and this test's own awaited statements could then never resume.
    @Test("awaited passes and requests that wait on locked rows leave the cooperative pool free; all land, and each request is answered, once the rows go",
          .timeLimit(.minutes(1)))
    func awaitedPassesAndRequestsDoNotHoldTheCooperativePool() async throws {
        let store = try Backend.postgres.makeStore()
        let sending = Wormhole(transiting: try store.postgresTransiting())
        try await sending.passMessage(0, identifier: "n")   // connected, schema made
        let responding = Wormhole(transiting: try store.postgresTransiting())
        let responder = try responding.respondToRequests(withIdentifier: "double", as: Int.self) { $0 * 2 }
        let requesting = Wormhole(transiting: try store.postgresTransiting())
        try await requesting.passMessage(0, identifier: "double")   // its row exists (not a request: skipped)
        // Another session holds both identifiers' rows: every pass and request waits on the server.
        let container = String(store.location.dropFirst(AgentLocation.postgresPrefix.count))
        let locker = try store.postgresTransiting()
        try await locker.session.query("BEGIN", "begin")
        try await locker.session.query("""
            SELECT last_sequence FROM wormhole.identifiers
            WHERE container = \(container) AND identifier IN ('n', 'double') FOR UPDATE
            """, "hold the identifiers' rows")
        // Many more waiting passes, and requests, than the pool has threads (one per
        // core). Had each blocked its thread, the probe below could not run until the
        // rows went. The first request of the identifier also starts the reply listener
        // (a LISTEN connection, a claim): that suspends the tasks too.
        let count = 4 * ProcessInfo.processInfo.activeProcessorCount + 8
        let passes = (1...count).map { value in
            Task { try await sending.passMessage(value, identifier: "n") }
        }
        let requests = (1...count).map { value in
            Task { try await requesting.request(value, identifier: "double", as: Int.self, timeout: 30) }
        }
        let probe = Collector<Bool>()
        Task { probe.append(true) }
        let ranWhileWaiting = Collector<Bool>()
        DispatchQueue.global().asyncAfter(deadline: .now() + 1.5) {
            // Had the waiting tasks blocked the pool's threads, the probe could not run
            // before the rows go. Other suites of the process may hold the pool's threads
            // for a while too: the probe is given up to 20 s, the rows still held.
            let deadline = ContinuousClock.now + .seconds(20)
            while probe.count == 0 && ContinuousClock.now < deadline { usleep(10_000) }
            ranWhileWaiting.append(probe.count == 1)
            _ = try? locker.session.query("COMMIT", "commit")
        }
        var sequences: [UInt64] = []
        for pass in passes { sequences.append(try await pass.value) }
        var answers: [Int] = []
        for request in requests { answers.append(try await request.value) }
        #expect(ranWhileWaiting.all == [true], "a task on the cooperative pool ran while the passes and requests waited on the server")
        #expect(sequences.sorted() == Array(2...UInt64(count + 1)))
        #expect(answers == (1...count).map { $0 * 2 })
        responder.cancel()
    }

    @Test("a database made before requests and work queues gains their columns and tables; its messages read as messages; queues and requests work there",
          .timeLimit(.minutes(1)))
    func anEarlierSchemaIsMigrated() async throws {
        let url = try #require(ProcessInfo.processInfo.environment[AgentLocation.urlVariable])
        let database = "wormhole_migration_" + String(UInt64.random(in: 1...UInt64.max), radix: 16)
        let adminTransiting = try PostgresTransiting(url: url, container: "migration-admin")
        defer { adminTransiting.close() }
        let admin = adminTransiting.session
        try await admin.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(database)"), "create a database")
        let path = try #require(url.range(of: #"/[^/?]+(\?|$)"#, options: .regularExpression))
        let databaseURL = url.replacingCharacters(in: path, with: "/" + database + (url[path].hasSuffix("?") ? "?" : ""))
        // The schema as the earlier Wormhole made it, and a message it passed with its statement.
        let earlier = PostgresSession(server: try PostgresServer(url: databaseURL), logger: admin.logger)
        for statement in [PostgresSchema.create, PostgresSchema.createDurable, PostgresSchema.createPruneThresholds] {
            try await earlier.query(statement, "make the earlier schema")
        }
        try await earlier.query("""
            INSERT INTO wormhole.identifiers (container, identifier, last_sequence, retained_count, retained_bytes)
            VALUES ('c', 'jobs', 1, 1, 3)
            """, "pass as the earlier Wormhole did")
        try await earlier.query("""
            INSERT INTO wormhole.messages (container, identifier, sequence, sent_at, sender_pid, kind, payload)
            VALUES ('c', 'jobs', 1, now(), 1, 1, 'old'::bytea)
            """, "pass as the earlier Wormhole did")
        earlier.close()
        do {
            let transiting = try PostgresTransiting(url: databaseURL, container: "c")
            let wormhole = Wormhole(transiting: transiting)
            let old = try #require(try await wormhole.record(withIdentifier: "jobs"))
            #expect(old.role == .message && old.correlation == 0 && old.expires == nil && String(decoding: old.payload, as: UTF8.self) == "old")
            try await wormhole.passMessage("new", identifier: "jobs")
            let taken = Collector<String>()
            let member = try wormhole.listenForMessage(withIdentifier: "jobs", as: String.self, workQueue: "w") { taken.append($0) }
            #expect(await taken.wait(for: 2).count == 2)
            #expect(taken.all == ["old", "new"])
            let responder = try wormhole.respondToRequests(withIdentifier: "echo", as: String.self) { "echo \($0)" }
            #expect(try await wormhole.request("hi", identifier: "echo", as: String.self, timeout: 10) == "echo hi")
            member.cancel()
            responder.cancel()
            transiting.close()
            let version = try await admin.query("SELECT 1", "probe")
            #expect(version.count == 1)
        }
        let columns = PostgresSession(server: try PostgresServer(url: databaseURL), logger: admin.logger)
        let rows = try await columns.query("""
            SELECT count(*) FROM information_schema.columns
            WHERE table_schema = 'wormhole' AND table_name = 'messages' AND column_name IN ('role', 'correlation', 'expires_at')
            """, "count the new columns")
        #expect(rows.first.flatMap { try? $0.decode(Int64.self) } == 3)
        let versions = try await columns.query(PostgresSchema.readVersion, "read the version")
        #expect(versions.first.flatMap { try? $0.decode(Int32?.self) } == 1, "the version stays 1: earlier Wormholes go on working")
        columns.close()
        try await admin.query(PostgresQuery(unsafeSQL: "DROP DATABASE \(database) WITH (FORCE)"), "drop the database")
    }
}

#endif
