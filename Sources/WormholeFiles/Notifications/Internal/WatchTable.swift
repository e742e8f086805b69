#if canImport(Glibc)
import Glibc
#endif
@_spi(Backend) import WormholeCore

/// The kernel calls a ``WatchTable`` makes. The engine passes its inotify instance; the
/// tests pass a fake, so the table's bookkeeping is tested without the kernel.
package protocol WatchKernel {
    /// Watches the directory at `path` for `mask`, replacing the mask of an existing watch
    /// of it (and returning that watch).
    func addWatch(_ path: String, mask: UInt32) throws(WormholeError) -> Int32
    func removeWatch(_ watch: Int32)
    /// Whether a directory (not a link to one) exists at `path` now.
    func isDirectory(_ path: String) -> Bool
    /// Whether users other than the owner may create and remove entries in the directory
    /// at `path` (`mode & 0o022`; with §4 of the protocol, only with the sticky bit, as
    /// `/tmp` and `/dev/shm` have).
    func isShared(_ path: String) -> Bool
}

/// One event as inotify reported it.
package struct RawEvent: Equatable {
    package let watch: Int32
    package let mask: UInt32
    package let name: String?
}

/// Who is subscribed to what, which watch stands for which directory, and what an event
/// means to each subscriber: a plain value, with no lock and no thread.
///
/// A directory's own watch reports its move (IN_MOVE_SELF) at once, but its deletion
/// (IN_DELETE_SELF) only once no descriptor of it or of a file in it is open, and
/// writers and readers hold such descriptors: nothing reaches the directory's watch when
/// `rmdir` removes it. The parent reports the deletion (or move) of its entry at once, so
/// the parent is watched too, in one of two ways:
///
/// - A private parent (only its owner may change its entries, as `$XDG_RUNTIME_DIR/
///   app-groups`) is watched for as long as the directory is: its entries change rarely.
/// - A shared parent (`/tmp`, `/dev/shm`) sees every user's files come and go: watching
///   it would wake the reader thread for each. It is watched only while it matters:
///   while the directory is missing (until it exists again), and from the moment an entry
///   of the directory is deleted or moved out (`rm -r` removes the entries first, then
///   the directory) until one is created in it again, which cannot happen in a removed
///   directory. When that watch is added, the path is looked at once, for what happened
///   before it was in place.
///
/// A deleted directory is watched again as soon as it exists again, and its subscribers
/// are told to look again then.
package struct WatchTable<Handler> {
    /// What a container needs when a subscriber wants to hear of its files' changes
    /// (``FileChanges``). Entry events are always part of it: the deletion of an entry is
    /// what says that a container in a shared parent may be on its way out.
    package static var activeMask: UInt32 { UInt32(IN_MODIFY | IN_ATTRIB | IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO) }
    /// What every watched container needs: that the directory itself went away.
    package static var selfMask: UInt32 { UInt32(IN_DELETE_SELF | IN_MOVE_SELF) }
    /// What a parent needs: its entries coming and going (and its own end). Writes to
    /// other files in a shared parent (`/dev/shm`, say) do not wake the reader thread.
    package static var parentMask: UInt32 { UInt32(IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF) }

    /// The mask the watch of `path` needs for every role it has: a container whose
    /// subscribers want to hear of no file (writers watching for a move) is not woken by
    /// its own appends; a directory that is also another container's parent keeps what
    /// that role needs.
    package func mask(for path: String) -> UInt32 {
        var mask = UInt32(IN_ONLYDIR)
        if let container = containers[path] {
            mask |= Self.selfMask
            if container.subscribers.values.contains(where: { !$0.changes.isEmpty }) { mask |= Self.activeMask }
        }
        if childrenOfParent[path]?.isEmpty == false { mask |= Self.parentMask }
        return mask
    }

    /// The mask each watch has now.
    private var appliedMask: [Int32: UInt32] = [:]

    /// The mask a watch has now, for tests.
    package func appliedMask(of path: String) -> UInt32? {
        (containers[path]?.watch ?? parentWatch[path]).flatMap { appliedMask[$0] }
    }

    /// Gives the watch of `path` the mask its roles need now, when that changed.
    private mutating func updateMask(_ path: String, kernel: some WatchKernel) {
        guard let watch = containers[path]?.watch ?? parentWatch[path] else { return }
        let mask = mask(for: path)
        guard appliedMask[watch] != mask, let again = try? kernel.addWatch(path, mask: mask) else { return }
        appliedMask[again] = mask
    }

    private struct Subscriber {
        /// The file names it hears about; empty for every name in the directory.
        let names: [String]
        /// The changes it hears about.
        let changes: FileChanges
        let handler: Handler
    }

    /// A directory someone subscribed to.
    private struct Container {
        let parent: String
        let name: String
        /// Whether the parent is shared (``WatchKernel/isShared(_:)``): then it is
        /// watched only while ``needsParent``.
        let sharedParent: Bool
        /// `nil` while the directory does not exist.
        var watch: Int32?
        /// An entry was deleted or moved out, and none created since: the directory may be
        /// on its way out (its parent is the one to say so).
        var emptying = false
        /// Whether the parent must be watched now.
        var needsParent: Bool { !sharedParent || watch == nil || emptying }
        var subscribers: [UInt64: Subscriber] = [:]
        /// The subscribers of each file name, so that an event costs the same whether
        /// the directory has one subscriber or ten thousand.
        var subscribersOfName: [String: Set<UInt64>] = [:]
        /// Subscribers of every name in the directory.
        var wildcardSubscribers: Set<UInt64> = []

        mutating func add(_ id: UInt64, _ subscriber: Subscriber) {
            subscribers[id] = subscriber
            for name in subscriber.names { subscribersOfName[name, default: []].insert(id) }
            if subscriber.names.isEmpty { wildcardSubscribers.insert(id) }
        }

        mutating func remove(_ id: UInt64) {
            guard let subscriber = subscribers.removeValue(forKey: id) else { return }
            for name in subscriber.names {
                subscribersOfName[name]?.remove(id)
                if subscribersOfName[name]?.isEmpty == true { subscribersOfName[name] = nil }
            }
            if subscriber.names.isEmpty { wildcardSubscribers.remove(id) }
        }
    }

    private var containers: [String: Container] = [:]
    private var containerOfWatch: [Int32: String] = [:]
    /// Parent watches, and the containers each one looks after.
    private var parentOfWatch: [Int32: String] = [:]
    private var parentWatch: [String: Int32] = [:]
    /// The containers that use each parent's watch now.
    private var childrenOfParent: [String: Set<String>] = [:]
    private var containerOfSubscription: [UInt64: String] = [:]
    private var nextSubscription: UInt64 = 1

    package init() {}

    private init(nextSubscription: UInt64) {
        self.nextSubscription = nextSubscription
    }

    /// Whether nothing is subscribed (and nothing watched).
    package var isEmpty: Bool { containers.isEmpty }

    /// The watches in use, for tests.
    package var watchCount: Int { Set(containerOfWatch.keys).union(parentOfWatch.keys).count }

    private func isWatchInUse(_ watch: Int32) -> Bool {
        containerOfWatch[watch] != nil || parentOfWatch[watch] != nil
    }

    // MARK: - Subscribing

    /// Adds a subscriber of the `changes` of `names` in `directory` (every name when
    /// empty), watching the directory (and its parent, as needed) first when it is not
    /// watched yet.
    package mutating func subscribe(directory: String, names: [String], changes: FileChanges, handler: Handler,
                            kernel: some WatchKernel) throws(WormholeError) -> UInt64 {
        if containers[directory] == nil { try addContainer(directory, kernel: kernel) }
        let id = nextSubscription
        nextSubscription += 1
        containers[directory]?.add(id, Subscriber(names: names, changes: changes, handler: handler))
        containerOfSubscription[id] = directory
        updateMask(directory, kernel: kernel)
        return id
    }

    /// Forgets every subscriber and watch, without a kernel call (the instance is being
    /// closed, which removes its watches); the subscription numbers go on rising.
    /// - Returns: The handlers of the subscribers that were there.
    package mutating func removeAll() -> [Handler] {
        let handlers = containers.values.flatMap { $0.subscribers.values.map(\.handler) }
        self = WatchTable(nextSubscription: nextSubscription)
        return handlers
    }

    /// Removes a subscriber; the last one of a directory releases its watches.
    package mutating func unsubscribe(_ id: UInt64, kernel: some WatchKernel) {
        guard let path = containerOfSubscription.removeValue(forKey: id) else { return }
        containers[path]?.remove(id)
        if containers[path]?.subscribers.isEmpty == true {
            removeContainer(path, kernel: kernel)
        } else {
            updateMask(path, kernel: kernel)
        }
    }

    private mutating func addContainer(_ path: String, kernel: some WatchKernel) throws(WormholeError) {
        let slash = path.lastIndex(of: "/") ?? path.startIndex
        let parent = slash == path.startIndex ? "/" : String(path[..<slash])
        let name = String(path[path.index(after: slash)...])
        containers[path] = Container(parent: parent, name: name, sharedParent: path != "/" && kernel.isShared(parent), watch: nil)
        let watch: Int32
        do throws(WormholeError) {
            watch = try kernel.addWatch(path, mask: mask(for: path))
        } catch {
            containers[path] = nil
            throw error
        }
        containers[path]?.watch = watch
        containerOfWatch[watch] = path
        appliedMask[watch] = mask(for: path)
        do throws(WormholeError) {
            _ = try settleParent(path, kernel: kernel)
        } catch {
            // Out of watches, most often: without the parent's watch a deleted and
            // recreated container would go unnoticed, so the subscription fails now.
            removeContainer(path, kernel: kernel)
            throw error
        }
    }

    private mutating func removeContainer(_ path: String, kernel: some WatchKernel) {
        guard let container = containers.removeValue(forKey: path) else { return }
        if let watch = container.watch {
            containerOfWatch[watch] = nil
            removeWatchIfUnused(watch, kernel: kernel)
        }
        detachParent(of: path, container.parent, kernel: kernel)
    }

    /// Watches or stops watching the parent of the container at `path`, as its state
    /// needs (``Container/needsParent``).
    /// - Returns: Whether a shared parent was watched just now: then what happened at the
    ///   path before the watch was in place went unseen, and ``recheck(_:kernel:)`` looks.
    /// - Throws: Why the parent cannot be watched (out of watches, say). A parent this
    ///   user may not read is no error: nothing better is possible without read access.
    private mutating func settleParent(_ path: String, kernel: some WatchKernel) throws(WormholeError) -> Bool {
        guard path != "/", let container = containers[path] else { return false }
        let parent = container.parent
        let attached = childrenOfParent[parent]?.contains(path) == true
        guard container.needsParent != attached else { return false }
        guard container.needsParent else {
            detachParent(of: path, parent, kernel: kernel)
            return false
        }
        childrenOfParent[parent, default: []].insert(path)
        guard parentWatch[parent] == nil else {
            updateMask(parent, kernel: kernel)
            return container.sharedParent
        }
        do throws(WormholeError) {
            let watch = try kernel.addWatch(parent, mask: mask(for: parent))
            parentWatch[parent] = watch
            parentOfWatch[watch] = parent
            appliedMask[watch] = mask(for: parent)
        } catch where error.errno == .permissionDenied {
            // A parent this user may not read (a home directory searchable by others,
            // say): the container is watched, but its deletion and recreation are not
            // followed.
            return false
        } catch {
            detachParent(of: path, parent, kernel: kernel)
            throw error
        }
        return container.sharedParent
    }

    /// Looks at the path of a container whose shared parent was watched just now: gone,
    /// made again, or another directory (the kernel hands out the same watch for the same
    /// directory).
    /// - Returns: Whether it changed, and why a directory there cannot be watched.
    private mutating func recheck(_ path: String, kernel: some WatchKernel) -> (changed: Bool, failure: WormholeError?) {
        guard let old = containers[path]?.watch else {
            let failure = refresh(path, kernel: kernel)
            return (containers[path]?.watch != nil, failure)
        }
        guard kernel.isDirectory(path) else { return (true, orphan(path, kernel: kernel)) }
        let failure = refresh(path, kernel: kernel)
        return (containers[path]?.watch != old, failure)
    }

    /// The container at `path` no longer uses its parent's watch; the last one releases it.
    private mutating func detachParent(of path: String, _ parent: String, kernel: some WatchKernel) {
        guard childrenOfParent[parent]?.remove(path) != nil, childrenOfParent[parent]?.isEmpty == true else { return }
        childrenOfParent[parent] = nil
        if let watch = parentWatch.removeValue(forKey: parent) {
            parentOfWatch[watch] = nil
            removeWatchIfUnused(watch, kernel: kernel)
        }
        // A parent that is a container too no longer needs the parent's events.
        updateMask(parent, kernel: kernel)
    }

    private mutating func removeWatchIfUnused(_ watch: Int32, kernel: some WatchKernel) {
        guard !isWatchInUse(watch) else { return }
        kernel.removeWatch(watch)
        appliedMask[watch] = nil
    }

    // MARK: - Events

    /// One delivery to one subscriber: of the changes of one file name, of a rescan or of
    /// a failure, so that events read together reach each subscriber once each.
    private struct DeliveryKey: Hashable {
        let subscription: UInt64
        /// The file name; nil for a rescan or a failure.
        let name: String?
        let failed: Bool
    }

    /// The deliveries of one batch of events, in the order they were first due: a second
    /// delivery with the same ``DeliveryKey`` is merged into the first (the changes of one
    /// name united), not added.
    private struct Deliveries {
        var list: [(Handler, DirectoryEvent)] = []
        private var position: [DeliveryKey: Int] = [:]

        /// Decides whether `event` for subscriber `id` is a new delivery or merges into
        /// the one already due to it for the same name (or rescan, or failure).
        mutating func deliver(_ id: UInt64, _ subscriber: Subscriber, _ event: DirectoryEvent) {
            let key: DeliveryKey
            switch event {
            case .changed(let name, _): key = DeliveryKey(subscription: id, name: name, failed: false)
            case .rescan: key = DeliveryKey(subscription: id, name: nil, failed: false)
            case .failed: key = DeliveryKey(subscription: id, name: nil, failed: true)
            }
            guard let index = position[key] else {
                position[key] = list.count
                list.append((subscriber.handler, event))
                return
            }
            if case .changed(let name, let earlier) = list[index].1, case .changed(_, let changes) = event {
                list[index].1 = .changed(name: name, earlier.union(changes))
            }
        }

        /// Delivers the changes of `name` that `subscriber` asked for, if any.
        mutating func tell(_ id: UInt64, _ subscriber: Subscriber, _ name: String, _ changes: FileChanges) {
            let heard = changes.intersection(subscriber.changes)
            if !heard.isEmpty { deliver(id, subscriber, .changed(name: name, heard)) }
        }

        /// Delivers `event` to each of `subscribers`.
        mutating func deliver(_ event: DirectoryEvent, to subscribers: [UInt64: Subscriber]?) {
            for (id, subscriber) in subscribers ?? [:] { deliver(id, subscriber, event) }
        }
    }

    /// Who hears what of `events`: each subscriber hears of each of its file names once
    /// per batch, with the changes of that name merged, and of a rescan or a failure at
    /// most once. Directories that went away stop being watched; those that came back
    /// are watched again.
    package mutating func handle(_ events: [RawEvent], kernel: some WatchKernel) -> [(Handler, DirectoryEvent)] {
        var deliveries = Deliveries()
        /// Containers whose parent may need to be watched, or no longer.
        var unsettled = Set<String>()
        for event in events {
            if event.mask & UInt32(IN_Q_OVERFLOW) != 0 {
                // Events were lost: every subscriber looks again, and directories that
                // came or went meanwhile are watched again.
                for path in containers.keys { report(path, refresh(path, kernel: kernel), to: &deliveries) }
                for path in containers.keys { deliveries.deliver(.rescan, to: containers[path]?.subscribers) }
                unsettled.formUnion(containers.keys)
                continue
            }
            if let path = containerOfWatch[event.watch] {
                handleContainerEvent(event, path: path, into: &deliveries, unsettled: &unsettled, kernel: kernel)
            }
            if let parent = parentOfWatch[event.watch] {
                handleParentEvent(event, parent: parent, into: &deliveries, unsettled: &unsettled, kernel: kernel)
            }
        }
        for path in unsettled.sorted() { settle(path, into: &deliveries, kernel: kernel) }
        return deliveries.list
    }

    /// An event of the container directory at `path`: its subscribers hear of the name's
    /// changes; a shared parent's watch follows whether the container is emptying; the
    /// directory's going away orphans it.
    private mutating func handleContainerEvent(_ event: RawEvent, path: String, into deliveries: inout Deliveries,
                                               unsettled: inout Set<String>, kernel: some WatchKernel) {
        guard let container = containers[path] else { return }
        if event.name != nil, container.sharedParent {
            let emptying = event.mask & UInt32(IN_DELETE | IN_MOVED_FROM) != 0
                || container.emptying && event.mask & UInt32(IN_CREATE | IN_MOVED_TO) == 0
            if emptying != container.emptying {
                containers[path]?.emptying = emptying
                unsettled.insert(path)
            }
        }
        if let name = event.name {
            let changes = FileChanges(inotifyMask: event.mask)
            for id in container.subscribersOfName[name] ?? [] {
                if let subscriber = container.subscribers[id] { deliveries.tell(id, subscriber, name, changes) }
            }
            for id in container.wildcardSubscribers {
                if let subscriber = container.subscribers[id] { deliveries.tell(id, subscriber, name, changes) }
            }
        }
        if event.mask & UInt32(IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF) != 0 {
            report(path, orphan(path, kernel: kernel), to: &deliveries)
            deliveries.deliver(.rescan, to: containers[path]?.subscribers)
            unsettled.insert(path)
        }
    }

    /// An event of the parent directory `parent`: a container of it deleted or moved away
    /// is orphaned, one that came back is watched again; the parent's own going away
    /// fails the subscribers of its containers that are gone, as nothing will tell when
    /// they come back.
    private mutating func handleParentEvent(_ event: RawEvent, parent: String, into deliveries: inout Deliveries,
                                            unsettled: inout Set<String>, kernel: some WatchKernel) {
        if let name = event.name {
            for path in childrenOfParent[parent] ?? [] where containers[path]?.name == name {
                if event.mask & UInt32(IN_DELETE | IN_MOVED_FROM) != 0 {
                    report(path, orphan(path, kernel: kernel), to: &deliveries)
                } else if event.mask & UInt32(IN_CREATE | IN_MOVED_TO) != 0, containers[path]?.watch == nil {
                    report(path, refresh(path, kernel: kernel), to: &deliveries)
                } else {
                    continue
                }
                deliveries.deliver(.rescan, to: containers[path]?.subscribers)
                unsettled.insert(path)
            }
        } else if event.mask & UInt32(IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF) != 0 {
            parentOfWatch[event.watch] = nil
            parentWatch[parent] = nil
            let error = WormholeError(.containerUnavailable,
                "'\(parent)' was removed, so Wormhole can no longer notice when its directories are recreated; start listening again",
                path: parent)
            for path in childrenOfParent[parent] ?? [] where containers[path]?.watch == nil {
                deliveries.deliver(.failed(error), to: containers[path]?.subscribers)
            }
        }
    }

    /// Watches the shared parent of the container at `path`, or stops, as it now needs;
    /// once watched, what happened before went unseen, so its subscribers rescan if the
    /// directory changed meanwhile. A parent that cannot be watched fails them.
    private mutating func settle(_ path: String, into deliveries: inout Deliveries, kernel: some WatchKernel) {
        do throws(WormholeError) {
            guard try settleParent(path, kernel: kernel) else { return }
            let (changed, failure) = recheck(path, kernel: kernel)
            report(path, failure, to: &deliveries)
            guard changed else { return }
            deliveries.deliver(.rescan, to: containers[path]?.subscribers)
            _ = try settleParent(path, kernel: kernel)
        } catch {
            let failure = WormholeError(error.code, "cannot watch the parent of '\(path)', so its deletion would go unnoticed and no more events would arrive from it: \(error.message)",
                                        path: path, errno: error.errno)
            deliveries.deliver(.failed(failure), to: containers[path]?.subscribers)
        }
    }

    /// A container that exists again but cannot be watched (`error`): its subscribers are told.
    private func report(_ path: String, _ error: WormholeError?, to deliveries: inout Deliveries) {
        guard let error else { return }
        let failure = WormholeError(error.code, "'\(path)' was recreated but cannot be watched again, so no more events will arrive from it: \(error.message)",
                                    path: path, errno: error.errno)
        deliveries.deliver(.failed(failure), to: containers[path]?.subscribers)
    }

    /// The container at `path` is gone (deleted or moved away): stop watching the old
    /// directory, and watch the new one at once if it was already recreated.
    private mutating func orphan(_ path: String, kernel: some WatchKernel) -> WormholeError? {
        guard let watch = containers[path]?.watch else { return nil }
        containers[path]?.watch = nil
        containerOfWatch[watch] = nil
        removeWatchIfUnused(watch, kernel: kernel)
        return refresh(path, kernel: kernel)
    }

    /// Watches the container at `path` again if a directory exists there now. Returns
    /// why it could not be watched, when it exists but the kernel refused (out of
    /// watches, say): its subscribers would otherwise wait for events that never come.
    @discardableResult
    private mutating func refresh(_ path: String, kernel: some WatchKernel) -> WormholeError? {
        let mask = mask(for: path)
        guard containers[path] != nil, kernel.isDirectory(path) else { return nil }
        let watch: Int32
        do throws(WormholeError) {
            watch = try kernel.addWatch(path, mask: mask)
        } catch where error.code == .containerUnavailable {
            // Gone again already: its parent's next event says when it is back.
            return nil
        } catch {
            return error
        }
        if let old = containers[path]?.watch, old != watch {
            containerOfWatch[old] = nil
            removeWatchIfUnused(old, kernel: kernel)
        }
        if containers[path]?.watch != watch { containers[path]?.emptying = false }
        containers[path]?.watch = watch
        containerOfWatch[watch] = path
        appliedMask[watch] = mask
        return nil
    }
}
