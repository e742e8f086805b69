// swift-tools-version: 6.2
import PackageDescription

/// `Scripts/sanitize` builds with WORMHOLE_SANITIZER set. Its run is the library's suite
/// (WormholeTests) alone, so its build leaves out the command-line tool, the examples and
/// their tests (half of ThreadSanitizer's build: 114 of 231 CPU-seconds on 2 cores), and
/// links the test agent as usual (testAgentLinkerSettings).
let sanitizerBuild = Context.environment["WORMHOLE_SANITIZER"] != nil

/// The test agent starts about 4,600 times in a run of the suite. Linked with the Swift
/// runtime and Foundation inside it (by the toolchain's lld), it starts in 6.3 ms of CPU
/// instead of 13.0, most of which was the loader binding symbols across a dozen shared
/// libraries, and the suite took 444 CPU-seconds instead of 527 on 2 cores. The flags
/// name the static libraries that Foundation's shared module does not list. Not under a
/// sanitizer: ThreadSanitizer with a static runtime started each agent in 180 ms instead
/// of 40, and some failed its allocator's checks.
var testAgentLinkerSettings: [LinkerSetting] {
    guard !sanitizerBuild else { return [] }
    return [
        .unsafeFlags(["-static-stdlib", "-use-ld=lld",
                      "-l_FoundationICU", "-l_FoundationCShims", "-l_FoundationCollections", "-lCoreFoundation"],
                     .when(platforms: [.linux])),
    ]
}

