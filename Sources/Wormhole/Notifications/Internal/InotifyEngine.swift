#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SystemPackage
import Synchronization

/// What the engine tells a directory subscriber.
enum DirectoryEvent: Sendable {
    /// The subscriber's log file was written to (IN_MODIFY): records may have been added.
    case appended
    /// The subscriber's log file was created, replaced, moved or deleted: the file at
    /// its name may be another one now.
    case replaced
    /// The subscriber's notification file was posted to (IN_ATTRIB).
    case posted
    /// Events may have been lost (queue overflow) or the directory was recreated:
    /// anything may have changed, so look again.
    case rescan
    /// The watched directory is gone and could not be recreated; the subscription ended.
    case failed(WormholeError)
}

/// What a subscriber's file is, which decides which events it hears.
enum SubscriberKind: Sendable {
    /// A message log: writes wake it, replacements make it look at the file again.
    case log
    /// A notification name: posts (IN_ATTRIB on its notification file) wake it, and so do
    /// passes to the identifier of the same name (IN_MODIFY on its log), as
    /// `passMessage` posts the identifier's Darwin notification in MMWormhole. Writing a
    /// notification file's state (IN_MODIFY on it) does not.
    case notification
    /// The directory itself: hears only that it went away or came back (rescan).
    case container
}

/// A subscription to the engine; cancelling it (or dropping it) unsubscribes.
final class EngineSubscription: WormholeTransitingObservation, Sendable {
    private let id: UInt64
    private let cancelled = Atomic<Bool>(false)
    init(id: UInt64) { self.id = id }
    func cancel() {
        guard !cancelled.exchange(true, ordering: .acquiringAndReleasing) else { return }
        InotifyEngine.shared.unsubscribe(id)
    }
    deinit { cancel() }
}

/// The process's single inotify instance and its reader thread, shared by every
/// notification center, observer and wormhole listener in the process.
///
/// The kernel allows 128 inotify instances per user, so one per listener would run out;
/// one per process, fanned out in user space, does not. The reader thread blocks in
/// `poll` on the inotify descriptor and a wake-up pipe: it never polls on a timer. The
/// instance and the thread exist only while something is subscribed; the last
/// unsubscribe writes to the pipe and the thread closes both descriptors and exits.
///
/// Each watched directory's parent is watched too. The kernel reports a directory's own
/// deletion (IN_DELETE_SELF) only once no process holds a file in it open, and writers
/// and readers do; the parent reports the deletion of its entry at once. A deleted
/// directory is re-watched as soon as it exists again (the next pass or post recreates
/// it), and its subscribers are told to look again then.
///
/// Handlers are chosen under the lock and called after it is released, on the reader
/// thread: they must only schedule work (dispatch, resume a continuation), never block.
final class InotifyEngine: Sendable {
    static let shared = InotifyEngine()

    typealias Handler = @Sendable (DirectoryEvent) -> Void

    /// One mask for every watch, so that a directory watched both as a container and as
    /// another container's parent keeps all it needs (a second add replaces the mask).
    /// IN_ATTRIB is a post; entry events serve the parent role; the self events say the
    /// directory itself went away.
    static let watchMask = UInt32(IN_MODIFY | IN_ATTRIB | IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO
        | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)

    private struct Subscriber {
        /// The file names it hears about; empty for every name in the directory.
        let names: [String]
        let kind: SubscriberKind
        let handler: Handler
    }

    /// A directory whose posts someone observes.
    private struct Container {
        let path: String
        let parent: String
        let name: String
        /// `nil` while the directory does not exist.
        var watch: Int32?
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

    private struct Session {
        let inotify: Inotify
        let generation: UInt64
    }

    private struct State {
        var session: Session?
        var containers: [String: Container] = [:]
        var containerOfWatch: [Int32: String] = [:]
        /// Parent watches, and the containers each one looks after.
        var parentOfWatch: [Int32: String] = [:]
        var parentWatch: [String: Int32] = [:]
        var childrenOfParent: [String: Set<String>] = [:]
        var containerOfSubscription: [UInt64: String] = [:]
        var nextSubscription: UInt64 = 1
        var generation: UInt64 = 0

