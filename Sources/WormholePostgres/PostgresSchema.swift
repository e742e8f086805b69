#if Postgres
import Foundation
import PostgresNIO
@_spi(Backend) import Wormhole

/// The tables in the database and the statements over them (specified in
/// `Docs/Scaling.md`, "The schema").
///
/// Every statement is a single SQL statement, so each is one transaction:
/// - a pass (or several callers' passes, or a batch: ``appendGroup(container:channel:processID:passes:synchronousCommit:)``)
///   takes the identifier's row lock (`INSERT … ON CONFLICT DO UPDATE`) to assign the
///   next sequence numbers, inserts the messages and queues the notification, all
///   committed together. The lock is held to the commit, so passes to one identifier commit in
///   sequence order and the committed messages are always 1…N without a gap: a reader
///   that asks for "after my position" never skips one that commits later;
/// - the notification is delivered at the commit, never before the message is readable.
enum PostgresSchema {
    /// The schema this library writes. A database with a higher one was set up by a newer
    /// Wormhole and is refused rather than misread.
    static let version: Int32 = 1

    /// Creates the schema when it is missing (under an advisory lock, so that processes
    /// starting together do not race). When it exists, nothing is created, so a user
    /// without the CREATE privilege can use a schema an administrator made.
    static let create: PostgresQuery = """
        DO $wormhole$
        BEGIN
            IF to_regclass('wormhole.listeners') IS NOT NULL THEN
                RETURN;
            END IF;
            PERFORM pg_advisory_xact_lock(2037085541);   -- 'worm', held to the end of this statement
            CREATE SCHEMA IF NOT EXISTS wormhole;
            CREATE TABLE IF NOT EXISTS wormhole.version (version integer NOT NULL);
            IF NOT EXISTS (SELECT 1 FROM wormhole.version) THEN
                INSERT INTO wormhole.version VALUES (1);
            END IF;
            -- One row per identifier: the order's counter and what is retained.
            CREATE TABLE IF NOT EXISTS wormhole.identifiers (
                container       text        NOT NULL,
                identifier      text        NOT NULL,
                last_sequence   bigint      NOT NULL,
                cleared_through bigint      NOT NULL DEFAULT 0,
                retained_count  bigint      NOT NULL DEFAULT 0,
                retained_bytes  bigint      NOT NULL DEFAULT 0,
                PRIMARY KEY (container, identifier));
            -- The messages: one row each, numbered from 1 per identifier.
            CREATE TABLE IF NOT EXISTS wormhole.messages (
                container   text        NOT NULL,
                identifier  text        NOT NULL,
                sequence    bigint      NOT NULL,
                sent_at     timestamptz NOT NULL,
                sender_pid  integer     NOT NULL,
                kind        smallint    NOT NULL,
                payload     bytea       NOT NULL,
                PRIMARY KEY (container, identifier, sequence));
            -- Live listeners' claims: keep the messages after "position" until read. A
            -- claim is live while the session that made it is connected.
            CREATE TABLE IF NOT EXISTS wormhole.listeners (
                listener      text        PRIMARY KEY,
                container     text        NOT NULL,
                identifier    text        NOT NULL,
                session_pid   integer     NOT NULL,
                session_start timestamptz,
                position      bigint      NOT NULL);
            CREATE INDEX IF NOT EXISTS listeners_by_identifier ON wormhole.listeners (container, identifier);
        END
        $wormhole$
        """

    /// The durable listeners' positions (added after version 1's tables; created when
    /// missing, under the same advisory lock). A position is held while the session in
    /// `session_pid` and `session_start` is connected; `session_pid` 0: nobody holds it.
    static let createDurable: PostgresQuery = """
        DO $wormhole$
        BEGIN
            IF to_regclass('wormhole.durable') IS NOT NULL THEN
                RETURN;
            END IF;
            PERFORM pg_advisory_xact_lock(2037085541);
            CREATE TABLE IF NOT EXISTS wormhole.durable (
                container     text        NOT NULL,
                identifier    text        NOT NULL,
                name          text        NOT NULL,
                position      bigint      NOT NULL,
                session_pid   integer     NOT NULL DEFAULT 0,
                session_start timestamptz,
                process_id    integer     NOT NULL,
                seen_at       timestamptz NOT NULL,
                PRIMARY KEY (container, identifier, name));
        END
        $wormhole$
        """

