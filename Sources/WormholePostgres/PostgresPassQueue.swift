#if Postgres
import Dispatch
import Foundation
import NIOCore
import PostgresNIO
import Synchronization
@_spi(Backend) import Wormhole

/// Group commit for one ``PostgresTransiting``: every pass of its threads and tasks, and
/// every batch, goes through here, and the passes that arrive while a statement is on
/// its way to the server go together in the next one.
///
/// One pass statement at a time is in flight on the statement connection. While it
/// waits for its commit (a WAL flush, with the server's default durability), the passes
/// that come are queued; when it returns, they are sent as one statement
/// (``PostgresSchema/appendGroup(container:channel:processID:passes:synchronousCommit:)``; a lone pass,
/// ``PostgresSchema/appendOne(container:channel:processID:pass:synchronousCommit:)``): one
/// transaction, one commit and one WAL flush for all of them, in the order they came.
/// A lone pass goes at once, so waiting adds nothing when there is nothing to share.
/// With ``PostgresServer/synchronousCommit`` set (the URL's `synchronous_commit`), each
/// statement commits with that setting: `off`, it returns without waiting for the flush.
///
/// What holds: passes to one identifier are numbered in the order they were queued (a
/// thread's or task's passes in the order it made them), a batch's messages are
/// consecutive, and each caller returns only once its statement committed. A statement
/// that fails fails every pass in it, none of which is stored (the statement is one
/// transaction). Nothing is ever sent twice: a statement whose connection breaks is
/// reported failed to its callers, whether or not the server committed it (as for any
/// statement), and is not retried.
final class PostgresPassQueue: Sendable {
    /// One message of a pass or a batch, as the statement takes it.
    struct Pass: Sendable {
        let identifier: String
        let sentAt: Date
        let kind: Int16
        let payload: ByteBuffer
        let role: Int16
        let correlation: Int64
        let expires: Date?
    }

    /// What the server returned for one message: its sequence number, and its
    /// identifier's counters after the statement (``PostgresSchema/appendGroup(container:channel:processID:passes:synchronousCommit:)``).
    struct Stored: Sendable {
        let sequence: Int64
        let retainedCount: Int64
        let retainedBytes: Int64
        let pruneAtCount: Int64
        let pruneAtBytes: Int64
        /// Whether this message is its identifier's last in the statement: the caller
        /// that gets it decides about pruning, so one statement prunes an identifier once.
        var lastOfIdentifier = false
    }

    typealias Completion = @Sendable (Result<[Stored], any Error>) -> Void

    private struct Entry {
        let passes: [Pass]
        let bytes: Int
        let completion: Completion
    }

    private struct State {
        var pending: [Entry] = []
        var sending = false
        /// The callers whose statement is in flight.
        var inFlight = 0
    }

    /// How much one statement carries at most, when several callers' passes are
    /// gathered (a single batch goes whole, however large).
    static let maximumRows = 4096
    static let maximumBytes = 8 << 20

    private let state = Mutex(State())
    private let session: PostgresSession
    private let container: String
    private let channel: String
    private let processID: Int32
    /// How many pass statements were sent (tests read it).
    let statements = Atomic<Int>(0)

    init(session: PostgresSession, container: String, channel: String) {
        self.session = session
        self.container = container
        self.channel = channel
        self.processID = ProcessInfo.processInfo.processIdentifier
    }

    /// How many callers wait: queued, or in the statement in flight (tests read it).
    var waiting: Int { state.withLock { $0.pending.count + $0.inFlight } }

    /// Stores `passes` as consecutive messages, blocking the calling thread until the
    /// statement that carries them has committed (the synchronous API's round trip).
    func pass(_ passes: [Pass]) throws -> [Stored] {
        let waiter = Waiter()
        submit(passes) { result in
            waiter.result = result
            waiter.done.signal()
        }
        waiter.done.wait()
        return try waiter.result!.get()
    }

    /// A synchronous caller's outcome: written before the semaphore is signalled, read
    /// after the wait returns.
    private final class Waiter: @unchecked Sendable {
        let done = DispatchSemaphore(value: 0)
        var result: Result<[Stored], any Error>?
    }

