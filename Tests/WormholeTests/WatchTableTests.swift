#if canImport(Glibc)
import Glibc
#endif
import Testing
@_spi(Backend) @testable import Wormhole
@_spi(Backend) @testable import WormholeCore
@_spi(Backend) @testable import WormholeFiles

/// The engine's bookkeeping, without the kernel: a fake hands out watch descriptors and
/// says which directories exist.
@Suite("Watch table")
struct WatchTableTests {
    final class FakeKernel: WatchKernel {
        var next: Int32 = 1
        var watches: [String: Int32] = [:]
        var removed: [Int32] = []
        var directories: Set<String> = []

        var masks: [String: UInt32] = [:]
        /// How many watches the kernel allows (max_user_watches).
        var limit = Int.max
        /// Paths the user may not read.
        var unreadable: Set<String> = []
        func addWatch(_ path: String, mask: UInt32) throws(WormholeError) -> Int32 {
            if directories.contains(path) { masks[path] = mask }
            guard directories.contains(path) else { throw WormholeError(.containerUnavailable, "no \(path)") }
            if let watch = watches[path] { return watch }   // the kernel returns the same watch
            if unreadable.contains(path) { throw WormholeError.system("watch", .permissionDenied, path: path) }
            if watches.count >= limit { throw WormholeError(.notificationLimitReached, "out of watches", errno: .noSpace) }
            defer { next += 1 }
            watches[path] = next
            return next
        }
        func removeWatch(_ watch: Int32) {
            removed.append(watch)
            watches = watches.filter { $0.value != watch }
        }
        func isDirectory(_ path: String) -> Bool { directories.contains(path) }
        /// Directories where other users create and delete files (`/tmp`).
        var shared: Set<String> = []
        func isShared(_ path: String) -> Bool { shared.contains(path) }
    }

    /// The deliveries as each subscriber reads them, with the rules of the client it
    /// stands for: "log" (and other names) a listener's (``FileTransiting``), "observer"
    /// an observer's of the name "x" (``DarwinNotificationCenter``); changes a client
    /// ignores are left out.
    private func kinds(_ deliveries: [(String, DirectoryEvent)]) -> [String] {
        deliveries.compactMap { handler, event -> String? in
            switch event {
            case .rescan: return "\(handler):rescan"
            case .failed: return "\(handler):failed"
            case .changed:
                if handler == "writer" { return "writer:changed" }
                if handler == "observer" {
                    return DarwinNotificationCenter.notice(for: event, notificationFile: "x.notification").map { _ in "observer:posted" }
                }
                switch FileTransiting.transitingEvent(for: event) {
                case .wake: return "\(handler):appended"
                case .replaced: return "\(handler):replaced"
                case .failed: return "\(handler):failed"
                }
            }
        }.sorted()
    }

    private func setUp() throws -> (WatchTable<String>, FakeKernel, container: Int32, parent: Int32) {
        let kernel = FakeKernel()
        kernel.directories = ["/run", "/run/c"]
        var table = WatchTable<String>()
        _ = try table.subscribe(directory: "/run/c", names: ["x.wormhole"], changes: FileTransiting.logChanges, handler: "log", kernel: kernel)
        _ = try table.subscribe(directory: "/run/c", names: ["x.notification", "x.wormhole"], changes: DarwinNotificationCenter.observedChanges, handler: "observer", kernel: kernel)
        _ = try table.subscribe(directory: "/run/c", names: [], changes: [], handler: "writer", kernel: kernel)
        return (table, kernel, kernel.watches["/run/c"]!, kernel.watches["/run"]!)
    }

