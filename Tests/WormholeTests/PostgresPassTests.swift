#if Postgres
import Dispatch
import Foundation
import PostgresNIO
import Testing
@_spi(Backend) @testable import Wormhole
@_spi(Backend) @testable import WormholeCore
@_spi(Backend) @testable import WormholeFiles
@_spi(Backend) @testable import WormholePostgres
import WormholeTestSupport

/// Passes over PostgreSQL go through one queue per wormhole (`PostgresPassQueue`): those
/// that meet share a statement and a commit, and a batch is one `INSERT`. What must hold
/// whatever shares a statement: per-identifier order, no gap, nothing stored twice.
@Suite("PostgreSQL passes")
struct PostgresPassTests {
    func transiting(_ store: TestStore) throws -> PostgresTransiting {
        try #require(try store.transiting() as? PostgresTransiting)
    }

    func container(_ store: TestStore) -> String {
        String(store.location.dropFirst(AgentLocation.postgresPrefix.count))
    }

    /// The stored rows of `identifier`: sequence, payload as text, and the transaction
    /// that inserted each (`xmin`), in sequence order.
    func rows(_ probe: PostgresTransiting, _ container: String, _ identifier: String) throws -> [(sequence: Int64, text: String, transaction: String)] {
        try probe.session.query("""
            SELECT sequence, convert_from(payload, 'UTF8'), xmin::text FROM wormhole.messages
            WHERE container = \(container) AND identifier = \(identifier) ORDER BY sequence
            """, "read the rows").map { row in
            let (sequence, text, transaction) = try row.decode((Int64, String, String).self)
            return (sequence: sequence, text: text, transaction: transaction)
        }
    }

    /// Holds `identifier`'s row in another session until the returned closure is called
    /// (`COMMIT`): every pass to it waits on the server meanwhile.
    func hold(_ store: TestStore, _ identifier: String) async throws -> (holder: PostgresTransiting, pid: Int32) {
        let holder = try store.postgresTransiting()
        try await holder.session.query("BEGIN", "begin")
        try await holder.session.query("""
            SELECT last_sequence FROM wormhole.identifiers WHERE container = \(container(store)) AND identifier = \(identifier) FOR UPDATE
            """, "hold the row")
        let pid = try #require(try await holder.session.query("SELECT pg_backend_pid()", "pid").first?.decode(Int32.self))
        return (holder, pid)
    }

    /// Whether some session waits for the one of `pid` (asked on a connection of its own);
    /// a session of the pid `except` does not count.
    func someoneWaits(on pid: Int32, _ probe: PostgresTransiting, except: Int32 = 0) throws -> Bool {
        let rows = try probe.session.query(
            "SELECT count(*) FROM pg_stat_activity WHERE \(pid)::int = ANY(pg_blocking_pids(pid)) AND pid <> \(except)::int", "count waiters")
        return (rows.first.flatMap { try? $0.decode(Int64.self) } ?? 0) > 0
    }

