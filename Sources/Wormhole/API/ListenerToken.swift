#if canImport(Glibc)
import Glibc
#endif
import Dispatch
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Synchronization
@_spi(Backend) import WormholeCore
@_spi(Backend) import WormholeFiles

/// One listener of a ``Wormhole``; returned by
/// ``Wormhole/listenForMessage(withIdentifier:as:durableName:startingFrom:queue:onError:listener:)``.
///
/// The listener runs until ``cancel()`` is called, its wormhole stops listening to its
/// identifier (``Wormhole/stopListeningForMessage(withIdentifier:)``), or the wormhole is
/// released. It also stops when nothing could wake it any more (inotify out of watches
/// when its container was recreated, or the container's parent removed): its `onError`
/// then receives the reason, and ``isCancelled`` is true. The wormhole keeps the token: dropping it (`_ = try wormhole.listen...`)
/// does not stop the listener, as with MMWormhole.
///
/// Without a queue, the listener runs on the process's inotify reader thread, the one
/// that was woken: no thread hop, so the lowest latency. Keep it short (hand long work to
/// a queue of your own) because the other listeners of the process wait meanwhile. With a
/// `queue:` it runs there: one hop.
public final class ListenerToken: Sendable, Hashable, TransitingEventReceiver {
    /// The identifier listened to.
    public let identifier: String

    private let queue: DispatchQueue?
    /// Touched only by the thread that holds the drain, or by ``cancel()`` when no drain
    /// runs and none can start (``ListenerStateMachine`` decides which).
    private nonisolated(unsafe) let reader: any WormholeTransitingReader
    private let observation: any WormholeTransitingObservation
    /// The observation of a listener made with `observeOnDemand`: made while held
    /// (``holdObservation()``).
    private let onDemand: OnDemandObservation?
    private let onError: @Sendable (WormholeError) -> Void
    private let listener: @Sendable (WormholeRecord) -> Void
    private let onCancel: @Sendable () -> Void
    /// Counts this listener's drains, from when one is scheduled to when it ends, so that
    /// ``Wormhole/waitUntilIdle(for:)`` does not end a service whose first read has not
    /// run yet (what a durable name resumed has to deliver).
    private let activity: HandlingActivity?
    /// A durable listener's position moves after each call of the listener returns.
    private let isDurable: Bool
    /// The one lock: the state machine, and the condition a cancel waits on for a drain
    /// in progress on another thread.
    private let state: ListenerState

    convenience init(
        transiting: any WormholeTransiting,
        identifier: String,
        start: Wormhole.StartingPoint,
        durableName: String? = nil,
        observeOnDemand: Bool = false,
        makeReader: (() throws(WormholeError) -> any WormholeTransitingReader)? = nil,
        queue: DispatchQueue?,
        onError: @escaping @Sendable (WormholeError) -> Void,
        listener: @escaping @Sendable (WormholeRecord) -> Void,
        activity: HandlingActivity? = nil,
        onCancel: @escaping @Sendable () -> Void
    ) throws(WormholeError) {
        // Watch first, then find the starting position: a message passed in between
        // wakes a drain that finds it.
        let relay = EventRelay()
        let observation: any WormholeTransitingObservation
        if observeOnDemand {
            observation = OnDemandObservation { () throws(WormholeError) in
                try transiting.observe(identifier: identifier) { relay.forward($0) }
            }
        } else {
            observation = try transiting.observe(identifier: identifier) { relay.forward($0) }
        }
        // `makeReader`, when given, makes the reader instead of the back end: the tap's,
        // which keeps no claim and opens its log only to read (``WormholeTap``).
        let reader: any WormholeTransitingReader
        do throws(WormholeError) {
            if let makeReader {
                reader = try makeReader()
            } else if let durableName {
                reader = try transiting.makeReader(identifier: identifier, startingFrom: start, durableName: durableName)
            } else {
                reader = try transiting.makeReader(identifier: identifier, startingFrom: start)
            }
        } catch {
            observation.cancel()
            throw error
        }
        self.init(identifier: identifier, relay: relay, observation: observation, reader: reader, isDurable: durableName != nil,
                  queue: queue, onError: onError, listener: listener, activity: activity, onCancel: onCancel)
    }

