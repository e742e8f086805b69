import Foundation
import Testing
@_spi(Backend) import Wormhole
import WormholeTestSupport

/// What the docs show, checked against what the code does: a sentence or a snippet in
/// the docs is a promise.
@Suite("Docs that match the code")
struct DocumentationTests {
    /// The repository's root, from this file's place in it.
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().path

    static func read(_ path: String) throws -> String {
        try String(contentsOfFile: root + "/" + path, encoding: .utf8)
    }

    /// The code blocks of a Markdown file that follow an `<!-- path -->` comment naming
    /// the file they show, by that path.
    static func namedBlocks(in markdown: String) -> [(path: String, code: String)] {
        var blocks: [(String, String)] = []
        var lines = markdown.split(separator: "\n", omittingEmptySubsequences: false)[...]
        while let line = lines.popFirst() {
            guard line.hasPrefix("<!-- "), line.hasSuffix(" -->"), lines.first?.hasPrefix("```") == true else { continue }
            let path = String(line.dropFirst(5).dropLast(4))
            lines.removeFirst()
            var code: [Substring] = []
            while let next = lines.popFirst(), next != "```" { code.append(next) }
            blocks.append((path, code.joined(separator: "\n") + "\n"))
        }
        return blocks
    }

    @Test func theReadmesQuickStartIsTheExamplePackageCIBuilds() throws {
        let blocks = Self.namedBlocks(in: try Self.read("README.md"))
        #expect(blocks.map(\.path) == ["Examples/QuickStart/Package.swift", "Examples/QuickStart/Sources/listener/main.swift",
                                       "Examples/QuickStart/Sources/sender/main.swift"])
        for block in blocks {
            #expect(block.code == (try Self.read(block.path)), "README.md's copy of \(block.path) differs from the file")
        }
    }

    @Test func theQuickStartPackageNamesTheCloneAsTheReadmeSays() throws {
        let manifest = try Self.read("Examples/QuickStart/Package.swift")
        #expect(manifest.contains(#".package(path: "../Wormhole")"#))
        #expect(manifest.contains(#"package: "Wormhole")"#))
        #expect(!manifest.contains("catch where"))
    }

    @Test func theErrorTheDocsQuoteIsTheOneThrown() throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.file("container"))
        let error = try #require(Result { () throws(WormholeError) in try wormhole.passMessage("hi", identifier: "../notes") }.failure)
        #expect(error.code == .invalidIdentifier)
        let quoted = "identifier '../notes' may not contain '/'"
        #expect(error.description == quoted)
        for path in ["Docs/GettingStarted.md", "Docs/CLI.md", "Examples/QuickStart/Sources/sender/main.swift"] {
            #expect(try Self.read(path).contains(quoted), "\(path) no longer quotes the error")
        }
    }

    @Test("the container is where GettingStarted says, with or without XDG_RUNTIME_DIR")
    func theContainerIsWhereGettingStartedSays() async throws {
        let sandbox = Sandbox(extra: [:])
        let runtime = TemporaryDirectory()
        var environment = sandbox.environment
        environment.removeValue(forKey: "WORMHOLE_APP_GROUPS_DIRECTORY")
        environment.removeValue(forKey: "XDG_RUNTIME_DIR")
        let group = "group.docs.check-\(getpid())"
        let path = try await RunningCommand("wormhole", ["path", "--group", group], environment: environment, input: nil, in: sandbox.root).finish()
        environment["XDG_RUNTIME_DIR"] = runtime.path
        let again = try await RunningCommand("wormhole", ["path", "--group", group], environment: environment, input: nil, in: sandbox.root).finish()
        var isDirectory: ObjCBool = false
        let parent = FileManager.default.fileExists(atPath: "/dev/shm", isDirectory: &isDirectory) && isDirectory.boolValue ? "/dev/shm" : "/tmp"
        let runtimeParent = "/run/user/\(geteuid())"
        let expected = FileManager.default.fileExists(atPath: runtimeParent) ? "\(runtimeParent)/app-groups/\(group)" : "\(parent)/app-groups-\(geteuid())/\(group)"
        #expect(path.output == expected + "\n")
        #expect(again.output == path.output, "XDG_RUNTIME_DIR does not move it")
        let guide = try Self.read("Docs/GettingStarted.md")
        #expect(guide.contains("`/run/user/<uid>/app-groups/<group>`") && guide.contains("`/dev/shm/app-groups-<uid>/<group>`"))
        try? FileManager.default.removeItem(atPath: expected)
    }
}

extension Result {
    var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
