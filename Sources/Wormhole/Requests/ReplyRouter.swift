#if canImport(Glibc)
import Glibc
#endif
import Dispatch
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// What a request ended with: the reply's record, or why there is none.
typealias ReplyOutcome = Result<WormholeRecord, WormholeError>

/// One request waiting for its reply: completed once, by the reply, its timeout or a
/// failure of the listener; waited for by a thread (``wait()``) or a task
/// (``value()``).
final class PendingReply: Sendable {
    let correlation: UInt64
    /// Seconds the requester waits, when it began and when that ends
    /// (``MonotonicCondition/now()``).
    let timeout: Double
    let began: UInt64
    let deadline: UInt64
    private struct State {
        var outcome: ReplyOutcome?
        var continuation: CheckedContinuation<ReplyOutcome, Never>?
        /// The thread blocked in ``ReplyRouter/wait(for:with:)`` and what wakes it.
        var waiter: (thread: UInt, wake: @Sendable () -> Void)?
    }
    private let state = Locked(State())
    private let done = MonotonicEvent()

    init(correlation: UInt64, timeout: Double) {
        self.correlation = correlation
        self.timeout = timeout
        self.began = MonotonicCondition.now()
        self.deadline = MonotonicCondition.deadline(after: timeout)
    }

    /// Completes the request; later calls do nothing. Returns whether this call did.
    @discardableResult
    func complete(_ outcome: ReplyOutcome) -> Bool {
        let (first, continuation, wake) = state.withLock { state -> (Bool, CheckedContinuation<ReplyOutcome, Never>?, (@Sendable () -> Void)?) in
            guard state.outcome == nil else { return (false, nil, nil) }
            state.outcome = outcome
            defer { state.continuation = nil }
            // The waiting thread completing its own request needs no wake-up.
            let wake = state.waiter.flatMap { $0.thread == UInt(pthread_self()) ? nil : $0.wake }
            return (true, state.continuation, wake)
        }
        guard first else { return false }
        // Resumed outside the lock.
        continuation?.resume(returning: outcome)
        wake?()
        done.signal()
        return true
    }

    /// The outcome, once complete.
    var outcome: ReplyOutcome? { state.withLock { $0.outcome } }

    /// Makes ``complete(_:)`` call `wake` (unless called on `thread`, the waiting one),
    /// until ``detach()``.
    func attach(thread: UInt, wake: @escaping @Sendable () -> Void) {
        state.withLock { $0.waiter = (thread, wake) }
    }

    func detach() {
        state.withLock { $0.waiter = nil }
    }

    /// Blocks the calling thread until the request is complete.
    func wait() -> ReplyOutcome {
        _ = done.wait(timeout: nil)
        return state.withLock { $0.outcome! }
    }