    private init(
        identifier: String,
        relay: EventRelay,
        observation: any WormholeTransitingObservation,
        reader: any WormholeTransitingReader,
        isDurable: Bool,
        queue: DispatchQueue?,
        onError: @escaping @Sendable (WormholeError) -> Void,
        listener: @escaping @Sendable (WormholeRecord) -> Void,
        activity: HandlingActivity?,
        onCancel: @escaping @Sendable () -> Void
    ) {
        self.identifier = identifier
        self.activity = activity
        self.queue = queue.map { DispatchQueue(label: "Wormhole.listener.\(identifier)", target: $0) }
        self.startQueue = self.queue ?? DispatchQueue(label: "Wormhole.listener.\(identifier).start")
        self.onError = onError
        self.listener = listener
        self.onCancel = onCancel
        self.state = ListenerState(ListenerStateMachine(hasQueue: queue != nil))
        self.reader = reader
        self.isDurable = isDurable
        self.observation = observation
        self.onDemand = observation as? OnDemandObservation
        // Anything passed before the relay was connected is found by the first drain, on
        // a queue (the caller's thread is not made to run the listener); a compaction
        // that replaced the log meanwhile, by looking at the file at the name once the
        // one held is read (no drain can run before the relay is connected).
        reader.invalidate()
        if let failure = relay.connect(self) { receive(.failed(failure)) }
        if state.withLock({ $0.scheduleDrain() }) { scheduleDrain() }
    }

    /// Where a listener without a queue runs its first drain (what its starting point
    /// replays), its timers' drains and a failure report: a serial queue of its own, so
    /// that one listener blocking there holds up no other. Not a global queue: using one
    /// starts Dispatch's once-a-second pool monitor for the life of the process, which
    /// would wake an idle listener every second.
    private let startQueue: DispatchQueue

    func receive(_ event: WormholeTransitingEvent) {
        switch event {
        case .wake, .replaced:
            let thread = UInt(pthread_self())
            switch state.withLock({ $0.wake(replaced: event.isReplaced, thread: thread) }) {
            case .none: break
            case .schedule: scheduleDrain()
            case .drainHere(let invalidate): drain(invalidate: invalidate)
            }
        case .failed(let error):
            // Nothing will wake this listener again: it stops, and says why (after a call
            // in progress has returned).
            startQueue.async { [self] in
                if cancelling() { onError(error) }
            }
        }
    }

    /// Drains on the calling thread now, as a wake-up of a listener without a queue
    /// would (`replaced`: the log may have been replaced): a thread blocked in a request
    /// reads its reply itself when its own watch woke it. Does nothing when a drain runs
    /// elsewhere (it reads once more) or is scheduled.
    func drainOnCallingThread(replaced: Bool) {
        switch state.withLock({ $0.wake(replaced: replaced, thread: UInt(pthread_self())) }) {
        case .none: break
        case .schedule: scheduleDrain()
        case .drainHere(let invalidate):
            activity?.begin()
            defer { activity?.end(handled: false) }
            drain(invalidate: invalidate)
        }
    }

    /// Makes a listener made with `observeOnDemand` wake on the process's reader thread
    /// until the matching ``releaseObservation()`` (holds count: it wakes while any is
    /// held). Returns whether the observation began with this hold: then nothing woke the
    /// listener for what was passed before, which ``drainOnCallingThread(replaced:)``
    /// reads. Does nothing for the other listeners.
    func holdObservation() throws(WormholeError) -> Bool {
        try onDemand?.hold() ?? false
    }

    /// Gives back a hold taken with ``holdObservation()``.
    func releaseObservation() {
        onDemand?.release()
    }

    private func scheduleDrain() {
        activity?.begin()
        (queue ?? startQueue).async { [self] in
            defer { activity?.end(handled: false) }
            guard let invalidate = state.withLock({ $0.beginScheduled(thread: UInt(pthread_self())) }) else { return }
            drain(invalidate: invalidate)
        }
    }

