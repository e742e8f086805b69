// A small program the integration tests start as a real, separate process.
//
// DIR is a directory, or postgres:<container> for the database at
// $WORMHOLE_TEST_POSTGRES_URL (WormholeTestSupport's AgentLocation).
//
//   WormholeTestAgent COMMAND ARGUMENT...
//
// Each command is a function of its own in Commands/ (its usage in its doc comment),
// found by name in the table `commands` below.

#if canImport(Glibc)
import Glibc
#endif
import Foundation
@_spi(Backend) import Wormhole
import WormholeTestSupport
import Synchronization

// An agent never outlives the test that started it, even when that test process is
// killed, and never runs longer than five minutes: a watchdog ends it.
let watchdogParent = getppid()
let watchdogDeadline = ContinuousClock.now + .seconds(300)
Thread {
    while getppid() == watchdogParent && ContinuousClock.now < watchdogDeadline { usleep(100_000) }
    _exit(3)
}.start()

// WORMHOLE_AGENT_UMASK=077: the umask of a service started with UMask=0077.
if let mask = ProcessInfo.processInfo.environment["WORMHOLE_AGENT_UMASK"], let bits = mode_t(mask, radix: 8) { umask(bits) }

// Each command is a function of its own, in Commands/: the table below maps the name a
// test gives to it.
let commands: [String: () throws -> Void] = [
    "write": writeCommand,
    "spray": sprayCommand,
    "flood": floodCommand,
    "listen": listenCommand,
    "starved": starvedCommand,
    "timers": timersCommand,
    "observe": observeCommand,
    "peak": peakCommand,
    "cycles": cyclesCommand,
    "durable": durableCommand,
    "sidecar": sidecarCommand,
    "instances": instancesCommand,
    "drop": dropCommand,
    "fault": faultCommand,
    "tight": tightCommand,
    "probe": probeCommand,
    "relative": relativeCommand,
    "group": groupCommand,
    "pace": paceCommand,
    "worker": workerCommand,
    "respond": respondCommand,
    "request": requestCommand,
    "wakeups": wakeupsCommand,
    "quiet-requests": quietRequestsCommand,
    "soak-listen": soakListenCommand,
]

guard !arguments.isEmpty else { fail("no command") }
guard let run = commands[command] else { fail("unknown command \(command)") }
do {
    try run()
} catch {
    fail("\(error)")
}