    /// Suspends until the request is complete.
    func value() async -> ReplyOutcome {
        await withCheckedContinuation { continuation in
            let ready = state.withLock { state -> ReplyOutcome? in
                if let outcome = state.outcome { return outcome }
                state.continuation = continuation
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }
}

/// The requests of one wormhole to one identifier, and the one listener of its reply
/// identifier that completes them by correlation. Replies to other requesters (the reply
/// identifier is shared) and late replies to requests that timed out are ignored.
///
/// Timeouts are swept, not timed one by one: one sweep is scheduled on the retry clock
/// for the earliest deadline of the requests waiting, and fails those whose time is up.
/// A request answered in time costs the clock nothing (a timer per request woke the
/// clock's thread at each request, and kept every answered request's timer until its
/// deadline).
final class ReplyRouter: Sendable {
    let identifier: String
    let repliesIdentifier: String
    private let pending = Locked<[UInt64: PendingReply]>([:])
    private let token = Locked<ListenerToken?>(nil)
    /// The reply log, on the shared directory: blocked requesters watch it themselves.
    private let logPath: String?
    /// The deadline of the sweep scheduled, when one is.
    private let sweepAt = Locked<UInt64?>(nil)
    /// The error of a request that timed out (`nil` once the wormhole is gone).
    private let timedOut: @Sendable (Double) -> WormholeError?
    /// How long a blocked requester polls for its reply (nanoseconds; 0: never); how long
    /// the recent blocking requests took, from their pass to their outcome in hand (an
    /// average weighing the latest an eighth); and when each requesting thread's last
    /// request ended, on the monotonic clock and on the thread's CPU clock.
    private let spinTime: UInt64
    private struct Polling {
        var recentWait: UInt64?
        var lastEnded: [UInt: (wall: UInt64, cpu: UInt64)] = [:]
        /// The requests that polled (for the tests).
        var polled = 0
    }
    private let polling = Locked(Polling())

    init(identifier: String, wormhole: Wormhole) {
        self.identifier = identifier
        self.repliesIdentifier = Requests.repliesIdentifier(of: identifier)
        let files = wormhole.transiting as? FileTransiting
        logPath = files.map { $0.directory + "/" + LogFile.name(Requests.repliesIdentifier(of: identifier)) }
        spinTime = Self.mayRunOnAnotherCPU ? UInt64((files?.configuration.replySpinTime ?? 0) * 1e9) : 0
        timedOut = { [weak wormhole] timeout in
            wormhole.map { Requests.timedOut(identifier, after: timeout, wormhole: $0) }
        }
    }

    /// Whether the router still listens (a `stopListeningForMessage` of the reply
    /// identifier, or a failed listener, ends it: a new one is then made).
    var isListening: Bool { token.withLock { $0 }.map { !$0.isCancelled } ?? false }

    /// Starts listening to the reply identifier, from now on. On the shared directory the
    /// listener is woken by the process's reader thread only while a request needs it
    /// (``holdReaderThread()``) or the router is idle: the threads blocked in requests
    /// read the replies.
    func start(_ wormhole: Wormhole) throws(WormholeError) {
        let made = try wormhole.makeListener(identifier: repliesIdentifier, start: .now, durableName: nil,
                                             observeOnDemand: logPath != nil, queue: nil, onError: { [weak self] error in
            self?.failAll(error)
        }) { [weak self] record in
            self?.route(record)
        }
        token.withLock { $0 = made }
    }

    /// Makes the reader thread deliver the replies until ``releaseReaderThread()``, as it
    /// must for a request that no thread of its own reads the replies for: an
    /// asynchronous one, one blocked beyond the process's waiters, or one made on the
    /// reader thread itself.
    func holdReaderThread() throws(WormholeError) {
        guard let token = token.withLock({ $0 }), try token.holdObservation() else { return }
        token.drainOnCallingThread(replaced: true)
    }

    func releaseReaderThread() {
        token.withLock { $0 }?.releaseObservation()
    }

    /// Whether the reader thread follows the log because the router is idle, and the
    /// check of that. A listener that nobody drains keeps its claim (Protocol §12) on the
    /// replies it has not read, which holds back the compaction of a log that the
    /// identifier's other requesters go on using: once no request of this router is
    /// pending for ``idleDelay``, the reader thread follows the log again, until the next
    /// request.
    ///
    /// The hold is taken and given up outside the lock (it subscribes to the inotify
    /// engine): the lock only decides who does it. `began` counts the requests begun, so
    /// that a check that looked at the pending requests before a request began does not
    /// follow the log for it; a request that begins while the check takes its hold leaves
    /// `leaving` for the check, which gives the hold up as soon as it has it.
    private struct Idle {
        enum Following { case no, holding, yes }
        var following = Following.no
        var leaving = false
        var checkScheduled = false
        var lastEnded: UInt64 = 0
        var began: UInt64 = 0
    }
    private let idle = Locked(Idle())
    static let idleDelay = 1.0

    /// A request ended (answered, failed or timed out).
    private func ended() {
        let now = MonotonicCondition.now()
        let schedule = idle.withLock { idle -> Bool in
            idle.lastEnded = now
            guard !idle.checkScheduled, idle.following == .no else { return false }
            idle.checkScheduled = true
            return true
        }
        if schedule { scheduleIdleCheck(after: Self.idleDelay) }
    }

    private func scheduleIdleCheck(after seconds: Double) {
        RetryClock.shared.schedule(after: seconds) { [weak self] in self?.checkIdle() }
    }

    /// Follows the log from the reader thread when no request was pending for
    /// ``idleDelay``; looks again later when one ended meanwhile.
    private func checkIdle() {
        let now = MonotonicCondition.now()
        let beganBefore = idle.withLock { $0.began }
        let noneWaiting = pending.withLock { $0.isEmpty }
        let again = idle.withLock { idle -> Double?? in
            idle.checkScheduled = false
            guard idle.following == .no, noneWaiting, idle.began == beganBefore else { return .some(nil) }
            let waited = Double(now &- idle.lastEnded) / 1e9
            if waited < Self.idleDelay {
                idle.checkScheduled = true
                return Self.idleDelay - waited
            }
            idle.following = .holding
            return nil
        }
        if let again {
            if let again { scheduleIdleCheck(after: again) }
            return
        }
        // A hold that fails (inotify out of watches) is tried again at the next idle.
        let token = token.withLock { $0 }
        let began = (try? token?.holdObservation()) ?? nil
        let (keep, giveUp) = idle.withLock { idle -> (Bool, Bool) in
            let leaving = idle.leaving
            idle.leaving = false
            guard began != nil, !leaving else {
                idle.following = .no
                return (false, began != nil)
            }
            idle.following = .yes
            return (true, false)
        }
        if giveUp { token?.releaseObservation() }
        if keep, began == true { token?.drainOnCallingThread(replaced: true) }
    }

    /// A request begins: the reader thread no longer follows the log for an idle router.
    private func leaveIdle() {
        let release = idle.withLock { idle -> Bool in
            idle.began &+= 1
            switch idle.following {
            case .no: return false
            case .holding:
                // The check gives its hold up once it has it.
                idle.leaving = true
                return false
            case .yes:
                idle.following = .no
                return true
            }
        }
        if release { token.withLock { $0 }?.releaseObservation() }
    }

    /// ``start(_:)`` for asynchronous callers: a back end that waits on a server
    /// suspends the caller instead of blocking its thread.
    func start(_ wormhole: Wormhole) async throws(WormholeError) {
        let made = try await wormhole.makeListener(identifier: repliesIdentifier, start: .now, queue: nil, onError: { [weak self] error in
            self?.failAll(error)
        }) { [weak self] record in
            self?.route(record)
        }
        token.withLock { $0 = made }
    }

    func stop() {
        token.withLock { token in
            defer { token = nil }
            return token
        }?.cancel()
    }

    /// A new request's pending reply, with a fresh correlation, waiting for its reply
    /// until `timeout` seconds have passed.
    func begin(timeout: Double) -> PendingReply {
        let reply = PendingReply(correlation: Requests.newCorrelation(), timeout: timeout)
        pending.withLock { $0[reply.correlation] = reply }
        leaveIdle()
        armSweep(at: reply.deadline)
        return reply
    }

    /// A request that could not be passed: it fails with `error`.
    func abandon(_ reply: PendingReply, _ error: WormholeError) {
        finish(reply.correlation, .failure(error))
        ended()
    }

    /// Suspends until `reply`, a request no thread waits for, is complete (the reader
    /// thread completes it: the caller held it with ``holdReaderThread()``).
    func value(of reply: PendingReply) async -> ReplyOutcome {
        let outcome = await reply.value()
        releaseReaderThread()
        ended()
        return outcome
    }

    /// What a blocked requester waits with, acquired by ``prepareWait()`` before its
    /// request is passed: what can fail (an inotify instance or watch) fails then, when
    /// the request can still be left unpassed, and not once a responder may be running it.
    enum WaitMeans {
        /// No log to watch (another back end): the reader thread or the back end's
        /// listener completes the request.
        case plain
        /// On the reader thread, which serves the process's events while it waits.
        case nested
        /// The reader thread delivers the reply (no waiter was free, or none could be made).
        case held
        /// A waiter of the calling thread watching the reply log, and whether it watched
        /// it before.
        case waiter(ReplyWaiter, watchedBefore: Bool)
    }

    /// Acquires what the calling thread will wait for its reply with, before the request
    /// is passed. Throws when neither a waiter nor the reader thread can follow the reply
    /// log (no inotify instance or watch left): the request must not be passed then.
    func prepareWait() throws(WormholeError) -> WaitMeans {
        guard let logPath, token.withLock({ $0 }) != nil else { return .plain }
        if InotifyEngine.shared.isOnReaderThread {
            try holdReaderThread()
            return .nested
        }
        if let taken = ReplyWaiter.take(watching: logPath) { return .waiter(taken.waiter, watchedBefore: taken.watchedBefore) }
        try holdReaderThread()
        return .held
    }

    /// Gives back what ``prepareWait()`` acquired, for a request that was not passed.
    func giveBack(_ means: WaitMeans) {
        switch means {
        case .plain: break
        case .nested, .held: releaseReaderThread()
        case .waiter(let waiter, _): ReplyWaiter.giveBack(waiter)
        }
    }

    /// Blocks the calling thread until `reply` is complete, waiting with `means`
    /// (``prepareWait()``, which this gives back). On the shared directory the
    /// thread watches the reply log itself and reads the reply when the append wakes it
    /// (``ReplyWaiter``); the reader thread, woken too, completes it when it gets there
    /// first, and the request's timeout is swept as for any request. On the reader thread
    /// itself (a listener or responder without a queue asking another service), the
    /// thread goes on serving the process's events while it waits, the reply's among
    /// them.
    func wait(for reply: PendingReply, with means: WaitMeans) -> ReplyOutcome {
        defer { ended() }
        defer { giveBack(means) }
        guard let token = token.withLock({ $0 }) else { return reply.wait() }
        let thread = UInt(pthread_self())
        defer { reply.detach() }
        let (waiter, watchedBefore): (ReplyWaiter, Bool)
        switch means {
        case .plain, .held:
            return reply.wait()
        case .nested:
            let engine = InotifyEngine.shared
            reply.attach(thread: thread) { engine.wakeReaderThread() }
            engine.serveNested { reply.outcome != nil }
            return reply.wait()
        case .waiter(let taken, let before):
            (waiter, watchedBefore) = (taken, before)
        }
        // A waiter that was watching the log before this request was passed has its
        // reply's append as an event in its queue, so its first read waits for one. A
        // waiter watching it only now reads first (the reply may have come before).
        let taken = (waiter: waiter, watchedBefore: watchedBefore)
        reply.attach(thread: thread) { waiter.wake() }
        let spinEnd = spinEnd(of: reply, thread: thread)
        var (read, replaced) = (!taken.watchedBefore, false)
        while true {
            if read { token.drainOnCallingThread(replaced: replaced) }
            read = true
            if let outcome = reply.outcome {
                if spinTime > 0 { noteWait(of: reply, thread: thread) }
                return outcome
            }
            // Bounded: a replaced log whose new watch was missed is read at its name then
            // (the reader thread reads it at once in any case).
            replaced = waiter.wait(milliseconds: 100, spinningUntil: spinEnd)
        }
    }

    // MARK: - Polling for a reply

    /// When a blocked requester of `reply` stops polling and sleeps (0: it does not poll):
    /// ``WormholeConfiguration/replySpinTime`` after the pass, when both hold:
    ///
    /// - The recent requests' replies came within that time. A responder that answers
    ///   slowly, or none at all, stops the polling after a request or two; once replies
    ///   come fast again (they are timed when the requester sleeps too), it resumes.
    /// - The calling thread ran, rather than slept, for at least half the time since its
    ///   last request of the identifier ended (back-to-back requests, or work between
    ///   them; a thread's first request does not poll). Its CPU is awake then, and
    ///   polling saves its wake-up. A thread that slept between requests sleeps for the
    ///   reply too: its responder has likely gone to sleep meanwhile and must be woken
    ///   anyway, and the scheduler may then run both on one CPU, which a polling
    ///   requester keeps busy (Performance.md measures both).
    private func spinEnd(of reply: PendingReply, thread: UInt) -> UInt64 {
        guard spinTime > 0 else { return 0 }
        let (recent, last) = polling.withLock { ($0.recentWait, $0.lastEnded[thread]) }
        guard let recent, recent <= spinTime, let last else { return 0 }
        // (A thread that ended and left its number to a new one has used less CPU.)
        let cpu = Self.threadCPUTime()
        guard cpu >= last.cpu, cpu - last.cpu >= (reply.began &- last.wall) / 2 else { return 0 }
        polling.withLock { $0.polled += 1 }
        return reply.began &+ spinTime
    }

    /// How many requests polled for their reply.
    var polledRequests: Int { polling.withLock { $0.polled } }

    /// Counts how long `reply` took, from its pass to its outcome (the first request's
    /// time is the average's start), and when the calling thread's request ended. (A few
    /// threads make requests; past 64, all are forgotten, which costs each of them one
    /// request without polling.)
    private func noteWait(of reply: PendingReply, thread: UInt) {
        let now = MonotonicCondition.now(), cpu = Self.threadCPUTime()
        polling.withLock { polling in
            let took = now &- reply.began
            polling.recentWait = polling.recentWait.map { $0 - $0 / 8 + took / 8 } ?? took
            if polling.lastEnded.count >= 64, polling.lastEnded[thread] == nil { polling.lastEnded.removeAll(keepingCapacity: true) }
            polling.lastEnded[thread] = (now, cpu)
        }
    }

    /// Nanoseconds of CPU the calling thread has used.
    private static func threadCPUTime() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }

    /// Whether this process may run on more than one CPU (its affinity mask, which
    /// `taskset`, cgroups' cpusets and containers narrow): on one, a polling requester
    /// would only take the CPU from its responder.
    /// (`sched_getaffinity` needs `_GNU_SOURCE`, which Swift's Glibc module is built
    /// without: it is looked up by name. Without it, the CPUs online count.)
    static let mayRunOnAnotherCPU: Bool = {
        typealias GetAffinity = @convention(c) (pid_t, Int, UnsafeMutableRawPointer?) -> Int32
        var mask = [UInt64](repeating: 0, count: 16)   // 1,024 CPUs, as glibc's cpu_set_t
        if let process = dlopen(nil, RTLD_NOW), let symbol = dlsym(process, "sched_getaffinity") {
            let getAffinity = unsafeBitCast(symbol, to: GetAffinity.self)
            if mask.withUnsafeMutableBytes({ getAffinity(0, $0.count, $0.baseAddress) }) == 0 {
                return mask.reduce(0) { $0 + $1.nonzeroBitCount } > 1
            }
        }
        return sysconf(Int32(_SC_NPROCESSORS_ONLN)) > 1
    }()

    /// Schedules a sweep at `deadline` unless one is scheduled at or before it.
    private func armSweep(at deadline: UInt64) {
        let arm = sweepAt.withLock { scheduled -> Bool in
            if let scheduled, scheduled <= deadline { return false }
            scheduled = deadline
            return true
        }
        guard arm else { return }
        let now = MonotonicCondition.now()
        RetryClock.shared.schedule(after: Double(deadline > now ? deadline - now : 0) / 1e9) { [weak self] in
            self?.sweep(scheduledAt: deadline)
        }
    }

    /// Fails the requests whose deadline passed, then schedules the next sweep.
    private func sweep(scheduledAt deadline: UInt64) {
        sweepAt.withLock { if $0 == deadline { $0 = nil } }
        let now = MonotonicCondition.now()
        let (expired, next) = pending.withLock { pending -> ([PendingReply], UInt64?) in
            let expired = pending.values.filter { $0.deadline <= now }
            for reply in expired { pending.removeValue(forKey: reply.correlation) }
            return (expired, pending.values.map(\.deadline).min())
        }
        if let next { armSweep(at: next) }
        guard !expired.isEmpty else { return }
        // The error says whether anyone serves the identifier, which asks the back end:
        // off the clock's thread, so that a slow answer delays no other timer.
        Self.timeoutQueue.async { [timedOut] in
            for reply in expired {
                guard let error = timedOut(reply.timeout) else { return }
                reply.complete(.failure(error))
            }
        }
    }

    /// Where timed-out requests look up their responders (a serial queue, not a global
    /// one: see ``ListenerToken``'s start queue).
    private static let timeoutQueue = DispatchQueue(label: "Wormhole.request.timeout")

    /// Completes `correlation`'s request with `outcome`, unless its reply came first.
    func finish(_ correlation: UInt64, _ outcome: ReplyOutcome) {
        pending.withLock { $0.removeValue(forKey: correlation) }?.complete(outcome)
    }

    private func route(_ record: WormholeRecord) {
        guard record.role == .reply || record.role == .errorReply else { return }
        finish(record.correlation, .success(record))
    }

    /// The reply listener stopped for good: nothing will complete the requests waiting.
    private func failAll(_ error: WormholeError) {
        guard !isListening else { return }
        let all = pending.withLock { pending -> [PendingReply] in
            defer { pending = [:] }
            return Array(pending.values)
        }
        for reply in all { reply.complete(.failure(error)) }
    }
}

/// The reply routers of one wormhole, one per request identifier, made at its first
/// request.
///
/// A router's listener is started outside the lock (it opens the reply log and
/// subscribes to the inotify engine, or waits for a server): a lookup of another
/// identifier's router never waits for it. Of two started at the same moment for one
/// identifier, the first kept is used and the other stopped.
final class ReplyRouters: Sendable {
    private let routers = Locked<[String: ReplyRouter]>([:])

