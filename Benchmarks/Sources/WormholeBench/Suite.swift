#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// `WormholeBench run`: every measurement on every file system, the tables, the CSV
/// files and the targets.
struct Suite {
    struct Place {
        /// "tmpfs" or "disk", as the tables say.
        var name: String
        var path: String
    }

    var places: [Place]
    var sections: Set<String>
    var quick: Bool
    var outputDirectory: String
    var cli: String?
    /// The `wormhole` that `Scripts/install` installs (static Swift runtime, packed
    /// relocations), timed beside ``cli`` in the process section.
    var installedCLI: String?
    var rows: [Row] = []
    /// Per-sample latencies of the latency section: (file system, mechanism, ns).
    var samples: [(String, String, [UInt64])] = []
    /// How many times the latency and burst sections run each mechanism.
    var rounds: Int
    var verdicts: [(String, Bool, String)] = []
    /// The server of the postgres section (`--postgres-url`, else
    /// `$WORMHOLE_BENCH_POSTGRES_URL`), and what it said about itself.
    var postgresURL: String?
    var postgresSettings: String?
    /// Where the postgres section puts the file back end's containers (tmpfs).
    var tmpfsPath: String
    /// The C peers and the bus of the D-Bus baseline (`--c-bin`, `--dbus-address`, ...).
    var peers = Peers()

    static let allSections = ["latency", "burst", "batch", "fanout", "sizes", "identifiers", "process", "memory", "syscalls", "requests", "queues", "clever", "postgres"]
    /// The sections that run once per file system (syscalls: on the first one only).
    static let fileSystemSections: Set<String> = ["latency", "burst", "batch", "fanout", "sizes", "identifiers", "process", "memory", "syscalls", "requests", "queues", "clever"]

    /// The mechanisms of the latency and burst sections: every local one this run has.
    var localMechanisms: [Mechanism] { Mechanism.local.filter { peers.has($0) } }

    init(_ options: Options) throws(BenchError) {
        quick = options.flag("quick")
        rounds = max(1, try options.int("rounds", default: options.flag("quick") ? 1 : 3))
        let runtime = ProcessInfo.processInfo.environment["XDG_RUNTIME_DIR"].flatMap { $0.hasPrefix("/") ? $0 : nil }
        let tmpfs = options.string("tmpfs-dir", default: (runtime ?? "/dev/shm") + "/wormhole-bench-\(getuid())")
        let disk = options.string("disk-dir", default: "/var/tmp/wormhole-bench-\(getuid())")
        let wanted = options.string("filesystems", default: "tmpfs,disk").split(separator: ",").map(String.init)
        places = []
        if wanted.contains("tmpfs") { places.append(Place(name: "tmpfs", path: tmpfs)) }
        if wanted.contains("disk") { places.append(Place(name: "disk", path: disk)) }
        tmpfsPath = tmpfs
        let url = options.flag("postgres-url") ? try options.string("postgres-url") : ProcessInfo.processInfo.environment["WORMHOLE_BENCH_POSTGRES_URL"]
        let server = url.flatMap { $0.isEmpty ? nil : $0 }
        postgresURL = server
        // The postgres section is in the default set only when there is a server to measure.
        let defaults = Self.allSections.filter { $0 != "postgres" || server != nil }
        sections = Set(options.string("sections", default: defaults.joined(separator: ",")).split(separator: ",").map(String.init))
        #if !Postgres
        if sections.contains("postgres") {
            printError("Note: this harness was built without PostgreSQL support (Benchmarks/run --postgres builds it): the postgres section is skipped")
            sections.remove("postgres")
        }
        #endif
        if sections.contains("postgres") && postgresURL == nil {
            printError("Note: the postgres section needs a server (--postgres-url URL or WORMHOLE_BENCH_POSTGRES_URL): skipped")
            sections.remove("postgres")
        }
        outputDirectory = options.string("out", default: "Results")
        cli = options.flag("cli") ? try options.string("cli") : nil
        installedCLI = options.flag("installed-cli") ? try options.string("installed-cli") : nil
        // The C peers, from the directory Benchmarks/run builds them into.
        if options.flag("c-bin") {
            let directory = try options.string("c-bin")
            peers.cBin = directory
            let what = ["floor": "the C floor", "rr_floor": "the C floor of a round trip", "dbus_peer": "the D-Bus baseline",
                        "redis_peer": "the Redis baseline"]
            for name in ["floor", "rr_floor", "dbus_peer", "redis_peer"] {
                let path = directory + "/" + name
                guard access(path, X_OK) == 0 else {
                    printError("Note: \(path) is missing: \(what[name]!) is skipped")
                    continue
                }
                switch name {
                case "floor": peers.floor = path
                case "rr_floor": peers.roundTripFloor = path
                case "dbus_peer": peers.dbusPeer = path
                default: peers.redisPeer = path
                }
            }
        } else {
            printError("Note: no --c-bin: the C floor and the D-Bus baseline are skipped (Benchmarks/run builds them)")
        }
        if options.flag("dbus-address") {
            peers.dbusAddress = try options.string("dbus-address")
            if options.flag("dbus-pid") { peers.dbusPid = pid_t(try options.int("dbus-pid", default: 0)) }
            if options.flag("dbus-config") { peers.dbusConfig = try options.string("dbus-config") }
            peers.dbusDaemon = executableOnPath("dbus-daemon")
        } else if peers.dbusPeer != nil {
            printError("Note: no --dbus-address: the D-Bus baseline is skipped (Benchmarks/run starts a bus)")
        }
        if options.flag("redis-port") {
            peers.redisPort = try options.int("redis-port", default: 0)
            if options.flag("redis-pid") { peers.redisPid = pid_t(try options.int("redis-pid", default: 0)) }
        } else if peers.redisPeer != nil {
            printError("Note: no --redis-port: the Redis baseline is skipped (Benchmarks/run starts a redis-server)")
        }
        if options.flag("python-listener") {
            peers.pythonListener = try options.string("python-listener")
            peers.python = executableOnPath("python3")
            if peers.python == nil { printError("Note: python3 is missing: the Python listener is skipped") }
        }
    }

    private func progress(_ text: String) {
        printError(text)
    }

