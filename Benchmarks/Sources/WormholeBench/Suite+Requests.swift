#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// The requests and queues sections: Wormhole's request/reply beside a D-Bus method call
/// and a Unix socket, and its work queue beside Redis Streams consumer groups, each in the
/// same run and interleaved over the rounds.
extension Suite {
    /// The mechanisms of the requests section.
    /// The Wormhole rows and the floor's come twice: with the requester polling for its
    /// reply up to 100 us after the pass (the library's default,
    /// `WormholeConfiguration.replySpinTime`), and sleeping at once (`replySpinTime` 0).
    enum RoundTrip: String, CaseIterable {
        case wormhole = "Wormhole request/reply (respondToRecords, requestRecord)"
        case wormholeSleeping = "Wormhole request/reply, the requester sleeping at once (replySpinTime 0)"
        case floor = "C floor: the same system calls in C, one thread each (rr_floor)"
        case floorSleeping = "C floor, the requester sleeping at once (rr_floor)"
        case dbus = "D-Bus method call via dbus-daemon"
        case socket = "Unix socket (one write and one read each way)"
    }

    /// Round trips back to back: a responder process and a caller process that times each
    /// request from before it is sent to after its reply (checked) is in hand. Then the
    /// same with the caller sleeping 1 ms before each request (section `requests-paced`):
    /// both sides sleep in between, and their CPUs may halt, as in a program that asks
    /// now and then; and with the caller busy 100 us before each (`requests-working`),
    /// as in a program that computes between its requests.
    mutating func requests(_ runner: Runner, _ fileSystem: String) throws(BenchError) {
        let count = quick ? 500 : 2000
        let mechanisms = RoundTrip.allCases.filter { ($0 != .dbus || peers.has(.dbus)) && (![.floor, .floorSleeping].contains($0) || peers.roundTripFloor != nil) }
        printError("  request/reply round trips: \(count) of 16 B back to back, \(rounds) rounds")
        try roundTripRows("requests", mechanisms, count: count, spacing: [], runner, fileSystem)
        let pacedCount = quick ? 200 : 1000
        printError("  request/reply round trips: \(pacedCount) of 16 B one every \(Self.requestPauseMicroseconds) us, \(rounds) rounds")
        let spaced = mechanisms.filter { ![.floor, .floorSleeping].contains($0) }
        try roundTripRows("requests-paced", spaced, count: pacedCount, spacing: ["--pause-us", String(Self.requestPauseMicroseconds)], runner, fileSystem)
        printError("  request/reply round trips: \(pacedCount) of 16 B each after \(Self.requestWorkMicroseconds) us of work, \(rounds) rounds")
        try roundTripRows("requests-working", spaced, count: pacedCount, spacing: ["--work-us", String(Self.requestWorkMicroseconds)], runner, fileSystem)
        guard fileSystem.hasPrefix("tmpfs"), let ours = rows.last(where: { $0.section == "requests" && $0.mechanism == RoundTrip.wormhole.rawValue }),
              let p50 = ours.p50 else { return }
        func p50Of(_ section: String, _ mechanism: RoundTrip) -> Double? {
            rows.last(where: { $0.section == section && $0.mechanism == mechanism.rawValue })?.p50
        }
        if let dbus = p50Of("requests", .dbus) {
            var figures = String(format: "%.1f us vs D-Bus %.1f us: %.2fx; %d failed", p50, dbus, p50 / dbus, ours.lost ?? 0)
            if let sleeping = p50Of("requests", .wormholeSleeping) {
                figures += String(format: " (the requester sleeping at once: %.1f us, %.2fx)", sleeping, sleeping / dbus)
            }
            for (section, what) in [("requests-paced", "after 1 ms asleep"), ("requests-working", "after 100 us of work")] {
                if let spaced = p50Of(section, .wormhole), let spacedDBus = p50Of(section, .dbus) {
                    figures += String(format: "; %@: %.1f us vs %.1f us, %.2fx", what, spaced, spacedDBus, spaced / spacedDBus)
                }
            }
            verdicts.append(("request/reply p50 <= 0.5x a D-Bus method call's", p50 <= 0.5 * dbus && ours.lost == 0, figures))
        }
    }

