import Foundation
import Testing
@_spi(Backend) @testable import Wormhole
@_spi(Backend) @testable import WormholeCore
@_spi(Backend) @testable import WormholeFiles
import WormholeTestSupport

/// The JSON form of messages that are neither `Data` nor `String`: stable for readers in
/// other languages, readable when stored by earlier versions, chosen per wormhole.
@Suite("JSON form of messages")
struct JSONCodingTests {
    /// A message whose keys Swift would not write in order, with a date.
    struct Reading: Codable, Sendable, Equatable {
        var zone: String
        var updated: Date
        var level: Int
        var averageLevel: Double
    }

    /// 2026-11-25T12:27:40.250Z: a quarter second is exact as a `Double`, so the date read
    /// back is equal to it.
    static let date = Date(timeIntervalSinceReferenceDate: 817_302_460.25)
    static let reading = Reading(zone: "kitchen/north", updated: date, level: 7, averageLevel: 6.5)

    @Test(arguments: Backend.all) func messagesAreStoredWithSortedKeysAndISO8601Dates(backend: Backend) async throws {
        let store = try backend.makeStore()
        let wormhole = try store.wormhole()
        for _ in 1...3 { try await wormhole.passMessage(Self.reading, identifier: "reading") }
        let payloads = try await wormhole.records(count: 3, identifier: "reading").map { String(decoding: $0.payload, as: UTF8.self) }
        #expect(payloads == Array(repeating: #"{"averageLevel":6.5,"level":7,"updated":"2026-11-25T12:27:40.250Z","zone":"kitchen/north"}"#, count: 3))
        #expect(try await wormhole.message(withIdentifier: "reading", as: Reading.self) == Self.reading)
    }