    private func measure(_ runner: Runner, _ scenario: Scenario, instrument: Instrument? = nil) throws(BenchError) -> Outcome {
        let outcome = try runner.run(scenario, instrument: instrument)
        let sorted = outcome.latencies
        var line = "    \(scenario.mechanism.label): \(scenario.count) x \(Format.size(scenario.size))"
        if scenario.listeners > 1 { line += ", \(scenario.listeners) listeners" }
        if scenario.identifiers > 1 { line += ", \(scenario.identifiers) identifiers" }
        if let instrument {
            if case .strace = instrument { line += " under strace:" } else { line += " under callgrind:" }
            for counts in outcome.counts {
                if let instructions = counts.instructions {
                    line += String(format: " %@ %.0f instructions/msg", counts.role, Double(instructions) / Double(max(1, scenario.count)))
                } else {
                    line += String(format: " %@ %.2f calls/msg", counts.role, Double(counts.totalSystemCalls) / Double(max(1, scenario.count)))
                }
            }
        } else if scenario.intervalNanoseconds > 0 {
            line += String(format: " paced: p50 %.1f us, p99 %.1f us", Double(percentile(sorted, 50)) / 1000, Double(percentile(sorted, 99)) / 1000)
        } else {
            line += " burst: \(Format.rate(outcome.throughput)) msg/s"
        }
        line += ", lost \(outcome.lost)"
        progress(line)
        return outcome
    }

    /// The 1-minute load average at the start and at the end of the run: on a shared
    /// machine it says how much else was running.
    var loadAtStart = Machine.loadAverage
    var loadAtEnd = ""

    mutating func run() throws(BenchError) {
        let started = Monotonic.now()
        loadAtStart = Machine.loadAverage
        progress("Wormhole benchmark\(quick ? " (quick)" : "") - \(Machine.summary)")
        for place in places where !sections.isDisjoint(with: Self.fileSystemSections) {
            try? FileManager.default.createDirectory(atPath: place.path, withIntermediateDirectories: true,
                                                     attributes: [.posixPermissions: 0o700])
            let type = fileSystemName(place.path)
            let fileSystem = type == place.name ? place.name : "\(place.name) (\(type))"
            progress("\n== \(fileSystem) at \(place.path)")
            let runner = Runner(base: place.path, peers: peers)
            if sections.contains("latency") { try latency(runner, fileSystem) }
            if sections.contains("burst") { try burst(runner, fileSystem) }
            if sections.contains("batch") { try batches(runner, fileSystem) }
            if sections.contains("fanout") { try fanOut(runner, fileSystem) }
            if sections.contains("sizes") { try sizes(runner, fileSystem) }
            if sections.contains("identifiers") { try identifierCounts(runner, fileSystem) }
            if sections.contains("process") { try process(runner, fileSystem) }
            if sections.contains("memory") && place.name == places.first?.name { try memory(runner, fileSystem) }
            if sections.contains("syscalls") && place.name == places.first?.name { try systemCalls(runner, fileSystem) }
            if sections.contains("requests") { try requests(runner, fileSystem) }
            if sections.contains("queues") { try queues(runner, fileSystem) }
            if sections.contains("clever") { try clever(runner, fileSystem) }
            removeTree(place.path)
        }
        if sections.contains("postgres"), let postgresURL { try postgres(postgresURL) }
        loadAtEnd = Machine.loadAverage
        judge()
        try write()
        progress(String(format: "\nDone in %.0f s.", Double(Monotonic.now() - started) / 1e9))
    }

    // MARK: - Sections

    /// Runs every mechanism once per round, the rounds one after the other, so that
    /// whatever else the machine does at some moment falls on ours and the baselines
    /// alike.
    private func interleaved(_ runner: Runner, _ mechanisms: [Mechanism]? = nil,
                             _ scenario: (Mechanism) -> Scenario) throws(BenchError) -> [Mechanism: [Outcome]] {
        let mechanisms = mechanisms ?? localMechanisms
        var outcomes: [Mechanism: [Outcome]] = [:]
        for round in 1...rounds {
            if rounds > 1 { progress("   round \(round) of \(rounds)") }
            for mechanism in mechanisms {
                outcomes[mechanism, default: []].append(try measure(runner, scenario(mechanism)))
            }
        }
        return outcomes
    }

    private mutating func latency(_ runner: Runner, _ fileSystem: String) throws(BenchError) {
        let count = quick ? 500 : 2000
        progress("  one-way latency, paced: \(count) small messages 300 us apart, \(rounds) rounds")
        let outcomes = try interleaved(runner) { Scenario(mechanism: $0, count: count) }
        for mechanism in localMechanisms {
            let runs = outcomes[mechanism] ?? []
            var row = Row(section: "latency", fileSystem: fileSystem, mechanism: mechanism.label, messages: count * runs.count)
            row.latency(from: runs)
            row.senderMicroseconds = median(runs.map { Double($0.sender.passMeanNanoseconds) / 1000 })
            if mechanism == .naive { row.note = "last value wins: lost = messages never seen" }
            if mechanism == .dbus { row.note = "libdbus-1 on both sides; a private dbus-daemon" }
            if mechanism == .wormholePython { row.note = "the Swift sender of the raw row; Python/ listening with listen_for_message" }
            rows.append(row)
            samples.append((fileSystem, mechanism.label, runs.flatMap(\.latenciesInOrder)))
        }
    }

    private mutating func burst(_ runner: Runner, _ fileSystem: String) throws(BenchError) {
        let count = quick ? 5000 : 20000
        progress("  burst throughput: \(count) small messages as fast as the sender can, \(rounds) rounds")
        let outcomes = try interleaved(runner) { Scenario(mechanism: $0, count: count, intervalNanoseconds: 0) }
        for mechanism in localMechanisms {
            let runs = outcomes[mechanism] ?? []
            var row = Row(section: "burst", fileSystem: fileSystem, mechanism: mechanism.label, messages: count)
            row.rate(from: runs)
            row.note = "median of \(runs.count) rounds: " + runs.map { Format.rate($0.throughput) }.joined(separator: " / ") + " msg/s"
            if mechanism == .naive { row.note += "; rate counts every message sent; lost = never seen (coalesced)" }
            rows.append(row)
        }
    }

    /// 64-byte messages: a pipe's single writes, Wormhole's single passes and batches of
    /// 64 (`passMessages`), and D-Bus signals, interleaved over the rounds.
    private mutating func batches(_ runner: Runner, _ fileSystem: String) throws(BenchError) {
        let count = quick ? 20_000 : 100_000
        let mechanisms = [Mechanism.pipe, .wormholeRaw, .wormholeBatched, .dbus].filter { peers.has($0) }
        progress("  batched passes: \(count) messages of 64 B as fast as the sender can, \(rounds) rounds")
        let outcomes = try interleaved(runner, mechanisms) { Scenario(mechanism: $0, size: 64, count: count, intervalNanoseconds: 0) }
        for mechanism in mechanisms {
            let runs = outcomes[mechanism] ?? []
            var row = Row(section: "batch", fileSystem: fileSystem, mechanism: mechanism.label, size: 64, messages: count)
            row.rate(from: runs)
            row.note = "median of \(runs.count) rounds: " + runs.map { Format.rate($0.throughput) }.joined(separator: " / ") + " msg/s"
            rows.append(row)
        }
    }

