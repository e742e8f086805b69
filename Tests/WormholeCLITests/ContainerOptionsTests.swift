import ArgumentParser
import Testing
@testable import WormholeCLI

@Suite("Container selection")
struct ContainerOptionsTests {
    @Test func withNoOptionsAndNoEnvironmentTheDefaultGroupIsUsed() throws {
        let options = try ContainerOptions.parse([])
        #expect(try options.location(environment: [:]) == .group("group.wormhole.default", optionalDirectory: nil))
    }

    @Test func theGroupOptionNamesTheGroupAndItsOptionalDirectory() throws {
        let options = try ContainerOptions.parse(["--group", "group.com.example.notes", "--optional-directory", "wormhole"])
        #expect(try options.location(environment: [:]) == .group("group.com.example.notes", optionalDirectory: "wormhole"))
    }

    @Test func theDirectoryOptionNamesADirectory() throws {
        let options = try ContainerOptions.parse(["--directory", "/tmp/shared"])
        #expect(try options.location(environment: [:]) == .directory("/tmp/shared"))
    }

    @Test func theEnvironmentGivesTheDefaultsAndOptionsOverrideIt() throws {
        let environment = ["WORMHOLE_DIRECTORY": "/tmp/from-env", "WORMHOLE_GROUP": "group.env"]
        #expect(try ContainerOptions.parse([]).location(environment: environment) == .directory("/tmp/from-env"))
        #expect(try ContainerOptions.parse([]).location(environment: ["WORMHOLE_GROUP": "group.env"])
                == .group("group.env", optionalDirectory: nil))
        #expect(try ContainerOptions.parse(["--group", "group.flag"]).location(environment: environment)
                == .group("group.flag", optionalDirectory: nil))
        #expect(try ContainerOptions.parse(["--directory", "/tmp/flag"]).location(environment: environment)
                == .directory("/tmp/flag"))
    }

    @Test func anOptionalDirectoryWithAnEnvironmentDirectoryIsAUsageError() throws {
        let options = try ContainerOptions.parse(["--optional-directory", "sub"])
        #expect(throws: CommandFailure.self) {
            try options.location(environment: ["WORMHOLE_DIRECTORY": "/tmp/x"])
        }
        do {
            _ = try options.location(environment: ["WORMHOLE_DIRECTORY": "/tmp/x"])
        } catch let failure as CommandFailure {
            #expect(failure.exitCode.rawValue == 64)
        }
    }

    @Test("conflicting container options are usage errors", arguments: [
        ["--group", "g", "--directory", "/tmp/x"],
        ["--directory", "/tmp/x", "--optional-directory", "sub"],
        ["--directory", ""],
    ])
    func conflictingOptionsAreRejected(arguments: [String]) {
        #expect(throws: (any Error).self) { try ContainerOptions.parse(arguments) }
        do {
            _ = try WormholeCommand.parseAsRoot(["path"] + arguments)
            Issue.record("\(arguments) parsed")
        } catch {
            #expect(WormholeCommand.exitCode(for: error).rawValue == 64)
        }
    }
}
