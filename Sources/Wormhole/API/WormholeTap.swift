import Dispatch
import Synchronization
@_spi(Backend) import WormholeCore
@_spi(Backend) import WormholeFiles

/// A listener of every identifier of a container, those created later included: what
/// `wormhole listen --all` and `wormhole top` show. Made by
/// ``Wormhole/listenForAllRecords(queue:onError:listener:)``.
///
/// It hears every message passed after it started, exactly once per identifier, as a
/// listener of that identifier would: the identifiers there when it starts from their
/// last message then, and each one that appears later from its first.
///
/// However many identifiers the container has, the tap holds no file descriptor for
/// any of them while it waits: the one inotify watch of the process on the container's
/// directory says which log was written, and the tap opens that log, reads what is new
/// and closes it. So it follows thousands of identifiers under a low `ulimit -n`. Unlike
/// a listener, it keeps no claim (Protocol.md §12): `status` does not list it, and a
/// compaction does not wait for it, so a tap that falls behind by more than the
/// retained messages (``WormholeConfiguration/retainedMessageCount``) is told of the
/// messages it missed, as a listener past the backlog cap is.
///
/// When its container is a shared one that `wormhole share --revoke` removed, the tap
/// ends as a whole: `onError` is called once with the ``WormholeError/Code/containerUnavailable``
/// error that says so, and ``isCancelled`` is then true (nothing will be passed there
/// again).
public final class WormholeTap: Sendable {
    private let wormhole: Wormhole
    private let transiting: any WormholeTransiting
    private let queue: DispatchQueue?
    private let onError: @Sendable (WormholeError) -> Void
    private let listener: @Sendable (WormholeRecord) -> Void
    private let state = Mutex<State>(State())
    private let observation = Mutex<(any WormholeTransitingObservation)?>(nil)

    private struct State {
        var tokens: [String: ListenerToken] = [:]
        var cancelled = false
    }

    /// Whether the tap stopped: cancelled, or ended because its shared container was
    /// revoked (reported once to `onError`).
    public var isCancelled: Bool { state.withLock { $0.cancelled } }

    init(wormhole: Wormhole, transiting: any WormholeTransiting, queue: DispatchQueue?,
         onError: @escaping @Sendable (WormholeError) -> Void,
         listener: @escaping @Sendable (WormholeRecord) -> Void) throws(WormholeError) {
        self.wormhole = wormhole
        self.transiting = transiting
        self.queue = queue
        self.onError = onError
        self.listener = listener
        // The tap starts at this look: every message after it is heard. An identifier
        // that appears between this look and the watch below starts from its first.
        let before = try wormhole.summaries()
        let subscription = try transiting.observeIdentifiers { [weak self] identifier in
            guard let self else { return }
            if let identifier { self.add(identifier, after: 0) } else if !self.endIfRevoked() { self.rescan() }
        }
        observation.withLock { $0 = subscription }
        for summary in before { add(summary.identifier, after: summary.lastSequence) }
        rescan()
    }

    deinit { cancelling() }

    /// The identifiers it listens to now.
    public var identifiers: [String] { state.withLock { $0.tokens.keys.sorted() } }

    /// Stops every listener of the tap, waiting for handlers that run on other threads.
    public func cancel() {
        cancelling()
    }

    private func cancelling() {
        observation.withLock { $0 }?.cancel()
        let tokens = state.withLock { state -> [ListenerToken] in
            state.cancelled = true
            defer { state.tokens.removeAll() }
            return Array(state.tokens.values)
        }
        for token in tokens { token.cancel() }
    }

    /// Ends the tap, reporting it once, when its shared container was revoked: its
    /// listeners each find their log's directory gone, and no member can make it again.
    /// Returns whether it ended.
    @discardableResult
    private func endIfRevoked() -> Bool {
        guard let revoked = transiting.containerRevocation() else { return false }
        let first = state.withLock { state -> Bool in
            defer { state.cancelled = true }
            return !state.cancelled
        }
        cancelling()
        if first { onError(revoked) }
        return true
    }

    /// Listens to every identifier there now that it does not listen to yet, from its
    /// first message (it appeared after the tap started).
    private func rescan() {
        do {
            for summary in try wormhole.summaries() { add(summary.identifier, after: 0) }
        } catch {
            onError(error)
        }
    }

    private func add(_ identifier: String, after sequence: UInt64) {
        let known = state.withLock { $0.cancelled || $0.tokens[identifier] != nil }
        guard !known else { return }
        do {
            // A reader that holds nothing while the tap waits, where the back end can.
            let transiting = self.transiting
            let token = try wormhole.makeListener(
                identifier: identifier, start: .after(sequence: sequence), durableName: nil,
                makeReader: { () throws(WormholeError) in
                    try transiting.makeTapReader(identifier: identifier, startingFrom: .after(sequence: sequence))
                },
                queue: queue, onError: { [weak self] error in
                    // One report for the whole tap when the container was revoked, not one
                    // per identifier.
                    guard let self, !self.endIfRevoked() else { return }
                    self.onError(error)
                }, listener: listener)
            let duplicate = state.withLock { state -> Bool in
                if state.cancelled || state.tokens[identifier] != nil { return true }
                state.tokens[identifier] = token
                return false
            }
            if duplicate { token.cancel() }
        } catch {
            onError(error)
        }
    }
}

extension Wormhole {
    /// Calls `listener` with every record passed under any identifier of the container
    /// after this call, identifiers created later included: a tap for operators
    /// (`wormhole listen --all`). Records of one identifier come in its order.
    ///
    /// - Throws: ``WormholeError`` when the container cannot be watched, or this
    ///   wormhole's back end has no container directory (PostgreSQL).
    public func listenForAllRecords(
        queue: DispatchQueue? = nil,
        onError: (@Sendable (WormholeError) -> Void)? = nil,
        listener: @escaping @Sendable (WormholeRecord) -> Void
    ) throws(WormholeError) -> WormholeTap {
        try WormholeTap(wormhole: self, transiting: transiting, queue: queue, onError: onError ?? Self.logError, listener: listener)
    }
}