let package = Package(
    name: "Wormhole",
    products: [
        .library(name: "Wormhole", targets: ["Wormhole"]),
        // The PostgreSQL back end: compiled only with the `Postgres` trait.
        .library(name: "WormholePostgres", targets: ["WormholePostgres"]),
    ],
    traits: [
        // Opt-in: the PostgreSQL back end (`WormholePostgres`) and the CLI's `--postgres`.
        // Without it nothing of postgres-nio is compiled.
        .trait(name: "Postgres", description: "The PostgreSQL back end (LISTEN/NOTIFY) and the CLI's --postgres option"),
    ],
    dependencies: [
        // Errno and FileDescriptor: typed system errors and EINTR-safe descriptor calls.
        .package(url: "https://github.com/apple/swift-system", from: "1.8.1"),
        // Diagnostics for listeners that have no error handler of their own.
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        // Tests only: generated inputs for the fuzz tests of the record reader and identifiers.
        .package(url: "https://github.com/x-sheep/swift-property-based", from: "2.0.1"),
        // Commands, options, help, usage errors and shell completion for the CLI and examples.
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        // The API reference: `swift package generate-documentation --target Wormhole`
        // (a command plugin: nothing of it is built by `swift build`).
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
        // With the `Postgres` trait only: the PostgreSQL wire protocol, LISTEN/NOTIFY.
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
        // With the `Postgres` trait only, already needed by postgres-nio: event loops,
        // buffers, and TLS for the `sslmode` of a PostgreSQL URL.
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
    ],
    targets: [
        // The library in three layers, each target importing only those below it:
        //   WormholeCore   the API's types (records, errors, configuration, JSON coding),
        //                  the back-end protocol `WormholeTransiting`, and the system layer
        //                  (system calls, locks, clocks, threads, identifiers);
        //   WormholeFiles  the directory back end: the container, inotify wake-ups, the
        //                  logs, claims, durable positions, compaction and work-queue files;
        //   Wormhole       the API (`Wormhole`, listeners, requests, work-queue members),
        //                  over any back end; it re-exports the two below, so that
        //                  `import Wormhole` is all a user writes.
        .target(
            name: "WormholeCore",
            dependencies: [
                .product(name: "SystemPackage", package: "swift-system"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(
            name: "WormholeFiles",
            dependencies: [
                "WormholeCore",
                .product(name: "SystemPackage", package: "swift-system"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(
            name: "Wormhole",
            dependencies: [
                "WormholeCore", "WormholeFiles",
                .product(name: "SystemPackage", package: "swift-system"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The PostgreSQL back end: a WormholeTransiting over a table and LISTEN/NOTIFY.
        // Its sources compile to nothing unless the `Postgres` trait is enabled.
        .target(
            name: "WormholePostgres",
            dependencies: [
                "Wormhole",
                .product(name: "PostgresNIO", package: "postgres-nio", condition: .when(traits: ["Postgres"])),
                .product(name: "NIOCore", package: "swift-nio", condition: .when(traits: ["Postgres"])),
                .product(name: "NIOPosix", package: "swift-nio", condition: .when(traits: ["Postgres"])),
                .product(name: "NIOFoundationCompat", package: "swift-nio", condition: .when(traits: ["Postgres"])),
                .product(name: "NIOSSL", package: "swift-nio-ssl", condition: .when(traits: ["Postgres"])),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // libinotifytools: the independent reference observer, linked by tests only.
        .systemLibrary(
            name: "CInotifyTools",
            path: "Tests/CInotifyTools",
            providers: [.apt(["libinotifytools0-dev"])]
        ),
        // How tests and their agent processes open the same container on either back end.
        .target(
            name: "WormholeTestSupport",
            dependencies: ["Wormhole", "WormholePostgres"],
            path: "Tests/WormholeTestSupport"
        ),
        // A small program the integration tests start as a real separate process (about
        // 4,600 times in a run of the suite; how it is linked: testAgentLinkerSettings).
        // No test target depends on it (one that did would get its code and its linker
        // flags linked into the test bundle): `swift build --build-tests` and `swift test`
        // build every executable.
        .executableTarget(
            name: "WormholeTestAgent",
            dependencies: ["Wormhole", "WormholeTestSupport"],
            path: "Tests/WormholeTestAgent",
            linkerSettings: testAgentLinkerSettings
        ),
        .testTarget(
            name: "WormholeTests",
            dependencies: [
                "Wormhole", "WormholePostgres", "WormholeTestSupport", "CInotifyTools",
                .product(name: "PropertyBased", package: "swift-property-based"),
                .product(name: "PostgresNIO", package: "postgres-nio", condition: .when(traits: ["Postgres"])),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)

// The command-line tool, the examples and their tests (not in a sanitizer's build).
if !sanitizerBuild {
    package.products += [
        // The command-line tool: `wormhole send`, `wormhole listen`, ...
        .executable(name: "wormhole", targets: ["WormholeCLI"]),
        // Examples: a chat between processes; a containing app and its widget; a job queue.
        .executable(name: "wormhole-chat", targets: ["wormhole-chat"]),
        .executable(name: "today-widget", targets: ["today-widget"]),
        .executable(name: "job-queue", targets: ["job-queue"]),
        .executable(name: "weather-service", targets: ["weather-service"]),
    ]
    package.targets += [
        // SIGINT and friends turned into a call on a thread of their own, for the CLI and
        // the examples (not part of the library).
        .target(name: "ProcessSignals"),
        // The `wormhole` command-line tool: a thin user of the library.
        .executableTarget(
            name: "WormholeCLI",
            dependencies: [
                "Wormhole", "WormholePostgres", "ProcessSignals",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            path: "Sources/WormholeCLI"
        ),
        // What both examples need to wait for their end (signals, end of input).
        .target(name: "ExampleSupport", dependencies: ["ProcessSignals"], path: "Examples/Support"),
        .executableTarget(
            name: "wormhole-chat",
            dependencies: [
                "Wormhole", "ExampleSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Examples/Chat"
        ),
        .executableTarget(
            name: "today-widget",
            dependencies: [
                "Wormhole", "ExampleSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Examples/TodayWidget",
            // The systemd units of the two-user deployment (Docs/Examples.md).
            exclude: ["systemd"]
        ),
        .executableTarget(
            name: "job-queue",
            dependencies: [
                "Wormhole", "ExampleSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Examples/JobQueue"
        ),
        .executableTarget(
            name: "weather-service",
            dependencies: [
                "Wormhole",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Examples/Weather/Service"
        ),
        // Argument parsing of the CLI, and end-to-end runs of the built binaries.
        .testTarget(
            name: "WormholeCLITests",
            dependencies: ["WormholeCLI", "Wormhole", "WormholeTestSupport"]
        ),
    ]
}
