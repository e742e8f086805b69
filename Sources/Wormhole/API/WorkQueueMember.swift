#if canImport(Glibc)
import Glibc
#endif
import Dispatch
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
@_spi(Backend) import WormholeCore
@_spi(Backend) import WormholeFiles

/// How a work queue hands out messages and when it gives up on one.
public struct WorkQueueOptions: Sendable, Hashable {
    /// How many times a message is handed out before it goes to the dead letters: a
    /// handler that threw, or a member that ended (killed) while it held the message,
    /// counts as one delivery. At least 1.
    public var maximumDeliveries: Int
    /// Where messages the queue gave up on go, as ``WormholeDeadLetter`` (JSON);
    /// `nil`: `<identifier>.dead-letters`.
    public var deadLetterIdentifier: String?
    /// Where a queue used for the first time starts: ``WormholeStartingPoint/history``
    /// (the default: the messages retained, so that jobs passed before any worker
    /// started are done) or ``WormholeStartingPoint/now``. A queue that exists resumes
    /// where it is, whatever this says.
    public var startingFrom: WormholeStartingPoint
    /// How often a member looks for messages that a member which ended was holding
    /// (its lock released), or whose retry delay ran out, besides each new message.
    /// Seconds.
    public var redeliveryInterval: Double
    /// Seconds before a message that failed is handed out again the first time: its
    /// handler threw, or its member ended (killed) while holding it. Each further failure
    /// of the same message doubles the wait, up to ``maximumRetryDelay``: with the
    /// defaults, 1, 2, 4 and 8 s between the 5 deliveries. 0 hands it out again at once.
    /// Other messages are handed out meanwhile. Stored in the queue (Protocol.md §18.1),
    /// so that every member, Swift or Python, waits as long.
    public var retryDelay: Double
    /// The longest wait before a message that failed is handed out again, seconds.
    public var maximumRetryDelay: Double

    public init(maximumDeliveries: Int = 5, deadLetterIdentifier: String? = nil,
                startingFrom: WormholeStartingPoint = .history, redeliveryInterval: Double = 0.25,
                retryDelay: Double = 1, maximumRetryDelay: Double = 300) {
        self.maximumDeliveries = maximumDeliveries
        self.deadLetterIdentifier = deadLetterIdentifier
        self.startingFrom = startingFrom
        self.redeliveryInterval = redeliveryInterval
        self.retryDelay = retryDelay
        self.maximumRetryDelay = maximumRetryDelay
    }

    /// The wait before a message that failed for the `deliveries`-th time is handed out
    /// again: ``retryDelay`` doubled for each delivery after the first, at most
    /// ``maximumRetryDelay``. Seconds.
    package func retryDelay(afterDeliveries deliveries: UInt32) -> Double {
        guard retryDelay > 0 else { return 0 }
        let doublings = Double(min(max(deliveries, 1) - 1, 62))
        return min(retryDelay * pow(2, doublings), max(maximumRetryDelay, retryDelay))
    }

    /// The longest retry delay: half of what the state file holds (`UInt32.max`
    /// milliseconds after the delivery, 49 days), the rest left for the time the
    /// handler took.
    static let longestRetryDelay = Double(UInt32.max) / 1000 / 2

    /// The dead-letter identifier for a queue of `identifier`.
    package func deadLetters(of identifier: String) -> String {
        deadLetterIdentifier ?? identifier + ".dead-letters"
    }
}

/// A member of a work queue, returned by
/// ``Wormhole/listenForMessage(withIdentifier:as:workQueue:options:queue:onError:listener:)``:
/// it takes messages from the queue, one at a time, until ``cancel()``.
///
/// Its drains (take, handle, acknowledge with the next take) are held by one state
/// machine, as a ``ListenerToken``'s are: they never overlap, a
/// wake-up during a drain makes it take once more, and a cancel waits for a drain on
/// another thread. A member runs its handler on its own serial queue (or the one given);
/// a responder on the shared directory, on the thread that was woken (no hop).
public final class WorkQueueMember: Sendable, TransitingEventReceiver {
    /// The identifier whose messages the queue hands out.
    public let identifier: String
    /// The queue's name.
    public let name: String

