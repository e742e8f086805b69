#if canImport(Glibc)
import Glibc
#endif
@_spi(Backend) import WormholeCore
@_spi(Backend) import WormholeFiles

/// Everything that decides what a ``ListenerToken`` (or a ``WorkQueueMember``, whose
/// drains take from its queue) does next, in one value behind one lock: whether it is
/// cancelled, whether a drain runs (and on which thread), whether another wake-up came
/// meanwhile, the retry and idle timers, and what is owed to the listener's `onError`.
///
/// Each method is one transition: it changes the state and returns what to do, which
/// the token does after releasing the lock (read the log, call the listener, schedule a
/// drain, close the reader). No method calls out, blocks or touches the reader; the
/// reader is touched only by the thread that holds the drain (``Drain/running(thread:again:)``),
/// or by ``cancel(from:)``'s caller when no drain runs and none can start any more.
///
/// The shape is async-algorithms' `ChannelStateMachine`: a plain value that a test can
/// drive, with the locking and the actions in its owner.
struct ListenerStateMachine {
    /// Who holds the drain: the right to read the log and call the listener.
    enum Drain: Equatable {
        /// Nobody: a wake-up starts a drain.
        case idle
        /// A drain waits on the listener's queue to start; wake-ups meanwhile add nothing.
        case scheduled
        /// `thread` drains; `again` records a wake-up since its last read, so that it
        /// reads once more before it stops.
        case running(thread: UInt, again: Bool)
    }

    /// How a wake-up is served.
    enum WakeAction: Equatable {
        /// Nothing to do: a drain in progress or scheduled will read.
        case none
        /// Drain on this thread (a listener without a queue, woken on the reader thread).
        case drainHere(invalidate: Bool)
        /// Schedule a drain on the listener's queue.
        case schedule
    }

    /// What the holder of the drain does after a batch.
    enum Next: Equatable {
        /// Read again (telling the reader first that its file may have been replaced).
        case read(invalidate: Bool)
        /// The drain is over: see ``Ending``.
        case end(Ending)
    }

    /// What ends a drain: released outside the lock.
    struct Ending: Equatable {
        /// The listener was cancelled: close the reader (nobody else will), then
        /// ``readerClosed()``.
        var closeReader = false
        /// Report this read failure to `onError`.
        var report = false
        /// Schedule a drain after this many seconds (a retry, or the idle read that
        /// publishes a caught-up position).
        var wakeAfter: Double?
    }

    /// What a cancel does.
    enum CancelAction: Equatable {
        /// Already cancelled.
        case none
        /// No drain runs: close the reader here.
        case closeReader
        /// The listener cancelled itself during its call: its drain closes the reader.
        case fromCall
        /// Another thread drains: wait until it has ended (it closes the reader).
        case waitForDrain
    }

    private(set) var drain = Drain.idle
    private(set) var isCancelled = false
    /// Cancelled by the listener during its own call: that message is not handled.
    private var declined = false
    /// The log may have been replaced since the reader last read.
    private var invalidated = false
    /// While reads fail for want of a descriptor or memory: the delay before the next try.
    private var retryDelay: Double?
    /// A timer (retry or idle) will schedule a drain.
    private var timerScheduled = false
    /// An acknowledgement failed and was reported; the next failures of the streak are not.
    private var acknowledgementFailing = false
    /// Whether wake-ups schedule drains on a queue, or drain on the thread woken.
    private let hasQueue: Bool

    init(hasQueue: Bool) {
        self.hasQueue = hasQueue
    }

    /// A wake-up from the observation, on its thread; `replaced` when the log may have
    /// been replaced.
    mutating func wake(replaced: Bool, thread: UInt) -> WakeAction {
        if replaced { invalidated = true }
        guard !isCancelled else { return .none }
        switch drain {
        case .running(let holder, _):
            drain = .running(thread: holder, again: true)
            return .none
        case .scheduled:
            return .none
        case .idle:
            if hasQueue {
                drain = .scheduled
                return .schedule
            }
            drain = .running(thread: thread, again: false)
            return .drainHere(invalidate: takeInvalidated())
        }
    }

    /// A drain to schedule on the queue, whatever the listener's kind: the first one, and
    /// those of the timers. Returns whether to schedule it.
    mutating func scheduleDrain(fromTimer: Bool = false) -> Bool {
        if fromTimer { timerScheduled = false }
        guard !isCancelled else { return false }
        switch drain {
        case .running(let holder, _):
            drain = .running(thread: holder, again: true)
            return false
        case .scheduled:
            return false
        case .idle:
            drain = .scheduled
            return true
        }
    }

