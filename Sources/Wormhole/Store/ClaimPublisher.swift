import Dispatch

/// Writes the caught-up claims of a process's listeners that were written too recently to
/// write again at once (``ListenerCursor/caughtUp(at:logID:)``): one sweep for all of
/// them, on a timer of the ``RetryClock`` at most once per 50 ms, and a 24-byte write for
/// each on a serial queue of the publisher's (off the clock's thread, so that a file
/// system slow to write delays no other timer, such as a request's timeout).
///
/// Before it, each such listener scheduled a timer of its own that woke it to read its log
/// again, so that the read would write the claim: with a hundred identifiers paced a few
/// milliseconds apart, every message cost a timer, a drain on a queue of its own (a
/// thread of Dispatch's) and a read, on top of its delivery. The position to write is known
/// when the reader catches up; only the write waits.
final class ClaimPublisher: Sendable {
    static let shared = ClaimPublisher()

    private struct Waiting {
        var cursors: [ListenerCursor] = []
        var sweepScheduled = false
        /// When the last sweep began (CLOCK_MONOTONIC, ns): sweeps are at least
        /// ``ListenerCursor/idleInterval`` apart, so a busy process's listeners are swept
        /// together, up to 20 times a second, however their deadlines fall.
        var lastSweep: UInt64 = 0
    }
    private let waiting = Locked(Waiting())

    /// Writes `cursor`'s caught-up claim at `deadline` (CLOCK_MONOTONIC, ns), or at the
    /// next sweep when one is scheduled: a cursor may be written sooner than its own
    /// interval asks, never more than once a sweep.
    func publish(_ cursor: ListenerCursor, at deadline: UInt64) {
        let sweepAt = waiting.withLock { waiting -> UInt64? in
            waiting.cursors.append(cursor)
            guard !waiting.sweepScheduled else { return nil }
            waiting.sweepScheduled = true
            return max(deadline, waiting.lastSweep &+ ListenerCursor.idleInterval)
        }
        guard let sweepAt else { return }
        let now = MonotonicCondition.now()
        RetryClock.shared.schedule(after: Double(sweepAt > now ? sweepAt - now : 0) / 1e9) { [self] in
            Self.queue.async { [self] in sweep() }
        }
    }

    /// Where the sweeps write (a serial queue, not a global one: see ``ListenerToken``'s
    /// start queue).
    private static let queue = DispatchQueue(label: "Wormhole.claims.publish")

    /// Writes every claim waiting; those whose write failed wait for the next sweep.
    private func sweep() {
        let now = MonotonicCondition.now()
        let cursors = waiting.withLock { waiting -> [ListenerCursor] in
            waiting.sweepScheduled = false
            waiting.lastSweep = now
            defer { waiting.cursors = [] }
            return waiting.cursors
        }
        for cursor in cursors where !cursor.publish() {
            publish(cursor, at: now &+ ListenerCursor.idleInterval)
        }
    }
}
