import Foundation
import Testing

/// Timeouts against steps of the wall clock, as NTP, an operator or a resume from
/// suspend makes them. The test steps this machine's clock, so it runs only when asked
/// (`WORMHOLE_TEST_CLOCK_STEPS=1`, as root), with no other test beside it: `.ci/run` runs
/// it on its own after the suite. The clock is put back by the opposite step.
@Suite("Clock steps", .serialized)
struct ClockStepTests {
    static let enabled = geteuid() == 0 && ProcessInfo.processInfo.environment["WORMHOLE_TEST_CLOCK_STEPS"] == "1"

    @Test("listen and observe --timeout 2 end after 2 s by the monotonic clock, whether the wall clock is stepped back or forward by an hour meanwhile",
          .enabled(if: enabled, "steps the machine's clock: WORMHOLE_TEST_CLOCK_STEPS=1, as root"), .timeLimit(.minutes(1)),
          arguments: ["listen", "observe"], [-3600, 3600])
    func timeoutsIgnoreClockSteps(command: String, step: Int) async throws {
        let sandbox = Sandbox()
        let started = ContinuousClock.now
        let running = try sandbox.start([command, "quiet", "--timeout", "2"])
        try await Task.sleep(for: .milliseconds(300))
        let stepped = WallClockStep(seconds: step)
        defer { stepped.undo() }
        while running.process.isRunning && ContinuousClock.now - started < .seconds(10) {
            try await Task.sleep(for: .milliseconds(10))
        }
        let elapsed = ContinuousClock.now - started
        stepped.undo()
        let result = await running.finish(seconds: 1)
        #expect(result.status == 2, "exit status 2 (nothing arrived): \(result.status) \(result.stderr)")
        #expect(elapsed >= .milliseconds(1900) && elapsed < .seconds(4), "\(command) --timeout 2 with the clock stepped by \(step) s ended after \(elapsed)")
    }
}

/// A step of CLOCK_REALTIME, undone once by the opposite step.
final class WallClockStep: @unchecked Sendable {
    private let seconds: Int
    private var undone = false

    init(seconds: Int) {
        self.seconds = seconds
        Self.step(by: seconds)
    }

    func undo() {
        guard !undone else { return }
        undone = true
        Self.step(by: -seconds)
    }

    private static func step(by seconds: Int) {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        now.tv_sec += seconds
        precondition(clock_settime(CLOCK_REALTIME, &now) == 0, "clock_settime: \(String(cString: strerror(errno)))")
    }
}