        func isWatchInUse(_ watch: Int32) -> Bool {
            containerOfWatch[watch] != nil || parentOfWatch[watch] != nil
        }
    }

    private let state = Locked(State())

    /// Starts delivering events for the file `name` of `directory` to `handler`; the
    /// watch is in place when this returns.
    func subscribe(directory: String, name: String, kind: SubscriberKind, handler: @escaping Handler) throws(WormholeError) -> EngineSubscription {
        EngineSubscription(id: try subscribe(directory: directory, names: [name], kind: kind, handler: handler))
    }

    /// Starts delivering events for `directory` (only those for the files `names`, unless
    /// empty) to `handler`. The watch is in place when this returns.
    func subscribe(directory: String, names: [String], kind: SubscriberKind, handler: @escaping Handler) throws(WormholeError) -> UInt64 {
        let result: Result<UInt64, WormholeError> = state.withLock { state in
            do throws(WormholeError) {
                let session = try Self.startSessionIfNeeded(&state)
                if state.containers[directory] == nil {
                    do throws(WormholeError) {
                        try Self.addContainer(directory, session: session, &state)
                    } catch {
                        if state.containers.isEmpty { Self.stopSession(&state) }
                        throw error
                    }
                }
                let id = state.nextSubscription
                state.nextSubscription += 1
                state.containers[directory]?.add(id, Subscriber(names: names, kind: kind, handler: handler))
                state.containerOfSubscription[id] = directory
                return .success(id)
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }

    /// Stops delivering to a subscription. A handler already chosen for an event may
    /// still run once after this returns.
    func unsubscribe(_ id: UInt64) {
        state.withLock { state in
            guard let path = state.containerOfSubscription.removeValue(forKey: id) else { return }
            state.containers[path]?.remove(id)
            if state.containers[path]?.subscribers.isEmpty == true {
                Self.removeContainer(path, &state)
            }
            if state.containers.isEmpty { Self.stopSession(&state) }
        }
    }

    private static func addContainer(_ path: String, session: Session, _ state: inout State) throws(WormholeError) {
        let slash = path.lastIndex(of: "/") ?? path.startIndex
        let parent = slash == path.startIndex ? "/" : String(path[..<slash])
        let name = String(path[path.index(after: slash)...])
        let watch = try addWatch(session.inotify, path)
        state.containers[path] = Container(path: path, parent: parent, name: name, watch: watch)
        state.containerOfWatch[watch] = path
        if state.parentWatch[parent] == nil, path != "/",
           let parentWatch = try? addWatch(session.inotify, parent) {
            state.parentWatch[parent] = parentWatch
            state.parentOfWatch[parentWatch] = parent
        }
        state.childrenOfParent[parent, default: []].insert(path)
    }

    private static func removeContainer(_ path: String, _ state: inout State) {
        guard let container = state.containers.removeValue(forKey: path) else { return }
        if let watch = container.watch {
            state.containerOfWatch[watch] = nil
            removeWatchIfUnused(watch, &state)
        }
        state.childrenOfParent[container.parent]?.remove(path)
        if state.childrenOfParent[container.parent]?.isEmpty == true {
            state.childrenOfParent[container.parent] = nil
            if let watch = state.parentWatch.removeValue(forKey: container.parent) {
                state.parentOfWatch[watch] = nil
                removeWatchIfUnused(watch, &state)
            }
        }
    }

    private static func removeWatchIfUnused(_ watch: Int32, _ state: inout State) {
        guard !state.isWatchInUse(watch), let session = state.session else { return }
        session.inotify.removeWatch(watch)
    }

    // MARK: - Session

    private static func startSessionIfNeeded(_ state: inout State) throws(WormholeError) -> Session {
        if let session = state.session { return session }
        let inotify = try Inotify()
        state.generation += 1
        let session = Session(inotify: inotify, generation: state.generation)
        state.session = session
        let thread = Thread { InotifyEngine.shared.run(session) }
        thread.name = "Wormhole inotify reader"
        thread.start()
        return session
    }

    /// Tells the reader thread to close its descriptor and exit; a later subscription
    /// starts a new session. The thread blocks in `read`: removing a watch queues
    /// IN_IGNORED, which wakes it. Every watch is gone by now, so a watch on `/` is added
    /// and removed for that purpose alone.
    private static func stopSession(_ state: inout State) {
        guard let session = state.session else { return }
        state.session = nil
        if let sentinel = try? session.inotify.addWatch("/", mask: UInt32(IN_DELETE_SELF | IN_ONLYDIR)) {
            session.inotify.removeWatch(sentinel)
        }
    }

    private static func addWatch(_ inotify: Inotify, _ directory: String) throws(WormholeError) -> Int32 {
        try inotify.addWatch(directory, mask: watchMask)
    }

    // MARK: - Reader thread

    /// The reader thread: blocks in `read` on the inotify descriptor (one system call
    /// per wake-up) and hands each batch of events to the subscribers, on this thread.
    private func run(_ session: Session) {
        let capacity = 64 * 1024
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 8)
        defer {
            buffer.deallocate()
            session.inotify.close()
        }
        while true {
            let count = session.inotify.read(into: buffer, capacity: capacity)
            if count < 0 { return }
            let current = state.withLock { $0.session?.generation == session.generation }
            guard current else { return }
            if count > 0 { handle(Self.parse(buffer, count: count), generation: session.generation) }
        }
    }

    private struct RawEvent {
        let watch: Int32
        let mask: UInt32
        let name: String?
    }

    private static func parse(_ buffer: UnsafeMutableRawPointer, count: Int) -> [RawEvent] {
        var events: [RawEvent] = []
        var offset = 0
        let headerSize = MemoryLayout<inotify_event>.size
        while offset + headerSize <= count {
            let watch = buffer.loadUnaligned(fromByteOffset: offset, as: Int32.self)
            let mask = buffer.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self)
            let length = Int(buffer.loadUnaligned(fromByteOffset: offset + 12, as: UInt32.self))
            var name: String?
            if length > 0 {
                let start = (buffer + offset + headerSize).assumingMemoryBound(to: UInt8.self)
                let bytes = UnsafeBufferPointer(start: start, count: length)
                let end = bytes.firstIndex(of: 0) ?? length
                name = String(decoding: UnsafeBufferPointer(rebasing: bytes[..<end]), as: UTF8.self)
            }
            events.append(RawEvent(watch: watch, mask: mask, name: name))
            offset += headerSize + length
        }
        return events
    }