    /// A sender passing 10 million 64-byte messages in batches of 64 to one listener:
    /// both processes' resident size every million.
    private mutating func memory(_ runner: Runner, _ fileSystem: String) throws(BenchError) {
        let count = quick ? 1_000_000 : 10_000_000
        let every = count / 10
        let directory = runner.base + "/memory"
        removeTree(directory)
        mkdir(directory, 0o700)
        defer { removeTree(directory) }
        progress("  memory: \(Format.grouped(count)) messages of 64 B in batches of 64 to one listener, resident size every \(Format.grouped(every))")
        let listener = try Child(["memory-listen", "--dir", directory, "--count", String(count), "--every", String(every)])
        _ = try listener.expect("READY", timeout: 60)
        let sender = try Child(["memory-send", "--dir", directory, "--count", String(count), "--every", String(every)])
        var senderSizes: [Int: Int] = [:], listenerSizes: [Int: Int] = [:]
        var senderResult = "", listenerResult = ""
        func collect(_ child: Child, _ sizes: inout [Int: Int], _ result: inout String) {
            while let line = child.readLine(timeout: 600) {
                let words = line.split(separator: " ")
                if words.first == "RSS", words.count == 3, let at = Int(words[1]), let size = Int(words[2]) { sizes[at] = size }
                if line.hasPrefix("RESULT") { result = line; return }
            }
        }
        collect(sender, &senderSizes, &senderResult)
        collect(listener, &listenerSizes, &listenerResult)
        _ = sender.wait()
        _ = listener.wait()
        for at in stride(from: every, through: count, by: every) {
            var row = Row(section: "memory", fileSystem: fileSystem, mechanism: Mechanism.wormholeBatched.label, messages: at)
            row.residentKiB = senderSizes[at].map(UInt64.init)
            row.listenerResidentKiB = listenerSizes[at].map(UInt64.init)
            rows.append(row)
        }
        progress("    sender: \(senderResult); listener: \(listenerResult)")
        let received = Int(listenerResult.split(separator: " ").first { $0.hasPrefix("received=") }?.dropFirst(9) ?? "") ?? 0
        let order = Int(listenerResult.split(separator: " ").first { $0.hasPrefix("order=") }?.dropFirst(6) ?? "") ?? -1
        if let firstSender = senderSizes[every], let lastSender = senderSizes[count],
           let firstListener = listenerSizes[every], let lastListener = listenerSizes[count] {
            let flat = lastSender <= firstSender + 4096 && lastListener <= firstListener + 4096
            verdicts.append(("memory flat over \(Format.grouped(count)) messages (resident size grows < 4 MiB from the first \(Format.grouped(every)))",
                             flat && received == count && order == 0,
                             "sender \(firstSender) -> \(lastSender) KiB, listener \(firstListener) -> \(lastListener) KiB; \(Format.grouped(received)) received, \(order) out of order"))
        }
    }

    private mutating func fanOut(_ runner: Runner, _ fileSystem: String) throws(BenchError) {
        let paced = quick ? 300 : 1000
        let burst = quick ? 2000 : 10000
        progress("  fan-out: 1, 2, 4, 8 listener processes; \(paced) paced, then \(burst) in a burst")
        for listeners in [1, 2, 4, 8] {
            var row = Row(section: "fanout", fileSystem: fileSystem, mechanism: Mechanism.wormholeRaw.label, listeners: listeners, messages: burst)
            row.latency(from: try measure(runner, Scenario(mechanism: .wormholeRaw, listeners: listeners, count: paced)))
            row.rate(from: try measure(runner, Scenario(mechanism: .wormholeRaw, listeners: listeners, count: burst, intervalNanoseconds: 0)))
            row.note = "every listener: \(paced) paced + \(burst) burst"
            rows.append(row)
        }
        if peers.has(.dbus) {
            // The same burst as D-Bus signals to 8 listeners, through the bus.
            var row = Row(section: "fanout", fileSystem: fileSystem, mechanism: Mechanism.dbus.label, listeners: 8, messages: burst)
            row.rate(from: try measure(runner, Scenario(mechanism: .dbus, listeners: 8, count: burst, intervalNanoseconds: 0)))
            row.note = "D-Bus signal to 8 listeners: \(burst) burst"
            rows.append(row)
        }
    }

    private mutating func sizes(_ runner: Runner, _ fileSystem: String) throws(BenchError) {
        progress("  message size: 16 B to 4 MiB, pipe and Wormhole")
        for size in [16, 256, 4096, 65536, 1 << 20, 4 << 20] {
            // Paced slowly enough for the largest messages that each is delivered before the
            // next is passed: this measures latency, not a queue.
            let paced = size <= 65536 ? (quick ? 200 : 500) : (size <= 1 << 20 ? (quick ? 20 : 50) : (quick ? 10 : 20))
            let burst = size <= 4096 ? (quick ? 2000 : 5000) : size <= 65536 ? (quick ? 500 : 2000) : size <= 1 << 20 ? (quick ? 50 : 200) : (quick ? 20 : 50)
            let interval: UInt64 = size <= 4096 ? 300_000 : size <= 65536 ? 1_000_000 : size <= 1 << 20 ? 20_000_000 : 60_000_000
            for mechanism in [Mechanism.pipe, .wormholeRaw] {
                var row = Row(section: "sizes", fileSystem: fileSystem, mechanism: mechanism.label, size: size, messages: burst)
                row.latency(from: try measure(runner, Scenario(mechanism: mechanism, size: size, count: paced, intervalNanoseconds: interval)))
                row.rate(from: try measure(runner, Scenario(mechanism: mechanism, size: size, count: burst, intervalNanoseconds: 0)))
                row.note = "\(paced) paced \(interval / 1000) us apart; \(burst) burst"
                rows.append(row)
            }
        }
    }

    private mutating func identifierCounts(_ runner: Runner, _ fileSystem: String) throws(BenchError) {
        let paced = quick ? 500 : 2000
        let burst = quick ? 5000 : 20000
        progress("  identifiers in use: 1, 100, 10,000 (listeners of all of them, 5,000 per process at most; messages round-robin)")
        for identifiers in [1, 100, 10_000] {
            var row = Row(section: "identifiers", fileSystem: fileSystem, mechanism: Mechanism.wormholeRaw.label, identifiers: identifiers, messages: burst)
            row.latency(from: try measure(runner, Scenario(mechanism: .wormholeRaw, identifiers: identifiers, count: paced)))
            row.rate(from: try measure(runner, Scenario(mechanism: .wormholeRaw, identifiers: identifiers, count: burst, intervalNanoseconds: 0)))
            rows.append(row)
        }
    }