    /// The count and size at which an identifier's next pruning is due (added after
    /// version 1's tables; added when missing, under the same advisory lock). A pruning
    /// sets them to twice what it kept, so that while a stalled listener's claim keeps a
    /// backlog, the passes of every process (each `wormhole send` is one) prune at
    /// doublings instead of at every pass; 0 means "twice the retention".
    static let createPruneThresholds: PostgresQuery = """
        DO $wormhole$
        BEGIN
            IF EXISTS (SELECT 1 FROM information_schema.columns
                       WHERE table_schema = 'wormhole' AND table_name = 'identifiers' AND column_name = 'prune_at_bytes') THEN
                RETURN;
            END IF;
            PERFORM pg_advisory_xact_lock(2037085541);
            ALTER TABLE wormhole.identifiers
                ADD COLUMN IF NOT EXISTS prune_at_count bigint NOT NULL DEFAULT 0,
                ADD COLUMN IF NOT EXISTS prune_at_bytes bigint NOT NULL DEFAULT 0;
        END
        $wormhole$
        """

    /// Requests, replies, expiry and work queues (added after version 1's tables; added
    /// when missing, under the same advisory lock): each message's role, correlation and
    /// expiry date, and the queues' tables (see ``joinQueue(container:identifier:name:member:processID:start:)``).
    static let createQueues: PostgresQuery = """
        DO $wormhole$
        BEGIN
            IF to_regclass('wormhole.queue_entries') IS NOT NULL THEN
                RETURN;
            END IF;
            PERFORM pg_advisory_xact_lock(2037085541);
            ALTER TABLE wormhole.messages
                ADD COLUMN IF NOT EXISTS role        smallint NOT NULL DEFAULT 0,
                ADD COLUMN IF NOT EXISTS correlation bigint   NOT NULL DEFAULT 0,
                ADD COLUMN IF NOT EXISTS expires_at  timestamptz;
            -- One row per work queue: how far it has taken the identifier's messages,
            -- and what became of them.
            CREATE TABLE IF NOT EXISTS wormhole.queues (
                container     text   NOT NULL,
                identifier    text   NOT NULL,
                name          text   NOT NULL,
                taken         bigint NOT NULL,
                acknowledged  bigint NOT NULL DEFAULT 0,
                dead_lettered bigint NOT NULL DEFAULT 0,
                expired       bigint NOT NULL DEFAULT 0,
                lost          bigint NOT NULL DEFAULT 0,
                PRIMARY KEY (container, identifier, name));
            -- The members: live while the session that joined is connected.
            CREATE TABLE IF NOT EXISTS wormhole.queue_members (
                member        bigint      PRIMARY KEY,
                container     text        NOT NULL,
                identifier    text        NOT NULL,
                name          text        NOT NULL,
                session_pid   integer     NOT NULL,
                session_start timestamptz,
                process_id    integer     NOT NULL,
                joined_at     timestamptz NOT NULL);
            CREATE INDEX IF NOT EXISTS queue_members_by_queue ON wormhole.queue_members (container, identifier, name);
            -- The messages a queue has taken and not finished with: member 0 while
            -- nobody holds one.
            CREATE TABLE IF NOT EXISTS wormhole.queue_entries (
                container    text    NOT NULL,
                identifier   text    NOT NULL,
                name         text    NOT NULL,
                sequence     bigint  NOT NULL,
                member       bigint  NOT NULL DEFAULT 0,
                deliveries   integer NOT NULL DEFAULT 0,
                delivered_at timestamptz,
                PRIMARY KEY (container, identifier, name, sequence));
            -- When an entry given back after a failure may be handed out again (its
            -- member's back-off); NULL: at once.
            ALTER TABLE wormhole.queue_entries ADD COLUMN IF NOT EXISTS due_at timestamptz;
        END
        $wormhole$
        """

    /// Takes the durable position `name` for this session, creating it at 0 (keep
    /// everything) when new: one row (position, created) when taken, none while a
    /// connected session holds it.
    static func takeDurable(container: String, identifier: String, name: String, processID: Int32) -> PostgresQuery {
        """
        INSERT INTO wormhole.durable AS l (container, identifier, name, position, session_pid, session_start, process_id, seen_at)
        SELECT \(container), \(identifier), \(name), 0, pg_backend_pid(),
               (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()), \(processID), now()
        ON CONFLICT (container, identifier, name) DO UPDATE
            SET session_pid = excluded.session_pid, session_start = excluded.session_start,
                process_id = excluded.process_id, seen_at = now()
            WHERE l.session_pid = 0 OR NOT \(unescaped: liveClaim)
        RETURNING l.position, (l.xmax::text = '0')
        """
    }