    /// One delivery of one kind of event to one subscriber, so that events read
    /// together reach each subscriber once.
    private struct DeliveryKey: Hashable {
        let subscription: UInt64
        /// 0 appended, 1 replaced, 2 posted, 3 rescan, 4 failed.
        let kind: UInt8
    }

    /// Decides under the lock who hears what; calls the handlers after releasing it.
    private func handle(_ events: [RawEvent], generation: UInt64) {
        var deliveries: [(Handler, DirectoryEvent)] = []
        var seen = Set<DeliveryKey>()
        func deliver(_ id: UInt64, _ subscriber: Subscriber, _ event: DirectoryEvent) {
            let kind: UInt8
            switch event {
            case .appended: kind = 0
            case .replaced: kind = 1
            case .posted: kind = 2
            case .rescan: kind = 3
            case .failed: kind = 4
            }
            let key = DeliveryKey(subscription: id, kind: kind)
            if seen.insert(key).inserted { deliveries.append((subscriber.handler, event)) }
        }
        func rescan(_ path: String, _ state: State) {
            for (id, subscriber) in state.containers[path]?.subscribers ?? [:] { deliver(id, subscriber, .rescan) }
        }
        state.withLock { state in
            guard let session = state.session, session.generation == generation else { return }
            for event in events {
                if event.mask & UInt32(IN_Q_OVERFLOW) != 0 {
                    // Events were lost: every subscriber looks again, and directories that
                    // came or went meanwhile are watched again.
                    for path in state.containers.keys { Self.refresh(path, session: session, &state) }
                    for path in state.containers.keys { rescan(path, state) }
                    continue
                }
                if let path = state.containerOfWatch[event.watch], let container = state.containers[path] {
                    if let name = event.name {
                        for id in container.subscribersOfName[name] ?? [] {
                            guard let subscriber = container.subscribers[id],
                                  let routed = Self.route(event.mask, on: name, to: subscriber.kind) else { continue }
                            deliver(id, subscriber, routed)
                        }
                        if event.mask & UInt32(IN_ATTRIB) != 0 {
                            for id in container.wildcardSubscribers {
                                if let subscriber = container.subscribers[id], subscriber.kind != .container { deliver(id, subscriber, .posted) }
                            }
                        }
                    }
                    if event.mask & UInt32(IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF) != 0 {
                        Self.orphan(path, session: session, &state)
                        rescan(path, state)
                    }
                }
                if let parent = state.parentOfWatch[event.watch], let name = event.name {
                    let children = state.childrenOfParent[parent] ?? []
                    for path in children where state.containers[path]?.name == name {
                        if event.mask & UInt32(IN_DELETE | IN_MOVED_FROM) != 0 {
                            Self.orphan(path, session: session, &state)
                            rescan(path, state)
                        } else if event.mask & UInt32(IN_CREATE | IN_MOVED_TO) != 0, state.containers[path]?.watch == nil {
                            Self.refresh(path, session: session, &state)
                            rescan(path, state)
                        }
                    }
                } else if let parent = state.parentOfWatch[event.watch],
                          event.mask & UInt32(IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF) != 0 {
                    // The parent itself went away: nothing will tell when the containers
                    // come back.
                    state.parentOfWatch[event.watch] = nil
                    state.parentWatch[parent] = nil
                    let error = WormholeError(.containerUnavailable,
                        "'\(parent)' was removed, so Wormhole can no longer notice when its directories are recreated; start listening again",
                        path: parent)
                    for path in state.childrenOfParent[parent] ?? [] where state.containers[path]?.watch == nil {
                        for (id, subscriber) in state.containers[path]?.subscribers ?? [:] { deliver(id, subscriber, .failed(error)) }
                    }
                }
            }
            if state.containers.isEmpty { Self.stopSession(&state) }
        }
        for (handler, event) in deliveries { handler(event) }
    }