    private mutating func process(_ runner: Runner, _ fileSystem: String) throws(BenchError) {
        let directory = runner.base + "/process"
        removeTree(directory)
        mkdir(directory, 0o700)
        defer { removeTree(directory) }
        let runs = quick ? 10 : 40
        if let cli {
            progress("  `wormhole send` as a whole process, \(runs) runs (and /bin/true and a Swift program that does nothing)")
            let send = ["send", "--directory", directory, "bench", "hello"]
            var commands = [
                ("/bin/true (any process)", "/bin/true", [String]()),
                ("a Swift program that prints its usage (Foundation loaded)", Child.selfPath, ["help"]),
                ("wormhole send (swift build -c release: Swift runtime as shared libraries)", cli, send),
            ]
            if let installedCLI {
                commands.append(("wormhole send (Scripts/install: Swift runtime linked in, packed relocations)", installedCLI, send))
            }
            for (label, path, arguments) in commands {
                _ = try spawnAndWait(path, arguments)
                var times: [UInt64] = []
                for _ in 0..<runs {
                    let begin = Monotonic.now()
                    let status = try spawnAndWait(path, arguments)
                    times.append(Monotonic.now() - begin)
                    if status != 0 { throw BenchError("\(path) \(arguments.joined(separator: " ")) exited with \(status)") }
                }
                times.sort()
                var row = Row(section: "process", fileSystem: fileSystem, mechanism: label, messages: runs)
                row.p50 = Double(percentile(times, 50)) / 1000
                row.p90 = Double(percentile(times, 90)) / 1000
                row.p99 = Double(percentile(times, 99)) / 1000
                row.max = Double(times.last ?? 0) / 1000
                row.note = "wall time from spawn to exit"
                rows.append(row)
                progress(String(format: "    %@: p50 %.2f ms", label, row.p50! / 1000))
                if path == installedCLI && fileSystem.hasPrefix("tmpfs") {
                    verdicts.append(("installed `wormhole send` within 4 ms (p50, whole process)", row.p50! <= 4000,
                                     String(format: "p50 %.2f ms", row.p50! / 1000)))
                }
            }
        }
        if let cli {
            // A stream of lines in one process: `send --lines` passes them in batches.
            let lines = 100_000
            let command = "seq \(lines) | '\(cli)' send --lines --directory '\(directory)' lines"
            var times: [UInt64] = []
            for _ in 0..<(quick ? 1 : 3) {
                let begin = Monotonic.now()
                let status = try spawnAndWait("/bin/sh", ["-c", command])
                times.append(Monotonic.now() - begin)
                if status != 0 { throw BenchError("\(command) exited with \(status)") }
            }
            times.sort()
            var row = Row(section: "process", fileSystem: fileSystem, mechanism: "seq \(Format.grouped(lines)) | wormhole send --lines (one process, batches of up to 1,024)", messages: lines)
            row.p50 = Double(percentile(times, 50)) / 1000
            row.max = Double(times.last ?? 0) / 1000
            row.rate = Double(lines) / (row.p50! / 1e6)
            row.note = "wall time of the pipeline, \(times.count) runs"
            rows.append(row)
            progress(String(format: "    send --lines of %d lines: p50 %.0f ms (%@ lines/s)", lines, row.p50! / 1000, Format.rate(row.rate)))
        }
        let idleSeconds = quick ? 1.0 : 3.0
        progress("  idle listeners: CPU and wake-ups over \(idleSeconds) s, resident memory")
        var idle: [(String, Child)] = []
        idle.append(("idle listener, library, 1 identifier", try Child(["wormhole-listen", "--dir", directory, "--idle"])))
        if !quick {
            idle.append(("idle listener, library, 5,000 identifiers", try Child(["wormhole-listen", "--dir", directory, "--ids", "5000", "--idle"])))
        }
        if let cli {
            idle.append(("idle `wormhole listen`", try Child(path: cli, ["listen", "--directory", directory, "bench", "--verbose"], quiet: true)))
        }
        for (label, child) in idle {
            if label.hasPrefix("idle listener") { _ = try child.expect("READY", timeout: 300) } else { Monotonic.sleep(seconds: 1) }
            Monotonic.sleep(seconds: 0.5)
            guard let before = ProcessSample.read(child.pid) else { throw BenchError("cannot read /proc/\(child.pid)") }
            Monotonic.sleep(seconds: idleSeconds)
            guard let after = ProcessSample.read(child.pid) else { throw BenchError("cannot read /proc/\(child.pid)") }
            child.terminate()
            let ticks = after.cpuTicks >= before.cpuTicks ? after.cpuTicks - before.cpuTicks : 0
            let switches = after.switches(since: before)
            var row = Row(section: "process", fileSystem: fileSystem, mechanism: label)
            row.residentKiB = after.residentKiB
            row.note = String(format: "CPU %.0f ms and %llu wake-ups in %.0f s idle; %llu threads",
                              Double(ticks) * 1000 / Double(ProcessSample.ticksPerSecond), switches, idleSeconds, after.threads)
            rows.append(row)
            progress("    \(label): \(row.note), \(after.residentKiB) KiB resident")
            if fileSystem.hasPrefix("tmpfs") {
                verdicts.append(("idle CPU zero: \(label)", ticks == 0 && switches == 0,
                                 "\(ticks) ticks, \(switches) wake-ups in \(Int(idleSeconds)) s"))
            }
        }
    }

    /// The burst that strace counts, and the smaller one that callgrind counts.
    var tracedBurst: Int { quick ? 5000 : 20000 }
    var profiledBurst: Int { quick ? 1000 : 2000 }

