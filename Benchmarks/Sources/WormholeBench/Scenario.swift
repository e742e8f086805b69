#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// What carries the messages in a measurement.
enum Mechanism: String, Sendable {
    case pipe
    case socket = "unix-socket"
    case wormholeRaw = "wormhole-raw"
    case wormholeCodable = "wormhole-codable"
    /// Raw bytes passed in batches of ``Scenario/batchSize`` (`passMessages`), one lock
    /// and one write per batch.
    case wormholeBatched = "wormhole-batched"
    case naive = "naive-rename"
    /// Wormhole over its PostgreSQL back end, raw bytes (sender and listeners each hold
    /// their own connections).
    case wormholePostgres = "wormhole-postgres"
    /// The same with `synchronous_commit=off` in the sender's URL: its passes return at
    /// their commit, without waiting for the WAL flush (Docs/Scaling.md, "Asynchronous commit").
    case wormholePostgresAsync = "wormhole-postgres-async"
    /// The same, the sender passing batches of ``Scenario/batchSize`` (`passMessages`:
    /// one statement, one `INSERT`, one commit per batch).
    case wormholePostgresBatched = "wormhole-postgres-batched"
    /// The same, the sender passing from ``Scenario/senderThreads`` threads at once, each
    /// to an identifier of its own: passes that meet share a statement and a commit.
    case wormholePostgresThreads = "wormhole-postgres-threads"
    /// The PostgreSQL floor: `SELECT pg_notify(channel, payload)` with the stamp and the
    /// index in the payload, one `LISTEN` connection per listener; no table.
    case postgresNotify = "postgres-notify"
    /// The floor of Wormhole's design: the system calls of protocol version 3 in C, one
    /// thread (`Benchmarks/C/floor.c`).
    case floor = "c-floor"
    /// A D-Bus signal through a private `dbus-daemon` (`Benchmarks/C/dbus_peer.c`, libdbus-1).
    case dbus = "dbus-signal"
    /// The Swift sender of ``wormholeRaw`` heard by a listener of the Python package
    /// (`Benchmarks/Python/listener.py`, `Python/`): what a Python program gets.
    case wormholePython = "wormhole-python-listener"

    /// What the latency and burst sections compare on each file system, when the run has
    /// them all (the C peers and the bus are optional: ``Peers``).
    static let local: [Mechanism] = [.pipe, .socket, .floor, .wormholeRaw, .wormholePython, .wormholeCodable, .dbus, .naive]

    /// The name in tables and charts.
    var label: String {
        switch self {
        case .pipe: "pipe"
        case .socket: "Unix socket"
        case .wormholeRaw: "Wormhole, raw bytes"
        case .wormholeCodable: "Wormhole, Codable"
        case .wormholeBatched: "Wormhole, raw bytes in batches of \(Scenario.batchSize) (passMessages)"
        case .naive: "naive file + rename (MMWormhole-style)"
        case .wormholePostgres: "Wormhole, PostgreSQL"
        case .wormholePostgresAsync: "Wormhole, PostgreSQL, synchronous_commit=off"
        case .wormholePostgresBatched: "Wormhole, PostgreSQL, batches of \(Scenario.batchSize) (passMessages)"
        case .wormholePostgresThreads: "Wormhole, PostgreSQL, \(Scenario.senderThreads) sender threads (an identifier each)"
        case .postgresNotify: "bare LISTEN/NOTIFY (payload in the notification, no table)"
        case .floor: "C floor: protocol v3 calls, one thread"
        case .dbus: "D-Bus signal via dbus-daemon"
        case .wormholePython: "Wormhole, raw bytes, Python listener"
        }
    }

    var usesPostgres: Bool { [.wormholePostgres, .wormholePostgresAsync, .wormholePostgresBatched, .wormholePostgresThreads, .postgresNotify].contains(self) }
}