    static func durableHolder(container: String, identifier: String, name: String) -> PostgresQuery {
        "SELECT process_id FROM wormhole.durable WHERE container = \(container) AND identifier = \(identifier) AND name = \(name)"
    }

    static func storeDurable(container: String, identifier: String, name: String, position: UInt64) -> PostgresQuery {
        let position = Int64(clamping: position)
        return """
            UPDATE wormhole.durable SET position = \(position), seen_at = now()
            WHERE container = \(container) AND identifier = \(identifier) AND name = \(name)
            """
    }

    static func releaseDurable(container: String, identifier: String, name: String) -> PostgresQuery {
        """
        UPDATE wormhole.durable SET session_pid = 0
        WHERE container = \(container) AND identifier = \(identifier) AND name = \(name) AND session_pid = pg_backend_pid()
        """
    }

    /// The durable names of the container (of `identifier` only, when given): identifier,
    /// name, position, running, process id, last seen, and the identifier's last sequence.
    static func durables(container: String, identifier: String?) -> PostgresQuery {
        """
        SELECT l.identifier, l.name, l.position, (l.session_pid <> 0 AND \(unescaped: liveClaim)), l.process_id, l.seen_at,
               coalesce(i.last_sequence, 0)
        FROM wormhole.durable l
        LEFT JOIN wormhole.identifiers i ON i.container = l.container AND i.identifier = l.identifier
        WHERE l.container = \(container) AND (\(identifier)::text IS NULL OR l.identifier = \(identifier))
        ORDER BY l.identifier, l.name
        """
    }

    /// The live listeners' claims: identifier, position, and the identifier's last sequence.
    static func liveListeners(container: String, identifier: String?) -> PostgresQuery {
        """
        SELECT l.identifier, l.position, coalesce(i.last_sequence, 0)
        FROM wormhole.listeners l
        LEFT JOIN wormhole.identifiers i ON i.container = l.container AND i.identifier = l.identifier
        WHERE l.container = \(container) AND (\(identifier)::text IS NULL OR l.identifier = \(identifier)) AND \(unescaped: liveClaim)
        ORDER BY l.identifier
        """
    }

    /// Deletes the durable position `name` (of `identifier`, or of every identifier) unless
    /// a connected session holds it: the rows deleted, and how many are held.
    static func forgetDurable(container: String, identifier: String?, name: String) -> PostgresQuery {
        """
        WITH held AS (
            SELECT count(*) AS n FROM wormhole.durable l
            WHERE l.container = \(container) AND l.name = \(name) AND (\(identifier)::text IS NULL OR l.identifier = \(identifier))
              AND l.session_pid <> 0 AND \(unescaped: liveClaim)),
        gone AS (
            DELETE FROM wormhole.durable l
            WHERE l.container = \(container) AND l.name = \(name) AND (\(identifier)::text IS NULL OR l.identifier = \(identifier))
              AND (SELECT n FROM held) = 0
            RETURNING 1)
        SELECT (SELECT count(*) FROM gone), (SELECT n FROM held)
        """
    }

    static let readVersion: PostgresQuery = "SELECT max(version) FROM wormhole.version"

    /// A lone pass (``PostgresPassQueue`` when nothing else waits): the next sequence
    /// number, the message, the notification; one transaction. The rows of
    /// ``appendGroup(container:channel:processID:passes:synchronousCommit:)`` for one
    /// message, planned more cheaply.
    static func appendOne(container: String, channel: String, processID: Int32, pass: PostgresPassQueue.Pass,
                          synchronousCommit: PostgresServer.SynchronousCommit? = nil) -> PostgresQuery {
        let size = Int64(pass.payload.readableBytes)
        return """
            WITH next AS (
                INSERT INTO wormhole.identifiers AS i (container, identifier, last_sequence, retained_count, retained_bytes)
                VALUES (\(container), \(pass.identifier), 1, 1, \(size))
                ON CONFLICT (container, identifier) DO UPDATE
                    SET last_sequence = i.last_sequence + 1,
                        retained_count = i.retained_count + 1,
                        retained_bytes = i.retained_bytes + excluded.retained_bytes
                RETURNING last_sequence, retained_count, retained_bytes, prune_at_count, prune_at_bytes),
            stored AS (
                INSERT INTO wormhole.messages (container, identifier, sequence, sent_at, sender_pid, kind, payload,
                                               role, correlation, expires_at)
                SELECT \(container), \(pass.identifier), last_sequence, \(pass.sentAt), \(processID), \(pass.kind), \(pass.payload),
                       \(pass.role), \(pass.correlation), \(pass.expires) FROM next
                RETURNING sequence)
            SELECT 1::bigint, stored.sequence, next.retained_count, next.retained_bytes, next.prune_at_count, next.prune_at_bytes,
                   pg_notify(\(channel), stored.sequence::text || ' ' || \(pass.identifier))
            FROM next, stored\(unescaped: durability(synchronousCommit))
            """
    }