    /// The sleep before each request of the paced rows, and the work before each of the
    /// working rows.
    static let requestPauseMicroseconds = 1000
    static let requestWorkMicroseconds = 100

    /// `rounds` rounds of `count` round trips of each mechanism, interleaved; a row each.
    private mutating func roundTripRows(_ section: String, _ mechanisms: [RoundTrip], count: Int, spacing: [String],
                                        _ runner: Runner, _ fileSystem: String) throws(BenchError) {
        var samples: [RoundTrip: [UInt64]] = [:]
        var failed: [RoundTrip: Int] = [:]
        var cpu: [RoundTrip: [Double]] = [:]
        for round in 1...rounds {
            for mechanism in mechanisms {
                let result = try roundTrips(mechanism, count: count, spacing: spacing, round: round, base: runner.base)
                samples[mechanism, default: []] += result.samples
                failed[mechanism, default: 0] += result.failed
                cpu[mechanism, default: []].append(result.callerMicroseconds)
                let sorted = result.samples.sorted()
                printError(String(format: "    %@: p50 %.1f us, p99 %.1f us, %d failed", mechanism.rawValue,
                                  Double(percentile(sorted, 50)) / 1000, Double(percentile(sorted, 99)) / 1000, result.failed))
            }
        }
        for mechanism in mechanisms {
            let sorted = (samples[mechanism] ?? []).sorted()
            var row = Row(section: section, fileSystem: fileSystem, mechanism: mechanism.rawValue, messages: sorted.count)
            row.p50 = Double(percentile(sorted, 50)) / 1000
            row.p90 = Double(percentile(sorted, 90)) / 1000
            row.p99 = Double(percentile(sorted, 99)) / 1000
            row.max = Double(sorted.last ?? 0) / 1000
            row.lost = failed[mechanism] ?? 0
            row.senderMicroseconds = median(cpu[mechanism] ?? [])
            row.note = "\(rounds) rounds of \(count); the caller's CPU per round trip is the median round's"
            rows.append(row)
        }
    }

