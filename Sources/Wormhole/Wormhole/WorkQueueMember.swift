import Dispatch
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Synchronization

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
    /// (its lock released), besides each new message. Seconds.
    public var redeliveryInterval: Double

    public init(maximumDeliveries: Int = 5, deadLetterIdentifier: String? = nil,
                startingFrom: WormholeStartingPoint = .history, redeliveryInterval: Double = 0.25) {
        self.maximumDeliveries = maximumDeliveries
        self.deadLetterIdentifier = deadLetterIdentifier
        self.startingFrom = startingFrom
        self.redeliveryInterval = redeliveryInterval
    }

    /// The dead-letter identifier for a queue of `identifier`.
    public func deadLetters(of identifier: String) -> String {
        deadLetterIdentifier ?? identifier + ".dead-letters"
    }
}

/// A member of a work queue, returned by
/// ``Wormhole/listenForMessage(withIdentifier:as:workQueue:options:queue:onError:listener:)``:
/// it takes messages from the queue, one at a time, until ``cancel()``.
public final class WorkQueueMember: Sendable {
    /// The identifier whose messages the queue hands out.
    public let identifier: String
    /// The queue's name.
    public let name: String

    private let file: Locked<(any WormholeTransitingWorkQueue)?>
    private let work: DispatchQueue
    private let options: WorkQueueOptions
    private let deadLetters: String
    private let handler: @Sendable (WormholeRecord, Int) throws -> Void
    private let onError: @Sendable (WormholeError) -> Void
    private let onCancel: @Sendable () -> Void
    private let cancelled = Atomic<Bool>(false)
    private let drainScheduled = Atomic<Bool>(false)
    /// The log may have been replaced (compacted, made anew): the reader looks again.
    private let replaced = Atomic<Bool>(false)
    private let observation = Locked<(any WormholeTransitingObservation)?>(nil)
    private let timer: Locked<DispatchTimer?>

    /// A dispatch source, whose calls are safe from any thread though its type does not
    /// say `Sendable`: held behind the lock for `cancel()`.
    private struct DispatchTimer: @unchecked Sendable {
        let source: any DispatchSourceTimer
    }

    init(transiting: any WormholeTransiting, identifier: String, name: String, options: WorkQueueOptions, queue: DispatchQueue?,
         onError: @escaping @Sendable (WormholeError) -> Void,
         handler: @escaping @Sendable (WormholeRecord, Int) throws -> Void,
         onCancel: @escaping @Sendable () -> Void) throws(WormholeError) {
        guard options.maximumDeliveries >= 1 else {
            throw WormholeError(.invalidConfiguration, "maximumDeliveries is \(options.maximumDeliveries); a message must be handed out at least once")
        }
        guard options.redeliveryInterval > 0, options.redeliveryInterval.isFinite else {
            throw WormholeError(.invalidConfiguration, "redeliveryInterval is \(options.redeliveryInterval); it must be a positive number of seconds")
        }
        let deadLetters = options.deadLetters(of: identifier)
        try Identifier.validate(deadLetters, kind: "dead-letter identifier")
        guard deadLetters != identifier else {
            throw WormholeError(.invalidConfiguration, "the dead-letter identifier of a queue of '\(identifier)' cannot be '\(identifier)' itself")
        }
        self.identifier = identifier
        self.name = name
        self.options = options
        self.deadLetters = deadLetters
        self.handler = handler
        self.onError = onError
        self.onCancel = onCancel
        let work = DispatchQueue(label: "Wormhole.workQueue.\(identifier).\(name)", target: queue)
        self.work = work
        // Watch first, then join: a message passed in between wakes a drain that finds it.
        let relay = Locked<(@Sendable (WormholeTransitingEvent) -> Void)?>(nil)
        let observation = try transiting.observe(identifier: identifier) { event in
            relay.withLock { $0 }?(event)
        }
        do throws(WormholeError) {
            file = Locked(try transiting.joinWorkQueue(identifier: identifier, name: name, startingFrom: options.startingFrom))
        } catch {
            observation.cancel()
            throw error
        }
        self.observation.withLock { $0 = observation }
        let timer = DispatchSource.makeTimerSource(queue: work)
        // Handed to the lock once it is set up (for cancel()); not touched here after that.
        self.timer = Locked(nil)
        work.setSpecific(key: Self.onWorkQueue, value: ObjectIdentifier(self))
        relay.withLock { $0 = { [weak self] event in self?.receive(event) } }
        timer.schedule(deadline: .now() + options.redeliveryInterval, repeating: options.redeliveryInterval,
                       leeway: .milliseconds(Int(options.redeliveryInterval * 250)))
        timer.setEventHandler { [weak self] in self?.drain() }
        timer.resume()
        self.timer.withLock { $0 = DispatchTimer(source: timer) }
        scheduleDrain()
    }

