#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing

@Suite("post and observe across processes", .timeLimit(.minutes(10)))
struct NotificationCommandsTests {
    func observer(_ sandbox: Sandbox, _ arguments: [String]) async throws -> RunningCommand {
        let observer = try sandbox.start(["observe", "--verbose"] + arguments)
        try #require(await observer.waitForStandardError(containing: "observing"), "\(observer.stderr)")
        return observer
    }

    @Test func anObserverInAnotherProcessSeesAPost() async throws {
        let sandbox = Sandbox()
        let observer = try await observer(sandbox, ["refresh", "--count", "1"])
        #expect(try await sandbox.run(["post", "refresh"]).status == 0)
        let result = await observer.finish()
        #expect(result.status == 0)
        #expect(result.lines == ["refresh"])
    }

    @Test func theStateValueTravelsWithThePost() async throws {
        let sandbox = Sandbox()
        let observer = try await observer(sandbox, ["battery", "--state", "--count", "1"])
        #expect(try await sandbox.run(["post", "--state", "87", "battery"]).status == 0)
        let result = await observer.finish()
        #expect(result.status == 0)
        #expect(result.lines == ["battery 87"])
    }

    @Test func sendingAMessagePostsItsIdentifiersName() async throws {
        let sandbox = Sandbox()
        let observer = try await observer(sandbox, ["chat", "--count", "1"])
        _ = try await sandbox.run(["send", "chat", "hello"])
        let result = await observer.finish()
        #expect(result.status == 0)
        #expect(result.lines == ["chat"])
    }

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/script")))
    func onATerminalObserveSaysWhereItObservesAsListenDoes() async throws {
        let sandbox = Sandbox()
        let terminal = try sandbox.startOnTerminal(["observe", "refresh", "--count", "1", "--timeout", "60"])
        #expect(await terminal.waitForStandardOutput(containing: "wormhole: observing 'refresh' in \(sandbox.defaultContainer); Ctrl-C stops"),
                "\(String(decoding: terminal.stdout, as: UTF8.self))")
        #expect(try await sandbox.run(["post", "refresh"]).status == 0)
        let result = await terminal.finish()
        #expect(result.status == 0)
        #expect(result.output.contains("refresh\r\n"))
        // In a pipe it says nothing until asked with --verbose.
        let piped = try await sandbox.run(["observe", "refresh", "--timeout", "0.2"])
        #expect(piped.stderr == "wormhole: no notification arrived within 0.2 seconds for 'refresh'\n")
    }

    @Test func anObserverThatHearsNothingTimesOutWithStatusTwo() async throws {
        let sandbox = Sandbox()
        let result = try await sandbox.run(["observe", "silence", "--timeout", "0.3"])
        #expect(result.status == 2)
        #expect(result.stderrLines == ["wormhole: no notification arrived within 0.3 seconds for 'silence'"])
    }
}