    /// System calls and user-space instructions per message of each process of a
    /// Wormhole pass, of the C floor and of a D-Bus signal (with the dbus-daemon between
    /// its two processes): a burst under `strace -c -f` attached to each process after
    /// the warm-up, then a smaller burst with every process under callgrind. Counted from
    /// the harness's GO to the moment the process has handled its last message; divided
    /// by the messages of the burst.
    private mutating func systemCalls(_ runner: Runner, _ fileSystem: String) throws(BenchError) {
        let strace = executableOnPath("strace")
        let valgrind = executableOnPath("valgrind")
        let control = executableOnPath("callgrind_control")
        if strace == nil { printError("Note: strace is missing: no system-call counts ('apt-get install strace')") }
        if valgrind == nil || control == nil { printError("Note: valgrind is missing: no instruction counts ('apt-get install valgrind')") }
        if strace == nil && (valgrind == nil || control == nil) { return }
        let mechanisms = [Mechanism.wormholeRaw, .floor, .dbus].filter { peers.has($0) }
        let tools = runner.base + "/instruments"
        // valgrind 3.19 cannot read the DWARF 5 debugging information of Swift 6 binaries
        // and gives up: it runs a copy of this executable without it (binutils' strip).
        let harness = runner.base + "/WormholeBench-nodebug"
        var harnessCopy = Child.selfPath
        if valgrind != nil, let strip = executableOnPath("strip"),
           (try? Child(path: strip, ["--strip-debug", "-o", harness, Child.selfPath], quiet: true).wait()) == 0 {
            harnessCopy = harness
        }
        defer { unlink(harness) }
        progress("  system calls per message (strace -c -f, burst of \(Format.grouped(tracedBurst))) and user-space instructions per message (callgrind, burst of \(Format.grouped(profiledBurst)))")
        for mechanism in mechanisms {
            removeTree(tools)
            mkdir(tools, 0o700)
            defer { removeTree(tools) }
            var traced: Outcome?
            var profiled: Outcome?
            if let strace {
                traced = try measure(runner, Scenario(mechanism: mechanism, count: tracedBurst, intervalNanoseconds: 0),
                                     instrument: .strace(tool: strace, directory: tools))
            }
            if let valgrind, let control {
                profiled = try measure(runner, Scenario(mechanism: mechanism, count: profiledBurst, intervalNanoseconds: 0),
                                       instrument: .callgrind(valgrind: valgrind, control: control, directory: tools, harness: harnessCopy))
            }
            for role in ["sender", "listener", "dbus-daemon"] {
                let calls = traced?.counts.filter { $0.role == role } ?? []
                let instructions = profiled?.counts.filter { $0.role == role }.compactMap(\.instructions) ?? []
                guard !calls.isEmpty || !instructions.isEmpty else { continue }
                var row = Row(section: "syscalls", fileSystem: fileSystem, mechanism: mechanism.label, messages: tracedBurst)
                row.process = role
                row.lost = (traced?.lost ?? 0) + (profiled?.lost ?? 0)
                if !calls.isEmpty {
                    var byName: [String: Int] = [:]
                    for count in calls { byName.merge(count.systemCalls, uniquingKeysWith: +) }
                    let burst = Double(tracedBurst)
                    func perMessage(_ value: Int) -> Double { Double(value) / burst }
                    row.systemCallsPerMessage = perMessage(byName.values.reduce(0, +))
                    // The calls that make up the figure, most frequent first; those under
                    // one per hundred messages are left out.
                    row.note = byName.sorted { $0.value == $1.value ? $0.key < $1.key : $0.value > $1.value }
                        .filter { perMessage($0.value) >= 0.01 }
                        .map { String(format: "%@ %.2f", $0.key, perMessage($0.value)) }
                        .joined(separator: ", ")
                }
                if !instructions.isEmpty {
                    row.instructionsPerMessage = Double(instructions.reduce(0, +)) / Double(profiledBurst)
                }
                rows.append(row)
            }
        }
    }

    /// The rows of the postgres section are one group in the tables and the CSV.
    static let postgresGroup = "PostgreSQL (loopback) beside files (tmpfs)"
    /// The paced interval of the postgres section: longer than a PostgreSQL pass (a
    /// commit with its WAL flush), so that each message is delivered before the next is
    /// passed and the figures are latency, not a queue.
    static let postgresInterval: UInt64 = 10_000_000

    /// The two back ends of Wormhole side by side, and the bare LISTEN/NOTIFY under them:
    /// paced latency and burst throughput interleaved over the rounds, then fan-out to 2
    /// and 4 listener processes. Every process has its own connections.
    private mutating func postgres(_ url: String) throws(BenchError) {
        do {
            postgresSettings = try PostgresRoles.serverSettings(url: url)
        } catch {
            throw BenchError("cannot reach the PostgreSQL server of the postgres section: \(error)")
        }
        try? FileManager.default.createDirectory(atPath: tmpfsPath, withIntermediateDirectories: true,
                                                 attributes: [.posixPermissions: 0o700])
        defer { removeTree(tmpfsPath) }
        let group = Self.postgresGroup
        progress("\n== \(group): files at \(tmpfsPath) (\(fileSystemName(tmpfsPath))); server: \(postgresSettings ?? "?")")
        let counters: ServerCounters
        do {
            counters = try ServerCounters(url: url)
        } catch {
            throw BenchError("cannot reach the PostgreSQL server of the postgres section: \(error)")
        }
        let runner = Runner(base: tmpfsPath, postgresURL: url, serverCounters: counters)
        let mechanisms: [Mechanism] = [.wormholeRaw, .wormholePostgres, .wormholePostgresAsync, .postgresNotify]
        func label(_ mechanism: Mechanism) -> String {
            mechanism == .wormholeRaw ? "Wormhole, files (tmpfs)" : mechanism.label
        }
        let interval = Self.postgresInterval
        let milliseconds = Double(interval) / 1e6

        let paced = quick ? 100 : 500
        progress("  one-way latency, paced: \(paced) small messages \(Format.micro(milliseconds)) ms apart, \(rounds) rounds")
        let latencies = try interleaved(runner, mechanisms) { Scenario(mechanism: $0, count: paced, intervalNanoseconds: interval) }
        for mechanism in mechanisms {
            let runs = latencies[mechanism] ?? []
            var row = Row(section: "postgres-latency", fileSystem: group, mechanism: label(mechanism), messages: paced * runs.count)
            row.latency(from: runs)
            row.senderMicroseconds = median(runs.map { Double($0.sender.passMeanNanoseconds) / 1000 })
            rows.append(row)
        }

        let burst = quick ? 500 : 3000
        // The burst also has the PostgreSQL back end's batches and several sender threads,
        // whose passes share statements and commits (bare LISTEN/NOTIFY beside them).
        let burstMechanisms = mechanisms + [.wormholePostgresBatched, .wormholePostgresThreads]
        progress("  burst throughput: \(burst) small messages as fast as the sender can, \(rounds) rounds")
        let bursts = try interleaved(runner, burstMechanisms) { mechanism in
            Scenario(mechanism: mechanism, identifiers: mechanism == .wormholePostgresThreads ? Scenario.senderThreads : 1,
                     count: burst, intervalNanoseconds: 0)
        }
        for mechanism in burstMechanisms {
            let runs = bursts[mechanism] ?? []
            var row = Row(section: "postgres-burst", fileSystem: group, mechanism: label(mechanism), messages: burst)
            row.rate(from: runs)
            row.note = "rounds: " + runs.map { Format.rate($0.throughput) }.joined(separator: " / ") + " msg/s"
            rows.append(row)
        }

        let fanPaced = quick ? 100 : 300
        let fanBurst = quick ? 300 : 2000
        progress("  fan-out: 2 and 4 listener processes; \(fanPaced) paced \(Format.micro(milliseconds)) ms apart, then \(fanBurst) in a burst")
        for listeners in [2, 4] {
            for mechanism in [Mechanism.wormholeRaw, .wormholePostgres] {
                var row = Row(section: "postgres-fanout", fileSystem: group, mechanism: label(mechanism), listeners: listeners, messages: fanBurst)
                let pacedRun = try measure(runner, Scenario(mechanism: mechanism, listeners: listeners, count: fanPaced, intervalNanoseconds: interval))
                row.latency(from: pacedRun)
                row.rate(from: try measure(runner, Scenario(mechanism: mechanism, listeners: listeners, count: fanBurst, intervalNanoseconds: 0)))
                // The server's work per message when each has a wake-up of its own.
                row.server(from: [pacedRun])
                row.note = "every listener: \(fanPaced) paced + \(fanBurst) burst"
                rows.append(row)
            }
        }
    }

