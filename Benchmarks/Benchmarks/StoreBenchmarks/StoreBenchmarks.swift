import Benchmark
import Foundation
import Wormhole

/// The costs inside one process, measured by package-benchmark (`swift package benchmark`
/// in `Benchmarks/`): a pass with 1, 100 or 10,000 identifiers in use, reading the
/// latest message, and the JSON coding of a small Codable message. The multi-process
/// figures (latency, throughput, fan-out) come from `WormholeBench run`.
let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.wallClock, .mallocCountTotal, .syscalls],
        warmupIterations: 10,
        scalingFactor: .kilo,
        maxDuration: .seconds(3),
        maxIterations: 50
    )

    for identifiers in [1, 100, 10_000] {
        Benchmark("passMessage 16 B, round-robin over \(identifiers) identifiers") { benchmark in
            let directory = try Scratch()
            defer { directory.remove() }
            let wormhole = try Wormhole(directory: directory.path)
            let names = (0..<identifiers).map { "bench-\($0)" }
            for name in names { try wormhole.passMessage(Data(count: 16), identifier: name) }
            let payload = Data(count: 16)
            benchmark.startMeasurement()
            for index in benchmark.scaledIterations {
                try wormhole.passMessage(payload, identifier: names[index % identifiers])
            }
            benchmark.stopMeasurement()
        }
    }

    Benchmark("message(withIdentifier:) of a 16 B message") { benchmark in
        let directory = try Scratch()
        defer { directory.remove() }
        let wormhole = try Wormhole(directory: directory.path)
        try wormhole.passMessage(Data(count: 16), identifier: "latest")
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations {
            blackHole(try wormhole.message(withIdentifier: "latest", as: Data.self))
        }
        benchmark.stopMeasurement()
    }

    Benchmark("JSON round trip of a small Codable message, coders reused") { benchmark in
        let message = Note(stamp: 1_234_567_890, index: 42, text: "ping")
        let encoder = JSONEncoder()
        let decoder = JSONDecoder()
        for _ in benchmark.scaledIterations {
            let data = try encoder.encode(message)
            blackHole(try decoder.decode(Note.self, from: data))
        }
    }

    Benchmark("JSON round trip of a small Codable message") { benchmark in
        let message = Note(stamp: 1_234_567_890, index: 42, text: "ping")
        for _ in benchmark.scaledIterations {
            let data = try JSONEncoder().encode(message)
            blackHole(try JSONDecoder().decode(Note.self, from: data))
        }
    }
}

/// A small Codable message, as an app would pass.
struct Note: Codable, Sendable {
    var stamp: UInt64
    var index: UInt64
    var text: String
}

/// A fresh directory on tmpfs (`$XDG_RUNTIME_DIR`, else `/dev/shm`), removed after use.
struct Scratch {
    let path: String

    init() throws {
        let runtime = ProcessInfo.processInfo.environment["XDG_RUNTIME_DIR"].flatMap { $0.hasPrefix("/") ? $0 : nil }
        path = (runtime ?? "/dev/shm") + "/wormhole-microbench-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
    }

    func remove() { try? FileManager.default.removeItem(atPath: path) }
}
