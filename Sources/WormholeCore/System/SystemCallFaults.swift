#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
import Synchronization

/// The seam that every system call of the core passes through, so that a test can make
/// the Nth one fail, or end the process right after it, as SQLite's I/O-error and crash
/// tests do.
///
/// Off (one relaxed atomic load per call) unless a test process arms it. The test agent
/// arms it around one operation (a pass, a listener's drain, a compaction, a clear, a
/// claim's creation and removal, a durable acknowledgement), walks N over every call that
/// operation makes, and the test checks after each fault that no message was lost in
/// silence (`FaultWalkTests`).
///
/// ```swift
/// SystemCallFaults.arm(.init(at: 3, fault: .fail(.noSpace)))
/// try? wormhole.passMessage("x", identifier: "id")   // the 3rd call fails with ENOSPC
/// let calls = SystemCallFaults.disarm()              // how many calls were made
/// ```
package enum SystemCallFaults {
    /// What happens at the chosen call.
    package enum Fault: Sendable, Equatable {
        /// The call is not made; it fails with this error (EINTR is retried by the caller,
        /// as a real one would be).
        case fail(Errno)
        /// A write writes half of what it was given (at least one byte); any other call
        /// is made as usual.
        case shortWrite
        /// The call is made, then the process ends at once (`_exit(9)`), as if killed.
        case exitAfter
    }

    /// Which call, counted from 1 after ``arm(_:)``, and what happens to it.
    package struct Plan: Sendable, Equatable {
        package let at: Int
        package let fault: Fault
        package init(at: Int, fault: Fault) {
            self.at = at
            self.fault = fault
        }
    }

    private struct State {
        var plan: Plan?
        var count = 0
        var calls: [String] = []
    }

    private static let armed = Atomic<Bool>(false)
    private static let state = Locked(State())

    /// Starts counting calls from 0; `plan`, when given, applies to the call it names.
    package static func arm(_ plan: Plan?) {
        state.withLock { $0 = State(plan: plan) }
        armed.store(true, ordering: .releasing)
    }

    /// Stops counting; returns how many calls were made since ``arm(_:)``.
    @discardableResult
    package static func disarm() -> Int {
        armed.store(false, ordering: .releasing)
        return state.withLock { $0.count }
    }

    /// The calls made since ``arm(_:)``, by name, in order.
    package static var calls: [String] { state.withLock { $0.calls } }

    /// What to do for the call about to be made; `nil`: make it as usual.
    @inline(__always)
    package static func next(_ name: StaticString) -> Fault? {
        guard armed.load(ordering: .relaxed) else { return nil }
        return nextArmed(name)
    }

    private static func nextArmed(_ name: StaticString) -> Fault? {
        state.withLock { state -> Fault? in
            state.count += 1
            state.calls.append(name.description)
            guard let plan = state.plan, plan.at == state.count else { return nil }
            return plan.fault
        }
    }

    /// After a call that was made: ends the process when the plan says so.
    @inline(__always)
    package static func after(_ fault: Fault?) {
        if fault == .exitAfter { _exit(9) }
    }
}