    private func spawnAndWait(_ path: String, _ arguments: [String]) throws(BenchError) -> Int32 {
        try Child(path: path, arguments, quiet: true).wait()
    }

    // MARK: - Targets

    private func row(_ section: String, _ mechanism: Mechanism, tmpfs: Bool = true, where condition: (Row) -> Bool = { _ in true }) -> Row? {
        rows.first { $0.section == section && $0.mechanism == mechanism.label && $0.fileSystem.hasPrefix(tmpfs ? "tmpfs" : "disk") && condition($0) }
    }

    /// Judges the targets against the tmpfs figures of this run: D-Bus, the pipe and the C
    /// floor were measured in the same run, so every ratio compares like with like.
    private mutating func judge() {
        func ratio(_ value: Double, _ base: Double) -> String { String(format: "%.2fx", value / base) }
        let dbusBurst = row("burst", .dbus)?.rate
        // 1. Batched passes.
        if let batched = row("batch", .wormholeBatched), let rate = batched.rate, let pipe = row("batch", .pipe)?.rate {
            let dbus = row("batch", .dbus)?.rate
            verdicts.append(("batches of 64 (64 B): >= 0.5x the pipe's single writes and >= 5x D-Bus's burst, none lost",
                             rate >= 0.5 * pipe && (dbus.map { rate >= 5 * $0 } ?? false) && batched.lost == 0,
                             "\(Format.rate(rate)) msg/s vs pipe \(Format.rate(pipe)) (\(ratio(rate, pipe))), D-Bus \(dbus.map(Format.rate) ?? "-") (\(dbus.map { ratio(rate, $0) } ?? "-")); \(batched.lost ?? 0) lost"))
        }
        // 2. Unbatched bursts, and what Codable costs.
        if let raw = row("burst", .wormholeRaw), let rate = raw.rate, let dbus = dbusBurst {
            verdicts.append(("raw burst >= 3x D-Bus's, none lost", rate >= 3 * dbus && raw.lost == 0,
                             "\(Format.rate(rate)) msg/s vs D-Bus \(Format.rate(dbus)): \(ratio(rate, dbus)), \(raw.lost ?? 0) lost"))
        }
        if let codable = row("burst", .wormholeCodable), let rate = codable.rate, let dbus = dbusBurst {
            verdicts.append(("Codable burst >= 2x D-Bus's, none lost", rate >= 2 * dbus && codable.lost == 0,
                             "\(Format.rate(rate)) msg/s vs D-Bus \(Format.rate(dbus)): \(ratio(rate, dbus)), \(codable.lost ?? 0) lost"))
        }
        if let codable = row("latency", .wormholeCodable)?.p50, let raw = row("latency", .wormholeRaw)?.p50 {
            verdicts.append(("Codable p50 <= 1.3x raw p50", codable <= 1.3 * raw, String(format: "%.1f us vs %.1f us: %.2fx", codable, raw, codable / raw)))
        }
        // 3. Latency, blocking.
        if let ours = row("latency", .wormholeRaw), let pipe = row("latency", .pipe), let p50 = ours.p50, let floor = pipe.p50, let p99 = ours.p99 {
            verdicts.append(("raw p50 <= 3x the pipe's", p50 <= 3 * floor, String(format: "%.1f us vs pipe %.1f us: %.1fx", p50, floor, p50 / floor)))
            verdicts.append(("raw p99 <= 50 us", p99 <= 50, String(format: "%.1f us", p99)))
            if let dbus = row("latency", .dbus)?.p50 {
                verdicts.append(("raw p50 <= 0.5x D-Bus's", p50 <= 0.5 * dbus, String(format: "%.1f us vs D-Bus %.1f us: %.2fx", p50, dbus, p50 / dbus)))
            }
        }
        // 4. Fan-out to 8 listener processes.
        if let eight = row("fanout", .wormholeRaw, where: { $0.listeners == 8 }), let rate = eight.rate,
           let dbus = row("fanout", .dbus, where: { $0.listeners == 8 })?.rate {
            let one = row("fanout", .wormholeRaw, where: { $0.listeners == 1 })?.rate
            let perListener = one.map { String(format: "; each extra listener costs %.0f%% of the single-listener rate", (1 - pow(rate / $0, 1.0 / 7)) * 100) } ?? ""
            verdicts.append(("fan-out to 8: burst to all >= D-Bus's fan-out to 8, none lost",
                             rate >= dbus && eight.lost == 0 && eight.duplicates == 0,
                             "\(Format.rate(rate)) msg/s to all 8 vs D-Bus \(Format.rate(dbus)) to 8: \(ratio(rate, dbus)); \(eight.lost ?? 0) lost\(perListener)"))
        }
        // 5. Many identifiers.
        if let one = row("identifiers", .wormholeRaw, where: { $0.identifiers == 1 }),
           let many = row("identifiers", .wormholeRaw, where: { $0.identifiers == 10_000 }),
           let oneSend = one.senderMicroseconds, let manySend = many.senderMicroseconds,
           let oneListen = one.pacedListenerMicroseconds, let manyListen = many.pacedListenerMicroseconds,
           let oneP50 = one.p50, let manyP50 = many.p50 {
            // The cost of a message: what the sender spends on it, what the listener spends
            // on it when each message has its own wake-up (paced), and its latency.
            let ratios = [manySend / oneSend, manyListen / oneListen, manyP50 / oneP50]
            verdicts.append(("10,000 identifiers within 1.5x of one (sender, paced listener CPU, p50)",
                             ratios.allSatisfy { $0 <= 1.5 } && many.lost == 0,
                             String(format: "10,000 vs 1: sender %.2fx, listener CPU paced %.2fx, p50 %.2fx; %d lost",
                                    ratios[0], ratios[1], ratios[2], many.lost ?? 0)))
        }
        func calls(_ process: String) -> Double? {
            rows.first { $0.section == "syscalls" && $0.mechanism == Mechanism.wormholeRaw.label && $0.process == process }?.systemCallsPerMessage
        }
        if let sender = calls("sender") {
            verdicts.append(("sender <= 4 system calls per pass", sender <= 4.05, String(format: "%.2f per message (strace)", sender)))
        }
        if let listener = calls("listener") {
            verdicts.append(("listener <= 2 system calls per wake-up", listener <= 2.05,
                             String(format: "%.2f per message, a wake-up per message in this burst (strace)", listener)))
        }
        // 6. PostgreSQL against bare LISTEN/NOTIFY, both measured in the postgres section.
        func postgres(_ section: String, _ mechanism: Mechanism) -> Row? {
            rows.first { $0.section == section && $0.fileSystem == Self.postgresGroup && $0.mechanism == mechanism.label }
        }
        if let bare = postgres("postgres-burst", .postgresNotify)?.rate {
            for mechanism in [Mechanism.wormholePostgres, .wormholePostgresAsync, .wormholePostgresBatched, .wormholePostgresThreads] {
                guard let ours = postgres("postgres-burst", mechanism), let rate = ours.rate else { continue }
                let flushes = ours.walFlushesPerMessage.map { String(format: ", %.2f WAL flushes and %.2f commits per message", $0, ours.commitsPerMessage ?? 0) } ?? ""
                verdicts.append(("PostgreSQL burst >= 0.67x bare LISTEN/NOTIFY's, none lost (\(mechanism.label))",
                                 rate >= 0.67 * bare && ours.lost == 0 && ours.duplicates == 0,
                                 "\(Format.rate(rate)) msg/s vs bare \(Format.rate(bare)): \(ratio(rate, bare))\(flushes); \(ours.lost ?? 0) lost"))
            }
        }
        if let ours = postgres("postgres-latency", .wormholePostgres)?.p50, let bare = postgres("postgres-latency", .postgresNotify)?.p50 {
            verdicts.append(("PostgreSQL p50 <= 1.5x bare LISTEN/NOTIFY's", ours <= 1.5 * bare,
                             String(format: "%.0f us vs bare %.0f us: %.2fx", ours, bare, ours / bare)))
        }
    }

