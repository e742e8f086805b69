#if Postgres
import Foundation
import PostgresNIO
@_spi(Backend) import Wormhole

/// The statements of work queues (specified in `Docs/Scaling.md`, "Work queues and
/// requests"). Each is one SQL statement, so one transaction:
/// - a member is a row of `wormhole.queue_members`, live while the database session
///   that joined is connected (the rule of listeners' claims): a member whose process is
///   killed loses its connection, the server ends its session, and what it held is
///   handed out again. No process id, lease or heartbeat decides it;
/// - a fill moves the queue's `taken` past the identifier's next messages and inserts
///   one `wormhole.queue_entries` row for each, under the queue row's lock;
/// - a take hands out the oldest entry that no live member holds, selected
///   `FOR UPDATE SKIP LOCKED`, so that members taking at the same moment each get
///   another one and never wait for each other;
/// - acknowledging deletes the entry and counts it in the queue's row.
extension PostgresSchema {
    /// "The entry `e` is held by a live member."
    private static let heldByLiveMember = """
        EXISTS (SELECT 1 FROM wormhole.queue_members l WHERE l.member = e.member AND \(liveClaim))
        """

    /// Creates the queue when missing, at `start` (`0` history, `1` now, `2` latest,
    /// `3` after `after`), and registers the member with this session; deletes the rows
    /// of the queue's members whose sessions are gone. One row: 1 when joined.
    static func joinQueue(container: String, identifier: String, name: String, member: Int64, processID: Int32,
                          start: WormholeStartingPoint) -> PostgresQuery {
        let (mode, after): (Int16, Int64)
        switch start {
        case .history: (mode, after) = (0, 0)
        case .now: (mode, after) = (1, 0)
        case .latest: (mode, after) = (2, 0)
        case .after(let sequence): (mode, after) = (3, Int64(clamping: sequence))
        }
        return """
            WITH counters AS (
                SELECT last_sequence, cleared_through FROM wormhole.identifiers
                WHERE container = \(container) AND identifier = \(identifier)),
            queue AS (
                INSERT INTO wormhole.queues (container, identifier, name, taken)
                SELECT \(container), \(identifier), \(name),
                       CASE \(mode)
                           WHEN 0 THEN coalesce(
                               (SELECT min(m.sequence) - 1 FROM wormhole.messages m, counters
                                WHERE m.container = \(container) AND m.identifier = \(identifier) AND m.sequence > counters.cleared_through),
                               (SELECT last_sequence FROM counters), 0)
                           WHEN 1 THEN coalesce((SELECT last_sequence FROM counters), 0)
                           WHEN 2 THEN greatest(coalesce((SELECT last_sequence FROM counters), 1) - 1, 0)
                           ELSE \(after)
                       END
                ON CONFLICT (container, identifier, name) DO NOTHING),
            gone AS (
                DELETE FROM wormhole.queue_members l
                WHERE l.container = \(container) AND l.identifier = \(identifier) AND l.name = \(name) AND NOT \(unescaped: liveClaim)),
            joined AS (
                INSERT INTO wormhole.queue_members (member, container, identifier, name, session_pid, session_start, process_id, joined_at)
                SELECT \(member), \(container), \(identifier), \(name), pg_backend_pid(),
                       (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()), \(processID), now()
                RETURNING member)
            SELECT count(*) FROM joined
            """
    }

