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

/// One listener of a ``Wormhole``; returned by
/// ``Wormhole/listenForMessage(withIdentifier:as:startingFrom:queue:onError:listener:)``.
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
public final class ListenerToken: Sendable, Hashable {
    /// The identifier listened to.
    public let identifier: String

    private let queue: DispatchQueue?
    private let reader: Locked<(any WormholeTransitingReader)?>
    private let observation: Locked<(any WormholeTransitingObservation)?>
    private let onError: @Sendable (WormholeError) -> Void
    private let listener: @Sendable (WormholeRecord) -> Void
    private let onCancel: @Sendable () -> Void
    /// A durable listener's position moves after each call of the listener returns.
    private let isDurable: Bool
    /// Cancelled by the listener itself, during its call: that message is not handled.
    private let declined = Atomic<Bool>(false)
    private let cancelled = Atomic<Bool>(false)
    private let drainScheduled = Atomic<Bool>(false)
    /// Held while the listener is called: ``cancel()`` from another thread waits for a
    /// call in progress, so that no call starts after it returns.
    private let delivery = DeliveryLock()

    convenience init(
        transiting: any WormholeTransiting,
        identifier: String,
        start: Wormhole.StartingPoint,
        durableName: String? = nil,
        queue: DispatchQueue?,
        onError: @escaping @Sendable (WormholeError) -> Void,
        listener: @escaping @Sendable (WormholeRecord) -> Void,
        onCancel: @escaping @Sendable () -> Void
    ) throws(WormholeError) {
        // Watch first, then find the starting position: a message passed in between
        // wakes a drain that finds it.
        let relay = EventRelay()
        let observation = try transiting.observe(identifier: identifier) { relay.forward($0) }
        let reader: any WormholeTransitingReader
        do throws(WormholeError) {
            if let durableName {
                reader = try transiting.makeReader(identifier: identifier, startingFrom: start, durableName: durableName)
            } else {
                reader = try transiting.makeReader(identifier: identifier, startingFrom: start)
            }
        } catch {
            observation.cancel()
            throw error
        }
        self.init(identifier: identifier, relay: relay, observation: observation, reader: reader, isDurable: durableName != nil,
                  queue: queue, onError: onError, listener: listener, onCancel: onCancel)
    }

    /// The listener for asynchronous callers: watching and finding the starting position
    /// suspend the caller (a back end that waits on a server blocks no thread for it).
    static func make(
        transiting: any WormholeTransiting,
        identifier: String,
        start: Wormhole.StartingPoint,
        queue: DispatchQueue?,
        onError: @escaping @Sendable (WormholeError) -> Void,
        listener: @escaping @Sendable (WormholeRecord) -> Void,
        onCancel: @escaping @Sendable () -> Void
    ) async throws(WormholeError) -> ListenerToken {
        let relay = EventRelay()
        let observation = try await transiting.observe(identifier: identifier) { relay.forward($0) }
        let reader: any WormholeTransitingReader
        do throws(WormholeError) {
            reader = try await transiting.makeReader(identifier: identifier, startingFrom: start)
        } catch {
            observation.cancel()
            throw error
        }
        return ListenerToken(identifier: identifier, relay: relay, observation: observation, reader: reader, isDurable: false,
                             queue: queue, onError: onError, listener: listener, onCancel: onCancel)
    }

    private init(
        identifier: String,
        relay: EventRelay,
        observation: any WormholeTransitingObservation,
        reader: sending any WormholeTransitingReader,
        isDurable: Bool,
        queue: DispatchQueue?,
        onError: @escaping @Sendable (WormholeError) -> Void,
        listener: @escaping @Sendable (WormholeRecord) -> Void,
        onCancel: @escaping @Sendable () -> Void
    ) {
        self.identifier = identifier
        self.queue = queue.map { DispatchQueue(label: "Wormhole.listener.\(identifier)", target: $0) }
        self.startQueue = self.queue ?? DispatchQueue(label: "Wormhole.listener.\(identifier).start")
        self.onError = onError
        self.listener = listener
        self.onCancel = onCancel
        self.reader = Locked(reader)
        self.isDurable = isDurable
        self.observation = Locked(observation)
        relay.connect(self)
        // Anything passed before the relay was connected is found by this first drain,
        // on a queue: the caller's thread is not made to run the listener.
        startQueue.async { [self] in drain() }
    }