    /// What an event on a subscriber's own file means to it, if anything.
    private static func route(_ mask: UInt32, on name: String, to kind: SubscriberKind) -> DirectoryEvent? {
        switch kind {
        case .log:
            if mask & UInt32(IN_CREATE | IN_MOVED_TO | IN_DELETE | IN_MOVED_FROM) != 0 { return .replaced }
            if mask & UInt32(IN_MODIFY) != 0 { return .appended }
            return nil
        case .container:
            return nil
        case .notification:
            if mask & UInt32(IN_ATTRIB) != 0 { return .posted }
            if mask & UInt32(IN_MODIFY) != 0, name.hasSuffix(LogFormat.fileSuffix) { return .posted }
            return nil
        }
    }

    /// The container at `path` is gone (deleted or moved away): stop watching the old
    /// directory, and watch the new one at once if it was already recreated.
    private static func orphan(_ path: String, session: Session, _ state: inout State) {
        guard let watch = state.containers[path]?.watch else { return }
        state.containers[path]?.watch = nil
        state.containerOfWatch[watch] = nil
        if !state.isWatchInUse(watch) { session.inotify.removeWatch(watch) }
        refresh(path, session: session, &state)
    }

    /// Watches the container at `path` again if a directory exists there now.
    private static func refresh(_ path: String, session: Session, _ state: inout State) {
        guard state.containers[path] != nil,
              case .success(let status) = Syscalls.linkStatus(path), status.isDirectory else { return }
        guard let watch = try? addWatch(session.inotify, path) else { return }
        if let old = state.containers[path]?.watch, old != watch {
            state.containerOfWatch[old] = nil
            if !state.isWatchInUse(old) { session.inotify.removeWatch(old) }
        }
        state.containers[path]?.watch = watch
        state.containerOfWatch[watch] = path
    }
}
