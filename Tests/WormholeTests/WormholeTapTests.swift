import Foundation
import Testing
@testable import Wormhole
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
        // What is open is the writer's one cached log, none of the tap's.
        #expect(Self.openLogs(in: container).count <= 1, "\(Self.openLogs(in: container))")
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
}
