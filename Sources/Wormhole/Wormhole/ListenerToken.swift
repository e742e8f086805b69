import Foundation
import Synchronization

/// One listener of a ``Wormhole``; returned by
/// ``Wormhole/listenForMessage(withIdentifier:as:startingFrom:queue:onError:listener:)``.
///
/// The listener runs until ``cancel()`` is called, its wormhole stops listening to its
/// identifier, or the wormhole is released. Dropping the token does not stop it.
public final class ListenerToken: Sendable, Hashable {
    /// The identifier listened to.
    public let identifier: String

    private let queue: DispatchQueue
    private let reader: Locked<(any WormholeTransitingReader)?>
    private let observation: Locked<(any WormholeTransitingObservation)?>
    private let onError: @Sendable (WormholeError) -> Void
    private let listener: @Sendable (WormholeRecord) -> Void
    private let onCancel: @Sendable () -> Void
    private let cancelled = Atomic<Bool>(false)
    private let drainScheduled = Atomic<Bool>(false)

    init(
        transiting: any WormholeTransiting,
        identifier: String,
        start: Wormhole.StartingPoint,
        queue: DispatchQueue?,
        onError: @escaping @Sendable (WormholeError) -> Void,
        listener: @escaping @Sendable (WormholeRecord) -> Void,
        onCancel: @escaping @Sendable () -> Void
    ) throws(WormholeError) {
        self.identifier = identifier
        self.queue = DispatchQueue(label: "Wormhole.listener.\(identifier)", target: queue)
        self.onError = onError
        self.listener = listener
        self.onCancel = onCancel
        // Watch first, then find the starting position: a message passed in between
        // wakes a drain that finds it.
        let relay = EventRelay()
        let observation = try transiting.observe(identifier: identifier) { relay.forward($0) }
        let reader: any WormholeTransitingReader
        do throws(WormholeError) {
            reader = try transiting.makeReader(identifier: identifier, startingFrom: start)
        } catch {
            observation.cancel()
            throw error
        }
        self.reader = Locked(reader)
        self.observation = Locked(observation)
        relay.connect(self)
        // Anything passed before the relay was connected is found by this first drain.
        scheduleDrain()
    }

    fileprivate func receive(_ event: WormholeTransitingEvent) {
        switch event {
        case .wake:
            scheduleDrain()
        case .failed(let error):
            queue.async { [self] in
                if !isCancelled { onError(error) }
            }
        }
    }

    /// Wake-ups that arrive before the drain has started again collapse into one: the
    /// drain reads everything there is.
    private func scheduleDrain() {
        guard !drainScheduled.exchange(true, ordering: .acquiringAndReleasing) else { return }
        queue.async { [self] in
            drainScheduled.store(false, ordering: .sequentiallyConsistent)
            drain()
        }
    }

    /// Reads and delivers until a read finds nothing new. The first read hands over
    /// what was committed when it looked; the last one, after delivery, checks that
    /// nothing came since and that the log file was not replaced meanwhile.
    private func drain() {
        let maximumCount = 256
        while !isCancelled {
            let batch: [Result<WormholeRecord, WormholeError>]
            do throws(WormholeError) {
                batch = try reader.withLock { (reader) throws(WormholeError) -> [Result<WormholeRecord, WormholeError>] in
                    try reader?.read(maximumCount: maximumCount) ?? []
                }
            } catch {
                onError(error)
                return
            }
            if batch.isEmpty { return }
            for item in batch {
                if isCancelled { return }
                switch item {
                case .success(let record): listener(record)
                case .failure(let error): onError(error)
                }
            }
        }
    }

    /// Whether the listener was cancelled.
    public var isCancelled: Bool { cancelled.load(ordering: .acquiring) }

    /// Stops this listener and releases its watch and its claim on the log. No call of
    /// the listener starts after this returns. Calling it again does nothing.
    public func cancel() {
        guard !cancelled.exchange(true, ordering: .acquiringAndReleasing) else { return }
        observation.withLock { observation in
            observation?.cancel()
            observation = nil
        }
        reader.withLock { reader in
            reader?.close()
            reader = nil
        }
        onCancel()
    }

    public static func == (lhs: ListenerToken, rhs: ListenerToken) -> Bool { lhs === rhs }
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
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