    @Test("a batch is one statement and one transaction: its messages arrive whole and in order; single passes from another task fall between batches, never inside one",
          .timeLimit(.minutes(1)))
    func batchesAreOneInsertAndArriveWhole() async throws {
        let store = try Backend.postgres.makeStore()
        let sending = try store.postgresTransiting()
        let wormhole = Wormhole(transiting: sending)
        let received = Collector<WormholeRecord>()
        let listener = try store.wormhole()
        let token = try listener.listenForRecords(withIdentifier: "stream", startingFrom: .after(sequence: 0)) { received.append($0) }

        // A lone batch: one statement, every row inserted by one transaction.
        let before = sending.passes.statements.load(ordering: .relaxed)
        let first = try wormhole.passMessages((0..<100).map { "lone-\($0)" }, identifier: "stream")
        #expect(first == 1..<101)
        #expect(sending.passes.statements.load(ordering: .relaxed) - before == 1, "a batch of 100 is one statement")
        let probe = try store.postgresTransiting()
        let lone = try rows(probe, container(store), "stream")
        #expect(lone.map(\.text) == (0..<100).map { "lone-\($0)" })
        #expect(Set(lone.map(\.transaction)).count == 1, "the batch's rows come from one transaction")

        // Batches from one thread, single passes from tasks beside them.
        let batches = 20, size = 50, singles = 200
        let batched = Task.detached {
            var ranges: [Range<UInt64>] = []
            for batch in 0..<batches {
                ranges.append(try wormhole.passMessages((0..<size).map { "b\(batch)-\($0)" }, identifier: "stream"))
            }
            return ranges
        }
        let single = Task {
            for index in 0..<singles { try await wormhole.passMessage("s\(index)", identifier: "stream") }
        }
        let ranges = try await batched.value
        try await single.value
        let total = 100 + batches * size + singles
        let all = await received.wait(for: total, seconds: 30)
        #expect(all.count == total)
        #expect(all.map(\.sequence) == Array(1...UInt64(total)), "every message once, numbered without a gap")
        let texts = all.map { String(decoding: $0.payload, as: UTF8.self) }
        for (batch, range) in ranges.enumerated() {
            #expect(range.count == size)
            let inRange = all.filter { range.contains($0.sequence) }.map { String(decoding: $0.payload, as: UTF8.self) }
            #expect(inRange == (0..<size).map { "b\(batch)-\($0)" }, "batch \(batch) at \(range)")
        }
        #expect(texts.filter { $0.hasPrefix("s") } == (0..<singles).map { "s\($0)" }, "single passes in the order they were made")
        token.cancel()
    }

