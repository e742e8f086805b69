import Dispatch
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
@_spi(Backend) import WormholeCore
@_spi(Backend) import WormholeFiles

/// Request and reply: ask whoever serves an identifier and await the answer, with a
/// timeout. No daemon: requests are messages of the identifier (role `request`, with a
/// random correlation); responders are the members of its work queue `responders`, so
/// each request goes to one of them and, should that one die, to another; replies are
/// passed to `<identifier>.replies` with the request's correlation (Protocol.md §19).
extension Wormhole {
    /// Passes `request` under `identifier` and waits for one responder's reply.
    ///
    /// Each request is answered once, by one responder, however many serve the
    /// identifier; replies are matched to their request by a random 64-bit correlation,
    /// so concurrent requests (of this process or others) never receive each other's.
    /// The request expires with its timeout: a responder that starts later does not
    /// answer it.
    ///
    /// ```swift
    /// let state = try await wormhole.request(StateQuery(), identifier: "app.state", as: AppState.self, timeout: 2)
    /// ```
    ///
    /// - Parameters:
    ///   - request: The request, encoded as ``passMessage(_:identifier:timeToLive:)-6gmz7`` encodes.
    ///   - identifier: What the responders serve.
    ///   - type: What to decode the reply as.
    ///   - timeout: Seconds to wait for the reply, on the monotonic clock.
    /// - Returns: The reply.
    /// - Throws: ``WormholeError/Code/timedOut`` when no reply came in time (the message
    ///   says whether any responder serves the identifier);
    ///   ``WormholeError/Code/requestFailed`` with what the responder said when its
    ///   handler threw; ``WormholeError/Code/decodingFailed`` for a reply that does not
    ///   decode; what passing the request threw; or, for a requester that cannot listen
    ///   for its reply (out of inotify instances or watches), that error, before the
    ///   request is passed.
    public func request<Request: Encodable & Sendable, Reply: Decodable & Sendable>(
        _ request: Request, identifier: String, as type: Reply.Type = Reply.self, timeout: Double = 5
    ) async throws(WormholeError) -> Reply {
        let (kind, payload) = try MessageCoding.encode(request, identifier: identifier, using: jsonCoding)
        return try await requestRecord(payload: payload, kind: kind, identifier: identifier, timeout: timeout)
            .decode(as: Reply.self, using: jsonCoding)
    }

    /// ``request(_:identifier:as:timeout:)-1vwec`` for a caller that may block its thread
    /// meanwhile (not one of Swift concurrency's pool).
    ///
    /// On the shared directory the blocked thread watches the reply log itself (an
    /// inotify instance of the process's few, kept for later requests) and reads its reply when
    /// the append wakes it: a round trip is two wake-ups, the responder's and this
    /// thread's, and the process's reader thread is not woken by either append. Called
    /// from a listener or responder without a queue (on the process's reader thread), it
    /// serves the process's other events while it waits.
    @available(*, noasync, message: "in an async context, await the async form: it waits for the reply without blocking a thread of the cooperative pool")
    public func request<Request: Encodable & Sendable, Reply: Decodable & Sendable>(
        _ request: Request, identifier: String, as type: Reply.Type = Reply.self, timeout: Double = 5
    ) throws(WormholeError) -> Reply {
        let (kind, payload) = try MessageCoding.encode(request, identifier: identifier, using: jsonCoding)
        return try requestRecord(payload: payload, kind: kind, identifier: identifier, timeout: timeout)
            .decode(as: Reply.self, using: jsonCoding)
    }

    /// A request of bytes already encoded; returns the reply's record (its bytes, kind,
    /// and the responder's process). What `wormhole request` uses.
    public func requestRecord(payload: Data, kind: WormholePayloadKind, identifier: String, timeout: Double = 5) async throws(WormholeError) -> WormholeRecord {
        let (router, pending) = try await startRequest(payload: payload, kind: kind, identifier: identifier, timeout: timeout)
        return try Self.reply(await router.value(of: pending), identifier: identifier)
    }