    /// Takes up to `limit` of the identifier's messages after the queue's `taken` into
    /// its entries, under the queue row's lock (one member fills at a time). Those no
    /// longer there (pruned, cleared) are counted lost. One row: (added, lost).
    static func fillQueue(container: String, identifier: String, name: String, limit: Int) -> PostgresQuery {
        let limit = Int64(limit)
        return """
            WITH locked AS (
                SELECT taken FROM wormhole.queues
                WHERE container = \(container) AND identifier = \(identifier) AND name = \(name)
                FOR UPDATE),
            span AS (
                SELECT locked.taken AS taken, least(i.last_sequence, locked.taken + \(limit)) AS through, i.cleared_through AS cleared
                FROM locked, wormhole.identifiers i
                WHERE i.container = \(container) AND i.identifier = \(identifier) AND i.last_sequence > locked.taken),
            added AS (
                INSERT INTO wormhole.queue_entries (container, identifier, name, sequence)
                SELECT \(container), \(identifier), \(name), m.sequence FROM wormhole.messages m, span
                WHERE m.container = \(container) AND m.identifier = \(identifier)
                  AND m.sequence > span.taken AND m.sequence <= span.through AND m.sequence > span.cleared
                RETURNING sequence),
            moved AS (
                UPDATE wormhole.queues q
                SET taken = span.through, lost = q.lost + (span.through - span.taken) - (SELECT count(*) FROM added)
                FROM span
                WHERE q.container = \(container) AND q.identifier = \(identifier) AND q.name = \(name)
                RETURNING (span.through - span.taken) - (SELECT count(*) FROM added) AS lost)
            SELECT (SELECT count(*) FROM added), coalesce((SELECT lost FROM moved), 0)::bigint
            """
    }

    /// Acknowledges the entry `acknowledging` held by `member` (when given), then hands
    /// `member` the oldest entry that nobody (alive) holds, counting the delivery: a
    /// member that goes on taking stores its acknowledgement with its next take, one
    /// statement per message. At most one row: the message's columns
    /// (``recordColumns``; NULL when it is no longer there) and the entry's deliveries,
    /// this one included.
    ///
    /// An entry that failed waits for its back-off: one given back is due at its
    /// `due_at`; one whose member ended, `retryDelay` after it was handed out, doubled for
    /// each delivery after the first, at most `maximumRetryDelay` (the member's
    /// ``WorkQueueOptions``). One that has had its `maximumDeliveries` is taken at once,
    /// for its dead letter.
    static func takeFromQueue(container: String, identifier: String, name: String, member: Int64,
                              acknowledging: UInt64?, maximumDeliveries: UInt32 = .max,
                              retryDelay: Double = 0, maximumRetryDelay: Double = 0) -> PostgresQuery {
        let acknowledged = acknowledging.map { Int64(clamping: $0) }
        let maximum = Int64(maximumDeliveries)
        return """
        WITH acknowledged AS (
            DELETE FROM wormhole.queue_entries
            WHERE container = \(container) AND identifier = \(identifier) AND name = \(name)
              AND sequence = \(acknowledged) AND member = \(member)
            RETURNING 1),
        counted AS (
            UPDATE wormhole.queues SET acknowledged = acknowledged + 1
            WHERE container = \(container) AND identifier = \(identifier) AND name = \(name)
              AND EXISTS (SELECT 1 FROM acknowledged)),
        pick AS (
            SELECT e.sequence FROM wormhole.queue_entries e
            WHERE e.container = \(container) AND e.identifier = \(identifier) AND e.name = \(name)
              AND (e.member = 0 OR NOT \(unescaped: heldByLiveMember))
              AND (e.deliveries >= \(maximum)
                   OR (e.member = 0 AND (e.due_at IS NULL OR e.due_at <= now()))
                   OR (e.member <> 0 AND (e.delivered_at IS NULL OR e.delivered_at + make_interval(secs =>
                         least(\(retryDelay)::float8 * power(2::float8, greatest(least(e.deliveries - 1, 60), 0)),
                               greatest(\(maximumRetryDelay)::float8, \(retryDelay)::float8))) <= now())))
            ORDER BY e.sequence
            LIMIT 1
            FOR UPDATE SKIP LOCKED),
        handed AS (
            UPDATE wormhole.queue_entries e SET member = \(member), deliveries = e.deliveries + 1, delivered_at = now(), due_at = NULL
            FROM pick
            WHERE e.container = \(container) AND e.identifier = \(identifier) AND e.name = \(name) AND e.sequence = pick.sequence
            RETURNING e.sequence, e.deliveries)
        SELECT handed.sequence, m.sent_at, m.sender_pid, m.kind, m.payload, m.role, m.correlation, m.expires_at, handed.deliveries
        FROM handed
        LEFT JOIN wormhole.identifiers i ON i.container = \(container) AND i.identifier = \(identifier)
        LEFT JOIN wormhole.messages m
               ON m.container = \(container) AND m.identifier = \(identifier) AND m.sequence = handed.sequence
              AND m.sequence > i.cleared_through
        """
    }