    /// Passes, one or many, from one or several callers (``PostgresPassQueue``): for
    /// each row, in the order of `passes`, its identifier's next sequence number; all the
    /// messages in one `INSERT`; one notification per identifier, naming its last
    /// sequence number; one transaction. Each identifier's row is locked once, in the
    /// order of the identifiers (so that two such statements cannot deadlock), and held
    /// to the commit. Returns, in the order of `passes`: position, sequence number, and
    /// the identifier's retained count and bytes and pruning thresholds after it.
    static func appendGroup(container: String, channel: String, processID: Int32,
                            passes: [PostgresPassQueue.Pass],
                            synchronousCommit: PostgresServer.SynchronousCommit? = nil) -> PostgresQuery {
        let identifiers = passes.map(\.identifier)
        let sentAt = passes.map(\.sentAt)
        let kinds = passes.map(\.kind)
        let payloads = passes.map(\.payload)
        let roles = passes.map(\.role)
        let correlations = passes.map(\.correlation)
        let expiring = passes.map { $0.expires != nil }
        let expires = passes.map { $0.expires ?? $0.sentAt }
        return """
            WITH input AS (
                SELECT * FROM unnest(\(identifiers)::text[], \(sentAt)::timestamptz[], \(kinds)::smallint[],
                                     \(payloads)::bytea[], \(roles)::smallint[], \(correlations)::bigint[],
                                     \(expires)::timestamptz[], \(expiring)::boolean[])
                    WITH ORDINALITY AS t(identifier, sent_at, kind, payload, role, correlation, expires_at, expiring, ord)),
            counts AS (
                SELECT identifier, count(*) AS n, sum(octet_length(payload))::bigint AS bytes FROM input GROUP BY identifier),
            next AS (
                INSERT INTO wormhole.identifiers AS i (container, identifier, last_sequence, retained_count, retained_bytes)
                SELECT \(container), identifier, n, n, bytes FROM counts ORDER BY identifier
                ON CONFLICT (container, identifier) DO UPDATE
                    SET last_sequence = i.last_sequence + excluded.last_sequence,
                        retained_count = i.retained_count + excluded.retained_count,
                        retained_bytes = i.retained_bytes + excluded.retained_bytes
                RETURNING i.identifier, i.last_sequence, i.retained_count, i.retained_bytes, i.prune_at_count, i.prune_at_bytes),
            numbered AS (
                SELECT input.ord, input.identifier,
                       next.last_sequence - counts.n + row_number() OVER (PARTITION BY input.identifier ORDER BY input.ord) AS sequence
                FROM input JOIN counts USING (identifier) JOIN next USING (identifier)),
            stored AS (
                INSERT INTO wormhole.messages (container, identifier, sequence, sent_at, sender_pid, kind, payload,
                                               role, correlation, expires_at)
                SELECT \(container), input.identifier, numbered.sequence, input.sent_at, \(processID), input.kind, input.payload,
                       input.role, input.correlation, CASE WHEN input.expiring THEN input.expires_at END
                FROM input JOIN numbered USING (ord)
                ORDER BY numbered.identifier, numbered.sequence
                RETURNING 1),
            notified AS (
                SELECT count(pg_notify(\(channel), next.last_sequence::text || ' ' || next.identifier)) AS notifications FROM next)
            SELECT numbered.ord, numbered.sequence, next.retained_count, next.retained_bytes, next.prune_at_count, next.prune_at_bytes
            FROM numbered JOIN next USING (identifier), notified\(unescaped: durability(synchronousCommit))
            ORDER BY numbered.ord
            """
    }

