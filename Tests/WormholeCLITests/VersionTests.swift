import Foundation
import Testing
@_spi(Backend) import Wormhole

/// One version number for a release: the library's ``Wormhole/version`` is the one that
/// is changed; the command and the Python package must say the same.
@Suite("One version number")
struct VersionTests {
    @Test("wormhole --version, the Python package's __version__ and its metadata say Wormhole.version, a Semantic Versioning number")
    func oneVersionEverywhere() async throws {
        let version = Wormhole.version
        let parts = version.split(separator: ".", omittingEmptySubsequences: false)
        #expect(parts.count == 3 && parts.allSatisfy { !$0.isEmpty && $0.allSatisfy(\.isASCII) && $0.allSatisfy(\.isNumber) },
                "MAJOR.MINOR.PATCH: \(version)")

        let command = try await Sandbox().run(["--version"])
        #expect(command.status == 0 && command.lines == [version], "wormhole --version: \(command.output)")

        let initFile = try DocumentationTests.read("Python/wormhole/__init__.py")
        let assignments = initFile.split(separator: "\n").filter { $0.hasPrefix("__version__") }
        #expect(assignments == ["__version__ = \"\(version)\""], "Python/wormhole/__init__.py: \(assignments)")

        // The package's metadata takes its version from __version__, not a copy of its own.
        let project = try DocumentationTests.read("Python/pyproject.toml")
        #expect(project.contains("dynamic = [\"version\"]") && project.contains("version = {attr = \"wormhole.__version__\"}"),
                "pyproject.toml reads the version from wormhole.__version__")
        #expect(!project.split(separator: "\n").contains { $0.hasPrefix("version = \"") }, "pyproject.toml has no version of its own")
    }
}