    /// Queues `passes`; sends them at once when no statement is in flight.
    func submit(_ passes: [Pass], completion: @escaping Completion) {
        let entry = Entry(passes: passes, bytes: passes.reduce(0) { $0 + $1.payload.readableBytes }, completion: completion)
        let group = state.withLock { state -> [Entry]? in
            state.pending.append(entry)
            guard !state.sending else { return nil }
            state.sending = true
            return Self.take(&state)
        }
        if let group { send(group) }
    }

    /// The queued entries that go in the next statement: in the order they came, up to
    /// the limits (at least one).
    private static func take(_ state: inout State) -> [Entry] {
        var rows = 0, bytes = 0, count = 0
        for entry in state.pending {
            if count > 0 && (rows + entry.passes.count > maximumRows || bytes + entry.bytes > maximumBytes) { break }
            rows += entry.passes.count
            bytes += entry.bytes
            count += 1
        }
        let group = Array(state.pending.prefix(count))
        state.pending.removeFirst(count)
        state.inFlight = count
        return group
    }

    /// After a statement: the next group, or nothing in flight.
    private func sendNext() {
        let group = state.withLock { state -> [Entry]? in
            guard !state.pending.isEmpty else {
                state.sending = false
                state.inFlight = 0
                return nil
            }
            return Self.take(&state)
        }
        if let group { send(group) }
    }

    private func send(_ group: [Entry]) {
        if let connection = session.openConnection {
            send(group, on: connection)
            return
        }
        // No connection yet (or it was lost): one is made on a dispatch thread, never on
        // a thread of Swift concurrency's pool (synchronous passes may be holding all of
        // them while they wait for this very statement) nor on an event loop.
        DispatchQueue.global().async { [self] in
            do {
                send(group, on: try session.open())
            } catch {
                finish(group, .failure(error))
            }
        }
    }

    private func send(_ group: [Entry], on connection: PostgresConnection) {
        statements.add(1, ordering: .relaxed)
        let passes = group.flatMap(\.passes)
        let query = passes.count == 1
            ? PostgresSchema.appendOne(container: container, channel: channel, processID: processID, pass: passes[0],
                                       synchronousCommit: session.server.synchronousCommit)
            : PostgresSchema.appendGroup(container: container, channel: channel, processID: processID, passes: passes,
                                         synchronousCommit: session.server.synchronousCommit)
        connection.query(query, logger: session.logger).whenComplete { [self] result in
            finish(group, result.map { Array($0.rows) })
        }
    }

    /// Hands each caller its rows (or the statement's error), then sends what came
    /// meanwhile.
    private func finish(_ group: [Entry], _ result: Result<[PostgresRow], any Error>) {
        switch result {
        case .failure(let error):
            for entry in group { entry.completion(.failure(error)) }
        case .success(let rows):
            let total = group.reduce(0) { $0 + $1.passes.count }
            var stored: [Stored] = []
            stored.reserveCapacity(total)
            for row in rows {
                guard let (_, sequence, count, bytes, pruneAtCount, pruneAtBytes)
                        = try? row.decode((Int64, Int64, Int64, Int64, Int64, Int64).self) else { break }
                stored.append(Stored(sequence: sequence, retainedCount: count, retainedBytes: bytes,
                                     pruneAtCount: pruneAtCount, pruneAtBytes: pruneAtBytes))
            }
            guard stored.count == total else {
                let error = WormholeError(.databaseError, "the pass statement returned \(stored.count) sequence numbers for \(total) messages")
                for entry in group { entry.completion(.failure(error)) }
                break
            }
            // Each identifier's last message in the statement decides about pruning.
            var last: [String: Int] = [:]
            var index = 0
            for entry in group {
                for pass in entry.passes {
                    last[pass.identifier] = index
                    index += 1
                }
            }
            for position in last.values { stored[position].lastOfIdentifier = true }
            var start = 0
            for entry in group {
                entry.completion(.success(Array(stored[start..<(start + entry.passes.count)])))
                start += entry.passes.count
            }
        }
        sendNext()
    }
}
#endif