    /// Touched only by the thread that holds the drain, or by ``cancel()`` when no drain
    /// runs and none can start (the state machine decides which).
    private nonisolated(unsafe) var file: (any WormholeTransitingWorkQueue)?
    /// A message handled whose acknowledgement could not be stored (a full disk, an I/O
    /// error): acknowledged with the next take, so that the queue does not keep it in
    /// flight, held by this member, for as long as the member lives. Touched as `file` is.
    private nonisolated(unsafe) var unacknowledged: UInt64?
    /// Where scheduled drains run: the first, the redelivery timer's, and every drain of
    /// a member that does not drain on the thread woken.
    private let work: DispatchQueue
    private let options: WorkQueueOptions
    private let deadLetters: String
    private let handler: @Sendable (WormholeRecord, Int) throws -> Void
    /// Counts this member's drains for ``Wormhole/waitUntilIdle(for:)``, from when one is
    /// scheduled to when it ends: its first take is never taken for idleness.
    private let activity: HandlingActivity?
    private let onError: @Sendable (WormholeError) -> Void
    private let onCancel: @Sendable () -> Void
    private let state: ListenerState
    private let observation = Locked<(any WormholeTransitingObservation)?>(nil)
    /// The redelivery timer's next run on the ``RetryClock`` (the library's one timer
    /// service: a Dispatch timer would make libdispatch's epoll instance, which stops a
    /// process out of descriptors), and whether ``cancel()`` ended it.
    private struct RedeliveryTimer {
        var scheduled: RetryClock.Scheduled?
        var cancelled = false
    }
    private let timer = Locked(RedeliveryTimer())

    /// - Parameter drainsOnWakingThread: Drain on the thread that delivered the wake-up
    ///   (the inotify reader thread) instead of hopping to `work`.
    init(transiting: any WormholeTransiting, identifier: String, name: String, options: WorkQueueOptions, queue: DispatchQueue?,
         drainsOnWakingThread: Bool = false,
         onError: @escaping @Sendable (WormholeError) -> Void,
         handler: @escaping @Sendable (WormholeRecord, Int) throws -> Void,
         activity: HandlingActivity? = nil,
         onCancel: @escaping @Sendable () -> Void) throws(WormholeError) {
        let deadLetters = try options.validatedDeadLetters(of: identifier)
        self.identifier = identifier
        self.name = name
        self.options = options
        self.deadLetters = deadLetters
        self.handler = handler
        self.activity = activity
        self.onError = onError
        self.onCancel = onCancel
        self.state = ListenerState(ListenerStateMachine(hasQueue: !drainsOnWakingThread || queue != nil))
        let work = DispatchQueue(label: "Wormhole.workQueue.\(identifier).\(name)", target: queue)
        self.work = work
        // Watch first, then join: a message passed in between wakes a drain that finds it.
        let relay = EventRelay()
        let observation = try transiting.observe(identifier: identifier) { relay.forward($0) }
        do throws(WormholeError) {
            file = try transiting.joinWorkQueue(identifier: identifier, name: name, startingFrom: options.startingFrom)
            file?.delayRedeliveries { options.retryDelay(afterDeliveries: $0) }
        } catch {
            observation.cancel()
            throw error
        }
        self.observation.withLock { $0 = observation }
        // A failure before the relay was connected: nothing wakes this member again, but
        // its timer takes on (and looks at the file at the log's name each time).
        if let failure = relay.connect(self) { onError(failure) }
        armRedeliveryTimer()
        // What the queue holds already is taken on `work`: the caller's thread is not
        // made to run the handler.
        if state.withLock({ $0.scheduleDrain() }) { scheduleDrain() }
    }

    /// Whether ``cancel()`` was called.
    public var isCancelled: Bool { state.withLock { $0.isCancelled } }

    /// Leaves the queue: no message is taken after it returns. Called from elsewhere than
    /// the member's own handler, it waits for a message being handled to be handled and
    /// acknowledged; called from the handler, that message is acknowledged when the
    /// handler returns. What this member still held goes to the others.
    public func cancel() {
        cancelling()
    }

