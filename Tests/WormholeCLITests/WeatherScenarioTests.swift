#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing

/// The weather example's scenario (`Examples/Weather/run-scenario`), run as it is: a
/// service user and a widget user sharing a Unix group, the service started on demand by
/// the path units `wormhole activation` writes under a real `systemd --user` manager (in a
/// mount namespace of its own), the Python widget in an unprivileged bubblewrap sandbox.
/// Needs root, useradd, bwrap and systemd; the script removes every user, group, unit and
/// container it made.
@Suite("The weather scenario (activation, sandbox, shared group)",
       .enabled(if: geteuid() == 0
                && ["/usr/sbin/useradd", "/usr/bin/bwrap", "/usr/lib/systemd/systemd", "/usr/bin/systemctl", "/usr/bin/python3"]
                    .allSatisfy { FileManager.default.isExecutableFile(atPath: $0) },
                "needs root, useradd, bwrap (apt-get install bubblewrap), systemd and python3"))
struct WeatherScenarioTests {
    @Test("jobs and a request passed while no service runs start it; the widget in the sandbox sees the latest reading; a service killed in a job loses and repeats none",
          .timeLimit(.minutes(2)))
    func scenario() async throws {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Examples/Weather/run-scenario").path
        let sandbox = Sandbox()
        let run = try sandbox.start([script], product: "/bin/bash", environment: ["WEATHER_PRODUCTS": Products.directory])
        let result = await run.finish(seconds: 100)
        let summary = result.output
        #expect(result.status == 0 && !result.signaled, "\(summary)\n\(result.stderr)")
        #expect(summary.contains("RESULT: all checks passed"), "\(summary)\n\(result.stderr)")
        for line in [
            "check ok: systemd-analyze verify --user of the 4 units",
            "check ok: (a) the widget got the forecast",
            "check ok: (a) jobs 1-3 done",
            "check ok: (a) both services exited 0 when idle",
            "check ok: (b) the widget shows the latest reading, 21.5 °C",
            "check ok: (c) job 5 handed out again, on delivery 2",
            "check ok: every job 1-6 done exactly once",
            "check ok: the queue: 6 acknowledged, 0 dead letters, 0 pending, 0 in flight",
        ] {
            #expect(summary.contains(line), "missing '\(line)' in:\n\(summary)")
        }
        #expect(!summary.contains("FAILED"), "\(summary)")
    }
}