    @Test("an append wakes the log's listener and the observer of its name; a post wakes the observer alone; state writes wake nobody")
    func routing() throws {
        var (table, kernel, container, _) = try setUp()
        #expect(kernel.watches.count == 2, "the container and its parent")
        #expect(kernel.masks["/run"].map { $0 & UInt32(IN_MODIFY | IN_ATTRIB) } == 0, "the parent is watched for its entries only")
        #expect(kernel.masks["/run/c"].map { $0 & UInt32(IN_MODIFY | IN_ATTRIB) } == UInt32(IN_MODIFY | IN_ATTRIB))
        let append = table.handle([RawEvent(watch: container, mask: UInt32(IN_MODIFY), name: "x.wormhole")], kernel: kernel)
        #expect(kinds(append) == ["log:appended", "observer:posted"])
        let post = table.handle([RawEvent(watch: container, mask: UInt32(IN_ATTRIB), name: "x.notification")], kernel: kernel)
        #expect(kinds(post) == ["observer:posted"])
        let state = table.handle([RawEvent(watch: container, mask: UInt32(IN_MODIFY), name: "x.notification")], kernel: kernel)
        #expect(kinds(state).isEmpty)
        let other = table.handle([RawEvent(watch: container, mask: UInt32(IN_MODIFY), name: "y.wormhole")], kernel: kernel)
        #expect(other.isEmpty, "nobody subscribed to that name hears of it")
        let replaced = table.handle([RawEvent(watch: container, mask: UInt32(IN_MOVED_TO), name: "x.wormhole")], kernel: kernel)
        #expect(kinds(replaced) == ["log:replaced"])
    }

