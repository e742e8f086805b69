@_spi(Backend) import WormholeCore
@_spi(Backend) import WormholeFiles
/// Makes the process's reader thread follow a router's reply log while the router is
/// idle, so that its listener's claim does not hold back the log's compaction.
///
/// A listener that nobody drains keeps its claim (Protocol §12) on the replies it has
/// not read, which holds back the compaction of a log that the identifier's other
/// requesters go on using: once no request of the router is pending for ``idleDelay``,
/// the reader thread follows the log again, until the next request.
///
/// The hold is taken and given up outside the lock (it subscribes to the inotify
/// engine): the lock only decides who does it. `began` counts the requests begun, so
/// that a check that looked at the pending requests before a request began does not
/// follow the log for it; a request that begins while the check takes its hold leaves
/// `leaving` for the check, which gives the hold up as soon as it has it.
final class ReplyIdleFollowing: Sendable {
    private struct State {
        enum Following { case no, holding, yes }
        var following = Following.no
        var leaving = false
        var checkScheduled = false
        var lastEnded: UInt64 = 0
        var began: UInt64 = 0
    }
    private let state = Locked(State())
    static let idleDelay = 1.0

    /// The router's reply listener, when it has one.
    private let token: @Sendable () -> ListenerToken?
    /// Whether no request of the router waits.
    private let noneWaiting: @Sendable () -> Bool

    init(token: @escaping @Sendable () -> ListenerToken?, noneWaiting: @escaping @Sendable () -> Bool) {
        self.token = token
        self.noneWaiting = noneWaiting
    }

    /// A request ended (answered, failed or timed out).
    func ended() {
        let now = MonotonicCondition.now()
        let schedule = state.withLock { state -> Bool in
            state.lastEnded = now
            guard !state.checkScheduled, state.following == .no else { return false }
            state.checkScheduled = true
            return true
        }
        if schedule { scheduleCheck(after: Self.idleDelay) }
    }

    /// A request begins: the reader thread no longer follows the log for an idle router.
    func leave() {
        let release = state.withLock { state -> Bool in
            state.began &+= 1
            switch state.following {
            case .no: return false
            case .holding:
                // The check gives its hold up once it has it.
                state.leaving = true
                return false
            case .yes:
                state.following = .no
                return true
            }
        }
        if release { token()?.releaseObservation() }
    }

    private func scheduleCheck(after seconds: Double) {
        RetryClock.shared.schedule(after: seconds) { [weak self] in self?.check() }
    }

    /// What a check decided under the lock.
    private enum Decision {
        /// Nothing to do: the reader thread follows already, or a request waits or began.
        case none
        /// A request ended less than ``idleDelay`` ago: look again after this many seconds.
        case again(Double)
        /// Idle: take the hold.
        case follow
    }

    /// Follows the log from the reader thread when no request was pending for
    /// ``idleDelay``; looks again later when one ended meanwhile.
    private func check() {
        let now = MonotonicCondition.now()
        let beganBefore = state.withLock { $0.began }
        let idle = noneWaiting()
        let decision = state.withLock { state -> Decision in
            state.checkScheduled = false
            guard state.following == .no, idle, state.began == beganBefore else { return .none }
            let waited = Double(now &- state.lastEnded) / 1e9
            if waited < Self.idleDelay {
                state.checkScheduled = true
                return .again(Self.idleDelay - waited)
            }
            state.following = .holding
            return .follow
        }
        switch decision {
        case .none: return
        case .again(let seconds): return scheduleCheck(after: seconds)
        case .follow: break
        }
        // A hold that fails (inotify out of watches) is tried again at the next idle.
        let token = token()
        let began = (try? token?.holdObservation()) ?? nil
        let (keep, giveUp) = state.withLock { state -> (Bool, Bool) in
            let leaving = state.leaving
            state.leaving = false
            guard began != nil, !leaving else {
                state.following = .no
                return (false, began != nil)
            }
            state.following = .yes
            return (true, false)
        }
        if giveUp { token?.releaseObservation() }
        if keep, began == true { token?.drainOnCallingThread(replaced: true) }
    }
}
