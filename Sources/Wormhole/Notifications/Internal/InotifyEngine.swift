#if canImport(Glibc)
import Glibc
#endif
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
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
/// `read` on the inotify descriptor (one system call per wake-up): it never polls on a
/// timer. The instance and the thread exist only while something is subscribed; the last
/// unsubscribe adds and removes a watch whose IN_IGNORED wakes the thread, which closes
/// the descriptor and exits.
///
/// What is watched and who hears what is a ``WatchTable``, a plain value; the engine
/// owns the descriptor, the thread and the lock around the table.
///
/// Handlers are chosen under the lock and called after it is released, on the reader
/// thread: a listener without a queue runs right there (no hop); others schedule work.
final class InotifyEngine: Sendable {
    static let shared = InotifyEngine()

    typealias Handler = @Sendable (DirectoryEvent) -> Void

    private struct Session {
        let inotify: Inotify
        let generation: UInt64
    }

    private struct State {
        var session: Session?
        var table = WatchTable<Handler>()
        var generation: UInt64 = 0
    }

    private let state = Locked(State())

    /// Starts delivering events for the file `name` of `directory` to `handler`; the
    /// watch is in place when this returns.
    func subscribe(directory: String, name: String, kind: SubscriberKind, handler: @escaping Handler) throws(WormholeError) -> EngineSubscription {
        try subscribe(directory: directory, names: [name], kind: kind, handler: handler)
    }

    /// Starts delivering events for `directory` (only those for the files `names`, unless
    /// empty) to `handler`. The watch is in place when this returns; dropping or
    /// cancelling the subscription ends it.
    func subscribe(directory: String, names: [String], kind: SubscriberKind, handler: @escaping Handler) throws(WormholeError) -> EngineSubscription {
        EngineSubscription(id: try subscriptionNumber(directory: directory, names: names, kind: kind, handler: handler))
    }

    private func subscriptionNumber(directory: String, names: [String], kind: SubscriberKind, handler: @escaping Handler) throws(WormholeError) -> UInt64 {
        let result: Result<UInt64, WormholeError> = state.withLock { state in
            do throws(WormholeError) {
                let session = try Self.startSessionIfNeeded(&state)
                do throws(WormholeError) {
                    return .success(try state.table.subscribe(directory: directory, names: names, kind: kind, handler: handler,
                                                              kernel: session.inotify))
                } catch {
                    if state.table.isEmpty { Self.stopSession(&state) }
                    throw error
                }
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }

    /// Stops delivering to a subscription (``EngineSubscription/cancel()`` calls it). A
    /// handler already chosen for an event may still run once after this returns.
    fileprivate func unsubscribe(_ id: UInt64) {
        state.withLock { state in
            guard let session = state.session else { return }
            state.table.unsubscribe(id, kernel: session.inotify)
            if state.table.isEmpty { Self.stopSession(&state) }
        }
    }

    // MARK: - Session

    private static func startSessionIfNeeded(_ state: inout State) throws(WormholeError) -> Session {
        if let session = state.session { return session }
        let inotify = try Inotify()
        state.generation += 1
        let session = Session(inotify: inotify, generation: state.generation)
        state.session = session
        let failure = DetachedThread.start { InotifyEngine.shared.run(session) }
        guard failure == 0 else {
            state.session = nil
            session.inotify.close()
            let errno = Errno(rawValue: failure)
            throw WormholeError(.systemError, "cannot start the thread that reads inotify events: \(errno) (see 'ulimit -u')", errno: errno)
        }
        return session
    }

    /// Tells the reader thread to close its descriptor and exit; a later subscription
    /// starts a new session. The thread blocks in `read`: removing a watch queues
    /// IN_IGNORED, which wakes it. Every watch is gone by now, so a watch on `/` is added
    /// and removed for that purpose alone.
    private static func stopSession(_ state: inout State) {
        guard let session = state.session else { return }
        state.session = nil
        // The table is empty by now, and is kept: its subscription numbers go on rising,
        // so a number is never reused and a late second unsubscribe cannot hit another.
        if let sentinel = try? session.inotify.addWatch("/", mask: UInt32(IN_DELETE_SELF | IN_ONLYDIR)) {
            session.inotify.removeWatch(sentinel)
        }
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

    /// Decides under the lock who hears what; calls the handlers after releasing it.
    private func handle(_ events: [RawEvent], generation: UInt64) {
        let deliveries = state.withLock { state -> [(Handler, DirectoryEvent)] in
            guard let session = state.session, session.generation == generation else { return [] }
            let deliveries = state.table.handle(events, kernel: session.inotify)
            if state.table.isEmpty { Self.stopSession(&state) }
            return deliveries
        }
        for (handler, event) in deliveries { handler(event) }
    }
}

extension Inotify: WatchKernel {
    func isDirectory(_ path: String) -> Bool {
        guard case .success(let status) = Syscalls.linkStatus(path) else { return false }
        return status.isDirectory
    }
}