    // MARK: - Output

    private var tables: String {
        var text = ""
        var fileSystems: [String] = []
        for row in rows where !fileSystems.contains(row.fileSystem) { fileSystems.append(row.fileSystem) }
        for fileSystem in fileSystems {
            let rows = self.rows.filter { $0.fileSystem == fileSystem }
            text += "### \(fileSystem)\n\n"
            func section(_ name: String, _ title: String, _ columns: [String], _ cells: (Row) -> [String]) {
                let selected = rows.filter { $0.section == name }
                guard !selected.isEmpty else { return }
                text += Table(title: title, columns: columns, rows: selected.map(cells)).markdown + "\n"
            }
            section("latency", "One-way latency, small messages, paced 300 us apart (us)",
                    ["mechanism", "p50", "p90", "p99", "max", "lost", "send call (us)"]) {
                [$0.mechanism, Format.micro($0.p50), Format.micro($0.p90), Format.micro($0.p99), Format.micro($0.max),
                 Format.integer($0.lost), Format.micro($0.senderMicroseconds)]
            }
            section("burst", "Burst throughput, small messages, as fast as the sender can",
                    ["mechanism", "messages", "msg/s received", "lost", "send call (us)", "listener CPU/msg (us)"]) {
                [$0.mechanism, Format.grouped($0.messages), Format.rate($0.rate), Format.integer($0.lost),
                 Format.micro($0.senderMicroseconds), Format.micro($0.listenerMicroseconds)]
            }
            section("batch", "Batched passes: 64-byte messages as fast as the sender can",
                    ["mechanism", "messages", "msg/s received", "lost"]) {
                [$0.mechanism, Format.grouped($0.messages), Format.rate($0.rate), Format.integer($0.lost)]
            }
            section("fanout", "Fan-out: every listener receives every message",
                    ["mechanism", "listeners", "p50 (us)", "p99 (us)", "max (us)", "burst msg/s to all", "lost", "repeated/out of order"]) {
                [$0.mechanism, String($0.listeners), Format.micro($0.p50), Format.micro($0.p99), Format.micro($0.max),
                 Format.rate($0.rate), Format.integer($0.lost), Format.integer($0.duplicates)]
            }
            section("memory", "Resident memory while 64-byte messages pass in batches of 64 (KiB)",
                    ["messages", "sender", "listener"]) {
                [Format.grouped($0.messages), $0.residentKiB.map { Format.grouped(Int($0)) } ?? "", $0.listenerResidentKiB.map { Format.grouped(Int($0)) } ?? ""]
            }
            section("sizes", "Message size",
                    ["size", "mechanism", "p50 (us)", "p99 (us)", "msg/s", "MiB/s", "lost"]) {
                [Format.size($0.size), $0.mechanism, Format.micro($0.p50), Format.micro($0.p99),
                 Format.rate($0.rate), String(format: "%.0f", $0.megabytesPerSecond ?? 0), Format.integer($0.lost)]
            }
            section("identifiers", "Identifiers in use (listeners of all of them, 5,000 per process at most; messages round-robin)",
                    ["identifiers", "p50 (us)", "p99 (us)", "listener CPU/msg, paced (us)", "send call, burst (us)", "burst msg/s", "listener CPU/msg, burst (us)", "listener RSS (KiB)", "lost"]) {
                [Format.grouped($0.identifiers), Format.micro($0.p50), Format.micro($0.p99), Format.micro($0.pacedListenerMicroseconds),
                 Format.micro($0.senderMicroseconds), Format.rate($0.rate), Format.micro($0.listenerMicroseconds),
                 $0.residentKiB.map { Format.grouped(Int($0)) } ?? "", Format.integer($0.lost)]
            }
            let pacing = Format.micro(Double(Self.postgresInterval) / 1e6)
            func ratio(_ value: Double?) -> String { value.map { String(format: "%.2f", $0) } ?? "" }
            section("postgres-latency", "One-way latency, small messages, paced \(pacing) ms apart (us)",
                    ["mechanism", "messages", "p50", "p90", "p99", "max", "lost", "send call (us)", "listener CPU/msg (us)",
                     "server commits/msg", "WAL flushes/msg"]) {
                [$0.mechanism, Format.grouped($0.messages), Format.micro($0.p50), Format.micro($0.p90), Format.micro($0.p99),
                 Format.micro($0.max), Format.integer($0.lost), Format.micro($0.senderMicroseconds), Format.micro($0.pacedListenerMicroseconds),
                 ratio($0.commitsPerMessage), ratio($0.walFlushesPerMessage)]
            }
            section("postgres-burst", "Burst throughput, small messages, as fast as the sender can",
                    ["mechanism", "messages", "msg/s received (median)", "each round (msg/s)", "lost", "send call (us)", "listener CPU/msg (us)",
                     "server commits/msg", "WAL flushes/msg"]) {
                [$0.mechanism, Format.grouped($0.messages), Format.rate($0.rate),
                 $0.note.replacingOccurrences(of: "rounds: ", with: "").replacingOccurrences(of: " msg/s", with: ""),
                 Format.integer($0.lost), Format.micro($0.senderMicroseconds), Format.micro($0.listenerMicroseconds),
                 ratio($0.commitsPerMessage), ratio($0.walFlushesPerMessage)]
            }
            section("postgres-fanout", "Fan-out: every listener process receives every message (paced \(pacing) ms apart, then a burst)",
                    ["mechanism", "listeners", "p50 (us)", "p99 (us)", "max (us)", "burst msg/s to all", "lost", "repeated/out of order",
                     "server commits/msg, paced", "WAL flushes/msg, paced"]) {
                [$0.mechanism, String($0.listeners), Format.micro($0.p50), Format.micro($0.p99), Format.micro($0.max),
                 Format.rate($0.rate), Format.integer($0.lost), Format.integer($0.duplicates),
                 ratio($0.commitsPerMessage), ratio($0.walFlushesPerMessage)]
            }
            section("process", "Whole processes",
                    ["what", "p50 (us)", "p90 (us)", "max (us)", "resident (KiB)", "note"]) {
                [$0.mechanism, Format.micro($0.p50), Format.micro($0.p90), Format.micro($0.max),
                 $0.residentKiB.map { Format.grouped(Int($0)) } ?? "", $0.note]
            }
            for (key, title) in [("requests", "Request/reply round trips, 16 bytes, back to back (us)"),
                                 ("requests-paced", "Request/reply round trips, 16 bytes, each after \(Self.requestPauseMicroseconds) us asleep (us)"),
                                 ("requests-working", "Request/reply round trips, 16 bytes, each after \(Self.requestWorkMicroseconds) us of work (us)")] {
                section(key, title, ["mechanism", "round trips", "p50", "p90", "p99", "max", "failed", "caller CPU/round trip (us)"]) {
                    [$0.mechanism, Format.grouped($0.messages), Format.micro($0.p50), Format.micro($0.p90), Format.micro($0.p99),
                     Format.micro($0.max), Format.integer($0.lost), Format.micro($0.senderMicroseconds)]
                }
            }
            section("queues", "Work queue: jobs of 16 bytes taken and acknowledged one at a time by worker processes (the queue filled first)",
                    ["mechanism", "workers", "jobs", "jobs/s (median)", "lost", "repeated", "worker CPU/job (us)", "note"]) {
                [$0.mechanism, String($0.listeners), Format.grouped($0.messages), Format.rate($0.rate), Format.integer($0.lost),
                 Format.integer($0.duplicates), Format.micro($0.listenerMicroseconds), $0.note]
            }
            section("syscalls", "System calls and user-space instructions per message (strace -c -f: burst of \(Format.grouped(tracedBurst)); callgrind: burst of \(Format.grouped(profiledBurst)))",
                    ["mechanism", "process", "system calls/msg", "user-space instructions/msg", "lost", "system calls/msg by name (strace)"]) {
                [$0.mechanism, $0.process ?? "", $0.systemCallsPerMessage.map { String(format: "%.2f", $0) } ?? "",
                 $0.instructionsPerMessage.map { Format.grouped(Int($0.rounded())) } ?? "", Format.integer($0.lost), $0.note]
            }
        }
        return text
    }

