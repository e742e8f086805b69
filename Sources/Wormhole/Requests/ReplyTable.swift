import Dispatch
@_spi(Backend) import WormholeCore
@_spi(Backend) import WormholeFiles

/// The requests of one router waiting for their replies, by correlation, and the sweep
/// that fails those whose timeout passed.
///
/// Timeouts are swept, not timed one by one: one sweep is scheduled on the retry clock
/// for the earliest deadline of the requests waiting, and fails those whose time is up.
/// A request answered in time costs the clock nothing (a timer per request woke the
/// clock's thread at each request, and kept every answered request's timer until its
/// deadline).
final class ReplyTable: Sendable {
    private let pending = Locked<[UInt64: PendingReply]>([:])
    /// The deadline of the sweep scheduled, when one is.
    private let sweepAt = Locked<UInt64?>(nil)
    /// The error of a request that timed out (`nil` once the wormhole is gone).
    private let timedOut: @Sendable (Double) -> WormholeError?

    init(timedOut: @escaping @Sendable (Double) -> WormholeError?) {
        self.timedOut = timedOut
    }

    /// Whether no request waits.
    var isEmpty: Bool { pending.withLock { $0.isEmpty } }

    /// A new request's pending reply, with a fresh correlation, waiting for its reply
    /// until `timeout` seconds have passed.
    func add(timeout: Double) -> PendingReply {
        let reply = PendingReply(correlation: Requests.newCorrelation(), timeout: timeout)
        pending.withLock { $0[reply.correlation] = reply }
        armSweep(at: reply.deadline)
        return reply
    }

    /// Completes `correlation`'s request with `outcome`, unless its reply came first.
    func finish(_ correlation: UInt64, _ outcome: ReplyOutcome) {
        pending.withLock { $0.removeValue(forKey: correlation) }?.complete(outcome)
    }

    /// Fails every request waiting with `error`.
    func failAll(_ error: WormholeError) {
        let all = pending.withLock { pending -> [PendingReply] in
            defer { pending = [:] }
            return Array(pending.values)
        }
        for reply in all { reply.complete(.failure(error)) }
    }

    /// Schedules a sweep at `deadline` unless one is scheduled at or before it.
    private func armSweep(at deadline: UInt64) {
        let arm = sweepAt.withLock { scheduled -> Bool in
            if let scheduled, scheduled <= deadline { return false }
            scheduled = deadline
            return true
        }
        guard arm else { return }
        let now = MonotonicCondition.now()
        RetryClock.shared.schedule(after: Double(deadline > now ? deadline - now : 0) / 1e9) { [weak self] in
            self?.sweep(scheduledAt: deadline)
        }
    }

    /// Fails the requests whose deadline passed, then schedules the next sweep.
    private func sweep(scheduledAt deadline: UInt64) {
        sweepAt.withLock { if $0 == deadline { $0 = nil } }
        let now = MonotonicCondition.now()
        let (expired, next) = pending.withLock { pending -> ([PendingReply], UInt64?) in
            let expired = pending.values.filter { $0.deadline <= now }
            for reply in expired { pending.removeValue(forKey: reply.correlation) }
            return (expired, pending.values.map(\.deadline).min())
        }
        if let next { armSweep(at: next) }
        guard !expired.isEmpty else { return }
        // The error says whether anyone serves the identifier, which asks the back end:
        // off the clock's thread, so that a slow answer delays no other timer.
        Self.timeoutQueue.async { [timedOut] in
            for reply in expired {
                guard let error = timedOut(reply.timeout) else { return }
                reply.complete(.failure(error))
            }
        }
    }

    /// Where timed-out requests look up their responders (a serial queue, not a global
    /// one: see ``ListenerToken``'s start queue).
    private static let timeoutQueue = DispatchQueue(label: "Wormhole.request.timeout")
}