    /// What became of an entry, counted in the queue's row.
    enum QueueOutcome: String {
        case acknowledged
        case deadLettered = "dead_lettered"
        case expired
        case lost
    }

    /// Removes the entry `sequence` held by `member`, counting it as `outcome`.
    static func finishEntry(container: String, identifier: String, name: String, member: Int64, sequence: UInt64,
                            outcome: QueueOutcome) -> PostgresQuery {
        let sequence = Int64(clamping: sequence)
        return """
            WITH gone AS (
                DELETE FROM wormhole.queue_entries
                WHERE container = \(container) AND identifier = \(identifier) AND name = \(name)
                  AND sequence = \(sequence) AND member = \(member)
                RETURNING 1)
            UPDATE wormhole.queues SET \(unescaped: outcome.rawValue) = \(unescaped: outcome.rawValue) + 1
            WHERE container = \(container) AND identifier = \(identifier) AND name = \(name) AND EXISTS (SELECT 1 FROM gone)
            """
    }

    /// Gives the entry `sequence` held by `member` back to the queue, due `delay` seconds
    /// from now (0: at once).
    static func giveBackEntry(container: String, identifier: String, name: String, member: Int64, sequence: UInt64,
                              delay: Double = 0) -> PostgresQuery {
        let sequence = Int64(clamping: sequence)
        return """
            UPDATE wormhole.queue_entries
            SET member = 0, due_at = CASE WHEN \(delay)::float8 > 0 THEN now() + make_interval(secs => \(delay)::float8) END
            WHERE container = \(container) AND identifier = \(identifier) AND name = \(name)
              AND sequence = \(sequence) AND member = \(member)
            """
    }

    /// Removes the member; what it held goes back to the queue.
    static func leaveQueue(container: String, identifier: String, name: String, member: Int64) -> PostgresQuery {
        """
        WITH gone AS (DELETE FROM wormhole.queue_members WHERE member = \(member))
        UPDATE wormhole.queue_entries SET member = 0
        WHERE container = \(container) AND identifier = \(identifier) AND name = \(name) AND member = \(member)
        """
    }

    /// The queues of the container (of `identifier` only, when given): identifier,
    /// name, taken, acknowledged, dead-lettered, expired, lost, the identifier's last
    /// sequence, the entries, and the entries held by live members.
    static func queues(container: String, identifier: String?) -> PostgresQuery {
        """
        SELECT q.identifier, q.name, q.taken, q.acknowledged, q.dead_lettered, q.expired, q.lost,
               coalesce(i.last_sequence, 0),
               (SELECT count(*) FROM wormhole.queue_entries e
                WHERE e.container = q.container AND e.identifier = q.identifier AND e.name = q.name),
               (SELECT count(*) FROM wormhole.queue_entries e
                WHERE e.container = q.container AND e.identifier = q.identifier AND e.name = q.name
                  AND e.member <> 0 AND \(unescaped: heldByLiveMember))
        FROM wormhole.queues q
        LEFT JOIN wormhole.identifiers i ON i.container = q.container AND i.identifier = q.identifier
        WHERE q.container = \(container) AND (\(identifier)::text IS NULL OR q.identifier = \(identifier))
        ORDER BY q.identifier, q.name
        """
    }

    /// The live members of the container's queues: identifier, name, process id, and
    /// whether it holds an entry.
    static func queueMembers(container: String, identifier: String?) -> PostgresQuery {
        """
        SELECT l.identifier, l.name, l.process_id,
               EXISTS (SELECT 1 FROM wormhole.queue_entries e
                       WHERE e.container = l.container AND e.identifier = l.identifier AND e.name = l.name AND e.member = l.member)
        FROM wormhole.queue_members l
        WHERE l.container = \(container) AND (\(identifier)::text IS NULL OR l.identifier = \(identifier)) AND \(unescaped: liveClaim)
        ORDER BY l.identifier, l.name, l.joined_at
        """
    }
}
#endif
