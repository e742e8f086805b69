import Synchronization
@_spi(Backend) import WormholeCore
@_spi(Backend) import WormholeFiles

/// The messages of one identifier as an asynchronous sequence; see
/// ``Wormhole/messages(withIdentifier:as:startingFrom:onError:)``.
///
/// The store is the buffer: the iterator reads from the log when it is asked for the
/// next element, so a slow consumer holds no messages in memory and loses none.
struct WormholeMessages<Message: Sendable>: AsyncSequence, Sendable {
    /// Each element: a decoded message, or a ``WormholeRecord`` for
    /// ``Wormhole/records(withIdentifier:startingFrom:onError:)``.
    public typealias Element = Message
    /// What ends the sequence with an error: a listener that cannot start or go on.
    public typealias Failure = WormholeError

    let wormhole: Wormhole
    let identifier: String
    let start: Wormhole.StartingPoint
    /// A durable listener's name: each element is acknowledged when the next one is
    /// requested.
    var durableName: String? = nil
    let onError: @Sendable (WormholeError) -> Void
    let transform: @Sendable (WormholeRecord) throws(WormholeError) -> Message

    public func makeAsyncIterator() -> Iterator {
        Iterator(sequence: self)
    }

    /// Iterates the messages; not Sendable: one task consumes it.
    public struct Iterator: AsyncIteratorProtocol {
        private let sequence: WormholeMessages
        private var source: Source?

        init(sequence: WormholeMessages) {
            self.sequence = sequence
        }

        /// The next message, waiting until one is passed; `nil` when the task is
        /// cancelled. Throws when listening cannot start or go on.
        public mutating func next() async throws(WormholeError) -> Message? {
            if source == nil {
                source = try await Source.make(sequence)
            }
            guard let source else { return nil }
            // Asking for the next element says the previous one was handled. A position
            // that cannot be stored goes to onError: the element comes again when the
            // name resumes (repeated, never skipped).
            do throws(WormholeError) {
                try await source.acknowledgeDelivered()
            } catch {
                sequence.onError(error)
            }
            while true {
                if Task.isCancelled {
                    source.close()
                    return nil
                }
                if let item = try await source.nextBuffered() {
                    switch item {
                    case .success(let record):
                        do throws(WormholeError) {
                            let message = try sequence.transform(record)
                            source.delivered = record.sequence
                            return message
                        } catch {
                            sequence.onError(error)
                        }
                    case .failure(let error):
                        sequence.onError(error)
                    }
                    continue
                }
                source.readAgainToPublishPosition()
                guard try await source.signal.wait() else {
                    source.close()
                    return nil
                }
            }
        }
    }

    /// The watch, the reader and the registration of one iteration; released when the
    /// iterator is dropped or the iteration ends.
    final class Source {
        let signal = WakeSignal()
        /// Set on the inotify thread when the log may have been replaced; the consumer
        /// tells its reader before the next read.
        private let replaced = Locked(false)
        private let wormhole: Wormhole
        private let registration: UInt64
        private var observation: (any WormholeTransitingObservation)?
        private var reader: (any WormholeTransitingReader)?
        private var buffer: [Result<WormholeRecord, WormholeError>] = []
        private var index = 0

        private init(_ wormhole: Wormhole) {
            self.wormhole = wormhole
            registration = wormhole.makeRegistrationID()
        }

        /// Watches the identifier, then opens the reader, on a thread of ``BlockingWork``'s
        /// while the caller is suspended (so are its reads and acknowledgements).
        static func make(_ sequence: WormholeMessages) async throws(WormholeError) -> Source {
            try Identifier.validate(sequence.identifier)
            let source = Source(sequence.wormhole)
            try await source.start(sequence)
            return source
        }

        private func start(_ sequence: WormholeMessages) async throws(WormholeError) {
            let signal = self.signal
            let transiting = wormhole.transiting
            let (identifier, start, durableName) = (sequence.identifier, sequence.start, sequence.durableName)
            // Registered before the reader exists: a `stopListeningForMessage` made once it
            // holds its claim, while this task has not resumed yet, ends the sequence (it
            // found no registration before, and the sequence waited on for good).
            wormhole.register(registration, sequence.identifier) { signal.finish() }
            let opened: HandedOver<(any WormholeTransitingObservation, any WormholeTransitingReader)>
            do throws(WormholeError) {
                opened = try await open(transiting, identifier, start, durableName)
            } catch {
                wormhole.unregister(registration)
                throw error
            }
            observation = opened.value.0
            reader = opened.value.1
        }

        /// Watches `identifier`, then opens its reader, on a thread of ``BlockingWork``'s.
        private func open(_ transiting: any WormholeTransiting, _ identifier: String, _ start: Wormhole.StartingPoint,
                          _ durableName: String?) async throws(WormholeError) -> HandedOver<(any WormholeTransitingObservation, any WormholeTransitingReader)> {
            let signal = self.signal
            let replaced = self.replaced
            return try await BlockingWork.run { () throws(WormholeError) -> HandedOver<(any WormholeTransitingObservation, any WormholeTransitingReader)> in
                let observation = try transiting.observe(identifier: identifier) { event in
                    switch event {
                    case .wake: signal.signal()
                    case .replaced:
                        replaced.withLock { $0 = true }
                        signal.signal()
                    case .failed(let error): signal.finish(throwing: error)
                    }
                }
                do throws(WormholeError) {
                    let reader: any WormholeTransitingReader
                    if let durableName {
                        reader = try transiting.makeReader(identifier: identifier, startingFrom: start, durableName: durableName)
                    } else {
                        reader = try transiting.makeReader(identifier: identifier, startingFrom: start)
                    }
                    return HandedOver((observation, reader))
                } catch {
                    observation.cancel()
                    throw error
                }
            }
        }

        /// The last element handed out, not yet acknowledged.
        var delivered: UInt64?

        func acknowledgeDelivered() async throws(WormholeError) {
            guard let sequence = delivered else { return }
            delivered = nil
            guard let reader else { return }
            let handed = HandedOver(reader)
            try await BlockingWork.run { () throws(WormholeError) in try handed.value.acknowledge(sequence) }
        }

        func nextBuffered() async throws(WormholeError) -> Result<WormholeRecord, WormholeError>? {
            if index >= buffer.count {
                if replaced.withLock({ flag in defer { flag = false }; return flag }) { reader?.invalidate() }
                if let reader {
                    let handed = HandedOver(reader)
                    buffer = try await BlockingWork.run { () throws(WormholeError) in HandedOver(try handed.value.read(maximumCount: 256)) }.value
                } else {
                    buffer = []
                }
                index = 0
            }
            guard index < buffer.count else { return nil }
            defer { index += 1 }
            return buffer[index]
        }

        /// A reader that caught up without publishing its position (at most one write
        /// per idle interval) is woken once the interval has passed: that read writes it.
        func readAgainToPublishPosition() {
            guard let delay = reader?.unpublishedPositionDelay,
                  !publishScheduled.withLock({ scheduled in defer { scheduled = true }; return scheduled }) else { return }
            let (signal, publishScheduled) = (self.signal, self.publishScheduled)
            RetryClock.shared.schedule(after: delay) {
                publishScheduled.withLock { $0 = false }
                signal.signal()
            }
        }
        private let publishScheduled = Locked(false)

        func close() {
            observation?.cancel()
            observation = nil
            reader?.close()
            reader = nil
            wormhole.unregister(registration)
        }

        deinit { close() }
    }
}