    /// Reads and delivers until a read finds nothing new and no wake-up came meanwhile.
    /// Called by the holder of the drain (the state machine gave it), so drains of one
    /// token never overlap.
    private func drain(invalidate: Bool) {
        let maximumCount = 256
        var invalidate = invalidate
        while true {
            if invalidate { reader.invalidate() }
            let batch: [Result<WormholeRecord, WormholeError>]
            do throws(WormholeError) {
                batch = try reader.read(maximumCount: maximumCount)
            } catch {
                let outOfResources = error.isOutOfResources
                let ending = state.withLock { $0.readFailed(outOfResources: outOfResources) }
                if ending.report {
                    onError(outOfResources
                        ? WormholeError(error.code, "\(error.message); no message is skipped: reading again until it succeeds",
                                        path: error.path, errno: error.errno)
                        : error)
                }
                end(ending)
                return
            }
            for item in batch {
                guard state.withLock({ $0.delivers }) else {
                    end(state.withLock { $0.stopped() })
                    return
                }
                switch item {
                case .success(let record):
                    listener(record)
                    // Cancelled from inside the call: not counted as handled. (A cancel
                    // from elsewhere waits for this call, acknowledgement included.)
                    if state.withLock({ $0.acknowledges(isDurable: isDurable) }) { acknowledge(record.sequence) }
                case .failure(let error): onError(error)
                }
            }
            let (count, mayHaveMore, unpublished) = (batch.count, reader.mayHaveMore, reader.unpublishedPositionDelay)
            switch state.withLock({ $0.batchRead(count: count, maximumCount: maximumCount, mayHaveMore: mayHaveMore, publishPositionAfter: unpublished) }) {
            case .read(let again): invalidate = again
            case .end(let ending):
                end(ending)
                return
            }
        }
    }

    /// What a drain leaves to do once it no longer holds the drain.
    private func end(_ ending: ListenerStateMachine.Ending) {
        if ending.closeReader {
            reader.close()
            state.readerClosed()
        }
        if let delay = ending.wakeAfter {
            RetryClock.shared.schedule(after: delay) { [weak self] in
                guard let self, state.withLock({ $0.scheduleDrain(fromTimer: true) }) else { return }
                scheduleDrain()
            }
        }
    }

    /// Moves a durable listener's position past `sequence`. A position that cannot be
    /// stored is reported (the message comes again when the name resumes: repeated,
    /// never skipped), once per streak of failures.
    private func acknowledge(_ sequence: UInt64) {
        var failure: WormholeError?
        do throws(WormholeError) {
            try reader.acknowledge(sequence)
        } catch {
            failure = error
        }
        let succeeded = failure == nil
        if state.withLock({ $0.acknowledged(succeeded) }), let failure { onError(failure) }
    }

    /// Whether the listener was cancelled.
    public var isCancelled: Bool { state.withLock { $0.isCancelled } }

    /// Stops this listener and releases its watch and its claim on the log. No call of
    /// the listener starts after this returns: a call in progress on another thread is
    /// waited for (from inside the listener itself, `cancel()` returns at once). Calling
    /// it again does nothing. A durable listener that cancels its token from inside its
    /// own call has not handled that message: it comes again when the name resumes (also
    /// when a cancel from another thread came first and is waiting for that call).
    public func cancel() {
        _ = cancelling()
    }

    /// ``cancel()``; returns whether this call cancelled the listener.
    private func cancelling() -> Bool {
        let thread = UInt(pthread_self())
        let action = state.withLock { $0.cancel(from: thread) }
        guard action != .none else { return false }
        observation.cancel()
        switch action {
        case .closeReader: reader.close()
        case .waitForDrain: state.waitWhileDraining(elsewhereThan: thread)
        case .fromCall, .none: break
        }
        onCancel()
        return true
    }

    public static func == (lhs: ListenerToken, rhs: ListenerToken) -> Bool { lhs === rhs }
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
}

/// A ``ListenerStateMachine`` behind a mutex, with a condition on which a cancel waits
/// for a drain in progress on another thread to end.
final class ListenerState: @unchecked Sendable {
    private let condition = MonotonicCondition()
    // Guarded by `condition`'s mutex.
    private var machine: ListenerStateMachine

    init(_ machine: ListenerStateMachine) {
        self.machine = machine
    }

    /// Runs one transition under the lock.
    func withLock<Result>(_ body: (inout ListenerStateMachine) -> Result) -> Result {
        condition.lock()
        defer { condition.unlock() }
        return body(&machine)
    }

