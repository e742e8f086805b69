#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing

@Suite("Bad input: exit status and one line on standard error", .timeLimit(.minutes(10)))
struct BadInputTests {
    /// Checks the status and that standard error is exactly one `wormhole: ...` line.
    func expectFailure(_ result: CommandResult, status: Int32, mentioning words: [String],
                       sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(result.status == status, "stderr: \(result.stderr)", sourceLocation: sourceLocation)
        #expect(result.stdout.isEmpty, sourceLocation: sourceLocation)
        #expect(result.stderrLines.count == 1, "stderr: \(result.stderr)", sourceLocation: sourceLocation)
        #expect(result.stderr.hasPrefix("wormhole: "), sourceLocation: sourceLocation)
        for word in words {
            #expect(result.stderr.contains(word), "'\(word)' missing from: \(result.stderr)", sourceLocation: sourceLocation)
        }
    }

    @Test("an invalid identifier is a usage error", arguments: [
        (["send", "../etc", "x"], "may not"),
        (["send", ".hidden", "x"], "may not start with '.'"),
        (["send", "", "x"], "may not be empty"),
        (["read", "a/b"], "may not contain '/'"),
        (["listen", "a\u{1}b", "--timeout", "1"], "control characters"),
        (["post", ".."], "notification name"),
        (["send", "--group", "../group", "chat", "x"], "application group identifier"),
    ])
    func invalidIdentifierIsAUsageError(arguments: [String], reason: String) async throws {
        let sandbox = Sandbox()
        expectFailure(try await sandbox.run(arguments), status: 64, mentioning: [reason])
    }

    @Test("arguments that are not UTF-8 are refused (exit 64), not turned into U+FFFD; nothing is stored")
    func argumentsThatAreNotUTF8AreRefused() throws {
        let sandbox = Sandbox()
        for (identifier, message) in [("x", "a\\377b"), ("x", "a\\376b"), ("a\\377b", "m")] {
            // A shell hands the bytes over as they are; Foundation's Process takes only text.
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/bin/sh")
            process.arguments = ["-c", "exec \"$0\" send \"$(printf '\(identifier)')\" \"$(printf '\(message)')\"", Products.path("wormhole")]
            process.environment = sandbox.environment
            let errors = Pipe()
            process.standardError = errors
            try process.run()
            let stderr = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            #expect(process.terminationStatus == 64, "\(stderr)")
            #expect(stderr.hasPrefix("wormhole: argument ") && stderr.contains("is not valid UTF-8") && stderr.contains("\\x"), "\(stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: sandbox.defaultContainer + "/x.wormhole"))
    }

    @Test func aContainerOtherUsersMayWriteToIsRefusedWithTheFix() async throws {
        let sandbox = Sandbox()
        let shared = sandbox.root.file("open")
        try FileManager.default.createDirectory(atPath: shared, withIntermediateDirectories: false)
        chmod(shared, 0o777)
        let result = try await sandbox.run(["send", "--directory", shared, "chat", "hi"])
        expectFailure(result, status: 1, mentioning: [shared, "chmod go-w"])
    }

    @Test(.enabled(if: geteuid() == 0, "only root can give a directory to another user"))
    func aContainerOwnedByAnotherUserIsRefused() async throws {
        let sandbox = Sandbox()
        let foreign = sandbox.root.file("foreign")
        try FileManager.default.createDirectory(atPath: foreign, withIntermediateDirectories: false)
        chmod(foreign, 0o700)
        chown(foreign, 65534, 65534)
        let result = try await sandbox.run(["read", "--directory", foreign, "chat"])
        expectFailure(result, status: 1, mentioning: ["belongs to user 65534"])
    }

    // Root may enter any directory: as root, the command runs as a user made for the test.
    @Test(.enabled(if: UnprivilegedRunner.isAvailable, "runs as a user who is not root: needs useradd and runuser as root"))
    func aContainerWithoutPermissionsIsRefused() async throws {
        let sandbox = Sandbox()
        let user = try UnprivilegedRunner(sandbox)
        let locked = sandbox.root.file("locked")
        try FileManager.default.createDirectory(atPath: locked, withIntermediateDirectories: false)
        user.own(locked)
        chmod(locked, 0o000)
        defer { chmod(locked, 0o700) }
        let result = try await user.run(["send", "--directory", locked + "/inner", "chat", "hi"])
        expectFailure(result, status: 1, mentioning: [locked])
    }

    @Test func aContainerThatIsASymbolicLinkIsRefused() async throws {
        let sandbox = Sandbox()
        let real = sandbox.root.file("real")
        let link = sandbox.root.file("link")
        try FileManager.default.createDirectory(atPath: real, withIntermediateDirectories: false)
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: real)
        let result = try await sandbox.run(["send", "--directory", link, "chat", "hi"])
        expectFailure(result, status: 1, mentioning: ["symbolic link"])
    }

    @Test func aContainerPathUnderAFileCannotBeCreated() async throws {
        let sandbox = Sandbox()
        let file = sandbox.root.file("plain-file")
        _ = FileManager.default.createFile(atPath: file, contents: Data("x".utf8))
        let result = try await sandbox.run(["send", "--directory", file + "/container", "chat", "hi"])
        expectFailure(result, status: 1, mentioning: ["cannot create or open container"])
    }

