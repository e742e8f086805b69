import Foundation
import Testing
@testable import WormholeCLI
@_spi(Backend) import Wormhole

@Suite("Record output formats")
struct RecordFormatTests {
    func record(_ payload: Data, kind: WormholePayloadKind, identifier: String = "chat") -> WormholeRecord {
        WormholeRecord(identifier: identifier, sequence: 7, date: Date(timeIntervalSince1970: 1_800_000_000.25),
                       processID: 4242, kind: kind, payload: payload)
    }

    func text(_ data: Data) -> String { String(decoding: data, as: UTF8.self) }

    @Test func linesAddANewlineOnlyWhenThePayloadHasNone() {
        let format = RecordFormat.lines(prefixIdentifier: false)
        #expect(text(format.render(record(Data("hi".utf8), kind: .text))) == "hi\n")
        #expect(text(format.render(record(Data("hi\n".utf8), kind: .text))) == "hi\n")
        #expect(text(RecordFormat.lines(prefixIdentifier: true).render(record(Data("hi".utf8), kind: .text))) == "chat: hi\n")
    }

    @Test func rawWritesThePayloadUnchanged() {
        let bytes = Data([0, 255, 10, 13, 128])
        #expect(RecordFormat.raw.render(record(bytes, kind: .data)) == bytes)
    }

    @Test func jsonLinesCarryTheRecordsFieldsInOrder() {
        let line = text(RecordFormat.json.render(record(Data("say \"hi\"\n\tnow".utf8), kind: .text)))
        #expect(line == #"{"identifier":"chat","sequence":7,"time":"2027-01-15T08:00:00.250Z","pid":4242,"uid":null,"kind":"text","payload":"say \"hi\"\n\tnow"}"# + "\n")
    }

    @Test("--json and --verbose carry the sender's uid when the record has it (protocol version 3)")
    func theSendersUIDIsShown() {
        let record = WormholeRecord(identifier: "chat", sequence: 7, date: Date(timeIntervalSince1970: 1_800_000_000.25),
                                    processID: 4242, kind: .text, payload: Data("hi".utf8), senderUID: 0)
        #expect(text(RecordFormat.json.render(record)).contains(#""pid":4242,"uid":0,"kind":"text""#))
        #expect(RecordFormat.sender(record) == "pid 4242, uid 0 (root)")
        #expect(RecordFormat.sender(self.record(Data(), kind: .text)) == "pid 4242")
    }

    @Test func jsonMessagesAreEmbeddedAsValuesOnOneLine() throws {
        let payload = Data("{\n  \"battery\": 87,\n  \"note\": \"a\\nb\"\n}".utf8)
        let line = text(RecordFormat.json.render(record(payload, kind: .json)))
        #expect(line.filter { $0 == "\n" }.count == 1)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        let embedded = try #require(object["payload"] as? [String: Any])
        #expect(embedded["battery"] as? Int == 87)
        #expect(embedded["note"] as? String == "a\nb")
        #expect(object["kind"] as? String == "json")
    }

    @Test func bytesAreBase64AndInvalidTextFallsBackToBytes() throws {
        let bytes = Data([0xFF, 0x00, 0xC3])
        for kind in [WormholePayloadKind.data, .text] {
            let line = text(RecordFormat.json.render(record(bytes, kind: kind)))
            let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
            #expect(object["kind"] as? String == "data")
            #expect((object["payload"] as? String).flatMap { Data(base64Encoded: $0) } == bytes)
        }
    }

    @Test func controlCharactersAreEscapedInJSONStrings() {
        #expect(RecordFormat.quoted("a\u{1}b\u{7F}") == #""a\u0001b\u007f""#)
        #expect(RecordFormat.quoted("é ✓") == "\"é ✓\"")
    }
}