    @Test("an empty batch sends nothing; a batch with a message too large stores none of it")
    func badBatchesStoreNothing() throws {
        let store = try Backend.postgres.makeStore()
        var configuration = Wormhole.Configuration()
        configuration.maximumMessageSize = 1024
        let sending = try store.postgresTransiting(configuration: configuration)
        let wormhole = Wormhole(transiting: sending)
        #expect(try wormhole.passMessages([String](), identifier: "x").isEmpty)
        #expect(sending.passes.statements.load(ordering: .relaxed) == 0)
        try wormhole.passMessage("first", identifier: "x")
        let tooLarge = #expect(throws: WormholeError.self) {
            try wormhole.passMessages(["a", String(repeating: "b", count: 2000), "c"], identifier: "x")
        }
        #expect(tooLarge?.code == .messageTooLarge)
        #expect(try rows(try store.postgresTransiting(), container(store), "x").map(\.text) == ["first"])
        #expect(try wormhole.passMessages(["a", "c"], identifier: "x") == 2..<4)
    }

    @Test("passes that wait while another statement is in flight share one statement and one commit, in the order they came",
          .timeLimit(.minutes(1)))
    func waitingPassesShareACommit() async throws {
        let store = try Backend.postgres.makeStore()
        let sending = try store.postgresTransiting()
        let wormhole = Wormhole(transiting: sending)
        try await wormhole.passMessage("0", identifier: "n")
        try await wormhole.passMessage("0", identifier: "m")
        let (holder, pid) = try await hold(store, "n")
        let probe = try store.postgresTransiting()
        let before = sending.passes.statements.load(ordering: .relaxed)
        // The first pass's statement waits on the held row; the passes made meanwhile,
        // to two identifiers, queue behind it.
        let waiter = Task { try await wormhole.passMessage("waiter", identifier: "n") }
        #expect(await eventually(seconds: 20) { try someoneWaits(on: pid, probe) })
        let count = 24
        let passes = (1...count).map { value in
            Task { try await wormhole.passMessage(String(value), identifier: value % 3 == 0 ? "m" : "n") }
        }
        #expect(await eventually(seconds: 20) { sending.passes.waiting == count + 1 }, "the passes never all waited")
        try await holder.session.query("COMMIT", "commit")
        #expect(try await waiter.value == 2)
        var sequences: [UInt64] = []
        for pass in passes { sequences.append(try await pass.value) }
        #expect(sending.passes.statements.load(ordering: .relaxed) - before == 2,
                "the waiting pass, then the \(count) that came meanwhile in one statement")
        let n = try rows(probe, container(store), "n"), m = try rows(probe, container(store), "m")
        #expect(n.map(\.sequence) == Array(1...Int64(n.count)) && m.map(\.sequence) == Array(1...Int64(m.count)), "no gap")
        #expect(n.count + m.count == count + 3)
        #expect(Set((n.dropFirst(2) + m.dropFirst()).map(\.transaction)).count == 1, "one commit for the passes that waited")
        for (offset, sequence) in sequences.enumerated() {
            let value = offset + 1
            let stored = (value % 3 == 0 ? m : n).first { $0.text == String(value) }?.sequence
            #expect(stored.map(UInt64.init) == sequence, "pass \(value) returned \(sequence), stored as \(stored.map(String.init) ?? "nothing")")
        }
    }

    @Test("concurrent passes from tasks, threads and processes to one identifier: each writer's messages in its order, every one once, no gap",
          .timeLimit(.minutes(2)))
    func concurrentPassesKeepOrderWithoutGaps() async throws {
        let store = try Backend.postgres.makeStore()
        let perWriter = scaled(300)
        let listening = try store.wormhole()
        let received = Collector<WormholeRecord>()
        let token = try listening.listenForRecords(withIdentifier: "ord", startingFrom: .after(sequence: 0)) { received.append($0) }
        let agents = try (0..<2).map { try Agent.start(["write", store.location, "ord", String(perWriter), "p\($0)"]) }
        let wormhole = try store.wormhole()
        // Two threads passing synchronously, three tasks awaiting, on one wormhole.
        let threadsDone = Collector<Bool>()
        for thread in 0..<2 {
            Thread.detachNewThread {
                var ok = true
                for index in 1...perWriter {
                    do { try wormhole.passMessage("t\(thread):\(index)", identifier: "ord") } catch { ok = false; break }
                }
                threadsDone.append(ok)
            }
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for task in 0..<3 {
                group.addTask {
                    for index in 1...perWriter { try await wormhole.passMessage("a\(task):\(index)", identifier: "ord") }
                }
            }
            try await group.waitForAll()
        }
        for agent in agents { #expect(await waitForExit(agent) == 0) }
        #expect(await threadsDone.wait(for: 2, seconds: 60) == [true, true])
        let total = 7 * perWriter
        let all = await received.wait(for: total, seconds: 60)
        #expect(all.count == total)
        #expect(all.map(\.sequence) == Array(1...UInt64(total)), "numbered 1...\(total) without a gap, each once")
        var byWriter: [String: [Int]] = [:]
        for record in all {
            let parts = String(decoding: record.payload, as: UTF8.self).split(separator: ":")
            byWriter[String(parts[0]), default: []].append(Int(parts[1]) ?? -1)
        }
        #expect(byWriter.count == 7)
        for (writer, indices) in byWriter {
            #expect(indices == Array(1...perWriter), "\(writer): its messages once each, in the order it passed them")
        }
        token.cancel()
    }

    @Test("passes whose connection is cut while their statement waits are reported failed and not stored; later passes reconnect; nothing is stored twice",
          .timeLimit(.minutes(1)))
    func aCutConnectionStoresOnceOrFails() async throws {
        let store = try Backend.postgres.makeStore()
        let sending = try store.postgresTransiting()
        let wormhole = Wormhole(transiting: sending)
        try await wormhole.passMessage("first", identifier: "cut")
        let own = try #require(try await sending.session.query("SELECT pg_backend_pid()", "own pid").first?.decode(Int32.self))
        let (holder, pid) = try await hold(store, "cut")
        let probe = try store.postgresTransiting()
        // Awaited passes and synchronous ones from threads, all waiting on the held row.
        let count = 12
        let outcomes = Collector<(String, Bool)>()
        for value in 0..<count / 2 {
            Thread.detachNewThread {
                let text = "sync-\(value)"
                outcomes.append((text, (try? wormhole.passMessage(text, identifier: "cut")) != nil))
            }
        }
        let tasks = (0..<count / 2).map { value in
            Task {
                let text = "async-\(value)"
                outcomes.append((text, (try? await wormhole.passMessage(text, identifier: "cut")) != nil))
            }
        }
        #expect(await eventually(seconds: 20) { try someoneWaits(on: pid, probe) && sending.passes.waiting == count })
        // The server ends the sender's session while its statement waits.
        let cut = try await probe.session.query("SELECT pg_terminate_backend(\(own))", "terminate the sender's session")
        #expect(cut.first.flatMap { try? $0.decode(Bool.self) } == true)
        // The passes queued behind it go on a new connection, and wait on the row again
        // (unless the cut statement carried every one of them, and they all failed).
        #expect(await eventually(seconds: 20) { try someoneWaits(on: pid, probe, except: own) || sending.passes.waiting == 0 })
        try await holder.session.query("COMMIT", "commit")
        for task in tasks { await task.value }
        #expect(await outcomes.wait(for: count, seconds: 30).count == count)
        try await wormhole.passMessage("after", identifier: "cut")
        let stored = try rows(probe, container(store), "cut")
        let texts = stored.map(\.text)
        #expect(stored.map(\.sequence) == Array(1...Int64(stored.count)), "no gap")
        #expect(Set(texts).count == texts.count, "nothing stored twice: \(texts)")
        for (text, passed) in outcomes.all {
            #expect(texts.filter { $0 == text }.count == (passed ? 1 : 0), "\(text): \(passed ? "passed" : "failed")")
        }
        #expect(outcomes.all.contains { !$0.1 }, "the statement whose connection was cut reported failure")
        #expect(texts.first == "first" && texts.last == "after")
    }

    // MARK: - synchronous_commit

    /// A transiting on the container of `store` whose URL carries `parameter`.
    func transiting(_ store: TestStore, adding parameter: String) throws -> PostgresTransiting {
        let url = try #require(ProcessInfo.processInfo.environment[AgentLocation.urlVariable])
        return try PostgresTransiting(url: url + (url.contains("?") ? "&" : "?") + parameter, container: container(store))
    }

    @Test("the URL's synchronous_commit takes PostgreSQL's values; another is refused, naming it")
    func synchronousCommitIsParsed() throws {
        #expect(try PostgresServer(url: "postgres://u@localhost/db").synchronousCommit == nil)
        #expect(try PostgresServer(url: "postgres://u@localhost/db?synchronous_commit=off").synchronousCommit == .off)
        #expect(try PostgresServer(url: "postgres://u@localhost/db?sslmode=disable&synchronous_commit=remote_apply").synchronousCommit == .remoteApply)
        for bad in ["maybe", "OFF", "false", ""] {
            let error = #expect(throws: WormholeError.self) {
                try PostgresServer(url: "postgres://u:secret@localhost/db?synchronous_commit=\(bad)")
            }
            #expect(error?.code == .invalidConfiguration)
            let text = error.map { String(describing: $0) } ?? ""
            #expect(text.contains("synchronous_commit '\(bad)'") && text.contains("on, off, local, remote_write or remote_apply"), "\(text)")
            #expect(!text.contains("secret"))
        }
    }

    /// What `synchronous_commit` was when each pass's transaction committed, seen by a
    /// deferred trigger on `wormhole.messages` (it runs at the commit, inside the
    /// transaction) that writes it beside the message.
    @Test("synchronous_commit=off in the URL applies to the transactions of passes and batches, and not to another wormhole's",
          .timeLimit(.minutes(1)))
    func synchronousCommitAppliesToPasses() throws {
        let store = try Backend.postgres.makeStore()
        let probe = try store.postgresTransiting()
        defer { probe.close() }
        try probe.session.query("""
            CREATE TABLE IF NOT EXISTS public.commit_settings (container text, identifier text, sequence bigint, setting text)
            """, "create the probe's table")
        try probe.session.query("""
            CREATE OR REPLACE FUNCTION public.record_commit_setting() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                INSERT INTO public.commit_settings VALUES (NEW.container, NEW.identifier, NEW.sequence, current_setting('synchronous_commit'));
                RETURN NULL;
            END $$
            """, "create the probe's function")
        try probe.session.query("""
            DO $$ BEGIN
                IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'record_commit_setting') THEN
                    CREATE CONSTRAINT TRIGGER record_commit_setting AFTER INSERT ON wormhole.messages
                        DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION public.record_commit_setting();
                END IF;
            END $$
            """, "create the probe's trigger")
        defer { _ = try? probe.session.query("DROP TRIGGER IF EXISTS record_commit_setting ON wormhole.messages", "drop the probe's trigger") }

        let asynchronous = try transiting(store, adding: "synchronous_commit=off")
        defer { asynchronous.close() }
        #expect(asynchronous.server.synchronousCommit == .off)
        let fast = Wormhole(transiting: asynchronous)
        try fast.passMessage("one", identifier: "off")
        #expect(try fast.passMessages(["a", "b", "c"], identifier: "off") == 2..<5)
        let plain = try store.wormhole()
        try plain.passMessage("one", identifier: "default")
        try plain.passMessages(["a", "b"], identifier: "default")

        let rows = try probe.session.query("""
            SELECT identifier, sequence, setting FROM public.commit_settings WHERE container = \(container(store)) ORDER BY identifier, sequence
            """, "read the settings").map { try $0.decode((String, Int64, String).self) }
        let setting = try #require(try probe.session.query("SHOW synchronous_commit", "show").first?.decode(String.self))
        #expect(setting == "on", "the test cluster commits synchronously by default")
        #expect(rows.filter { $0.0 == "off" }.map { "\($0.1) \($0.2)" } == ["1 off", "2 off", "3 off", "4 off"])
        #expect(rows.filter { $0.0 == "default" }.map { "\($0.1) \($0.2)" } == ["1 on", "2 on", "3 on"])
    }

    @Test("with synchronous_commit=off, concurrent passes and batches arrive in order, once each, without a gap",
          .timeLimit(.minutes(1)))
    func asynchronousCommitKeepsTheOrder() async throws {
        let store = try Backend.postgres.makeStore()
        let sending = try transiting(store, adding: "synchronous_commit=off")
        defer { sending.close() }
        let wormhole = Wormhole(transiting: sending)
        let received = Collector<WormholeRecord>()
        let listener = try store.wormhole()
        let token = try listener.listenForRecords(withIdentifier: "stream", startingFrom: .after(sequence: 0)) { received.append($0) }
        let writers = 4, each = 100, batches = 10, size = 20
        let tasks = (0..<writers).map { writer in
            Task { for index in 0..<each { try await wormhole.passMessage("w\(writer)-\(index)", identifier: "stream") } }
        }
        let batched = Task.detached {
            for batch in 0..<batches { _ = try wormhole.passMessages((0..<size).map { "b\(batch)-\($0)" }, identifier: "stream") }
        }
        for task in tasks { try await task.value }
        try await batched.value
        let total = writers * each + batches * size
        let all = await received.wait(for: total, seconds: 30)
        #expect(all.count == total)
        #expect(all.map(\.sequence) == Array(1...UInt64(total)), "every message once, numbered without a gap")
        let texts = all.map { String(decoding: $0.payload, as: UTF8.self) }
        for writer in 0..<writers {
            #expect(texts.filter { $0.hasPrefix("w\(writer)-") } == (0..<each).map { "w\(writer)-\($0)" })
        }
        #expect(texts.filter { $0.hasPrefix("b") } == (0..<batches).flatMap { batch in (0..<size).map { "b\(batch)-\($0)" } })
        token.cancel()
    }
}
#endif
