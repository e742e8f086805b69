#if canImport(Glibc)
import Glibc
#endif
@_spi(Backend) import WormholeCore
@_spi(Backend) import WormholeFiles

/// When a wormhole's listeners, durable listeners, work queue members and responders
/// last handled a message, and how many are handling one now: what
/// ``Wormhole/waitUntilIdle(for:)`` waits on.
final class HandlingActivity: @unchecked Sendable {
    private let condition = MonotonicCondition()
    /// Guarded by `condition`'s mutex.
    private var handling = 0
    /// When the last handler returned (``MonotonicCondition/now()``). Guarded likewise.
    private var lastHandled: UInt64 = 0
    /// How many threads wait in ``waitUntilIdle(for:)``: a handler's return wakes them
    /// only when there are some. Guarded likewise.
    private var waiting = 0

    /// `handler`, counted: while it runs the wormhole is not idle, and its return starts
    /// the idle time again.
    func counting<Value>(_ handler: @escaping @Sendable (Value) -> Void) -> @Sendable (Value) -> Void {
        { [self] value in
            begin()
            defer { end() }
            handler(value)
        }
    }

    /// ``counting(_:)`` for a work queue member's handler, which may throw.
    func counting(_ handler: @escaping @Sendable (WormholeRecord, Int) throws -> Void) -> @Sendable (WormholeRecord, Int) throws -> Void {
        { [self] record, deliveries in
            begin()
            defer { end() }
            try handler(record, deliveries)
        }
    }

    /// A handler, or a listener's read (a drain, from when it is scheduled), begins: the
    /// wormhole is not idle until the matching ``end(handled:)``.
    func begin() {
        condition.lock()
        handling += 1
        condition.unlock()
    }

    /// What ``begin()`` began ends. A handler's end (`handled`) starts the idle time
    /// again; a drain's does not (a drain that found nothing is no activity), it only
    /// lets the idle time run out.
    func end(handled: Bool = true) {
        condition.lock()
        handling -= 1
        if handled { lastHandled = MonotonicCondition.now() }
        if waiting > 0 { condition.broadcast() }
        condition.unlock()
    }

    /// Blocks until `seconds` have passed, on the monotonic clock, since the later of this
    /// call and the last handler's return, with no handler running.
    func waitUntilIdle(for seconds: Double) {
        let span = seconds.isFinite ? UInt64(clamping: Int64(max(0, min(seconds, 1e9)) * 1e9)) : UInt64(1e18)
        let start = MonotonicCondition.now()
        condition.lock()
        waiting += 1
        defer {
            waiting -= 1
            condition.unlock()
        }
        while true {
            if handling > 0 {
                condition.wait()
                continue
            }
            let deadline = max(start, lastHandled) &+ span
            if MonotonicCondition.now() >= deadline { return }
            condition.wait(until: deadline)
        }
    }
}

extension Wormhole {
    /// Blocks the calling thread until this wormhole has been idle for `seconds`: none of
    /// its listeners, durable listeners, work queue members or responders has handled a
    /// message for that long (counted from the later of this call and the last handler's
    /// return, on the monotonic clock), and none is handling one.
    ///
    /// For a service started on demand (by a systemd path unit when a message arrives,
    /// Activation.md) that ends when there is nothing more to do: its durable listener or
    /// responder first delivers what was passed while it did not run, then new messages
    /// as they come; once they stop, the service cancels it and exits. A message passed
    /// after this returns is not lost: a durable listener's position and a work queue
    /// (responders included) keep it for the next run.
    ///
    /// ```swift
    /// let token = try wormhole.listenForRecords(withIdentifier: "jobs", durableName: "worker") { handle($0) }
    /// wormhole.waitUntilIdle(for: 30)
    /// token.cancel()
    /// ```
    ///
    /// The time counts from the call when nothing has been handled yet; a listener's read
    /// that is scheduled or running counts as handling, so that the first read of a
    /// listener made just before (what a durable name resumed has to deliver) is never
    /// taken for idleness, however loaded the machine.
    /// It waits on its own thread (not one of Swift concurrency's pool) and is woken only
    /// when a handler returns.
    public func waitUntilIdle(for seconds: Double) {
        handlingActivity.waitUntilIdle(for: seconds)
    }
}