    /// A scheduled drain starts on `thread`. Returns whether it reads (and whether to
    /// invalidate first); `nil` when it does nothing.
    mutating func beginScheduled(thread: UInt) -> Bool? {
        guard drain == .scheduled else { return nil }
        guard !isCancelled else {
            drain = .idle
            return nil
        }
        drain = .running(thread: thread, again: false)
        return takeInvalidated()
    }

    /// Whether the holder of the drain calls the listener with the next record.
    var delivers: Bool { !isCancelled }

    /// The listener's call returned: whether to acknowledge the record (a durable
    /// listener that did not cancel itself during the call).
    func acknowledges(isDurable: Bool) -> Bool { isDurable && !declined }

    /// An acknowledgement succeeded or failed: whether to report the failure (once per
    /// streak).
    mutating func acknowledged(_ succeeded: Bool) -> Bool {
        defer { acknowledgementFailing = !succeeded }
        return !succeeded && !acknowledgementFailing
    }

    /// A read returned `count` records of `maximumCount`; `mayHaveMore` when the reader
    /// stopped at the end of a replaced log; `publishPositionAfter` when it caught up
    /// without writing its position, the seconds after which a read writes it.
    mutating func batchRead(count: Int, maximumCount: Int, mayHaveMore: Bool, publishPositionAfter: Double?) -> Next {
        retryDelay = nil
        if !isCancelled, case .running(let holder, let again) = drain,
           // A full batch, or one that stopped at the end of a replaced log (no event
           // will come for the rest, in the new one), or a wake-up meanwhile.
           count == maximumCount || mayHaveMore || again {
            // The next read serves the wake-ups so far.
            drain = .running(thread: holder, again: false)
            return .read(invalidate: takeInvalidated())
        }
        var ending = Ending()
        if let delay = publishPositionAfter, !timerScheduled {
            timerScheduled = true
            ending.wakeAfter = delay
        }
        return .end(release(ending))
    }

    /// The holder of the drain stops after handing out part of a batch (the listener was
    /// cancelled during it).
    mutating func stopped() -> Ending {
        release(Ending())
    }

    /// A read failed; `outOfResources` for a want of descriptors or memory, which is
    /// retried at growing intervals up to a second (reported once per streak), where any
    /// other failure is reported and waits for the next wake-up.
    mutating func readFailed(outOfResources: Bool) -> Ending {
        var ending = Ending()
        if isCancelled { return release(ending) }
        guard outOfResources else {
            ending.report = true
            return release(ending)
        }
        ending.report = retryDelay == nil
        // Wake-ups before the timer fires fail too; one timer is enough, and only its
        // tries make the interval grow.
        if !timerScheduled {
            let delay = min(1, (retryDelay ?? 0.005) * 2)
            retryDelay = delay
            timerScheduled = true
            ending.wakeAfter = delay
        } else if retryDelay == nil {
            // The idle timer's drain retries: the streak has begun all the same.
            retryDelay = 0.005
        }
        return release(ending)
    }

    /// Cancels the listener, from `thread`.
    mutating func cancel(from thread: UInt) -> CancelAction {
        if case .running(let holder, _) = drain, holder == thread {
            // The listener declines the message of its call, also when a cancel from
            // elsewhere came first and waits for that call (`listen --count`: the main
            // thread's cancel at the count, and the listener's own for a message it did
            // not print).
            declined = true
            guard !isCancelled else { return .none }
            isCancelled = true
            return .fromCall
        }
        guard !isCancelled else { return .none }
        isCancelled = true
        guard case .running = drain else { return .closeReader }
        return .waitForDrain
    }

    /// Whether a drain runs on another thread than `thread` (what a cancel waits for).
    func drains(elsewhereThan thread: UInt) -> Bool {
        if case .running(let holder, _) = drain { return holder != thread }
        return false
    }

    /// The reader that a cancelled listener's drain closed: the drain is over, and the
    /// cancels waiting for it return.
    mutating func readerClosed() {
        drain = .idle
    }

    /// Ends the drain; a cancelled listener's stays held until its reader is closed
    /// (``readerClosed()``), so that a cancel waiting for it returns with the claim gone.
    private mutating func release(_ ending: Ending) -> Ending {
        var ending = ending
        if isCancelled {
            ending.closeReader = true
            ending.wakeAfter = nil
        } else {
            drain = .idle
        }
        return ending
    }

    private mutating func takeInvalidated() -> Bool {
        defer { invalidated = false }
        return invalidated
    }
}