    /// ``requestRecord(payload:kind:identifier:timeout:)-2iwmv`` blocking the calling thread.
    @available(*, noasync, message: "in an async context, await the async form: it waits for the reply without blocking a thread of the cooperative pool")
    public func requestRecord(payload: Data, kind: WormholePayloadKind, identifier: String, timeout: Double = 5) throws(WormholeError) -> WormholeRecord {
        try Self.checkRequest(payload, kind: kind, identifier: identifier, timeout: timeout)
        // What the wait needs, acquired before the pass: a request is never passed that its
        // requester then cannot wait for (out of inotify instances, say).
        let (router, means): (ReplyRouter, ReplyRouter.WaitMeans)
        do throws(WormholeError) {
            router = try replyRouters.router(for: identifier, in: self)
            means = try router.prepareWait()
        } catch {
            throw Requests.notSent(identifier, because: error)
        }
        let pending = router.begin(timeout: timeout)
        do throws(WormholeError) {
            try passRecord(payload, kind: kind, identifier: identifier, role: .request, correlation: pending.correlation,
                           expires: Date().addingTimeInterval(timeout))
        } catch {
            router.abandon(pending, error)
            router.giveBack(means)
            throw error
        }
        return try Self.reply(router.wait(for: pending, with: means), identifier: identifier)
    }

    /// Serves `identifier`: `responder` is called with each request that this responder
    /// receives (each request goes to one responder of the identifier, in whatever
    /// process), and what it returns is the reply. What it throws reaches the requester
    /// as a ``WormholeError/Code/requestFailed`` error carrying the error's description.
    ///
    /// A responder is a member of the identifier's work queue `responders`: a request
    /// whose responder dies before replying goes to another (or, after three tries, to
    /// `<identifier>.dead-letters`); a request whose requester gave up (its timeout
    /// passed) is not answered. Messages of the identifier that are not requests are
    /// skipped. A reply that cannot be passed (larger than
    /// ``WormholeConfiguration/maximumMessageSize``, or a full disk) reaches the requester
    /// as a ``WormholeError/Code/requestFailed`` error saying why; the request is not run
    /// again.
    ///
    /// ```swift
    /// let responder = try wormhole.respondToRequests(withIdentifier: "app.state", as: StateQuery.self) { _ in
    ///     model.currentState
    /// }
    /// ```
    ///
    /// `queue` is where `responder` runs. Without one, on the shared directory, it runs on
    /// the thread that the request woke, the process's inotify reader thread, as a listener
    /// without a queue does: no thread hop between the request and its reply. Keep it short, since
    /// the process's other listeners wait meanwhile; give long or parallel responders a
    /// queue. A responder there may itself make a blocking request (ask another service,
    /// in this process or another): the thread serves the process's other events while
    /// it waits, the reply among them. On PostgreSQL a responder without a queue runs on
    /// a serial queue of its own.
    ///
    /// - Returns: The responder's membership; ``WorkQueueMember/cancel()`` stops it.
    @discardableResult
    public func respondToRequests<Request: Decodable & Sendable, Reply: Encodable & Sendable>(
        withIdentifier identifier: String,
        as type: Request.Type = Request.self,
        queue: DispatchQueue? = nil,
        onError: (@Sendable (WormholeError) -> Void)? = nil,
        responder: @escaping @Sendable (Request) throws -> Reply
    ) throws(WormholeError) -> WorkQueueMember {
        try respondToRecords(withIdentifier: identifier, queue: queue, onError: onError) { [jsonCoding] record in
            let reply = try responder(try record.decode(as: Request.self, using: jsonCoding))
            let (kind, payload) = try MessageCoding.encode(reply, identifier: Requests.repliesIdentifier(of: identifier), using: jsonCoding)
            return (payload, kind)
        }
    }