    /// Whether ``cancel()`` was called.
    public var isCancelled: Bool { cancelled.load(ordering: .acquiring) }

    /// Leaves the queue: no message is taken after it returns. Called from elsewhere than
    /// the member's own handler, it waits for a message being handled to be handled and
    /// acknowledged; called from the handler, that message is acknowledged when the
    /// handler returns. What this member still held goes to the others.
    public func cancel() {
        guard !cancelled.exchange(true, ordering: .acquiringAndReleasing) else { return }
        observation.withLock { $0?.cancel(); $0 = nil }
        timer.withLock { $0?.source.cancel(); $0 = nil }
        let leave: @Sendable () -> Void = { [file] in file.withLock { $0?.close(); $0 = nil } }
        if DispatchQueue.getSpecific(key: Self.onWorkQueue) == ObjectIdentifier(self) {
            work.async(execute: leave)
        } else {
            work.sync(execute: leave)
        }
        onCancel()
    }

    /// Marks the member's own queue, so that ``cancel()`` knows when it is called from
    /// the handler.
    private static let onWorkQueue = DispatchSpecificKey<ObjectIdentifier>()

    private func receive(_ event: WormholeTransitingEvent) {
        switch event {
        case .wake: break
        case .replaced: replaced.store(true, ordering: .releasing)
        case .failed(let error): onError(error)
        }
        scheduleDrain()
    }

    private func scheduleDrain() {
        guard !drainScheduled.exchange(true, ordering: .acquiringAndReleasing) else { return }
        work.async { [self] in
            drainScheduled.store(false, ordering: .sequentiallyConsistent)
            drain()
        }
    }

    /// Takes, handles and acknowledges until the queue has nothing for this member. A
    /// message handled is acknowledged with the next take (one statement on a back end
    /// that can), or alone once the member is cancelled.
    private func drain() {
        let maximum = UInt32(clamping: options.maximumDeliveries)
        var handled: UInt64?
        while !isCancelled {
            let delivery: WormholeWorkQueueDelivery?
            let invalidate = replaced.exchange(false, ordering: .acquiringAndReleasing)
            do throws(WormholeError) {
                delivery = try file.withLock { [handled] (file) throws(WormholeError) -> WormholeWorkQueueDelivery? in
                    if invalidate { file?.invalidate() }
                    if let handled {
                        return try file?.acknowledge(handled, thenTakeWithMaximumDeliveries: maximum, deadLetters: deadLetters, report: onError)
                    }
                    return try file?.take(maximumDeliveries: maximum, deadLetters: deadLetters, report: onError)
                }
            } catch {
                // An acknowledgement not stored: the message is handed out again
                // (repeated, never skipped).
                onError(error)
                return
            }
            handled = nil
            guard let delivery else { return }
            let sequence = delivery.record.sequence
            do {
                try handler(delivery.record, Int(delivery.deliveries))
                handled = sequence
            } catch {
                do throws(WormholeError) {
                    try file.withLock { (file) throws(WormholeError) in
                        try file?.giveBack(sequence, reason: "the handler threw: \(error)", maximumDeliveries: maximum, deadLetters: deadLetters)
                    }
                } catch {
                    onError(error)
                    return
                }
            }
        }
        // Cancelled (cancel() leaves the queue after this drain): the last message handled
        // is acknowledged before that.
        guard let handled else { return }
        do throws(WormholeError) {
            try file.withLock { (file) throws(WormholeError) in try file?.acknowledge(handled) }
        } catch {
            onError(error)
        }
    }
}
