#if canImport(Glibc)
import Glibc
#endif
import Dispatch
import Foundation
@_spi(Backend) import Wormhole
#if Postgres
import WormholePostgres
#endif

/// The child processes that use the library: a listener of one or many identifiers, and
/// a sender. Each prints `READY` when it may be measured and `RESULT ...` at the end.
///
/// Both open their wormhole on either back end (``open(_:configuration:)``): files in
/// `--dir D`, or PostgreSQL with `--postgres URL --container NAME`.
enum WormholeRoles {
    /// The wormhole a role uses: over the directory of `--dir`, or, with
    /// `--postgres URL --container NAME`, over PostgreSQL (`PostgresTransiting`, two
    /// connections of this process's own).
    static func open(_ options: Options, configuration: Wormhole.Configuration = Wormhole.Configuration()) throws -> Wormhole {
        if options.flag("postgres") {
            #if Postgres
            return Wormhole(transiting: try PostgresTransiting(
                url: try options.string("postgres"), container: try options.string("container"), configuration: configuration))
            #else
            throw PostgresRoles.missing
            #endif
        }
        return try Wormhole(directory: try options.string("dir"), configuration: configuration)
    }

    /// `wormhole-listen (--dir D | --postgres URL --container NAME) [--ids N] [--first-id A --end-id B] [--count C] [--mode raw|codable] [--queue] [--idle] [--hold]`
    ///
    /// Listens to N identifiers (or those numbered A..<B of them) the library's default way,
    /// on its inotify reader thread (with `--queue`, on one serial queue, as an app that
    /// names its main queue: one hop), counts what arrives and times it. `--idle` listens until killed, for the
    /// idle CPU and memory measurement. `--hold` prints `MEASURED` once every message
    /// arrived and waits for a line on standard input before it reports (the syscalls
    /// section stops counting there).
    static func listen(_ options: Options) throws -> Int32 {
        let identifiers = try options.int("ids", default: 1)
        let count = try options.int("count", default: 2000)
        let codable = options.string("mode", default: "raw") == "codable"
        raiseDescriptorLimit(atLeast: identifiers * 2 + 256)
        let wormhole = try open(options)
        let queue: DispatchQueue? = options.flag("queue") ? DispatchQueue(label: "bench.listener") : nil
        // A slice of the identifiers, when several processes share them out.
        let first = try options.int("first-id", default: 0)
        let end = min(identifiers, try options.int("end-id", default: identifiers))
        let tally = SharedTally(Tally(count: count, identifiers: identifiers, slice: first..<end))
        var tokens: [ListenerToken] = []
        tokens.reserveCapacity(end - first)
        for number in first..<end {
            let identifier = identifierName(number, of: identifiers)
            if codable {
                tokens.append(try wormhole.listenForMessage(withIdentifier: identifier, as: BenchMessage.self, queue: queue) { message in
                    tally.record(index: message.index, stamp: message.stamp, at: Monotonic.now())
                })
            } else {
                tokens.append(try wormhole.listenForRecords(withIdentifier: identifier, queue: queue) { record in
                    let now = Monotonic.now()
                    guard record.payload.count >= Frame.minimumSize else { return }
                    let (stamp, index) = record.payload.withUnsafeBytes { Frame.read($0.baseAddress!) }
                    tally.record(index: index, stamp: stamp, at: now)
                })
            }
        }
        let start = ResourceUsage.current()
        emit("READY")
        if tally.read({ $0.expectedWarmUps == 0 }) { emit("WARM") }
        if options.flag("idle") {
            while true { pause() }
        }
        tally.waitForEnd(idle: try options.double("idle-timeout", default: 3), start: 60)
        if options.flag("hold") { holdUntilReport() }
        emit(tally.read { $0.report(since: start) })
        withExtendedLifetime(tokens) {}
        return 0
    }