/// One measurement: a sender process, listener processes, and how messages are sent.
struct Scenario: Sendable {
    var mechanism: Mechanism
    var listeners = 1
    var identifiers = 1
    var size = 16
    var count = 2000
    /// Identifiers per listener process at most. A listener holds two descriptors per
    /// identifier (its position in the log and its claim), and a process may hold 20,000
    /// on these machines: more identifiers are shared out among several processes.
    static let identifiersPerProcess = 5000
    /// 0: as fast as the sender can (a burst).
    var intervalNanoseconds: UInt64 = 300_000
    /// The batch of the batched mechanisms.
    static let batchSize = 64
    /// The sender's threads of ``Mechanism/wormholePostgresThreads``.
    static let senderThreads = 8
}

/// What one listener process reported.
struct ListenerReport: Sendable {
    var expected: Int
    var received: Int
    var duplicates: Int
    var outOfOrder: Int
    var firstReceipt: UInt64
    var lastReceipt: UInt64
    var cpuMicroseconds: UInt64
    var residentKiB: UInt64
    var latencies: [UInt64]
}

/// What the sender process reported.
struct SenderReport: Sendable {
    var first: UInt64
    var end: UInt64
    var passMedianNanoseconds: UInt64
    var passMeanNanoseconds: UInt64
    var cpuMicroseconds: UInt64
    var residentKiB: UInt64
}

/// The C peers (`Benchmarks/C`, built by `Benchmarks/run`) and the bus of the D-Bus
/// baseline, as far as this run has them.
struct Peers: Sendable {
    /// The directory of the C peers (`--c-bin`), where Benchmarks/run also puts the clever
    /// section's two small Swift programs.
    var cBin: String?
    /// `floor`: the protocol's system calls in C.
    var floor: String?
    /// `rr_floor`: the system calls of a request/reply round trip in C.
    var roundTripFloor: String?
    /// `dbus_peer`: a D-Bus signal sender and listener.
    var dbusPeer: String?
    /// The address of the running bus (a private `dbus-daemon` started by `Benchmarks/run`)
    /// and its process id (for `strace`).
    var dbusAddress: String?
    var dbusPid: pid_t?
    /// Its configuration file and `dbus-daemon` itself: the callgrind measurement starts
    /// a bus of its own under valgrind with them.
    var dbusConfig: String?
    var dbusDaemon: String?
    /// `python3` and the Python listener (`--python-listener`, `Benchmarks/Python/listener.py`).
    var python: String?
    var pythonListener: String?
    /// `redis_peer`: a Redis Streams consumer-group worker (the queues section), and the
    /// port and process id of the redis-server `Benchmarks/run` started on 127.0.0.1.
    var redisPeer: String?
    var redisPort: Int?
    var redisPid: pid_t?

    func has(_ mechanism: Mechanism) -> Bool {
        switch mechanism {
        case .floor: floor != nil
        case .dbus: dbusPeer != nil && dbusAddress != nil
        case .wormholePython: python != nil && pythonListener != nil
        default: true
        }
    }
}

/// A tool that counts what the processes of a measurement do between the harness's `GO`
/// (after the warm-up) and the moment each of them has handled its last message (it then
/// prints `MEASURED` and waits, so that what it does to report is not counted).
enum Instrument: Sendable {
    /// `strace -c -f -p PID` attached to every process at `GO` (and to the running
    /// dbus-daemon, for D-Bus) and detached at `MEASURED`: system calls by name.
    case strace(tool: String, directory: String)
    /// Every process started under `valgrind --tool=callgrind` (D-Bus: with a bus of its
    /// own, also under callgrind); counters zeroed at `GO` and dumped at `MEASURED`
    /// (`callgrind_control`): instructions executed in user space. `harness` is the
    /// executable that runs this harness's roles under valgrind: a copy of it without
    /// debugging information (valgrind 3.19 gives up on the DWARF 5 of Swift 6 binaries).
    case callgrind(valgrind: String, control: String, directory: String, harness: String)

