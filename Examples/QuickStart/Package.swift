// swift-tools-version: 6.2
import PackageDescription

let package = Package(
    name: "NotesDemo",
    dependencies: [
        // A clone on disk. `package:` below is the name of the clone's folder, the last
        // part of this path ("Wormhole"): rename one, rename the other.
        .package(path: "../Wormhole"),
        // From a Git server instead: .package(url: "https://<host>/<owner>/Wormhole.git", branch: "main"),
        // and `package:` is the URL's last part without ".git".
    ],
    targets: [
        .executableTarget(name: "listener", dependencies: [.product(name: "Wormhole", package: "Wormhole")]),
        .executableTarget(name: "sender", dependencies: [.product(name: "Wormhole", package: "Wormhole")]),
    ]
)