    private var targets: String {
        guard !verdicts.isEmpty else { return "" }
        var text = "### Targets (release build, tmpfs, this run)\n\n| target | result | figures |\n|---|---|---|\n"
        for (target, met, figures) in verdicts { text += "| \(target) | \(met ? "met" : "**missed**") | \(figures) |\n" }
        return text
    }

    private func write() throws(BenchError) {
        var report = "## Wormhole benchmark\n\n\(Machine.summary)\n\nLoad average (1 minute) at the start of the run: \(loadAtStart); at the end: \(loadAtEnd).\n\n"
        if let postgresSettings {
            report += "PostgreSQL server (as it reported itself), on this machine: \(postgresSettings).\n\n"
        }
        report += tables + targets
        print(report)
        do {
            try FileManager.default.createDirectory(atPath: outputDirectory, withIntermediateDirectories: true)
            try (([Row.csvHeader] + rows.map(\.csv)).joined(separator: "\n") + "\n")
                .write(toFile: outputDirectory + "/latest.csv", atomically: true, encoding: .utf8)
            var lines = ["filesystem,mechanism,latency_us"]
            for (fileSystem, mechanism, values) in samples {
                let prefix = csvQuoted(fileSystem) + "," + csvQuoted(mechanism) + ","
                for value in values { lines.append(prefix + String(format: "%.2f", Double(value) / 1000)) }
            }
            try (lines.joined(separator: "\n") + "\n").write(toFile: outputDirectory + "/latency-samples.csv", atomically: true, encoding: .utf8)
            try report.write(toFile: outputDirectory + "/latest.md", atomically: true, encoding: .utf8)
        } catch {
            throw BenchError("cannot write the results to \(outputDirectory): \(error)")
        }
        progress("Wrote \(outputDirectory)/latest.csv, latency-samples.csv and latest.md")
    }
}

/// What the machine is, for the report.
enum Machine {
    /// The 1-minute load average (`/proc/loadavg`).
    static var loadAverage: String {
        String((readText("/proc/loadavg") ?? "?").split(separator: " ").first ?? "?")
    }

    static let summary: String = {
        let cpu = (readText("/proc/cpuinfo") ?? "").split(separator: "\n")
            .first { $0.hasPrefix("model name") }.map { String($0.split(separator: ":").last ?? "").trimmingCharacters(in: .whitespaces) } ?? "?"
        var name = utsname()
        uname(&name)
        let kernel = withUnsafePointer(to: name.release) { $0.withMemoryRebound(to: CChar.self, capacity: 65) { String(cString: $0) } }
        let memory = (readText("/proc/meminfo") ?? "").split(separator: "\n").first { $0.hasPrefix("MemTotal") }
            .flatMap { UInt64($0.split(separator: " ").dropFirst().first ?? "") }.map { "\($0 / 1_048_576) GiB" } ?? "?"
        return "Machine: \(sysconf(Int32(_SC_NPROCESSORS_ONLN))) cores (\(cpu)), \(memory), Linux \(kernel); release build"
    }()
}