    @Test("out of watches for the parent: the subscription fails and the container's watch is released")
    func parentOutOfWatchesFails() throws {
        let kernel = FakeKernel()
        kernel.directories = ["/run", "/run/c"]
        kernel.limit = 1
        var table = WatchTable<String>()
        #expect(throws: WormholeError.self) {
            _ = try table.subscribe(directory: "/run/c", names: ["x.wormhole"], changes: FileTransiting.logChanges, handler: "log", kernel: kernel)
        }
        #expect(kernel.watches.isEmpty, "the container's watch was taken back")
        #expect(table.isEmpty)
        // An unreadable parent is not a reason to refuse: the container alone is watched.
        kernel.limit = .max
        kernel.unreadable = ["/run"]
        _ = try table.subscribe(directory: "/run/c", names: ["x.wormhole"], changes: FileTransiting.logChanges, handler: "log", kernel: kernel)
        #expect(Array(kernel.watches.keys) == ["/run/c"])
    }

    @Test("a container recreated while out of watches: its subscribers are told, not left waiting")
    func recreatedOutOfWatchesIsReported() throws {
        var (table, kernel, _, parent) = try setUp()
        kernel.directories.remove("/run/c")
        let deleted = table.handle([RawEvent(watch: parent, mask: UInt32(IN_DELETE | IN_ISDIR), name: "c")], kernel: kernel)
        #expect(!kinds(deleted).contains { $0.hasSuffix("failed") })
        kernel.directories.insert("/run/c")
        kernel.limit = kernel.watches.count
        let recreated = table.handle([RawEvent(watch: parent, mask: UInt32(IN_CREATE | IN_ISDIR), name: "c")], kernel: kernel)
        #expect(kinds(recreated).filter { $0.hasSuffix("failed") } == ["log:failed", "observer:failed", "writer:failed"])
        let message = recreated.compactMap { _, event -> String? in
            if case .failed(let error) = event { return error.message } else { return nil }
        }.first
        #expect(message?.contains("'/run/c' was recreated but cannot be watched again") == true, "\(message ?? "")")
    }

    @Test("the table hands each subscriber the raw changes of its own names, merged over a batch, and only those it asked for; a subscriber of the whole directory hears every name")
    func deliversRawChangesPerName() throws {
        var (table, kernel, container, _) = try setUp()
        _ = try table.subscribe(directory: "/run/c", names: [], changes: [.attributes], handler: "all", kernel: kernel)
        let batch = table.handle([RawEvent(watch: container, mask: UInt32(IN_MODIFY), name: "x.wormhole"),
                                  RawEvent(watch: container, mask: UInt32(IN_MOVED_TO), name: "x.wormhole"),
                                  RawEvent(watch: container, mask: UInt32(IN_ATTRIB), name: "y.notification")], kernel: kernel)
        #expect(batch.count == 3, "one delivery per subscriber and name")
        let heard = Dictionary(batch.map { ($0.0, $0.1) }, uniquingKeysWith: { first, _ in first })
        #expect(heard == ["log": .changed(name: "x.wormhole", [.written, .entry]),
                          "observer": .changed(name: "x.wormhole", .written),
                          "all": .changed(name: "y.notification", .attributes)])
    }

    @Test("a batch of a thousand appends reaches each subscriber once")
    func batchesCoalesce() throws {
        var (table, kernel, container, _) = try setUp()
        let events = Array(repeating: RawEvent(watch: container, mask: UInt32(IN_MODIFY), name: "x.wormhole"), count: 1000)
        #expect(kinds(table.handle(events, kernel: kernel)) == ["log:appended", "observer:posted"])
    }

    @Test("the container moved away: everyone looks again, the old watch goes; made again: watched again, everyone looks again")
    func movedAndRecreated() throws {
        var (table, kernel, container, parent) = try setUp()
        kernel.directories.remove("/run/c")
        let moved = table.handle([RawEvent(watch: parent, mask: UInt32(IN_MOVED_FROM | IN_ISDIR), name: "c")], kernel: kernel)
        #expect(kinds(moved) == ["log:rescan", "observer:rescan", "writer:rescan"])
        #expect(kernel.removed == [container])
        kernel.directories.insert("/run/c")
        let made = table.handle([RawEvent(watch: parent, mask: UInt32(IN_CREATE | IN_ISDIR), name: "c")], kernel: kernel)
        #expect(kinds(made) == ["log:rescan", "observer:rescan", "writer:rescan"])
        let newWatch = try #require(kernel.watches["/run/c"])
        #expect(newWatch != container)
        let append = table.handle([RawEvent(watch: newWatch, mask: UInt32(IN_MODIFY), name: "x.wormhole")], kernel: kernel)
        #expect(kinds(append) == ["log:appended", "observer:posted"])
        // The old watch's IN_IGNORED, arriving late, means nothing now.
        #expect(table.handle([RawEvent(watch: container, mask: UInt32(IN_IGNORED), name: nil)], kernel: kernel).isEmpty)
    }

    /// A listener of /tmp/c, where /tmp is shared; the container's watch.
    private func setUpInSharedParent() throws -> (WatchTable<String>, FakeKernel, container: Int32) {
        let kernel = FakeKernel()
        kernel.directories = ["/tmp", "/tmp/c"]
        kernel.shared = ["/tmp"]
        var table = WatchTable<String>()
        _ = try table.subscribe(directory: "/tmp/c", names: ["x.wormhole"], changes: FileTransiting.logChanges, handler: "log", kernel: kernel)
        return (table, kernel, try #require(kernel.watches["/tmp/c"]))
    }

    @Test("a container in a shared parent (as /tmp): the parent is watched only while the container is missing, or from the deletion of an entry until the next creation")
    func sharedParentIsWatchedOnlyWhileItMatters() throws {
        var (table, kernel, container) = try setUpInSharedParent()
        #expect(Array(kernel.watches.keys) == ["/tmp/c"], "the container alone")
        // An append, and a compaction's rename within the container: still alone.
        _ = table.handle([RawEvent(watch: container, mask: UInt32(IN_MODIFY), name: "x.wormhole"),
                          RawEvent(watch: container, mask: UInt32(IN_MOVED_FROM), name: ".x.wormhole.compacting"),
                          RawEvent(watch: container, mask: UInt32(IN_MOVED_TO), name: "x.wormhole")], kernel: kernel)
        #expect(kernel.watches["/tmp"] == nil)
        // An entry deleted (rm -r starts so): the parent is watched, and tells of the rmdir.
        let deleted = table.handle([RawEvent(watch: container, mask: UInt32(IN_DELETE), name: "x.wormhole")], kernel: kernel)
        #expect(kinds(deleted) == ["log:replaced"])
        let parent = try #require(kernel.watches["/tmp"])
        kernel.directories.remove("/tmp/c")
        let removed = table.handle([RawEvent(watch: parent, mask: UInt32(IN_DELETE | IN_ISDIR), name: "c")], kernel: kernel)
        #expect(kinds(removed) == ["log:rescan"])
        #expect(kernel.watches["/tmp"] == parent, "watched while the container is missing")
        // Made again: watched again, and the parent no longer.
        kernel.directories.insert("/tmp/c")
        let made = table.handle([RawEvent(watch: parent, mask: UInt32(IN_CREATE | IN_ISDIR), name: "c")], kernel: kernel)
        #expect(kinds(made) == ["log:rescan"])
        #expect(Array(kernel.watches.keys) == ["/tmp/c"])
        // An entry deleted, then one created: the container lives, the parent goes again.
        let again = try #require(kernel.watches["/tmp/c"])
        _ = table.handle([RawEvent(watch: again, mask: UInt32(IN_DELETE), name: "x.wormhole")], kernel: kernel)
        #expect(kernel.watches["/tmp"] != nil)
        _ = table.handle([RawEvent(watch: again, mask: UInt32(IN_CREATE), name: "x.wormhole")], kernel: kernel)
        #expect(kernel.watches["/tmp"] == nil)
    }

    @Test("a container in a shared parent removed before the parent's watch was in place, or moved away: noticed all the same")
    func sharedParentLooksOnceWhenWatched() throws {
        var (table, kernel, container) = try setUpInSharedParent()
        // The last entry and the directory went in one batch: the parent saw nothing.
        kernel.directories.remove("/tmp/c")
        let gone = table.handle([RawEvent(watch: container, mask: UInt32(IN_DELETE | IN_ISDIR), name: ".listeners")], kernel: kernel)
        #expect(kinds(gone) == ["log:rescan"])
        #expect(kernel.removed == [container])
        #expect(kernel.watches["/tmp"] != nil, "watched until the container is back")
        // Made again before the parent's event is read: the batch that reports it rewatches.
        kernel.directories.insert("/tmp/c")
        let parent = try #require(kernel.watches["/tmp"])
        _ = table.handle([RawEvent(watch: parent, mask: UInt32(IN_CREATE | IN_ISDIR), name: "c")], kernel: kernel)
        let moved = try #require(kernel.watches["/tmp/c"])
        #expect(kernel.watches["/tmp"] == nil)
        // Moved away (the container's own watch says so at once) and made again meanwhile.
        kernel.watches["/tmp/c"] = nil
        let movedAway = table.handle([RawEvent(watch: moved, mask: UInt32(IN_MOVE_SELF), name: nil)], kernel: kernel)
        #expect(kinds(movedAway) == ["log:rescan"])
        #expect(kernel.watches["/tmp/c"] != nil && kernel.watches["/tmp/c"] != moved, "the directory there now is watched")
        #expect(kernel.watches["/tmp"] == nil)
    }

    @Test("an overflow tells every subscriber of every directory to look again")
    func overflowRescansAll() throws {
        var (table, kernel, _, _) = try setUp()
        kernel.directories.insert("/srv/d")
        kernel.directories.insert("/srv")
        _ = try table.subscribe(directory: "/srv/d", names: ["y.wormhole"], changes: FileTransiting.logChanges, handler: "other", kernel: kernel)
        let overflow = table.handle([RawEvent(watch: -1, mask: UInt32(IN_Q_OVERFLOW), name: nil)], kernel: kernel)
        #expect(kinds(overflow) == ["log:rescan", "observer:rescan", "other:rescan", "writer:rescan"])
    }

    @Test("the parent removed: subscribers of a container that is gone are told it failed")
    func parentRemovedFails() throws {
        var (table, kernel, _, parent) = try setUp()
        kernel.directories = []
        _ = table.handle([RawEvent(watch: parent, mask: UInt32(IN_DELETE | IN_ISDIR), name: "c")], kernel: kernel)
        let gone = table.handle([RawEvent(watch: parent, mask: UInt32(IN_DELETE_SELF), name: nil)], kernel: kernel)
        #expect(kinds(gone) == ["log:failed", "observer:failed", "writer:failed"])
    }

    @Test("a writer watching only for its container's moves is not woken by appends; a listener's arrival and departure change the mask")
    func writersAloneWatchQuietly() throws {
        let kernel = FakeKernel()
        kernel.directories = ["/run", "/run/c"]
        var table = WatchTable<String>()
        _ = try table.subscribe(directory: "/run/c", names: [], changes: [], handler: "writer", kernel: kernel)
        #expect(kernel.masks["/run/c"].map { $0 & UInt32(IN_MODIFY | IN_ATTRIB | IN_CREATE) } == 0)
        let listener = try table.subscribe(directory: "/run/c", names: ["x.wormhole"], changes: FileTransiting.logChanges, handler: "log", kernel: kernel)
        #expect(kernel.masks["/run/c"].map { $0 & UInt32(IN_MODIFY) } == UInt32(IN_MODIFY))
        table.unsubscribe(listener, kernel: kernel)
        #expect(kernel.masks["/run/c"].map { $0 & UInt32(IN_MODIFY) } == 0)
        #expect(table.appliedMask(of: "/run/c") == kernel.masks["/run/c"])
    }

    @Test("a directory that is a container and another container's parent keeps both roles' events")
    func containerThatIsAlsoAParent() throws {
        let kernel = FakeKernel()
        kernel.directories = ["/run", "/run/c", "/run/c/inner"]
        var table = WatchTable<String>()
        _ = try table.subscribe(directory: "/run/c", names: [], changes: [], handler: "writer", kernel: kernel)
        _ = try table.subscribe(directory: "/run/c/inner", names: ["x.wormhole"], changes: FileTransiting.logChanges, handler: "log", kernel: kernel)
        #expect(kernel.masks["/run/c"].map { $0 & UInt32(IN_CREATE | IN_MOVED_FROM) } == UInt32(IN_CREATE | IN_MOVED_FROM))
        #expect(kernel.masks["/run/c"].map { $0 & UInt32(IN_MODIFY) } == 0)
    }

    @Test("an instance that cannot be read any more: every subscriber is handed back to be told, the table is empty, and numbers go on rising")
    func removeAllHandsBackEverySubscriber() throws {
        var (table, kernel, _, _) = try setUp()
        let last = try table.subscribe(directory: "/run/c", names: ["y.wormhole"], changes: FileTransiting.logChanges, handler: "other", kernel: kernel)
        let watches = kernel.watches
        #expect(table.removeAll().sorted() == ["log", "observer", "other", "writer"])
        #expect(table.isEmpty && table.watchCount == 0)
        #expect(kernel.watches == watches && kernel.removed.isEmpty, "closing the instance removes its watches, not the table")
        let next = try table.subscribe(directory: "/run/c", names: ["x.wormhole"], changes: FileTransiting.logChanges, handler: "new", kernel: kernel)
        #expect(next > last)
    }

    @Test("a subscription number is never reused: a late second unsubscribe of an old one leaves a new one alone")
    func numbersAreNotReused() throws {
        let kernel = FakeKernel()
        kernel.directories = ["/run", "/run/c"]
        var table = WatchTable<String>()
        let old = try table.subscribe(directory: "/run/c", names: ["x.wormhole"], changes: FileTransiting.logChanges, handler: "old", kernel: kernel)
        table.unsubscribe(old, kernel: kernel)
        #expect(table.isEmpty)
        let new = try table.subscribe(directory: "/run/c", names: ["x.wormhole"], changes: FileTransiting.logChanges, handler: "new", kernel: kernel)
        #expect(new != old)
        table.unsubscribe(old, kernel: kernel)
        let watch = try #require(kernel.watches["/run/c"])
        #expect(kinds(table.handle([RawEvent(watch: watch, mask: UInt32(IN_MODIFY), name: "x.wormhole")], kernel: kernel)) == ["new:appended"])
    }

    @Test("the last unsubscribe of a directory releases its watch and its parent's; the table is empty again")
    func unsubscribingReleasesWatches() throws {
        let kernel = FakeKernel()
        kernel.directories = ["/run", "/run/a", "/run/b"]
        var table = WatchTable<String>()
        let a = try table.subscribe(directory: "/run/a", names: ["x.wormhole"], changes: FileTransiting.logChanges, handler: "a", kernel: kernel)
        let b = try table.subscribe(directory: "/run/b", names: ["x.wormhole"], changes: FileTransiting.logChanges, handler: "b", kernel: kernel)
        #expect(table.watchCount == 3, "two containers, one shared parent")
        table.unsubscribe(a, kernel: kernel)
        #expect(table.watchCount == 2)
        table.unsubscribe(b, kernel: kernel)
        #expect(table.watchCount == 0)
        #expect(table.isEmpty)
        #expect(kernel.watches.isEmpty)
        #expect(throws: WormholeError.self) {
            _ = try table.subscribe(directory: "/nowhere", names: [], changes: FileTransiting.logChanges, handler: "x", kernel: kernel)
        }
        #expect(table.isEmpty)
    }
}