    /// ``respondToRequests(withIdentifier:as:queue:onError:responder:)`` with the request's record;
    /// `responder` returns the reply's bytes and kind. What `wormhole respond` uses.
    @discardableResult
    public func respondToRecords(
        withIdentifier identifier: String,
        queue: DispatchQueue? = nil,
        onError: (@Sendable (WormholeError) -> Void)? = nil,
        responder: @escaping @Sendable (WormholeRecord) throws -> (payload: Data, kind: WormholePayloadKind)
    ) throws(WormholeError) -> WorkQueueMember {
        let replies = Requests.repliesIdentifier(of: identifier)
        try Identifier.validate(replies, kind: "reply identifier")
        // No retry delay: a request whose responder ended goes to another at once, since
        // its requester is waiting (and the request expires with the requester's timeout).
        let options = WorkQueueOptions(maximumDeliveries: 3, startingFrom: .history, retryDelay: 0)
        // Without a queue, on the shared directory, the request is answered on the thread
        // that was woken: no hop between the request's wake-up and its reply.
        return try joinWorkQueue(identifier: identifier, name: Requests.respondersQueue, options: options, queue: queue,
                                 drainsOnWakingThread: transiting.handlesOnTheWakingThread, onError: onError) { [self] record, _ in
            // Only requests are answered; anything else passed under the identifier is
            // someone else's message.
            guard record.role == .request, record.correlation != 0 else { return }
            let reply: (payload: Data, kind: WormholePayloadKind, role: WormholeRecordRole)
            do {
                let answer = try responder(record)
                reply = (answer.payload, answer.kind, .reply)
            } catch let error as WormholeError {
                reply = (Data(error.description.utf8), .text, .errorReply)
            } catch {
                reply = (Data(String(describing: error).utf8), .text, .errorReply)
            }
            // A reply that cannot be passed (over maximumMessageSize, a full disk) becomes an
            // error reply saying why, and the request counts as handled all the same:
            // running it again would not make its reply pass, and would repeat what it did.
            do throws(WormholeError) {
                try passRecord(reply.payload, kind: reply.kind, identifier: replies, role: reply.role,
                               correlation: record.correlation, expires: record.expires)
            } catch {
                do throws(WormholeError) {
                    try passRecord(Data(Requests.unpassableReply(error).utf8), kind: .text, identifier: replies, role: .errorReply,
                                   correlation: record.correlation, expires: record.expires)
                } catch let second {
                    (onError ?? Self.logError)(WormholeError(second.code,
                        "the reply to request \(record.sequence) of '\(identifier)' could not be passed (\(error.description)), nor an error reply (\(second.description)); the request is not run again",
                        path: second.path, errno: second.errno))
                }
            }
        }
    }

    // MARK: - Internals

    /// Registers the request, with its timeout, with the identifier's reply router, makes
    /// the reader thread deliver its reply (which fails before anything is passed when it
    /// cannot), and passes it: on a thread of ``BlockingWork``'s while the caller is
    /// suspended, since each may block (the listener's start, the reader thread's drain,
    /// the pass).
    private func startRequest(payload: Data, kind: WormholePayloadKind, identifier: String, timeout: Double) async throws(WormholeError) -> (ReplyRouter, PendingReply) {
        try Self.checkRequest(payload, kind: kind, identifier: identifier, timeout: timeout)
        let router: ReplyRouter
        do throws(WormholeError) {
            // No thread of the caller's waits for this reply: the reader thread delivers it.
            router = try await BlockingWork.run { [self] () throws(WormholeError) in
                let router = try replyRouters.router(for: identifier, in: self)
                try router.holdReaderThread()
                return router
            }
        } catch {
            throw Requests.notSent(identifier, because: error)
        }
        let pending = router.begin(timeout: timeout)
        do throws(WormholeError) {
            try await passRecord(payload, kind: kind, identifier: identifier, role: .request, correlation: pending.correlation,
                                 expires: Date().addingTimeInterval(timeout))
        } catch {
            router.abandon(pending, error)
            router.releaseReaderThread()
            throw error
        }
        return (router, pending)
    }

    private static func checkRequest(_ payload: Data, kind: WormholePayloadKind, identifier: String, timeout: Double) throws(WormholeError) {
        try Identifier.validate(identifier)
        guard timeout > 0, timeout.isFinite, timeout < 1e9 else {
            throw WormholeError(.invalidConfiguration, "a request's timeout must be a positive number of seconds, not \(timeout)")
        }
        try MessageCoding.check(payload, is: kind, identifier: identifier)
    }

    private static func reply(_ outcome: ReplyOutcome, identifier: String) throws(WormholeError) -> WormholeRecord {
        let record = try outcome.get()
        if record.role == .errorReply { throw Requests.failed(identifier, reply: record) }
        return record
    }
}