    /// What a pass statement joins to set `synchronous_commit` for its own transaction
    /// (the statement is one, implicit: `set_config(…, true)` is `SET LOCAL`), read at its
    /// commit; nothing for the server's setting. Evaluated once, as the statement's rows
    /// are made, before the commit.
    private static func durability(_ setting: PostgresServer.SynchronousCommit?) -> String {
        guard let setting else { return "" }
        return ", (SELECT set_config('synchronous_commit', '\(setting.rawValue)', true)) AS durability"
    }

    /// The condition "this claim's session is still connected". Sessions of other users
    /// show no start time to an unprivileged user; their process number alone decides.
    static let liveClaim = """
        EXISTS (SELECT 1 FROM pg_stat_activity a
                WHERE a.pid = l.session_pid
                  AND (a.backend_start IS NULL OR l.session_start IS NULL OR a.backend_start = l.session_start))
        """

    /// Deletes what retention and clearing no longer keep, except what a live listener
    /// has not read, and the claims of sessions that are gone, and sets the next pruning
    /// due at twice what is kept. Returns the number deleted.
    static func prune(container: String, identifier: String, retainedCount: Int, retainedBytes: Int,
                      backlogCount: Int, backlogBytes: Int) -> PostgresQuery {
        let count = Int64(retainedCount)
        let bytes = Int64(retainedBytes)
        let capCount = Int64(max(backlogCount, retainedCount))
        let capBytes = Int64(max(backlogBytes, retainedBytes))
        return """
            WITH ranked AS (
                SELECT sequence,
                       row_number() OVER newest_first AS n,
                       sum(octet_length(payload)) OVER newest_first AS bytes
                FROM wormhole.messages
                WHERE container = \(container) AND identifier = \(identifier)
                WINDOW newest_first AS (ORDER BY sequence DESC)),
            floor AS (
                SELECT greatest(
                    (SELECT coalesce(max(sequence), 0) FROM ranked WHERE n > 1 AND (n > \(count) OR bytes > \(bytes))),
                    (SELECT cleared_through FROM wormhole.identifiers WHERE container = \(container) AND identifier = \(identifier))
                ) AS through),
            stale AS (
                DELETE FROM wormhole.listeners l
                WHERE l.container = \(container) AND l.identifier = \(identifier) AND NOT \(unescaped: liveClaim)),
            live AS (
                SELECT min(l.position) AS position FROM wormhole.listeners l
                WHERE l.container = \(container) AND l.identifier = \(identifier) AND \(unescaped: liveClaim)),
            -- Durable positions (and work queues) keep their unread messages, running or not, up to the
            -- backlog cap (the newest ones within it). (greatest() skips a NULL: without
            -- a durable position this bound must not apply at all.)
            capped AS (
                SELECT coalesce(max(sequence), 0) AS through FROM ranked WHERE n > \(capCount) OR bytes > \(capBytes)),
            -- Work queues count as durable positions: what a queue has not taken yet, and
            -- what it took and has not finished with.
            durable AS (
                SELECT min(kept.position) AS position FROM (
                    SELECT d.position FROM wormhole.durable d
                    WHERE d.container = \(container) AND d.identifier = \(identifier)
                    UNION ALL
                    SELECT q.taken FROM wormhole.queues q
                    WHERE q.container = \(container) AND q.identifier = \(identifier)
                    UNION ALL
                    SELECT min(e.sequence) - 1 FROM wormhole.queue_entries e
                    WHERE e.container = \(container) AND e.identifier = \(identifier)) AS kept),
            deleted AS (
                DELETE FROM wormhole.messages m
                USING floor, live, capped, durable
                WHERE m.container = \(container) AND m.identifier = \(identifier)
                  AND m.sequence <= least(floor.through, coalesce(live.position, floor.through),
                                          CASE WHEN durable.position IS NULL THEN floor.through
                                               ELSE greatest(durable.position, capped.through) END)
                RETURNING octet_length(m.payload) AS size)
            UPDATE wormhole.identifiers
            SET retained_count = retained_count - (SELECT count(*) FROM deleted),
                retained_bytes = retained_bytes - (SELECT coalesce(sum(size), 0) FROM deleted),
                prune_at_count = 2 * (retained_count - (SELECT count(*) FROM deleted)),
                prune_at_bytes = 2 * (retained_bytes - (SELECT coalesce(sum(size), 0) FROM deleted))
            WHERE container = \(container) AND identifier = \(identifier)
            RETURNING (SELECT count(*) FROM deleted)
            """
    }