    /// One round of one mechanism: the samples (ns), the failed round trips and the
    /// caller's CPU per round trip (us).
    private func roundTrips(_ mechanism: RoundTrip, count: Int, spacing: [String], round: Int, base: String) throws(BenchError) -> (samples: [UInt64], failed: Int, callerMicroseconds: Double) {
        let directory = base + "/requests"
        removeTree(directory)
        mkdir(directory, 0o700)
        defer { removeTree(directory) }
        let counted = ["--count", String(count)] + spacing
        let server: Child, caller: Child
        switch mechanism {
        case .wormhole, .wormholeSleeping:
            server = try Child(["rr-serve", "--mechanism", "wormhole", "--dir", directory])
            _ = try server.expect("READY", timeout: 60)
            let spin = mechanism == .wormhole ? [] : ["--reply-spin-time", "0"]
            caller = try Child(["rr-call", "--mechanism", "wormhole", "--dir", directory] + spin + counted)
        case .floor, .floorSleeping:
            guard let floor = peers.roundTripFloor else { throw BenchError("the C floor of a round trip is not built (Benchmarks/run builds it)") }
            server = try Child(path: floor, ["serve", "--dir", directory])
            _ = try server.expect("READY", timeout: 60)
            let spin = mechanism == .floor ? ["--spin-us", "100"] : []
            caller = try Child(path: floor, ["call", "--dir", directory] + spin + counted)
        case .dbus:
            guard let peer = peers.dbusPeer, let address = peers.dbusAddress else { throw BenchError("no D-Bus peer") }
            // A name of its own each round: the bus may not have seen the last server go.
            let name = ["--name", "org.wormhole.BenchServer.r\(round)"]
            server = try Child(path: peer, ["serve", "--address", address] + name)
            _ = try server.expect("READY", timeout: 60)
            caller = try Child(path: peer, ["call", "--address", address] + name + counted)
        case .socket:
            var ends: [Int32] = [0, 0]
            guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &ends) == 0 else {
                throw BenchError("socketpair: \(String(cString: strerror(errno)))")
            }
            defer { close(ends[0]); close(ends[1]) }
            server = try Child(["rr-serve", "--mechanism", "socket"], passing: ends[0])
            _ = try server.expect("READY", timeout: 60)
            caller = try Child(["rr-call", "--mechanism", "socket"] + counted, passing: ends[1])
        }
        defer { server.terminate() }
        let result = fields(of: try caller.expect("RESULT", timeout: 600))
        let line = try caller.expect("SAMPLES", timeout: 60)
        caller.wait()
        let samples = line.dropFirst("SAMPLES ".count).split(separator: ",").compactMap { UInt64($0) }
        let timed = Int(result["count"] ?? "") ?? 0
        guard samples.count == timed else { throw BenchError("\(mechanism.rawValue): \(samples.count) samples for \(timed) round trips") }
        let cpu = Double(result["cpu_us"] ?? "") ?? 0
        return (samples, Int(result["failed"] ?? "") ?? 0, cpu / Double(max(1, count)))
    }

    /// The mechanisms of the queues section.
    enum WorkQueue: String, CaseIterable {
        case wormhole = "Wormhole work queue (listenForRecords(workQueue:))"
        case redis = "Redis Streams XREADGROUP + XACK (redis-server on loopback)"
    }

    /// A queue filled with jobs, then 3 worker processes that take and acknowledge them one
    /// at a time until none is left: jobs per second from GO to the last acknowledgement.
    mutating func queues(_ runner: Runner, _ fileSystem: String) throws(BenchError) {
        let count = quick ? 5000 : 20000
        let workers = 3
        let mechanisms = WorkQueue.allCases.filter { $0 != .redis || (peers.redisPeer != nil && peers.redisPort != nil) }
        printError("  work queue: \(count) jobs of 16 B, \(workers) worker processes taking and acknowledging one at a time, \(rounds) rounds")
        var outcomes: [WorkQueue: [QueueOutcome]] = [:]
        for _ in 1...rounds {
            for mechanism in mechanisms {
                let outcome = try drain(mechanism, count: count, workers: workers, base: runner.base)
                printError(String(format: "    %@: %@ jobs/s, %d lost, %d repeated; worker CPU %.1f us/job%@", mechanism.rawValue,
                                  Format.rate(outcome.rate), outcome.lost, outcome.repeated, outcome.workerMicroseconds,
                                  outcome.serverMicroseconds.map { String(format: ", server CPU %.1f us/job", $0) } ?? ""))
                outcomes[mechanism, default: []].append(outcome)
            }
        }
        for mechanism in mechanisms {
            let runs = (outcomes[mechanism] ?? []).sorted { $0.rate < $1.rate }
            guard !runs.isEmpty else { continue }
            let middle = runs[runs.count / 2]
            var row = Row(section: "queues", fileSystem: fileSystem, mechanism: mechanism.rawValue, listeners: workers, messages: count)
            row.rate = middle.rate
            row.lost = runs.reduce(0) { $0 + $1.lost }
            row.duplicates = runs.reduce(0) { $0 + $1.repeated }
            row.listenerMicroseconds = middle.workerMicroseconds
            row.note = "rounds: " + (outcomes[mechanism] ?? []).map { Format.rate($0.rate) }.joined(separator: " / ") + " jobs/s"
            if let server = middle.serverMicroseconds { row.note += String(format: "; redis-server CPU %.1f us/job", server) }
            rows.append(row)
        }
        guard fileSystem.hasPrefix("tmpfs"),
              let ours = rows.last(where: { $0.section == "queues" && $0.mechanism == WorkQueue.wormhole.rawValue }), let rate = ours.rate,
              let redis = rows.last(where: { $0.section == "queues" && $0.mechanism == WorkQueue.redis.rawValue })?.rate else { return }
        verdicts.append(("work queue, 3 workers: jobs/s >= Redis Streams', none lost or repeated",
                         rate >= redis && ours.lost == 0 && ours.duplicates == 0,
                         String(format: "%@ jobs/s vs Redis %@: %.2fx; %d lost, %d repeated", Format.rate(rate), Format.rate(redis), rate / redis,
                                ours.lost ?? 0, ours.duplicates ?? 0)))
    }

    struct QueueOutcome {
        var rate: Double
        var lost: Int
        var repeated: Int
        /// The workers' CPU time, all together, per job (us).
        var workerMicroseconds: Double
        /// redis-server's CPU time per job (us).
        var serverMicroseconds: Double?
    }

    /// One round: fills the queue, starts the workers, says GO to all of them and waits
    /// for each to report (they stop when the queue has had nothing for them for 0.5 s).
    private func drain(_ mechanism: WorkQueue, count: Int, workers: Int, base: String) throws(BenchError) -> QueueOutcome {
        let directory = base + "/queues"
        removeTree(directory)
        mkdir(directory, 0o700)
        defer { removeTree(directory) }
        var children: [Child] = []
        switch mechanism {
        case .wormhole:
            do { try RequestRoles.fill(directory: directory, count: count, size: 16) } catch {
                throw BenchError("filling the work queue: \(error)")
            }
            for _ in 0..<workers { children.append(try Child(["queue-work", "--dir", directory], withInput: true)) }
        case .redis:
            guard let peer = peers.redisPeer, let port = peers.redisPort else { throw BenchError("no Redis peer") }
            let filler = try Child(path: peer, ["fill", "--port", String(port), "--count", String(count), "--size", "16"])
            _ = try filler.expect("RESULT", timeout: 300)
            filler.wait()
            for number in 0..<workers {
                children.append(try Child(path: peer, ["work", "--port", String(port), "--consumer", "worker\(number)"], withInput: true))
            }
        }
        for child in children { _ = try child.expect("READY", timeout: 60) }
        let server = peers.redisPid.flatMap { mechanism == .redis ? ProcessSample.read($0) : nil }
        let go = Monotonic.now()
        for child in children { child.send("GO") }
        var handled = 0, last: UInt64 = go, cpu = 0.0
        var sum: UInt64 = 0
        for child in children {
            let result = fields(of: try child.expect("RESULT", timeout: 600))
            child.wait()
            handled += Int(result["handled"] ?? "") ?? 0
            sum &+= UInt64(result["sum"] ?? "") ?? 0
            last = max(last, UInt64(result["last"] ?? "") ?? 0)
            cpu += Double(result["cpu_us"] ?? "") ?? 0
        }
        var serverMicroseconds: Double?
        if let server, let pid = peers.redisPid, let after = ProcessSample.read(pid) {
            serverMicroseconds = Double(after.cpuTicks - server.cpuTicks) * 1e6 / Double(ProcessSample.ticksPerSecond) / Double(count)
        }
        // Each job once: as many handled as passed, and the indices 0..<count summed.
        let expected = UInt64(count) * UInt64(count - 1) / 2
        if handled == count && sum != expected { printError("    \(mechanism.rawValue): the jobs handled are not 0..<\(count) (sum \(sum), not \(expected))") }
        return QueueOutcome(rate: Double(handled) / (Double(last - go) / 1e9), lost: max(0, count - handled),
                            repeated: max(0, handled - count) + (handled == count && sum != expected ? 1 : 0),
                            workerMicroseconds: cpu / Double(max(1, handled)), serverMicroseconds: serverMicroseconds)
    }
}