    @Test func aPythonReaderSeesSortedKeysAndAUTCDate() async throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.path)
        try await wormhole.passMessage(Self.reading, identifier: "reading")
        // Python's standard library alone, reading the log as Docs/Protocol.md says.
        let program = """
            import datetime, json, sys
            sys.path.insert(0, sys.argv[2])
            import wormhole_log
            value = json.loads(wormhole_log.read_latest(sys.argv[1], "reading").payload)
            updated = datetime.datetime.fromisoformat(value["updated"])
            print(json.dumps({"keys": list(value), "updated": updated.timestamp(), "offset": updated.utcoffset().total_seconds()}))
            """
        let interop = URL(fileURLWithPath: ProtocolInteropTests.script).deletingLastPathComponent().path
        let scratch = TemporaryDirectory("python-reader")
        let result = try await ProtocolInteropTests.PythonProcess(["-c", program, directory.path, interop], scratch: scratch,
                                                                  name: "reader", executable: "python3").finish()
        try #require(result.status == 0, "\(result.errorOutput)")
        struct Seen: Decodable { var keys: [String]; var updated: Double; var offset: Double }
        let seen = try JSONDecoder().decode(Seen.self, from: Data(result.output.utf8))
        #expect(seen.keys == ["averageLevel", "level", "updated", "zone"])
        #expect(seen.offset == 0)
        #expect(abs(seen.updated - Self.date.timeIntervalSince1970) < 0.000_5)
    }

    @Test func datesAreRoundedToTheNearestMillisecond() throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.path)
        // 40.034 is 40.0339999... as a Double, 40.9996 rounds up into the next second,
        // and a date before 1970 rounds the same way.
        let dates = [1_795_609_660.034, 1_795_609_660.999_6, -1.000_4].map { Date(timeIntervalSince1970: $0) }
        try wormhole.passMessage(dates, identifier: "dates")
        let stored = try #require(try wormhole.record(withIdentifier: "dates")?.payload)
        #expect(String(decoding: stored, as: UTF8.self)
                == #"["2026-11-25T12:27:40.034Z","2026-11-25T12:27:41.000Z","1969-12-31T23:59:59.000Z"]"#)
        let read = try #require(try wormhole.message(withIdentifier: "dates", as: [Date].self))
        #expect(read.count == 3)
        for (sent, received) in zip(dates, read) {
            #expect(abs(sent.timeIntervalSince(received)) <= 0.000_5)
        }
    }

    @Test(arguments: Backend.all) func messagesStoredWithNumericDatesAreStillRead(backend: Backend) throws {
        let store = try backend.makeStore()
        let wormhole = try store.wormhole()
        // What earlier versions stored: JSONEncoder's defaults, seconds since 2001.
        let old = try JSONEncoder().encode(Self.reading)
        #expect(String(decoding: old, as: UTF8.self).contains(#""updated":817302460.25"#))
        try wormhole.passPayload(old, kind: .json, identifier: "reading")
        #expect(try wormhole.message(withIdentifier: "reading", as: Reading.self) == Self.reading)
    }

    @Test func datesWithAnOffsetOrWithoutFractionsAreRead() throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.path)
        try wormhole.passPayload(Data(#"["2026-11-25T14:27:40+02:00","2026-11-25T12:27:40.5Z"]"#.utf8), kind: .json, identifier: "dates")
        let dates = try wormhole.message(withIdentifier: "dates", as: [Date].self)
        #expect(dates?.map(\.timeIntervalSince1970) == [1_795_609_660, 1_795_609_660.5])
    }

    @Test func aDateThatIsNotISO8601IsRefusedWithTheFormToUse() throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.path)
        try wormhole.passPayload(Data(#"["25/11/2026"]"#.utf8), kind: .json, identifier: "dates")
        let error = try #require(throws: WormholeError.self) { try wormhole.message(withIdentifier: "dates", as: [Date].self) }
        #expect(error.code == .decodingFailed)
        #expect(error.description.contains("'25/11/2026' is not an ISO 8601 date and time such as 2026-11-25T12:27:40.034Z"))
    }

    @Test(arguments: Backend.all) func eachWormholeEncodesAndDecodesWithItsOwnCoding(backend: Backend) async throws {
        let store = try backend.makeStore()
        let encoder = Wormhole.JSONCoding.standardEncoder()
        encoder.keyEncodingStrategy = .convertToSnakeCase
        let decoder = Wormhole.JSONCoding.standardDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        let snakeCase = Wormhole(transiting: try store.transiting(), jsonCoding: .init(encoder: encoder, decoder: decoder))
        let standard = try store.wormhole()

        let heard = Collector<Reading>()
        try snakeCase.listenForMessage(withIdentifier: "reading", as: Reading.self) { heard.append($0) }
        try await snakeCase.passMessage(Self.reading, identifier: "reading")
        #expect(try await snakeCase.record(withIdentifier: "reading").map { String(decoding: $0.payload, as: UTF8.self) }
                == #"{"average_level":6.5,"level":7,"updated":"2026-11-25T12:27:40.250Z","zone":"kitchen/north"}"#)
        #expect(try await snakeCase.message(withIdentifier: "reading", as: Reading.self) == Self.reading)
        let synchronous = { () throws -> Reading? in try snakeCase.message(withIdentifier: "reading", as: Reading.self) }
        #expect(try synchronous() == Self.reading)
        #expect(await heard.wait(for: 1) == [Self.reading])
        for try await reading in snakeCase.messages(withIdentifier: "reading", as: Reading.self, startingFrom: .latest) {
            #expect(reading == Self.reading)
            break
        }
        // The standard decoder does not know the snake-case key: the coding is per wormhole.
        let error = try #require(throws: WormholeError.self) { try standard.message(withIdentifier: "reading", as: Reading.self) }
        #expect(error.code == .decodingFailed)
        #expect(error.description.contains("averageLevel"))
    }
}

private extension Wormhole {
    /// The first `count` records of `identifier`'s retained history.
    func records(count: Int, identifier: String) async throws -> [WormholeRecord] {
        let collected = Collector<WormholeRecord>()
        let token = try listenForRecords(withIdentifier: identifier, startingFrom: .history) { collected.append($0) }
        defer { token.cancel() }
        return await collected.wait(for: count)
    }
}