    /// `wormhole-send (--dir D | --postgres URL --container NAME) [--ids N] [--count C] [--size S] [--interval-ns I] [--mode raw|codable] [--batch B | --threads T] [--handshake] [--hold]`
    ///
    /// Passes C messages round-robin over N identifiers, one every I nanoseconds (as
    /// fast as it can when I is 0), each stamped just before it is passed. Warm-up
    /// messages go first, one per identifier at least. With `--batch B` (raw, one
    /// identifier), every B messages are passed together with `passMessages`. With
    /// `--threads T` (raw, a burst, T identifiers), T threads pass at once, each to an
    /// identifier of its own, so that each identifier's order is one thread's.
    static func send(_ options: Options) throws -> Int32 {
        let identifiers = try options.int("ids", default: 1)
        let count = try options.int("count", default: 2000)
        let size = max(Frame.minimumSize, try options.int("size", default: 16))
        let interval = UInt64(try options.int("interval-ns", default: 0))
        let codable = options.string("mode", default: "raw") == "codable"
        let batchSize = max(1, try options.int("batch", default: 1))
        let threads = max(1, try options.int("threads", default: 1))
        // A sender to many identifiers keeps every log open, as GettingStarted.md advises:
        // a descriptor each, the limit raised for them.
        raiseDescriptorLimit(atLeast: identifiers + 1024)
        var configuration = Wormhole.Configuration()
        configuration.maximumMessageSize = max(configuration.maximumMessageSize, size)
        if identifiers > 64 { configuration.maximumOpenLogCount = identifiers }
        let wormhole = try open(options, configuration: configuration)
        let names = (0..<identifiers).map { identifierName($0, of: identifiers) }
        var payload = Data(count: size)

        func pass(_ index: UInt64, _ identifier: String) throws {
            let stamp = Monotonic.now()
            if codable {
                try wormhole.passMessage(BenchMessage(stamp: stamp, index: index, text: "ping"), identifier: identifier)
            } else {
                payload.withUnsafeMutableBytes { Frame.write(stamp: stamp, index: index, into: $0.baseAddress!) }
                try wormhole.passMessage(payload, identifier: identifier)
            }
        }

        for number in 0..<Frame.warmUpCount(identifiers: identifiers) {
            try pass(Frame.warmUpBit | UInt64(number), names[number % identifiers])
        }
        // The clock starts when the harness says that every listener has read the
        // warm-up (a `GO` line on standard input), or after a pause without a harness.
        if options.flag("handshake") {
            emit("WARMED")
            _ = readLine()
        } else {
            Monotonic.sleep(seconds: 0.05 + Double(identifiers) * 20e-6 + Double(size) * 20 / 1e9)
        }
        Monotonic.sleep(seconds: 0.01)
        if threads > 1 {
            // Thread t passes the indices i with i % T == t; with T identifiers, those all
            // go to one identifier (identifierNumber is a bijection of i % T).
            try sendConcurrently(count: count, threads: threads) { index in
                var payload = Data(count: size)
                payload.withUnsafeMutableBytes { Frame.write(stamp: Monotonic.now(), index: UInt64(index), into: $0.baseAddress!) }
                try wormhole.passMessage(payload, identifier: names[identifierNumber(forMessage: index, of: identifiers)])
            }
            return 0
        }
        if batchSize > 1 {
            // Stamped as each batch is passed; passed whenever B are ready, and at the end.
            var batch: [(payload: Data, kind: WormholePayloadKind)] = []
            try sendPaced(count: count, interval: interval, hold: options.flag("hold")) { index in
                payload.withUnsafeMutableBytes { Frame.write(stamp: Monotonic.now(), index: UInt64(index), into: $0.baseAddress!) }
                batch.append((payload, .data))
                if batch.count == batchSize || index == count - 1 {
                    try wormhole.passPayloads(batch, identifier: names[0])
                    batch.removeAll(keepingCapacity: true)
                }
            }
            return 0
        }
        try sendPaced(count: count, interval: interval, hold: options.flag("hold")) { index in
            try pass(UInt64(index), names[identifierNumber(forMessage: index, of: identifiers)])
        }
        return 0
    }
}

/// Raises this process's descriptor limit to at least `count` where it can: a listener
/// of 10,000 identifiers holds two descriptors per identifier (its position in the log
/// and its claim).
func raiseDescriptorLimit(atLeast count: Int) {
    var limit = rlimit()
    getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    let wanted = rlim_t(count)
    guard limit.rlim_cur < wanted else { return }
    var raised = rlimit(rlim_cur: max(wanted, limit.rlim_cur), rlim_max: max(wanted, limit.rlim_max))
    if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised) != 0 {
        // Not allowed to raise the hard limit: go as far as it allows.
        raised = rlimit(rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max)
        setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised)
    }
}