    func router(for identifier: String, in wormhole: Wormhole) throws(WormholeError) -> ReplyRouter {
        if let router = listening(identifier) { return router }
        let made = ReplyRouter(identifier: identifier, wormhole: wormhole)
        try made.start(wormhole)
        return keep(made)
    }

    /// ``router(for:in:)`` for asynchronous callers: the router is started while the
    /// caller is suspended.
    func router(for identifier: String, in wormhole: Wormhole) async throws(WormholeError) -> ReplyRouter {
        if let router = listening(identifier) { return router }
        let made = ReplyRouter(identifier: identifier, wormhole: wormhole)
        try await made.start(wormhole)
        return keep(made)
    }

    /// The identifier's router, if it still listens.
    private func listening(_ identifier: String) -> ReplyRouter? {
        guard let router = routers.withLock({ $0[identifier] }), router.isListening else { return nil }
        return router
    }

    /// Keeps `made`, started, unless another router of its identifier that listens was
    /// kept meanwhile: then `made` is stopped and that one returned.
    private func keep(_ made: ReplyRouter) -> ReplyRouter {
        while true {
            let current = routers.withLock { $0[made.identifier] }
            // Whether the current one listens is asked outside the lock (its own lock).
            if let current, current !== made, current.isListening {
                made.stop()
                return current
            }
            let replaced = routers.withLock { routers -> Bool in
                guard routers[made.identifier] === current else { return false }
                routers[made.identifier] = made
                return true
            }
            if replaced { return made }
        }
    }
}