    /// Where a listener without a queue runs its first drain (what its starting point
    /// replays) and a failure report: a serial queue of its own, so that one listener
    /// blocking there holds up no other. Not a global queue: using one starts Dispatch's
    /// once-a-second pool monitor for the life of the process, which would wake an idle
    /// listener every second.
    private let startQueue: DispatchQueue

    fileprivate func receive(_ event: WormholeTransitingEvent) {
        switch event {
        case .wake:
            wake()
        case .replaced:
            reader.withLock { $0?.invalidate() }
            wake()
        case .failed(let error):
            // Nothing will wake this listener again: it stops, and says why.
            startQueue.async { [self] in
                delivery.run {
                    guard !isCancelled else { return }
                    cancel()
                    onError(error)
                }
            }
        }
    }

    /// Without a queue: drain here, on the thread that was woken. With one: wake-ups
    /// that arrive before the drain has started again collapse into one.
    private func wake() {
        guard let queue else {
            drain()
            return
        }
        guard !drainScheduled.exchange(true, ordering: .acquiringAndReleasing) else { return }
        queue.async { [self] in
            drainScheduled.store(false, ordering: .sequentiallyConsistent)
            drain()
        }
    }

    /// Reads and delivers until a read finds nothing new. Drains of one token never
    /// overlap: the delivery lock is held for the whole drain.
    private func drain() {
        let maximumCount = 256
        delivery.run {
            while !isCancelled {
                let batch: [Result<WormholeRecord, WormholeError>]
                do throws(WormholeError) {
                    batch = try reader.withLock { (reader) throws(WormholeError) -> [Result<WormholeRecord, WormholeError>] in
                        try reader?.read(maximumCount: maximumCount) ?? []
                    }
                } catch {
                    if isCancelled { return }
                    if error.isOutOfResources {
                        retryLater(after: error)
                    } else {
                        onError(error)
                    }
                    return
                }
                retryDelay = nil
                if batch.isEmpty { return }
                for item in batch {
                    if isCancelled { return }
                    switch item {
                    case .success(let record):
                        listener(record)
                        // Cancelled from inside the call: not counted as handled. (A cancel
                        // from elsewhere waits for this call, acknowledgement included.)
                        if isDurable && !declined.load(ordering: .acquiring) { acknowledge(record.sequence) }
                    case .failure(let error): onError(error)
                    }
                }
                // A short batch is the end, unless the reader stopped at the end of a
                // replaced log: then the rest is in the new one, and no event will come
                // for it.
                if batch.count < maximumCount && !reader.withLock({ $0?.mayHaveMore ?? false }) { return }
            }
        }
    }

    /// Moves a durable listener's position past `sequence`. A position that cannot be
    /// stored is reported (the message comes again when the name resumes: repeated,
    /// never skipped), once per streak of failures.
    private func acknowledge(_ sequence: UInt64) {
        do throws(WormholeError) {
            try reader.withLock { (reader) throws(WormholeError) in try reader?.acknowledge(sequence) }
            acknowledgementFailing = false
        } catch {
            if !acknowledgementFailing { onError(error) }
            acknowledgementFailing = true
        }
    }
    /// Only touched inside a drain (under the delivery lock).
    private nonisolated(unsafe) var acknowledgementFailing = false

    /// While a read fails for want of a descriptor or memory: how long until the next
    /// try. Only touched inside a drain (under the delivery lock).
    private nonisolated(unsafe) var retryDelay: Double?