    /// The mechanisms whose processes can be held at `MEASURED`.
    static let mechanisms: Set<Mechanism> = [.wormholeRaw, .wormholeCodable, .floor, .dbus]
}

/// What an ``Instrument`` counted in one process of a measurement.
struct ProcessCounts: Sendable {
    /// "sender", "listener" or "dbus-daemon".
    var role: String
    /// strace: system calls by name.
    var systemCalls: [String: Int] = [:]
    /// callgrind: instructions (Ir).
    var instructions: UInt64?

    var totalSystemCalls: Int { systemCalls.values.reduce(0, +) }
}

/// The result of one ``Scenario``.
struct Outcome: Sendable {
    var scenario: Scenario
    var sender: SenderReport
    var listeners: [ListenerReport]
    /// What an ``Instrument`` counted, per process (none without one).
    var counts: [ProcessCounts] = []
    /// For PostgreSQL scenarios: the server's WAL flushes and commits during the
    /// scenario (setup, warm-up and measured messages, every process).
    var serverDelta: ServerCounters.Snapshot? = nil

    /// WAL flushes and commits per message passed (warm-up included).
    var walFlushesPerMessage: Double? { serverDelta.map { Double($0.walFlushes) / Double(passed) } }
    var commitsPerMessage: Double? { serverDelta.map { Double($0.commits) / Double(passed) } }
    private var passed: Int { scenario.count + Frame.warmUpCount(identifiers: scenario.identifiers) }

    /// Every listener's latencies in the order each received its messages, listener
    /// after listener, in nanoseconds.
    var latenciesInOrder: [UInt64] { listeners.flatMap(\.latencies) }

    /// Every listener's latencies together, sorted, in nanoseconds.
    var latencies: [UInt64] { listeners.flatMap(\.latencies).sorted() }

    /// Messages some listener did not receive, over all listeners.
    var lost: Int { listeners.reduce(0) { $0 + max(0, $1.expected - $1.received) } }
    var duplicates: Int { listeners.reduce(0) { $0 + $1.duplicates } }
    var outOfOrder: Int { listeners.reduce(0) { $0 + $1.outOfOrder } }

    /// Messages per second delivered to every listener: the count over the time from
    /// the first send to the last receipt by the slowest listener.
    var throughput: Double {
        let last = listeners.map(\.lastReceipt).max() ?? 0
        guard last > sender.first else { return 0 }
        return Double(scenario.count) / (Double(last - sender.first) / 1e9)
    }

    /// Listener CPU time per message received, in microseconds (mean over listeners).
    var listenerMicrosecondsPerMessage: Double {
        let counted = listeners.filter { $0.received > 0 }
        let total = counted.reduce(0.0) { $0 + Double($1.cpuMicroseconds) / Double($1.received) }
        return total / Double(max(1, counted.count))
    }
}

/// Runs scenarios in a directory on one file system (and on a PostgreSQL server, for
/// the mechanisms that use one).
struct Runner {
    /// Where containers are made, one per scenario, removed after it.
    let base: String
    /// The server of ``Mechanism/wormholePostgres`` and ``Mechanism/postgresNotify``.
    var postgresURL: String? = nil
    /// Its counters, read before and after each of their scenarios.
    var serverCounters: ServerCounters? = nil
    /// The C peers and the bus, for ``Mechanism/floor`` and ``Mechanism/dbus``.
    var peers = Peers()

