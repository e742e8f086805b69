@_spi(Backend) import WormholeCore
@_spi(Backend) import WormholeFiles
/// The requests of one wormhole to one identifier, and the one listener of its reply
/// identifier that completes them by correlation. Replies to other requesters (the reply
/// identifier is shared) and late replies to requests that timed out are ignored.
///
/// Its parts, each with one job: ``ReplyTable`` (the requests waiting, and their
/// timeouts), ``ReplyIdleFollowing`` (the reader thread follows the log while the router
/// is idle), ``ReplySpinPolicy`` (whether a blocked requester polls), and the waits of
/// `ReplyRouter+Waiting.swift` and `ReplyRouter+Nested.swift`; ``ReplyRouters`` keeps a
/// wormhole's routers.
final class ReplyRouter: Sendable {
    let identifier: String
    let repliesIdentifier: String
    /// The requests waiting for their replies.
    let table: ReplyTable
    private let listener: Locked<ListenerToken?>
    /// The back end: blocked requesters wait with its change waiters, where it has them
    /// (the shared directory's watch the reply log themselves).
    let transiting: any WormholeTransiting
    /// Whether a blocked requester polls for its reply before it sleeps.
    let spin: ReplySpinPolicy
    private let idle: ReplyIdleFollowing

    init(identifier: String, wormhole: Wormhole) {
        self.identifier = identifier
        self.repliesIdentifier = Requests.repliesIdentifier(of: identifier)
        transiting = wormhole.transiting
        spin = ReplySpinPolicy(spinTime: transiting.offersChangeWaiters ? transiting.configuration.replySpinTime : 0)
        let table = ReplyTable(timedOut: { [weak wormhole] timeout in
            wormhole.map { Requests.timedOut(identifier, after: timeout, wormhole: $0) }
        })
        self.table = table
        let listener = Locked<ListenerToken?>(nil)
        self.listener = listener
        idle = ReplyIdleFollowing(token: { listener.withLock { $0 } }, noneWaiting: { table.isEmpty })
    }

    /// How long an idle router waits before the reader thread follows its log.
    static var idleDelay: Double { ReplyIdleFollowing.idleDelay }

    /// Whether a requester may poll at all (``ReplySpinPolicy``).
    static var mayRunOnAnotherCPU: Bool { ReplySpinPolicy.mayRunOnAnotherCPU }
    /// How many requests polled for their reply.
    var polledRequests: Int { spin.polledRequests }

    /// The reply listener, while there is one.
    var token: ListenerToken? { listener.withLock { $0 } }

    /// Whether the router still listens (a `stopListeningForMessage` of the reply
    /// identifier, or a failed listener, ends it: a new one is then made).
    var isListening: Bool { token.map { !$0.isCancelled } ?? false }

    /// Starts listening to the reply identifier, from now on. On the shared directory the
    /// listener is woken by the process's reader thread only while a request needs it
    /// (``holdReaderThread()``) or the router is idle: the threads blocked in requests
    /// read the replies.
    func start(_ wormhole: Wormhole) throws(WormholeError) {
        let made = try wormhole.makeListener(identifier: repliesIdentifier, start: .now, durableName: nil,
                                             observeOnDemand: transiting.offersChangeWaiters, queue: nil, onError: { [weak self] error in
            self?.failAll(error)
        }) { [weak self] record in
            self?.route(record)
        }
        listener.withLock { $0 = made }
    }

    func stop() {
        listener.withLock { listener in
            defer { listener = nil }
            return listener
        }?.cancel()
    }

    /// Makes the reader thread deliver the replies until ``releaseReaderThread()``, as it
    /// must for a request that no thread of its own reads the replies for: an
    /// asynchronous one, one blocked beyond the process's waiters, or one made on the
    /// reader thread itself.
    func holdReaderThread() throws(WormholeError) {
        guard let token, try token.holdObservation() else { return }
        token.drainOnCallingThread(replaced: true)
    }

    func releaseReaderThread() {
        token?.releaseObservation()
    }

    /// A new request's pending reply, with a fresh correlation, waiting for its reply
    /// until `timeout` seconds have passed.
    func begin(timeout: Double) -> PendingReply {
        let reply = table.add(timeout: timeout)
        idle.leave()
        return reply
    }

    /// A request that could not be passed: it fails with `error`.
    func abandon(_ reply: PendingReply, _ error: WormholeError) {
        table.finish(reply.correlation, .failure(error))
        ended()
    }

    /// A request ended (answered, failed or timed out).
    func ended() {
        idle.ended()
    }

    /// Suspends until `reply`, a request no thread waits for, is complete (the reader
    /// thread completes it: the caller held it with ``holdReaderThread()``).
    func value(of reply: PendingReply) async -> ReplyOutcome {
        let outcome = await reply.value()
        releaseReaderThread()
        ended()
        return outcome
    }

    /// Completes `correlation`'s request with `outcome`, unless its reply came first.
    func finish(_ correlation: UInt64, _ outcome: ReplyOutcome) {
        table.finish(correlation, outcome)
    }

    private func route(_ record: WormholeRecord) {
        guard record.role == .reply || record.role == .errorReply else { return }
        table.finish(record.correlation, .success(record))
    }

    /// The reply listener stopped for good: nothing will complete the requests waiting.
    private func failAll(_ error: WormholeError) {
        guard !isListening else { return }
        table.failAll(error)
    }
}