    /// A read that failed for want of a descriptor (EMFILE, ENFILE) or memory leaves the
    /// message where it is: the drain is tried again later, at growing intervals up to a
    /// second, until it succeeds or the listener is cancelled. The listener's `onError`
    /// hears of it once per streak, so nothing is skipped in silence.
    private func retryLater(after error: WormholeError) {
        if retryDelay == nil {
            onError(WormholeError(error.code, "\(error.message); no message is skipped: reading again until it succeeds",
                                  path: error.path, errno: error.errno))
        }
        // Wake-ups meanwhile drain (and fail) too; one timer is enough.
        guard !retryScheduled.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let delay = min(1, (retryDelay ?? 0.005) * 2)
        retryDelay = delay
        RetryClock.shared.schedule(after: delay) { [weak self] in
            guard let self else { return }
            (queue ?? startQueue).async { [self] in
                retryScheduled.store(false, ordering: .sequentiallyConsistent)
                drain()
            }
        }
    }
    private let retryScheduled = Atomic<Bool>(false)

    /// Whether the listener was cancelled.
    public var isCancelled: Bool { cancelled.load(ordering: .acquiring) }

    /// Stops this listener and releases its watch and its claim on the log. No call of
    /// the listener starts after this returns: a call in progress on another thread is
    /// waited for (from inside the listener itself, `cancel()` returns at once). Calling
    /// it again does nothing. A durable listener that cancels its token from inside its
    /// own call has not handled that message: it comes again when the name resumes.
    public func cancel() {
        if delivery.isHeldByCurrentThread { declined.store(true, ordering: .releasing) }
        guard !cancelled.exchange(true, ordering: .acquiringAndReleasing) else { return }
        observation.withLock { observation in
            observation?.cancel()
            observation = nil
        }
        delivery.waitForCallInProgress()
        reader.withLock { reader in
            reader?.close()
            reader = nil
        }
        onCancel()
    }

    public static func == (lhs: ListenerToken, rhs: ListenerToken) -> Bool { lhs === rhs }
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
}

/// A mutex that knows which thread holds it, so that the holder can ask to wait for it
/// without deadlocking itself.
final class DeliveryLock: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let owner = Atomic<UInt>(0)

    init() {
        mutex = .allocate(capacity: 1)
        var attributes = pthread_mutexattr_t()
        pthread_mutexattr_init(&attributes)
        pthread_mutexattr_settype(&attributes, Int32(PTHREAD_MUTEX_RECURSIVE))
        pthread_mutex_init(mutex, &attributes)
        pthread_mutexattr_destroy(&attributes)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    func run(_ body: () -> Void) {
        pthread_mutex_lock(mutex)
        let previous = owner.exchange(UInt(pthread_self()), ordering: .relaxed)
        body()
        owner.store(previous, ordering: .relaxed)
        pthread_mutex_unlock(mutex)
    }

    /// Whether the calling thread is inside ``run(_:)``.
    var isHeldByCurrentThread: Bool { owner.load(ordering: .relaxed) == UInt(pthread_self()) }

    /// Returns once no other thread is inside ``run(_:)``; at once when called from
    /// inside it.
    func waitForCallInProgress() {
        if owner.load(ordering: .relaxed) == UInt(pthread_self()) { return }
        pthread_mutex_lock(mutex)
        pthread_mutex_unlock(mutex)
    }
}

/// Forwards observation events to a listener that did not exist yet when the
/// observation began.
///
/// It holds the token weakly and hands it out of the lock as an object reference. An
/// earlier version kept a closure as the lock's value: each `withLock` re-abstracted it
/// and wrote it back wrapped in one more thunk, so the n-th event ran through n thunks
/// and kept them all (about 20 bytes per event: found by the soak test's memory check
/// and by the benchmark's instruction counts).
final class EventRelay: Sendable {
    private struct Target: @unchecked Sendable {
        weak var token: ListenerToken?
    }
    private let target = Locked(Target())

    func connect(_ token: ListenerToken) {
        target.withLock { $0.token = token }
    }

    func forward(_ event: WormholeTransitingEvent) {
        let token = target.withLock { $0.token }
        token?.receive(event)
    }
}

