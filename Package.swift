// swift-tools-version: 6.2
import PackageDescription

let package = Package(
    name: "Wormhole",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "Wormhole", targets: ["Wormhole"]),
    ],
    dependencies: [
        // Errno and FileDescriptor: typed system errors and EINTR-safe descriptor calls.
        .package(url: "https://github.com/apple/swift-system", from: "1.8.1"),
        // Diagnostics for listeners that have no error handler of their own.
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
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
            dependencies: ["Wormhole", "CInotifyTools", "WormholeTestAgent"]
        ),
    ],
    swiftLanguageModes: [.v6]
)
