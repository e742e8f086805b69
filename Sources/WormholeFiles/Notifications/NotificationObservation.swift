import Dispatch
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Logging
import Synchronization
@_spi(Backend) import WormholeCore

/// One observer registered with ``DarwinNotificationCenter/addObserver(forName:queue:onError:using:)``.
///
/// Keep it for as long as you want to be notified; ``cancel()`` stops the notifications
/// and releases the watch. Dropping the last reference cancels it too.
public final class NotificationObservation: Sendable {
    /// The name observed.
    public let name: String
    private let queue: DispatchQueue
    private let block: @Sendable (String) -> Void
    private let onError: (@Sendable (WormholeError) -> Void)?
    private let subscription = Locked<EngineSubscription?>(nil)
    private let cancelled = Atomic<Bool>(false)
    private let scheduled = Atomic<Bool>(false)

    package init(name: String, queue: DispatchQueue?, onError: (@Sendable (WormholeError) -> Void)? = nil, block: @escaping @Sendable (String) -> Void) {
        self.name = name
        self.queue = DispatchQueue(label: "Wormhole.observer.\(name)", target: queue)
        self.onError = onError
        self.block = block
    }

    package func start(_ engineSubscription: EngineSubscription) {
        subscription.withLock { $0 = engineSubscription }
        if cancelled.load(ordering: .acquiring) { cancel() }
    }

    package func receive(_ notice: DarwinNotificationCenter.Notice) {
        switch notice {
        case .posted:
            // Posts that arrive before the block has run again collapse into one call.
            guard !scheduled.exchange(true, ordering: .acquiringAndReleasing) else { return }
            queue.async { [self] in
                scheduled.store(false, ordering: .releasing)
                if !cancelled.load(ordering: .acquiring) { block(name) }
            }
        case .failed(let error):
            cancel()
            if let onError {
                queue.async { onError(error) }
            } else {
                Logger(label: "Wormhole").error("observer of '\(name)' stopped: \(error)")
            }
        }
    }

    /// Whether ``cancel()`` was called.
    public var isCancelled: Bool { cancelled.load(ordering: .acquiring) }

    /// Stops notifications and releases the watch. No call of the block starts after this
    /// returns.
    public func cancel() {
        cancelled.store(true, ordering: .releasing)
        subscription.withLock { $0 }?.cancel()
    }

    deinit { cancel() }
}
