#if canImport(Glibc)
import Glibc
#endif
import Dispatch
import ProcessSignals
import Synchronization
@_spi(Backend) import Wormhole

/// How long `listen` and `observe` go on: until a count of events, a deadline or a
/// signal, whichever comes first.
final class ListeningSession: Sendable {
    enum Outcome: Sendable, Equatable {
        /// `--count` events arrived.
        case reachedCount
        /// `--timeout` elapsed first.
        case timedOut
        /// SIGINT, SIGTERM or SIGHUP arrived.
        case interrupted(Int32)
        /// Listening cannot go on (out of inotify watches, the container's parent gone).
        case failed(String)
        /// `--exit-when-idle`: nothing was handled for that long.
        case idle
    }

    private struct State {
        var received = 0
        var outcome: Outcome?
    }

    /// The serial queue on which every event of the session is handled and printed.
    let queue = DispatchQueue(label: "wormhole.session")
    private let limit: Int?
    private let state = Mutex(State())
    /// Signalled once, when the session ends.
    private let ended = MonotonicEvent()

    /// Starts a session: from here on SIGINT, SIGTERM and SIGHUP end it. Throws when
    /// that cannot be set up, before anything is listened to.
    init(limit: Int?) throws(CommandFailure) {
        self.limit = limit
        do {
            try CaughtSignals.route([SIGINT, SIGTERM, SIGHUP]) { [weak self] number in self?.finish(.interrupted(number)) }
        } catch {
            throw CommandFailure("cannot set up the handling of Ctrl-C and termination signals: \(error)")
        }
    }

    /// How many events were admitted.
    var received: Int { state.withLock { $0.received } }

    /// Handles one event unless the session has ended or reached its count: `handle`
    /// runs, then the session ends if this was the last event wanted.
    /// Returns whether the event was handled.
    @discardableResult
    func admit(_ handle: () -> Void) -> Bool {
        let admitted = state.withLock { state -> Bool in
            guard state.outcome == nil, limit.map({ state.received < $0 }) ?? true else { return false }
            state.received += 1
            return true
        }
        guard admitted else { return false }
        handle()
        if let limit, received >= limit { finish(.reachedCount) }
        return true
    }

    /// Ends the session with `outcome`, unless it has already ended.
    func finish(_ outcome: Outcome) {
        let first = state.withLock { state -> Bool in
            guard state.outcome == nil else { return false }
            state.outcome = outcome
            return true
        }
        if first { ended.signal() }
    }

    /// `--exit-when-idle`: ends the session once `wormhole` has handled nothing for
    /// `seconds` (``Wormhole/waitUntilIdle(for:)``), on a thread of its own.
    func finishWhenIdle(_ wormhole: Wormhole, after seconds: Double?) throws {
        guard let seconds else { return }
        let started = DetachedThread.start { [weak self] in
            wormhole.waitUntilIdle(for: seconds)
            self?.finish(.idle)
        }
        if started != 0 {
            throw CommandFailure("cannot start the thread that waits for --exit-when-idle: \(String(cString: strerror(started)))")
        }
    }

    /// Blocks the calling thread until the session ends: the count is reached, `timeout`
    /// seconds pass, or a termination signal arrives. A blocking wait, not a task: an
    /// idle `wormhole listen` then has no thread of Swift's cooperative pool and no
    /// timer of Dispatch's, so nothing wakes it while nothing arrives (with a task,
    /// Dispatch's pool monitor woke it once a second).
    func wait(timeout: Double?) -> Outcome {
        // On the monotonic clock: a step of the wall clock moves no timeout.
        if !ended.wait(timeout: timeout) { finish(.timedOut) }
        return state.withLock { $0.outcome } ?? .timedOut
    }

    /// Waits up to `seconds` for the session to end (a signal, or ``finish(_:)``),
    /// without ending it when they pass: for a command that works at intervals (`top`).
    /// Returns how it ended, or `nil` when it goes on.
    func outcome(within seconds: Double) -> Outcome? {
        _ = ended.wait(timeout: seconds)
        return state.withLock { $0.outcome }
    }

    /// Waits for the count, the timeout or a signal, stops what was listening, and turns
    /// how the wait ended into the command's result: a timeout before anything (or before
    /// the count) arrived is "no message" (exit status 2); a signal ends the process by it.
    /// - Parameters:
    ///   - what: The plural of what was awaited ("messages", "notifications").
    ///   - names: The identifiers or names, as printed.
    ///   - stop: Cancels the listeners or observers.
    func finish(count: Int?, timeout: Double?, what: String, names: String, stop: () -> Void) throws {
        let outcome = wait(timeout: timeout)
        stop()
        queue.sync {}
        switch outcome {
        case .reachedCount, .idle:
            return
        case .timedOut:
            let received = self.received
            if received == 0 {
                throw CommandFailure("no \(what.dropLast()) arrived within \(Listen.seconds(timeout)) \(what == "messages" ? "on" : "for") \(names)",
                                     exitCode: WormholeExitCode.noMessage)
            }
            if let count, received < count {
                throw CommandFailure("only \(received) of \(count) \(what) arrived within \(Listen.seconds(timeout))",
                                     exitCode: WormholeExitCode.noMessage)
            }
        case .interrupted(let signal):
            Self.endBySignal(signal)
        case .failed(let reason):
            throw CommandFailure(reason)
        }
    }

    /// Ends the process by `signal` after the caller has released what it held, so that
    /// the shell sees the usual "killed by SIGINT" and stops a loop around the command.
    static func endBySignal(_ signal: Int32) -> Never {
        Glibc.signal(signal, SIG_DFL)
        // Dispatch's threads block signals: unblock it here and direct it at the process.
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, signal)
        pthread_sigmask(SIG_UNBLOCK, &set, nil)
        kill(getpid(), signal)
        usleep(100_000)
        exit(128 + signal)
    }
}
