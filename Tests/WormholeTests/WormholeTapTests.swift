import Foundation
import Testing
@_spi(Backend) @testable import Wormhole
@_spi(Backend) @testable import WormholeCore
@_spi(Backend) @testable import WormholeFiles
import WormholeTestSupport

/// The tap on every identifier of a container (``Wormhole/listenForAllRecords(queue:onError:listener:)``),
/// which `wormhole listen --all` and `wormhole top` use.
@Suite("Tap on every identifier")
struct WormholeTapTests {
    /// The logs of `directory` that this process has open, by their descriptors' targets.
    static func openLogs(in directory: String) -> [String] {
        let descriptors = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return descriptors.compactMap { name in
            guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(name)"),
                  target.hasPrefix(directory + "/"), target.hasSuffix(".wormhole") else { return nil }
            return target
        }
    }

    @Test("a tap holds no log and no claim of its identifiers, and hears every message once and in order across compactions, and a log made anew from its first message",
          .timeLimit(.minutes(1)))
    func tapHoldsNothingPerIdentifierAndFollowsReplacedLogs() async throws {
        let directory = TemporaryDirectory()
        let container = directory.path + "/container"
        var configuration = Wormhole.Configuration()
        // A compaction every 20 messages or so; the writer keeps one log open.
        configuration.retainedMessageCount = 10
        configuration.maximumOpenLogCount = 1
        let wormhole = try Wormhole(directory: container, configuration: configuration)
        let identifiers = ["a", "b", "c"]
        for identifier in identifiers { try await wormhole.passMessage("before", identifier: identifier) }
        let heard = Collector<String>()
        let errors = Collector<String>()
        let tap = try wormhole.listenForAllRecords(queue: DispatchQueue(label: "tap"), onError: { errors.append($0.description) }) { record in
            heard.append("\(record.identifier) \(record.sequence) \(String(decoding: record.payload, as: UTF8.self))")
        }
        defer { tap.cancel() }
        #expect(tap.identifiers == identifiers)
        // What stays open is the writer's one cached log, none of the tap's (the tap's
        // first read of each log, on its reader thread, opens and closes it: a check at
        // that instant saw two under load).
        #expect(await eventually { Self.openLogs(in: container).count <= 1 }, "\(Self.openLogs(in: container))")
        #expect(try wormhole.listeners().isEmpty)

        var expected: [String] = []
        for round in 0..<8 {
            // Ten messages per identifier, then wait until the tap heard them: it never
            // falls behind by the retained ten, so a compaction takes nothing it has not read.
            for identifier in identifiers {
                for index in 0..<10 {
                    let sequence = round * 10 + index + 2
                    try await wormhole.passMessage("m\(sequence)", identifier: identifier)
                    expected.append("\(identifier) \(sequence) m\(sequence)")
                }
            }
            _ = await heard.wait(for: expected.count)
        }
        #expect(Self.openLogs(in: container).count <= 1, "\(Self.openLogs(in: container))")
        // A log removed and made again is a new log: heard from its first message.
        try FileManager.default.removeItem(atPath: container + "/b.wormhole")
        try await wormhole.passMessage("again", identifier: "b")
        expected.append("b 1 again")
        let values = await heard.wait(for: expected.count)
        for identifier in identifiers {
            #expect(values.filter { $0.hasPrefix(identifier + " ") } == expected.filter { $0.hasPrefix(identifier + " ") })
        }
        #expect(values.count == expected.count)
        #expect(errors.all.isEmpty, "\(errors.all)")
        let compacted = try await wormhole.summaries().first { $0.identifier == "a" }
        #expect((compacted?.messageCount ?? 0) < 81, "no compaction happened: \(String(describing: compacted))")
    }

    @Test("a log made anew in the inode number of the one it replaced (a tap's reader holds no descriptor, so the kernel may reuse it) is read as the new log from its first message, with no report of a file emptied",
          .timeLimit(.minutes(1)))
    func logMadeAnewInTheSameInodeIsANewLog() async throws {
        let directory = TemporaryDirectory()
        let container = directory.path + "/container"
        let writer = try Wormhole(directory: container)
        for index in 1...3 { try await writer.passMessage("old \(index)", identifier: "b") }
        let heard = Collector<String>()
        let errors = Collector<String>()
        let queue = DispatchQueue(label: "tap")
        let tap = try writer.listenForAllRecords(queue: queue, onError: { errors.append($0.description) }) { record in
            heard.append("\(record.identifier) \(record.sequence) \(String(decoding: record.payload, as: UTF8.self))")
        }
        defer { tap.cancel() }
        try await writer.passMessage("old 4", identifier: "b")
        #expect(await heard.wait(for: 1) == ["b 4 old 4"])
        // Another log (another logID), written where the old one was, in the same inode:
        // what a deletion and a creation that reused its number look like to a reader that
        // holds no descriptor. The renames are the events a deletion and a creation give.
        let scratch = TemporaryDirectory()
        try await Wormhole(directory: scratch.path).passMessage("new 1", identifier: "b")
        let fresh = try Data(contentsOf: URL(fileURLWithPath: scratch.path + "/b.wormhole"))
        let log = container + "/b.wormhole", aside = container + "/b.aside"
        let inode = try #require(try FileManager.default.attributesOfItem(atPath: log)[.systemFileNumber] as? UInt64)
        // The tap reads only once both events came (its queue held meanwhile), as when
        // a deletion and a creation are read in one batch.
        queue.suspend()
        try FileManager.default.moveItem(atPath: log, toPath: aside)
        let handle = try #require(FileHandle(forUpdatingAtPath: aside))
        try handle.truncate(atOffset: 0)
        try FileManager.default.moveItem(atPath: aside, toPath: log)
        #expect(try FileManager.default.attributesOfItem(atPath: log)[.systemFileNumber] as? UInt64 == inode)
        await settle(100)
        queue.resume()
        // The tap reads while the new file is still empty, as when it reads between a
        // writer's creation of a log and its header.
        await settle(300)
        try handle.write(contentsOf: fresh)
        try handle.close()
        // A writer that opens the log now appends to the new one.
        try await Wormhole(directory: container).passMessage("new 2", identifier: "b")
        #expect(await heard.wait(for: 3) == ["b 4 old 4", "b 1 new 1", "b 2 new 2"])
        await settle(100)
        #expect(errors.all.isEmpty, "\(errors.all)")
    }
}
