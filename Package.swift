// swift-tools-version: 6.2
import PackageDescription

let package = Package(
    name: "Wormhole",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "Wormhole", targets: ["Wormhole"]),
        // The command-line tool: `wormhole send`, `wormhole listen`, ...
        .executable(name: "wormhole", targets: ["WormholeCLI"]),
        // Examples: a chat between processes; a containing app and its widget.
        .executable(name: "wormhole-chat", targets: ["wormhole-chat"]),
        .executable(name: "today-widget", targets: ["today-widget"]),
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
    ],
    targets: [
        .target(
            name: "Wormhole",
            dependencies: [
                .product(name: "SystemPackage", package: "swift-system"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // libinotifytools: the independent reference observer, linked by tests only.
        .systemLibrary(
            name: "CInotifyTools",
            path: "Tests/CInotifyTools",
            providers: [.apt(["libinotifytools0-dev"])]
        ),
        // A small program the integration tests start as a real separate process.
        .executableTarget(
            name: "WormholeTestAgent",
            dependencies: ["Wormhole"],
            path: "Tests/WormholeTestAgent"
        ),
        .testTarget(
            name: "WormholeTests",
            dependencies: [
                "Wormhole", "CInotifyTools", "WormholeTestAgent",
                .product(name: "PropertyBased", package: "swift-property-based"),
            ]
        ),
        // The `wormhole` command-line tool: a thin user of the library.
        .executableTarget(
            name: "WormholeCLI",
            dependencies: [
                "Wormhole",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Sources/WormholeCLI"
        ),
        // What both examples need to wait for their end (signals, end of input).
        .target(name: "ExampleSupport", path: "Examples/Support"),
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
            path: "Examples/TodayWidget"
        ),
        // Argument parsing of the CLI, and end-to-end runs of the built binaries.
        .testTarget(
            name: "WormholeCLITests",
            dependencies: ["WormholeCLI", "Wormhole"]
        ),
    ],
    swiftLanguageModes: [.v6]
)