    /// A cancelled listener's drain closed the reader: the drain ends, and the cancels
    /// waiting for it return.
    func readerClosed() {
        condition.lock()
        machine.readerClosed()
        condition.broadcast()
        condition.unlock()
    }

    /// Returns once no drain runs on another thread than `thread`.
    func waitWhileDraining(elsewhereThan thread: UInt) {
        condition.lock()
        while machine.drains(elsewhereThan: thread) { condition.wait() }
        condition.unlock()
    }
}

extension WormholeTransitingEvent {
    fileprivate var isReplaced: Bool {
        if case .replaced = self { return true }
        return false
    }
}

/// What an ``EventRelay`` forwards events to: a listener or a work-queue member.
protocol TransitingEventReceiver: AnyObject, Sendable {
    func receive(_ event: WormholeTransitingEvent)
}

/// Forwards observation events to a listener or work-queue member that did not exist yet
/// when the observation began.
///
/// It holds the receiver weakly and hands it out of the lock as an object reference. An
/// earlier version kept a closure as the lock's value: each `withLock` re-abstracted it
/// and wrote it back wrapped in one more thunk, so the n-th event ran through n thunks
/// and kept them all (about 20 bytes per event: found by the soak test's memory check
/// and by the benchmark's instruction counts; the work-queue members, responders among
/// them, had kept that version until the round-trip profile found it again).
///
/// Events that come before ``connect(_:)`` have no receiver yet. A wake-up or a
/// replacement is made up for by the receiver (its first drain reads, and looks at the
/// file at the log's name); a failure (the observation ended: nothing will wake the
/// receiver again) is kept and handed back by ``connect(_:)``, so that it is not lost.
final class EventRelay: Sendable {
    private struct Target: @unchecked Sendable {
        weak var receiver: (any TransitingEventReceiver)?
        var connected = false
        var earlyFailure: WormholeError?
    }
    private let target = Locked(Target())

    /// Connects `receiver`; returns the first failure that came before, for the receiver
    /// to act on.
    func connect(_ receiver: any TransitingEventReceiver) -> WormholeError? {
        target.withLock { target in
            target.receiver = receiver
            target.connected = true
            defer { target.earlyFailure = nil }
            return target.earlyFailure
        }
    }

    func forward(_ event: WormholeTransitingEvent) {
        let receiver = target.withLock { target in
            if !target.connected, target.earlyFailure == nil, case .failed(let error) = event { target.earlyFailure = error }
            return target.receiver
        }
        receiver?.receive(event)
    }
}

/// An observation made while it is held, and given up when no hold remains: the reply
/// listener of a process whose requests block is drained by the blocked threads, which
/// watch its log themselves, so the process's reader thread is woken by neither each
/// request's append nor each reply's, except while a request needs it (or the requester
/// is idle: see ``ReplyRouter``).
private final class OnDemandObservation: WormholeTransitingObservation {
    private struct State {
        var observation: (any WormholeTransitingObservation)?
        var holds = 0
        var cancelled = false
    }
    private let make: @Sendable () throws(WormholeError) -> any WormholeTransitingObservation
    private let state = Locked(State(), rank: .observationHolds)

    init(_ make: @escaping @Sendable () throws(WormholeError) -> any WormholeTransitingObservation) {
        self.make = make
    }

    /// Takes a hold; makes the observation for the first. Returns whether this call made
    /// it. A hold that fails to make it is not taken.
    func hold() throws(WormholeError) -> Bool {
        // The observation is made and given up under the lock, so that they happen in the
        // order of the holds (the engine never calls back into this lock).
        try state.withLock { (state) throws(WormholeError) -> Bool in
            guard !state.cancelled else { return false }
            guard state.observation == nil else {
                state.holds += 1
                return false
            }
            state.observation = try make()
            state.holds += 1
            return true
        }
    }

    func release() {
        state.withLock { state in
            guard state.holds > 0 else { return }
            state.holds -= 1
            if state.holds == 0 {
                state.observation?.cancel()
                state.observation = nil
            }
        }
    }

    func cancel() {
        let observation = state.withLock { state -> (any WormholeTransitingObservation)? in
            defer { (state.observation, state.cancelled) = (nil, true) }
            return state.observation
        }
        observation?.cancel()
    }
}