    @Test func aMissingFileIsARuntimeFailureThatNamesThePath() async throws {
        let sandbox = Sandbox()
        let missing = sandbox.root.file("missing.bin")
        let result = try await sandbox.run(["send", "--file", missing, "blob"])
        expectFailure(result, status: 1, mentioning: [missing, "no such file"])
    }

    @Test func aDirectoryGivenAsTheFileIsRefused() async throws {
        let sandbox = Sandbox()
        let result = try await sandbox.run(["send", "--file", sandbox.root.path, "blob"])
        expectFailure(result, status: 1, mentioning: ["is a directory"])
    }

    // Root may read any file: as root, the command runs as a user made for the test.
    @Test(.enabled(if: UnprivilegedRunner.isAvailable, "runs as a user who is not root: needs useradd and runuser as root"))
    func anUnreadableFileIsRefused() async throws {
        let sandbox = Sandbox()
        let user = try UnprivilegedRunner(sandbox)
        let secret = sandbox.root.file("secret.bin")
        _ = FileManager.default.createFile(atPath: secret, contents: Data("x".utf8))
        user.own(secret)
        chmod(secret, 0o000)
        let result = try await user.run(["send", "--file", secret, "blob"])
        expectFailure(result, status: 1, mentioning: ["permission denied"])
    }

    @Test func inputThatIsNotJSONIsRefusedWithJSON() async throws {
        let sandbox = Sandbox()
        let result = try await sandbox.run(["send", "--json", "status", "{battery: 87}"])
        expectFailure(result, status: 1, mentioning: ["not JSON", "without --json"])
        #expect(try await sandbox.run(["read", "status"]).status == 2)
    }

    @Test("send --json accepts exactly RFC 8259 JSON and names the problem and its position", arguments: [
        (#"{"a":1,}"#, "a comma before '}' at line 1, column 8"),
        ("\u{FEFF}{}", "byte order mark"),
        (#""\ud800""#, "lone surrogate \\ud800"),
        ("[1,]", "a comma before ']'"),
        ("01", "may not start with 0"),
        ("{\n  \"a\": tru\n}", "expected 'true' at line 2"),
        (#"{"a":1} x"#, "more after the end of the value"),
    ])
    func jsonIsCheckedStrictly(input: String, reason: String) async throws {
        let sandbox = Sandbox()
        expectFailure(try await sandbox.run(["send", "--json", "status", input]), status: 1, mentioning: ["not JSON", reason])
        #expect(try await sandbox.run(["read", "status"]).status == 2)
    }

    @Test("input longer than a message may be is refused without reading it all: /dev/zero, a long standard input")
    func endlessOrOversizedInputIsRefusedAtTheLimit() async throws {
        let sandbox = Sandbox()
        expectFailure(try await sandbox.run(["send", "--file", "/dev/zero", "big"]), status: 1,
                      mentioning: ["'/dev/zero' holds more than 8388608 bytes", "nothing was sent"])
        expectFailure(try await sandbox.run(["send", "big"], input: Data(count: (8 << 20) + 1)), status: 1,
                      mentioning: ["standard input holds more than 8388608 bytes"])
        #expect(try await sandbox.run(["read", "big"]).status == 2)
        // Exactly the limit is fine.
        #expect(try await sandbox.run(["send", "big"], input: Data(count: 8 << 20)).status == 0)
    }

    @Test("--file reads pipes and devices: /dev/stdin")
    func fileReadsPipesAndDevices() async throws {
        let sandbox = Sandbox()
        let sent = try await sandbox.run(["send", "--file", "/dev/stdin", "piped"], input: Data("abc".utf8))
        #expect(sent.status == 0, "\(sent.stderr)")
        #expect(try await sandbox.run(["read", "--raw", "piped"]).stdout == Data("abc".utf8))
    }

    @Test func validJSONOfEveryKindIsAccepted() async throws {
        let sandbox = Sandbox()
        for input in [#"{"a":[1,2.5e3,-0,true,false,null,"\u00e9\ud83d\ude00é"],"b":{}}"#, "3", #""text""#, " [ ] "] {
            let result = try await sandbox.run(["send", "--json", "status", input])
            #expect(result.status == 0, "\(input): \(result.stderr)")
        }
    }

    @Test func usageErrorsExitSixtyFourAndPointToTheHelp() async throws {
        let sandbox = Sandbox()
        let result = try await sandbox.run(["listen", "chat", "--count", "0"])
        #expect(result.status == 64)
        #expect(result.stderr.contains("--count must be at least 1"))
        #expect(result.stderr.contains("--help"))
        let unknown = try await sandbox.run(["send", "--loud", "chat", "hi"])
        #expect(unknown.status == 64)
        #expect(unknown.stderr.contains("--loud"))
    }

    @Test func helpListsExamplesAndExitsZero() async throws {
        let sandbox = Sandbox()
        let help = try await sandbox.run(["send", "--help"])
        #expect(help.status == 0)
        #expect(help.output.contains("Examples:"))
        #expect(help.output.contains("echo hello | wormhole send chat"))
    }

    @Test func completionScriptsAreGeneratedForEachShell() async throws {
        let sandbox = Sandbox()
        for shell in ["bash", "zsh", "fish"] {
            let script = try await sandbox.run(["--generate-completion-script", shell])
            #expect(script.status == 0)
            #expect(script.output.contains("listen"))
        }
    }
}
