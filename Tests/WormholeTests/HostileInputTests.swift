import Foundation
import Testing
@_spi(Backend) @testable import Wormhole
@_spi(Backend) @testable import WormholeCore
@_spi(Backend) @testable import WormholeFiles
import WormholeTestSupport
#if Postgres
@_spi(Backend) import WormholePostgres
#endif

/// Identifiers, files and sizes that must be refused cleanly, with nothing written
/// outside the container.
@Suite("Hostile input")
struct HostileInputTests {
    static let hostile: [(String, String)] = [
        ("../x", "may not contain '/'"),
        ("a/b", "may not contain '/'"),
        ("", "may not be empty"),
        (String(repeating: "x", count: 300), "300 bytes long"),
        ("a\u{0}b", "NUL"),
        (".", "may not be '.' or '..'"),
        ("..", "may not be '.' or '..'"),
        (".hidden", "may not start with '.'"),
        ("line\nbreak", "control characters"),
    ]

    /// One case of `Tests/Interop/identifiers.tsv`, the table the Python package's tests read too.
    struct SharedCase: CustomTestStringConvertible, Sendable {
        var accepted: Bool
        var identifier: String
        var reason: String
        var note: String
        var testDescription: String { "\(accepted ? "accept" : "refuse") \(identifier.unicodeScalars.map { String($0.value, radix: 16, uppercase: true) }.joined(separator: " ")): \(note)" }
    }