    private func cancelling() {
        let thread = UInt(pthread_self())
        let action = state.withLock { $0.cancel(from: thread) }
        guard action != .none else { return }
        // Taken out under the locks, ended after them.
        observation.withLock { observation in
            defer { observation = nil }
            return observation
        }?.cancel()
        let scheduled = timer.withLock { timer in
            timer.cancelled = true
            defer { timer.scheduled = nil }
            return timer.scheduled
        }
        if let scheduled { RetryClock.shared.cancel(scheduled) }
        switch action {
        case .closeReader:
            if let pending = unacknowledged {
                do throws(WormholeError) { try file?.acknowledge(pending) } catch { onError(error) }
                unacknowledged = nil
            }
            file?.close()
            file = nil
        case .waitForDrain: state.waitWhileDraining(elsewhereThan: thread)
        case .fromCall, .none: break
        }
        onCancel()
    }

    func receive(_ event: WormholeTransitingEvent) {
        let replaced: Bool
        switch event {
        case .wake: replaced = false
        case .replaced: replaced = true
        case .failed(let error) where error.code == .containerUnavailable && error.errno == .noSuchFileOrDirectory:
            // Its shared container was revoked, or the container's parent is gone (the
            // failures of a watch with ENOENT; a container that is merely gone is watched
            // for until it is back): nothing will be handed out here again, and nothing
            // would wake the member. It leaves, then says why, as a listener does.
            work.async { [self] in
                cancel()
                onError(error)
            }
            return
        case .failed(let error):
            onError(error)
            replaced = false
        }
        switch state.withLock({ $0.wake(replaced: replaced, thread: UInt(pthread_self())) }) {
        case .none: break
        case .schedule: scheduleDrain()
        case .drainHere(let invalidate):
            activity?.begin()
            defer { activity?.end(handled: false) }
            drain(invalidate: invalidate)
        }
    }

    /// Schedules the redelivery timer's next drain, ``WorkQueueOptions/redeliveryInterval``
    /// from now, unless ``cancel()`` came first.
    private func armRedeliveryTimer() {
        let next = RetryClock.shared.schedule(after: options.redeliveryInterval) { [weak self] in self?.redeliveryDue() }
        let stale = timer.withLock { timer -> Bool in
            guard !timer.cancelled else { return true }
            timer.scheduled = next
            return false
        }
        if stale { RetryClock.shared.cancel(next) }
    }

    /// The redelivery timer ran out: its drain runs on `work` (never on the clock's
    /// thread, which other timers share), and the next is scheduled.
    private func redeliveryDue() {
        guard !isCancelled else { return }
        work.async { [weak self] in self?.beginScheduledDrain(asked: true) }
        armRedeliveryTimer()
    }

    /// A drain for a wake-up (or the first, at joining), counted from now until it ends
    /// (``Wormhole/waitUntilIdle(for:)``); the redelivery timer's are not counted.
    private func scheduleDrain() {
        activity?.begin()
        work.async { [self] in
            defer { activity?.end(handled: false) }
            beginScheduledDrain(asked: false)
        }
    }

    /// Starts a drain on `work`: one scheduled (`asked` false), or the redelivery timer's,
    /// which asks for one first. The timer's drain also looks at the file at the log's
    /// name (one `openat` when it is the same): a replacement whose event was lost (the
    /// observation failed) does not leave the member reading a file nobody appends to.
    private func beginScheduledDrain(asked: Bool) {
        if asked, !state.withLock({ $0.scheduleDrain() }) { return }
        guard let invalidate = state.withLock({ $0.beginScheduled(thread: UInt(pthread_self())) }) else { return }
        drain(invalidate: invalidate || asked)
    }