    static func clear(container: String, identifier: String) -> PostgresQuery {
        """
        UPDATE wormhole.identifiers SET cleared_through = last_sequence
        WHERE container = \(container) AND identifier = \(identifier)
        """
    }

    static func identifiers(container: String) -> PostgresQuery {
        "SELECT identifier FROM wormhole.identifiers WHERE container = \(container) ORDER BY identifier"
    }

    /// The columns of a message that make a record, in ``PostgresTransiting``'s order.
    static let recordColumns = "m.sequence, m.sent_at, m.sender_pid, m.kind, m.payload, m.role, m.correlation, m.expires_at"

    static func latest(container: String, identifier: String) -> PostgresQuery {
        """
        SELECT \(unescaped: recordColumns)
        FROM wormhole.messages m JOIN wormhole.identifiers i USING (container, identifier)
        WHERE m.container = \(container) AND m.identifier = \(identifier) AND m.sequence > i.cleared_through
        ORDER BY m.sequence DESC LIMIT 1
        """
    }

    static func summaries(container: String) -> PostgresQuery {
        """
        SELECT i.identifier, count(m.sequence), coalesce(sum(octet_length(m.payload)), 0)::bigint,
               i.last_sequence, max(m.sent_at)
        FROM wormhole.identifiers i
        LEFT JOIN wormhole.messages m
               ON m.container = i.container AND m.identifier = i.identifier AND m.sequence > i.cleared_through
        WHERE i.container = \(container)
        GROUP BY i.identifier, i.last_sequence
        ORDER BY i.identifier
        """
    }

    /// A listener's claim, made by this session, keeping everything (position 0).
    static func claim(listener: String, container: String, identifier: String) -> PostgresQuery {
        """
        INSERT INTO wormhole.listeners (listener, container, identifier, session_pid, session_start, position)
        SELECT \(listener), \(container), \(identifier), pg_backend_pid(),
               (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()), 0
        """
    }

    /// The identifier's counters, read after the claim exists.
    static func state(container: String, identifier: String) -> PostgresQuery {
        """
        SELECT last_sequence, cleared_through FROM wormhole.identifiers
        WHERE container = \(container) AND identifier = \(identifier)
        """
    }

    /// Reads what follows `delivered`; when `claim` is set, also moves the listener's
    /// claim to it in the same round trip.
    static func read(listener: String, container: String, identifier: String, after delivered: UInt64, limit: Int, claim: Bool) -> PostgresQuery {
        let position = Int64(clamping: delivered)
        let limit = Int64(limit)
        guard claim else {
            return """
                SELECT \(unescaped: recordColumns) FROM wormhole.messages m
                WHERE m.container = \(container) AND m.identifier = \(identifier) AND m.sequence > \(position)
                ORDER BY m.sequence LIMIT \(limit)
                """
        }
        return """
            WITH claim AS (UPDATE wormhole.listeners SET position = \(position) WHERE listener = \(listener))
            SELECT \(unescaped: recordColumns) FROM wormhole.messages m
            WHERE m.container = \(container) AND m.identifier = \(identifier) AND m.sequence > \(position)
            ORDER BY m.sequence LIMIT \(limit)
            """
    }

    /// Moves this process's claims and work queue memberships to the session of a new
    /// connection (after the old one was lost), so that they count as live again.
    static func adoptClaims(_ listeners: [String], members: [Int64]) -> PostgresQuery {
        """
        WITH me AS (
            SELECT pg_backend_pid() AS pid, (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()) AS start),
        adopted_claims AS (
            UPDATE wormhole.listeners SET session_pid = me.pid, session_start = me.start
            FROM me WHERE listener = ANY(\(listeners)) RETURNING 1),
        adopted_members AS (
            UPDATE wormhole.queue_members SET session_pid = me.pid, session_start = me.start
            FROM me WHERE member = ANY(\(members)) RETURNING 1)
        SELECT (SELECT count(*) FROM adopted_claims), (SELECT count(*) FROM adopted_members)
        """
    }

    static func release(listener: String) -> PostgresQuery {
        "DELETE FROM wormhole.listeners WHERE listener = \(listener)"
    }
}
#endif
