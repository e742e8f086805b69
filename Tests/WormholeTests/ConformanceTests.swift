import CInotifyTools
import Foundation
import Testing
@testable import Wormhole

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

    @Test("passing a message is seen as MODIFY on the identifier's log and ATTRIB on its notification file",
          .timeLimit(.minutes(1)))
    func passingAMessageProducesOrdinaryInotifyEvents() throws {
        let directory = TemporaryDirectory()
        let wormhole = try Wormhole(directory: directory.path)
        try wormhole.passMessage("first", identifier: "note")
        let events = try observe(directory.path) {
            try wormhole.passMessage("second", identifier: "note")
        }
        let log = events.filter { $0.name == "note.wormhole" }.map(\.events)
        let notification = events.filter { $0.name == "note.notification" }.map(\.events)
        #expect(log.contains { $0.contains("MODIFY") }, "events on note.wormhole: \(log)")
        #expect(notification.contains { $0.contains("ATTRIB") }, "events on note.notification: \(notification)")
        // The notification carries nothing: the notification file is not written to.
        #expect(!notification.contains { $0.contains("MODIFY") })
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
