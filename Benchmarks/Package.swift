// swift-tools-version: 6.2
// Benchmarks of Wormhole, kept out of the main package so that its build stays light.
//
//   Benchmarks/run                 the whole suite, release build (see Docs/Performance.md)
//   swift package benchmark        the in-process micro-benchmarks alone (package-benchmark)
import PackageDescription

let package = Package(
    name: "WormholeBenchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        // The project itself, by path: the benchmarks measure the working tree.
        .package(name: "Wormhole", path: ".."),
        // In-process micro-benchmarks with statistics and baselines (`swift package benchmark`).
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.1", traits: ["MallocInterposer"]),
    ],
    targets: [
        // The multi-process harness: `WormholeBench run` re-executes itself as senders and
        // listeners, measures Wormhole against a pipe, a Unix socket and a naive
        // file-per-identifier mode, prints the tables and writes the CSV files.
        .executableTarget(
            name: "WormholeBench",
            dependencies: [.product(name: "Wormhole", package: "Wormhole")]
        ),
        // The costs inside one process: passing to 1, 100 or 10,000 identifiers, reading
        // the latest record, JSON coding.
        .executableTarget(
            name: "StoreBenchmarks",
            dependencies: [
                .product(name: "Wormhole", package: "Wormhole"),
                .product(name: "Benchmark", package: "benchmark"),
            ],
            path: "Benchmarks/StoreBenchmarks",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
    ],
    swiftLanguageModes: [.v6]
)
