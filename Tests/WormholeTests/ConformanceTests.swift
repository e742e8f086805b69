import CInotifyTools
import Foundation
import Testing
@_spi(Backend) @testable import Wormhole
@_spi(Backend) @testable import WormholeCore
@_spi(Backend) @testable import WormholeFiles
import WormholeTestSupport

/// libinotifytools, the standard inotify library, as an independent observer: what the
/// library posts is ordinary inotify traffic that the standard tooling sees.
@Suite("Conformance with libinotifytools", .serialized)
struct ConformanceTests {
    /// The events libinotifytools reports for `directory` while `body` runs.
    private func observe(_ directory: String, during body: () throws -> Void) throws -> [(name: String, events: String)] {
        try #require(inotifytools_initialize() != 0, "libinotifytools could not initialise")
        defer { inotifytools_cleanup() }
        try #require(inotifytools_watch_file(directory, 0xFFF /* IN_ALL_EVENTS */) != 0)
        try body()
        var seen: [(String, String)] = []
        // Whole-second timeouts are all libinotifytools offers; one second of quiet ends it.
        while let event = inotifytools_next_event(1) {
            let length = Int(event.pointee.len)
            var name = ""
            if length > 0 {
                let start = UnsafeRawPointer(event).advanced(by: MemoryLayout<inotify_event>.size)
                    .assumingMemoryBound(to: CChar.self)
                name = String(cString: start)
            }
            let events = inotifytools_event_to_str(Int32(bitPattern: event.pointee.mask)).map { String(cString: $0) } ?? ""
            seen.append((name, events))
        }
        return seen
    }

    @Test("passing a message is one MODIFY on the identifier's log and nothing else (protocol v2: the append is the wake-up)",
          .timeLimit(.minutes(1)))
    func passingAMessageProducesOrdinaryInotifyEvents() throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.path)
        try wormhole.passMessage("first", identifier: "note")
        let events = try observe(directory.path) {
            try wormhole.passMessage("second", identifier: "note")
        }
        // One event, naming the identifier's file and carrying nothing else: no
        // notification file is touched, no header is rewritten after the record.
        #expect(events.map(\.name) == ["note.wormhole"], "events: \(events)")
        #expect(events.map(\.events) == ["MODIFY"], "events: \(events)")
        #expect(!FileManager.default.fileExists(atPath: directory.path + "/note.notification"))
    }

    @Test("a post is an ATTRIB event on the name's file, and nothing else", .timeLimit(.minutes(1)))
    func postIsAnAttribEvent() throws {
        let directory = TemporaryDirectory()
        let center = try DarwinNotificationCenter(directory: directory.path)
        try center.post("ping")
        let events = try observe(directory.path) { try center.post("ping") }
        #expect(events.map(\.name) == ["ping.notification"])
        #expect(events.map(\.events) == ["ATTRIB"])
    }
}
