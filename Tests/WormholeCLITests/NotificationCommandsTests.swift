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

    @Test func anObserverThatHearsNothingTimesOutWithStatusTwo() async throws {
        let sandbox = Sandbox()
        let result = try await sandbox.run(["observe", "silence", "--timeout", "0.3"])
        #expect(result.status == 2)
        #expect(result.stderrLines == ["wormhole: no notification arrived within 0.3 seconds for 'silence'"])
    }
}
