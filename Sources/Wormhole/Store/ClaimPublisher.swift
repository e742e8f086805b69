/// Writes the caught-up claims of a process's listeners that were written too recently to
/// write again at once (``ListenerCursor/caughtUp(at:logID:)``): one timer on the
/// ``RetryClock`` for all of them, at the earliest moment one is due, and a 24-byte write
/// for each on the clock's thread.
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
        /// When the timer scheduled will sweep, if one is.
        var sweepAt: UInt64?
    }
    private let waiting = Locked(Waiting())

    /// Writes `cursor`'s caught-up claim at `deadline` (CLOCK_MONOTONIC, ns), or later.
    func publish(_ cursor: ListenerCursor, at deadline: UInt64) {
        let schedule = waiting.withLock { waiting -> Bool in
            waiting.cursors.append(cursor)
            if let sweepAt = waiting.sweepAt, sweepAt <= deadline { return false }
            waiting.sweepAt = deadline
            return true
        }
        if schedule { scheduleSweep(at: deadline) }
    }

    private func scheduleSweep(at deadline: UInt64) {
        let now = MonotonicCondition.now()
        RetryClock.shared.schedule(after: Double(deadline > now ? deadline - now : 0) / 1e9) { [self] in
            sweep(scheduledAt: deadline)
        }
    }

    /// Writes the claims that are due; those that are not (or whose write failed) wait
    /// for the next sweep, scheduled for the earliest of them.
    private func sweep(scheduledAt deadline: UInt64) {
        let cursors = waiting.withLock { waiting -> [ListenerCursor] in
            // Every sweep takes every cursor; only the one scheduled last clears the mark,
            // so that an earlier timer still pending is not scheduled again.
            if waiting.sweepAt == deadline { waiting.sweepAt = nil }
            defer { waiting.cursors = [] }
            return waiting.cursors
        }
        let now = MonotonicCondition.now()
        var later: [(ListenerCursor, UInt64)] = []
        for cursor in cursors {
            if let again = cursor.publish(now: now) { later.append((cursor, again)) }
        }
        for (cursor, again) in later { publish(cursor, at: again) }
    }
}
