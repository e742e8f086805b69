#if canImport(Glibc)
import Glibc
#endif
@_spi(Backend) import WormholeCore
@_spi(Backend) import WormholeFiles

/// How a requester blocked in a request waits for its reply: with a change waiter of its
/// own on the reply log (``WormholeTransiting/takeChangeWaiter(identifier:)``), or on the
/// reader thread's delivery.
extension ReplyRouter {
    /// What a blocked requester waits with, acquired by ``prepareWait()`` before its
    /// request is passed: what can fail (an inotify instance or watch) fails then, when
    /// the request can still be left unpassed, and not once a responder may be running it.
    enum WaitMeans {
        /// No log to watch (another back end): the reader thread or the back end's
        /// listener completes the request.
        case plain
        /// On the reader thread, which serves the process's events while it waits
        /// (`ReplyRouter+Nested.swift`).
        case nested
        /// The reader thread delivers the reply (no waiter was free, or none could be made).
        case held
        /// A waiter of the calling thread watching the reply log, and whether it watched
        /// it before.
        case waiter(any WormholeChangeWaiter, watchedBefore: Bool)
    }

    /// Acquires what the calling thread will wait for its reply with, before the request
    /// is passed. Throws when neither a waiter nor the reader thread can follow the reply
    /// log (no inotify instance or watch left): the request must not be passed then.
    func prepareWait() throws(WormholeError) -> WaitMeans {
        guard transiting.offersChangeWaiters, token != nil else { return .plain }
        if let nested = try prepareNestedWait() { return nested }
        if let taken = transiting.takeChangeWaiter(identifier: repliesIdentifier) { return .waiter(taken.waiter, watchedBefore: taken.watchedBefore) }
        try holdReaderThread()
        return .held
    }

    /// Gives back what ``prepareWait()`` acquired, for a request that was not passed.
    func giveBack(_ means: WaitMeans) {
        switch means {
        case .plain: break
        case .nested, .held: releaseReaderThread()
        case .waiter(let waiter, _): waiter.giveBack()
        }
    }

    /// Blocks the calling thread until `reply` is complete, waiting with `means`
    /// (``prepareWait()``, which this gives back). On the shared directory the
    /// thread watches the reply log itself and reads the reply when the append wakes it
    /// (a change waiter); the reader thread, woken too, completes it when it gets there
    /// first, and the request's timeout is swept as for any request. On the reader thread
    /// itself (a listener or responder without a queue asking another service), the
    /// thread goes on serving the process's events while it waits, the reply's among
    /// them.
    func wait(for reply: PendingReply, with means: WaitMeans) -> ReplyOutcome {
        defer { ended() }
        defer { giveBack(means) }
        guard let token else { return reply.wait() }
        let thread = UInt(pthread_self())
        defer { reply.detach() }
        let (waiter, watchedBefore): (any WormholeChangeWaiter, Bool)
        switch means {
        case .plain, .held:
            return reply.wait()
        case .nested:
            return waitServingNested(for: reply, thread: thread)
        case .waiter(let taken, let before):
            (waiter, watchedBefore) = (taken, before)
        }
        // A waiter that was watching the log before this request was passed has its
        // reply's append as an event in its queue, so its first read waits for one. A
        // waiter watching it only now reads first (the reply may have come before).
        reply.attach(thread: thread) { waiter.wake() }
        let spinEnd = spin.spinEnd(of: reply, thread: thread)
        var (read, replaced) = (!watchedBefore, false)
        while true {
            if read { token.drainOnCallingThread(replaced: replaced) }
            read = true
            if let outcome = reply.outcome {
                spin.noteWait(of: reply, thread: thread)
                return outcome
            }
            // Bounded: a replaced log whose new watch was missed is read at its name then
            // (the reader thread reads it at once in any case).
            replaced = waiter.wait(milliseconds: 100, spinningUntil: spinEnd)
        }
    }
}