    func run(_ scenario: Scenario, instrument: Instrument? = nil) throws(BenchError) -> Outcome {
        let directory = base + "/" + scenario.mechanism.rawValue + "-\(scenario.listeners)-\(scenario.identifiers)-\(scenario.size)"
        removeTree(directory)
        defer { removeTree(directory) }
        // Each PostgreSQL scenario has a container (and a channel) of its own, so that no
        // run reads what an earlier one left in the tables.
        let container = "wormhole-bench-" + UUID().uuidString.prefix(13).lowercased()
        var postgres: [String] = []
        if scenario.mechanism.usesPostgres {
            guard let postgresURL else { throw BenchError("\(scenario.mechanism.label) needs a PostgreSQL server: --postgres-url URL") }
            let url = scenario.mechanism == .wormholePostgresAsync
                ? postgresURL + (postgresURL.contains("?") ? "&" : "?") + "synchronous_commit=off" : postgresURL
            postgres = ["--postgres", url, "--container", container]
        }
        let countersBefore = scenario.mechanism.usesPostgres ? serverCounters?.read() : nil
        var common = ["--count", String(scenario.count), "--size", String(scenario.size)]
        let sendArguments = common + ["--interval-ns", String(scenario.intervalNanoseconds)]
        // Enough time for whatever the sender does: its paced duration, then plenty.
        let timeout = Double(scenario.count) * Double(scenario.intervalNanoseconds) / 1e9 + 120
        var listeners: [Child] = []
        let sender: Child
        // With an instrument, each process stops at MEASURED until the counts are taken.
        let held = instrument != nil
        if held && !Instrument.mechanisms.contains(scenario.mechanism) {
            throw BenchError("\(scenario.mechanism.label) cannot be measured under strace or callgrind")
        }
        var instrumented: [Tracee] = []
        var counts: [ProcessCounts] = []
        var busUnderCallgrind: Child?
        defer { busUnderCallgrind?.terminate() }
        /// Starts a child in `role`; under callgrind, inside valgrind. With `input`, its
        /// standard input is a pipe (for GO and REPORT); listeners get one when held.
        func start(_ role: String, _ program: String, _ arguments: [String], input: Bool = false) throws(BenchError) -> Child {
            if case .callgrind(let valgrind, _, let tools, let harness) = instrument {
                let program = program == Child.selfPath ? harness : program
                return try Child(path: valgrind, Self.callgrindArguments(tools, role) + [program] + arguments, withInput: true)
            }
            return try Child(path: program, arguments, withInput: input || held)
        }
        switch scenario.mechanism {
        case .pipe, .socket:
            var ends: [Int32] = [0, 0]
            if scenario.mechanism == .pipe {
                guard makePipe(&ends) else { throw BenchError("pipe: \(String(cString: strerror(errno)))") }
                // The default 64 KiB is what a program gets; make no special case.
            } else {
                guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &ends) == 0 else {
                    throw BenchError("socketpair: \(String(cString: strerror(errno)))")
                }
            }
            let receiver = try Child(["stream-receive"] + common, passing: ends[0])
            close(ends[0])
            listeners = [receiver]
            _ = try receiver.expect("READY", timeout: 30)
            sender = try Child(["stream-send"] + sendArguments, passing: ends[1])
            close(ends[1])
        case .naive:
            mkdir(directory, 0o700)
            common += ["--dir", directory]
            let listener = try Child(["naive-listen"] + common)
            listeners = [listener]
            _ = try listener.expect("READY", timeout: 30)
            sender = try Child(["naive-send"] + sendArguments + ["--dir", directory])
        case .wormholeRaw, .wormholeCodable, .wormholeBatched, .wormholePython, .wormholePostgres, .wormholePostgresAsync, .wormholePostgresBatched,
             .wormholePostgresThreads, .postgresNotify, .floor, .dbus:
            // These take part in the warm-up handshake: the listeners print READY, the
            // sender passes the warm-up and prints WARMED, the listeners print WARM once
            // they have read it, and the harness says GO.
            let mode = scenario.mechanism == .wormholeCodable ? "codable" : "raw"
            var program = Child.selfPath
            /// The listeners' program when it is not the sender's (the Python listener).
            var listenProgram: String?
            var listen: [String]
            var send: [String]
            switch scenario.mechanism {
            case .floor, .dbus:
                if scenario.mechanism == .floor {
                    guard let floor = peers.floor else { throw BenchError("the C floor is not built (Benchmarks/run builds it)") }
                    program = floor
                    mkdir(directory, 0o700)
                    common += ["--dir", directory]
                } else {
                    guard let dbusPeer = peers.dbusPeer else { throw BenchError("dbus_peer is not built (Benchmarks/run builds it)") }
                    program = dbusPeer
                    if case .callgrind(let valgrind, _, let tools, _) = instrument {
                        // A bus of its own, under callgrind too: the daemon's instructions.
                        guard let daemon = peers.dbusDaemon, let config = peers.dbusConfig else {
                            throw BenchError("the D-Bus measurement under callgrind needs dbus-daemon and --dbus-config")
                        }
                        // (Quiet: under valgrind it cannot raise its descriptor limit, and says so.)
                        let bus = try Child(path: valgrind, Self.callgrindArguments(tools, "dbus-daemon") + [
                            daemon, "--config-file=" + config, "--address=unix:path=" + tools + "/bus", "--nofork", "--print-address=1"],
                            quiet: true)
                        guard let address = bus.readLine(timeout: 300), address.hasPrefix("unix:") else {
                            throw BenchError("dbus-daemon under callgrind printed no address")
                        }
                        busUnderCallgrind = bus
                        common += ["--address", address]
                    } else {
                        guard let address = peers.dbusAddress else { throw BenchError("no bus for D-Bus: --dbus-address (Benchmarks/run starts one)") }
                        common += ["--address", address]
                    }
                }
                listen = ["listen"] + common
                send = ["send"] + sendArguments + Array(common.dropFirst(4)) + ["--handshake"]
            default:
                let (listenRole, sendRole) = scenario.mechanism == .postgresNotify ? ("notify-listen", "notify-send") : ("wormhole-listen", "wormhole-send")
                // Where the messages go: the directory, or the PostgreSQL server and a container.
                let place = scenario.mechanism.usesPostgres ? postgres : ["--dir", directory]
                common += place + ["--ids", String(scenario.identifiers), "--mode", mode]
                // The container exists before the listeners start, as an app's would.
                if !scenario.mechanism.usesPostgres { mkdir(directory, 0o700) }
                listen = [listenRole] + common
                send = [sendRole] + sendArguments + place + ["--ids", String(scenario.identifiers), "--mode", mode, "--handshake"]
                if scenario.mechanism == .wormholeBatched || scenario.mechanism == .wormholePostgresBatched {
                    send += ["--batch", String(Scenario.batchSize)]
                }
                if scenario.mechanism == .wormholePostgresThreads { send += ["--threads", String(Scenario.senderThreads)] }
                if scenario.mechanism == .wormholePython {
                    guard let python = peers.python, let script = peers.pythonListener else {
                        throw BenchError("the Python listener needs python3 and --python-listener (Benchmarks/run gives them)")
                    }
                    listenProgram = python
                    listen = [script] + common
                }
            }
            if held {
                listen.append("--hold")
                send.append("--hold")
            }
            let perProcess = Scenario.identifiersPerProcess
            for _ in 0..<scenario.listeners {
                if scenario.identifiers <= perProcess {
                    listeners.append(try start("listener", listenProgram ?? program, listen))
                    continue
                }
                for first in stride(from: 0, to: scenario.identifiers, by: perProcess) {
                    listeners.append(try start("listener", listenProgram ?? program, listen + ["--first-id", String(first), "--end-id", String(first + perProcess)]))
                }
            }
            for listener in listeners { _ = try listener.expect("READY", timeout: 300) }
            sender = try start("sender", program, send, input: true)
            _ = try sender.expect("WARMED", timeout: 300)
            for listener in listeners { _ = try listener.expect("WARM", timeout: 300) }
            if let instrument {
                var targets = [("sender", sender.pid)] + listeners.map { ("listener", $0.pid) }
                if scenario.mechanism == .dbus {
                    if let busUnderCallgrind {
                        targets.append(("dbus-daemon", busUnderCallgrind.pid))
                    } else if let pid = peers.dbusPid {
                        targets.append(("dbus-daemon", pid))
                    }
                }
                instrumented = try Self.begin(instrument, targets)
            }
            sender.send("GO")
        }
        if let instrument {
            // Each process prints MEASURED once it has handled its last message and waits:
            // the counts stop there, before it sorts and prints what it measured.
            _ = try sender.expect("MEASURED", timeout: timeout)
            for listener in listeners { _ = try listener.expect("MEASURED", timeout: timeout) }
            counts = try Self.end(instrument, instrumented)
            sender.send("REPORT")
            for listener in listeners { listener.send("REPORT") }
        }
        let sent = fields(of: try sender.expect("RESULT", timeout: timeout))
        sender.wait()
        var reports: [ListenerReport] = []
        for listener in listeners {
            let result = fields(of: try listener.expect("RESULT", timeout: timeout))
            let samples = try listener.expect("SAMPLES", timeout: 30).dropFirst("SAMPLES ".count)
            listener.wait()
            reports.append(ListenerReport(
                expected: Int(result["expected"] ?? "") ?? scenario.count,
                received: Int(result["received"] ?? "") ?? 0,
                duplicates: Int(result["duplicates"] ?? "") ?? 0,
                outOfOrder: Int(result["order"] ?? "") ?? 0,
                firstReceipt: UInt64(result["first"] ?? "") ?? 0,
                lastReceipt: UInt64(result["last"] ?? "") ?? 0,
                cpuMicroseconds: UInt64(result["cpu_us"] ?? "") ?? 0,
                residentKiB: UInt64(result["rss_kb"] ?? "") ?? 0,
                latencies: samples.split(separator: ",").compactMap { UInt64($0) }))
        }
        var serverDelta: ServerCounters.Snapshot?
        if let countersBefore, let serverCounters {
            serverCounters.waitForOtherSessionsToEnd(timeout: 3)
            if let after = serverCounters.read() {
                serverDelta = .init(walFlushes: after.walFlushes - countersBefore.walFlushes,
                                    commits: after.commits - countersBefore.commits)
            }
        }
        return Outcome(
            scenario: scenario,
            sender: SenderReport(
                first: UInt64(sent["first"] ?? "") ?? 0,
                end: UInt64(sent["end"] ?? "") ?? 0,
                passMedianNanoseconds: UInt64(sent["pass_p50_ns"] ?? "") ?? 0,
                passMeanNanoseconds: UInt64(sent["pass_mean_ns"] ?? "") ?? 0,
                cpuMicroseconds: UInt64(sent["cpu_us"] ?? "") ?? 0,
                residentKiB: UInt64(sent["rss_kb"] ?? "") ?? 0),
            listeners: reports,
            counts: counts,
            serverDelta: serverDelta)
    }
}

/// Removes a directory tree (a scenario's container); missing is fine.
func removeTree(_ path: String) {
    try? FileManager.default.removeItem(atPath: path)
}

/// The file system `path` is on ("tmpfs", "ext4", ...): the type of the longest mount
/// point in `/proc/mounts` that contains it.
func fileSystemName(_ path: String) -> String {
    var best = ("", "?")
    for line in (readText("/proc/mounts") ?? "").split(separator: "\n") {
        let parts = line.split(separator: " ")
        guard parts.count > 2 else { continue }
        let mountPoint = String(parts[1])
        let contains = path == mountPoint || path.hasPrefix(mountPoint == "/" ? "/" : mountPoint + "/")
        if contains && mountPoint.count >= best.0.count { best = (mountPoint, String(parts[2])) }
    }
    return best.1
}

/// The value at percentile `p` (0-100) of sorted `values`, by nearest rank.
func percentile(_ sorted: [UInt64], _ p: Double) -> UInt64 {
    guard !sorted.isEmpty else { return 0 }
    let rank = Int((p / 100 * Double(sorted.count)).rounded(.up)) - 1
    return sorted[min(sorted.count - 1, max(0, rank))]
}
