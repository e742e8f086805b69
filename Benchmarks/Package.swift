// swift-tools-version: 6.2
// Benchmarks of Wormhole, kept out of the main package so that its build stays light.
//
//   Benchmarks/run                 the whole suite, release build (see Docs/Performance.md)
//   Benchmarks/run --postgres      also the PostgreSQL back end (the `Postgres` trait below)
//   swift package benchmark        the in-process micro-benchmarks alone (package-benchmark)
import PackageDescription

let package = Package(
    name: "WormholeBenchmarks",
    platforms: [.macOS(.v15)],
    traits: [
        // Opt-in, as in the project: the harness's postgres section and its roles. Without
        // it nothing of the PostgreSQL client (postgres-nio, swift-nio, BoringSSL) is
        // compiled, and the section says how to get it.
        .trait(name: "Postgres", description: "The postgres section: Wormhole's PostgreSQL back end and a bare LISTEN/NOTIFY"),
    ],
    dependencies: [
        // The project itself, by path: the benchmarks measure the working tree. With its
        // `Postgres` trait when this package has it, so that the harness can measure the
        // PostgreSQL back end beside the file one (`--sections postgres`).
        .package(name: "Wormhole", path: "..", traits: [.trait(name: "Postgres", condition: .when(traits: ["Postgres"]))]),
        // The bare LISTEN/NOTIFY baseline talks to PostgreSQL without Wormhole: the same
        // packages, at the versions the root resolves with its `Postgres` trait.
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        // In-process micro-benchmarks with statistics and baselines (`swift package benchmark`).
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.1", traits: ["MallocInterposer"]),
    ],
    targets: [
        // The multi-process harness: `WormholeBench run` re-executes itself as senders and
        // listeners, measures Wormhole against a pipe, a Unix socket and a naive
        // file-per-identifier mode (and its PostgreSQL back end against the files and a
        // bare LISTEN/NOTIFY), prints the tables and writes the CSV files.
        .executableTarget(
            name: "WormholeBench",
            dependencies: [
                .product(name: "Wormhole", package: "Wormhole"),
                .product(name: "WormholePostgres", package: "Wormhole", condition: .when(traits: ["Postgres"])),
                .product(name: "PostgresNIO", package: "postgres-nio", condition: .when(traits: ["Postgres"])),
                .product(name: "NIOPosix", package: "swift-nio", condition: .when(traits: ["Postgres"])),
                .product(name: "Logging", package: "swift-log"),
            ]
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
