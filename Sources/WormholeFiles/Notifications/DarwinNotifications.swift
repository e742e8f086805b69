@_spi(Backend) import WormholeCore
/// The posts of one name, as an asynchronous sequence; see
/// ``DarwinNotificationCenter/notifications(named:)``.
///
/// Each element is the posted name. Posts that arrive while the consumer is busy
/// collapse into one element, as Darwin notifications coalesce.
package struct DarwinNotifications: AsyncSequence, Sendable {
    public typealias Element = String
    public typealias Failure = WormholeError

    package let center: DarwinNotificationCenter
    package let name: String

    public func makeAsyncIterator() -> Iterator {
        Iterator(center: center, name: name)
    }

    /// Iterates the posts; not Sendable: one task consumes it.
    public struct Iterator: AsyncIteratorProtocol {
        private let center: DarwinNotificationCenter
        private let name: String
        private var subscription: Subscription?

        package init(center: DarwinNotificationCenter, name: String) {
            self.center = center
            self.name = name
        }

        public mutating func next() async throws(WormholeError) -> String? {
            if subscription == nil {
                try Identifier.validate(name, kind: "notification name")
                let signal = WakeSignal()
                let engineSubscription = try center.subscribe(name) { notice in
                    switch notice {
                    case .posted: signal.signal()
                    case .failed(let error): signal.finish(throwing: error)
                    }
                }
                subscription = Subscription(engineSubscription, signal: signal)
            }
            guard let subscription, try await subscription.signal.wait() else {
                self.subscription?.cancel()
                return nil
            }
            return name
        }
    }

    /// Owns the engine subscription (which unsubscribes itself when dropped).
    package final class Subscription {
        package let engineSubscription: EngineSubscription
        package let signal: WakeSignal
        package init(_ engineSubscription: EngineSubscription, signal: WakeSignal) {
            self.engineSubscription = engineSubscription
            self.signal = signal
        }
        package func cancel() {
            signal.finish()
            engineSubscription.cancel()
        }
    }
}