    static let sharedCases: [SharedCase] = {
        let path = ProtocolInteropTests.repositoryRoot.appendingPathComponent("Tests/Interop/identifiers.tsv").path
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line in
            guard !line.hasPrefix("#") else { return nil }
            let fields = line.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
            guard fields.count == 4 else { return SharedCase(accepted: false, identifier: "", reason: "a line of 4 fields", note: String(line)) }
            var identifier = ""
            for point in fields[1].split(separator: " ") {
                guard let value = UInt32(point, radix: 16), let scalar = Unicode.Scalar(value) else {
                    return SharedCase(accepted: false, identifier: "", reason: "a code point, not '\(point)'", note: String(line))
                }
                identifier.unicodeScalars.append(scalar)
            }
            return SharedCase(accepted: fields[0] == "accept", identifier: identifier, reason: fields[2], note: fields[3])
        }
    }()

    @Test("the shared table of identifiers holds the cases the Python package's tests check too")
    func theSharedTableIsRead() {
        #expect(Self.sharedCases.count > 20)
        #expect(Self.sharedCases.allSatisfy { !$0.identifier.isEmpty })
    }

    @Test("each identifier of the shared table is accepted or refused as it says, whatever this runtime's Unicode",
          arguments: sharedCases)
    func everyIdentifierOfTheSharedTableIsJudgedAsItSays(_ shared: SharedCase) {
        do throws(WormholeError) {
            try Wormhole.validate(identifier: shared.identifier)
            #expect(shared.accepted, "accepted, but the table says it is refused for '\(shared.reason)'")
        } catch {
            #expect(!shared.accepted, "refused: \(error.message)")
            #expect(error.code == .invalidIdentifier)
            #expect(error.message.contains(shared.reason), "\(error.message) does not say '\(shared.reason)'")
        }
    }

    @Test("the committed table of Unicode 13.0's code points is what this standard library's Unicode data says")
    func theUnicodeTableMatchesTheStandardLibrary() {
        var bounds: [UInt32] = []
        var first: UInt32?
        for value in UInt32(0)...0x110000 {
            let scalar = value <= 0x10FFFF ? Unicode.Scalar(value) : nil
            let assigned = scalar.map { scalar in
                guard let age = scalar.properties.age, scalar.properties.generalCategory != .unassigned else { return false }
                return (age.major, age.minor) <= (13, 0)
            } ?? false
            if assigned, first == nil { first = value }
            if !assigned, let start = first {
                bounds += [start, value - 1]
                first = nil
            }
        }
        #expect(Identifier.unicodeVersion == "13.0")
        #expect(bounds == Identifier.assignedRangeBounds, "run Scripts/unicode-table/update")
    }

    @Test("each hostile identifier is refused with a reason, and nothing is written anywhere",
          arguments: Array(0..<hostile.count))
    func hostileIdentifiersAreRefused(index: Int) throws {
        let (identifier, reason) = Self.hostile[index]
        let parent = TemporaryDirectory()
        let container = parent.file("container")
        let wormhole = try Wormhole(directory: container)
        let before = try FileManager.default.subpathsOfDirectory(atPath: parent.path).sorted()
        let operations: [() throws -> Void] = [
            { try wormhole.passMessage("x", identifier: identifier) },
            { _ = try wormhole.message(withIdentifier: identifier, as: String.self) },
            { try wormhole.clearMessageContents(forIdentifier: identifier) },
            { try wormhole.listenForMessage(withIdentifier: identifier, as: String.self) { _ in } },
            { try DarwinNotificationCenter(directory: container).post(identifier) },
            { try DarwinNotificationCenter(directory: container).setState(1, forName: identifier) },
            { _ = try Wormhole(directory: container).transiting.makeReader(identifier: identifier, startingFrom: .now) },
        ]
        for operation in operations {
            let error = #expect(throws: WormholeError.self) { try operation() }
            #expect(error?.code == .invalidIdentifier)
            #expect(error?.description.contains(reason) == true, "\(error?.description ?? "no error") names '\(reason)'")
        }
        #expect(try FileManager.default.subpathsOfDirectory(atPath: parent.path).sorted() == before)
    }

    #if Postgres
    @Test("each hostile identifier is refused by the PostgreSQL back end too, and nothing is stored")
    func hostileIdentifiersAreRefusedByTheDatabase() throws {
        let store = try Backend.postgres.makeStore()
        let wormhole = try store.wormhole()
        for (identifier, reason) in Self.hostile {
            let operations: [() throws -> Void] = [
                { try wormhole.passMessage("x", identifier: identifier) },
                { _ = try wormhole.message(withIdentifier: identifier, as: String.self) },
                { try wormhole.clearMessageContents(forIdentifier: identifier) },
                { try wormhole.listenForMessage(withIdentifier: identifier, as: String.self) { _ in } },
                { _ = try wormhole.transiting.makeReader(identifier: identifier, startingFrom: .now) },
                { _ = try wormhole.transiting.append(Data("x".utf8), kind: .text, identifier: identifier) },
            ]
            for operation in operations {
                let error = #expect(throws: WormholeError.self) { try operation() }
                #expect(error?.code == .invalidIdentifier)
                #expect(error?.description.contains(reason) == true, "\(error?.description ?? "no error") names '\(reason)'")
            }
        }
        #expect(try wormhole.summaries().isEmpty, "nothing was stored")
        // Group and sub-directory names are refused by name before anything connects.
        let url = try #require(ProcessInfo.processInfo.environment["WORMHOLE_TEST_POSTGRES_URL"])
        for (group, sub, named) in [("../escape", nil, "application group identifier"), ("group.ok", "../up", "optional directory"),
                                    ("", nil, "application group identifier")] as [(String, String?, String)] {
            let error = #expect(throws: WormholeError.self) {
                try Wormhole(postgresURL: url, applicationGroupIdentifier: group, optionalDirectory: sub)
            }
            #expect(error?.code == .invalidIdentifier)
            #expect(error?.description.contains(named) == true, "\(error?.description ?? "no error") names the \(named)")
        }
        #expect(try store.claims(identifier: "x") == 0)
    }
    #endif

    @Test func hostileGroupAndDirectoryNamesAreRefused() throws {
        let parent = TemporaryDirectory()
        let environment = [WormholeContainer.environmentOverride: parent.path]
        for group in ["../escape", "a/b", "", ".."] {
            let error = #expect(throws: WormholeError.self) {
                try WormholeContainer.directory(forApplicationGroupIdentifier: group, environment: environment)
            }
            #expect(error?.code == .invalidIdentifier)
            #expect(error?.description.contains("application group identifier") == true)
        }
        #expect(throws: WormholeError.self) {
            try Wormhole(applicationGroupIdentifier: "group.ok", optionalDirectory: "../up")
        }
    }

    @Test(arguments: Backend.all)
    func oversizedMessageIsRefusedAndNothingIsStored(backend: Backend) throws {
        let store = try backend.makeStore()
        var configuration = Wormhole.Configuration()
        configuration.maximumMessageSize = 1024
        let wormhole = try store.wormhole(configuration: configuration)
        try wormhole.passMessage(Data(count: 1024), identifier: "big")
        let error = #expect(throws: WormholeError.self) { try wormhole.passMessage(Data(count: 1025), identifier: "big") }
        #expect(error?.code == .messageTooLarge)
        #expect(error?.description.contains("1025 bytes") == true)
        #expect(try wormhole.record(withIdentifier: "big")?.sequence == 1)
    }

    @Test func invalidConfigurationIsRefused() {
        var configuration = Wormhole.Configuration()
        configuration.retainedMessageCount = 0
        let directory = TemporaryDirectory()
        let error = #expect(throws: WormholeError.self) { try Wormhole(directory: directory.path, configuration: configuration) }
        #expect(error?.code == .invalidConfiguration)
    }

    @Test func foreignFileInPlaceOfALogIsReportedAndLeftAlone() throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.path)
        let garbage = Data((0..<4096).map { _ in UInt8.random(in: 0...255) })
        try garbage.write(to: URL(fileURLWithPath: directory.file("garbage.wormhole")))
        try Data("hello".utf8).write(to: URL(fileURLWithPath: directory.file("short.wormhole")))
        try Data("notes".utf8).write(to: URL(fileURLWithPath: directory.file("readme.txt")))
        for identifier in ["garbage", "short"] {
            let read = #expect(throws: WormholeError.self) { try wormhole.message(withIdentifier: identifier, as: Data.self) }
            #expect(read?.code == .unsupportedFormat)
            #expect(read?.description.contains("is not a Wormhole message log") == true)
            let write = #expect(throws: WormholeError.self) { try wormhole.passMessage("x", identifier: identifier) }
            #expect(write?.code == .unsupportedFormat)
        }
        try wormhole.passMessage("fine", identifier: "good")
        try wormhole.clearAllMessageContents()
        #expect(try Data(contentsOf: URL(fileURLWithPath: directory.file("garbage.wormhole"))) == garbage)
        #expect(try String(contentsOfFile: directory.file("readme.txt"), encoding: .utf8) == "notes")
        #expect(try wormhole.message(withIdentifier: "good", as: String.self) == nil)
        #expect(try wormhole.summaries().map(\.identifier) == ["good"])
    }

    @Test("a corrupt record is reported to the listener, which goes on with the next", .timeLimit(.minutes(1)))
    func corruptRecordIsReportedAndSkipped() async throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.path)
        for text in ["first", "second", "third"] { try await wormhole.passMessage(text, identifier: "log") }
        // Flip one byte inside the second record's payload.
        let path = directory.file("log.wormhole")
        var bytes = try Data(contentsOf: URL(fileURLWithPath: path))
        let second = try #require(bytes.range(of: Data("second".utf8)))
        bytes[second.lowerBound] ^= 0xFF
        try bytes.write(to: URL(fileURLWithPath: path))

        let received = Collector<String>()
        let errors = Collector<WormholeError>()
        let token = try wormhole.listenForMessage(withIdentifier: "log", as: String.self, startingFrom: .history,
                                                  onError: { errors.append($0) }) { received.append($0) }
        await received.wait(for: 2)
        try await wormhole.passMessage("fourth", identifier: "log")
        await received.wait(for: 3)
        token.cancel()
        #expect(received.all == ["first", "third", "fourth"])
        #expect(errors.all.map(\.code) == [.corruptRecord])
        #expect(errors.all.first?.description.contains("checksum") == true)
    }

    @Test("a message that is not the type asked for is reported; the next one arrives", .timeLimit(.minutes(1)),
          arguments: Backend.all)
    func undecodableMessageIsReportedAndSkipped(backend: Backend) async throws {
        let store = try backend.makeStore()
        let wormhole = try store.wormhole()
        let received = Collector<Note>()
        let errors = Collector<WormholeError>()
        let token = try wormhole.listenForMessage(withIdentifier: "note", as: Note.self,
                                                  onError: { errors.append($0) }) { received.append($0) }
        try await wormhole.passMessage("not json", identifier: "note")
        try await wormhole.passMessage(Note(text: "ok"), identifier: "note")
        await received.wait(for: 1)
        token.cancel()
        #expect(received.all == [Note(text: "ok")])
        #expect(errors.all.map(\.code) == [.decodingFailed])
        #expect(throws: WormholeError.self) { _ = try wormhole.message(withIdentifier: "note", as: Int.self) }
    }
}