    /// Takes, handles and acknowledges until the queue has nothing for this member and no
    /// wake-up came meanwhile. A message handled is acknowledged with the next take (one
    /// statement on a back end that can), or alone once the member is cancelled. Called
    /// by the holder of the drain.
    private func drain(invalidate: Bool) {
        let maximum = UInt32(clamping: options.maximumDeliveries)
        var invalidate = invalidate
        var handled = unacknowledged
        unacknowledged = nil
        while state.withLock({ $0.delivers }) {
            let delivery: WormholeWorkQueueDelivery?
            do throws(WormholeError) {
                if invalidate { file?.invalidate() }
                if let handled {
                    delivery = try file?.acknowledge(handled, thenTakeWithMaximumDeliveries: maximum, deadLetters: deadLetters, report: onError)
                } else {
                    delivery = try file?.take(maximumDeliveries: maximum, deadLetters: deadLetters, report: onError)
                }
            } catch {
                // An acknowledgement not stored is tried again with the next take (the
                // next wake-up or the timer's); should this member end first, the message
                // is handed out again (repeated, never skipped).
                onError(error)
                unacknowledged = handled
                end(state.withLock { $0.readFailed(outOfResources: false) }, handled: nil)
                return
            }
            handled = nil
            if let delivery {
                let sequence = delivery.record.sequence
                do {
                    try handler(delivery.record, Int(delivery.deliveries))
                    handled = sequence
                } catch {
                    // A member cancelled from its handler, which threw to give the message
                    // back (`wormhole listen --queue` at its --count), is leaving, not
                    // failing: the others get it at once, without the retry delay.
                    if state.withLock({ $0.isCancelled }) { file?.delayRedeliveries { _ in 0 } }
                    do throws(WormholeError) {
                        try file?.giveBack(sequence, reason: "the handler threw: \(error)", maximumDeliveries: maximum, deadLetters: deadLetters)
                    } catch {
                        onError(error)
                        end(state.withLock { $0.readFailed(outOfResources: false) }, handled: nil)
                        return
                    }
                }
            }
            // A message taken: take again; none: stop, unless a wake-up came meanwhile.
            let taken = delivery == nil ? 0 : 1
            switch state.withLock({ $0.batchRead(count: taken, maximumCount: 1, mayHaveMore: false, publishPositionAfter: nil) }) {
            case .read(let again): invalidate = again
            case .end(let ending):
                end(ending, handled: handled)
                return
            }
        }
        // Cancelled (from the handler or elsewhere): the last message handled is
        // acknowledged before the queue is left.
        end(state.withLock { $0.stopped() }, handled: handled)
    }

    /// What a drain leaves to do once it stops: acknowledge the message it handled last
    /// (a cancelled member's), and leave the queue when cancelled.
    private func end(_ ending: ListenerStateMachine.Ending, handled: UInt64?) {
        if let handled = handled ?? (ending.closeReader ? unacknowledged : nil) {
            do throws(WormholeError) {
                try file?.acknowledge(handled)
                unacknowledged = nil
            } catch {
                onError(error)
                if !ending.closeReader { unacknowledged = handled }
            }
        }
        if ending.closeReader {
            file?.close()
            file = nil
            state.readerClosed()
        }
    }
}

extension WorkQueueOptions {
    /// Decides whether these options can run a queue of `identifier`: at least one
    /// delivery, a positive redelivery interval, retry delays in range and in order, and a
    /// valid dead-letter identifier other than `identifier`, which it returns.
    func validatedDeadLetters(of identifier: String) throws(WormholeError) -> String {
        guard maximumDeliveries >= 1 else {
            throw WormholeError(.invalidConfiguration, "maximumDeliveries is \(maximumDeliveries); a message must be handed out at least once")
        }
        guard redeliveryInterval > 0, redeliveryInterval.isFinite else {
            throw WormholeError(.invalidConfiguration, "redeliveryInterval is \(redeliveryInterval); it must be a positive number of seconds")
        }
        for (name, value) in [("retryDelay", retryDelay), ("maximumRetryDelay", maximumRetryDelay)]
        where !(value >= 0 && value <= WorkQueueOptions.longestRetryDelay) {
            throw WormholeError(.invalidConfiguration, "\(name) is \(value); it must be between 0 and \(Int(WorkQueueOptions.longestRetryDelay)) seconds")
        }
        guard maximumRetryDelay >= retryDelay else {
            throw WormholeError(.invalidConfiguration, "maximumRetryDelay is \(maximumRetryDelay), less than retryDelay \(retryDelay)")
        }
        let letters = self.deadLetters(of: identifier)
        try Identifier.validate(letters, kind: "dead-letter identifier")
        guard letters != identifier else {
            throw WormholeError(.invalidConfiguration, "the dead-letter identifier of a queue of '\(identifier)' cannot be '\(identifier)' itself")
        }
        return letters
    }
}
