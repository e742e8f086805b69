#if canImport(Glibc)
import Glibc
#endif
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Dispatch
import SystemPackage
import Synchronization
@_spi(Backend) import WormholeCore

/// What the engine tells a directory subscriber: which of its files changed and how, as
/// inotify said, with no idea of what the files are. What a change means (an append, a
/// replaced log, a post) is the subscriber's business.
package enum DirectoryEvent: Sendable, Equatable {
    /// The file `name` changed (one of the names subscribed to, or any name for a
    /// subscriber of the whole directory), in the ways it asked to hear of: everything
    /// inotify reported of that name in one read, merged.
    case changed(name: String, FileChanges)
    /// Events may have been lost (queue overflow), or the directory went away or came
    /// back: anything may have changed, so look again.
    case rescan
    /// Nothing can tell of this directory any more (it was recreated but cannot be
    /// watched, or its parent went away): no more events will come.
    case failed(WormholeError)
}

/// How a file of a watched directory changed, in inotify's terms.
package struct FileChanges: OptionSet, Sendable, Hashable {
    package let rawValue: UInt8

    /// Its contents were written (IN_MODIFY).
    package static let written = FileChanges(rawValue: 1 << 0)
    /// Its attributes or times were set (IN_ATTRIB).
    package static let attributes = FileChanges(rawValue: 1 << 1)
    /// A file was created at the name, deleted from it, or moved to or from it (IN_CREATE,
    /// IN_DELETE, IN_MOVED_TO, IN_MOVED_FROM): the name may stand for another file now.
    package static let entry = FileChanges(rawValue: 1 << 2)

    /// The changes an event's mask reports.
    package init(inotifyMask mask: UInt32) {
        var changes: FileChanges = []
        if mask & UInt32(IN_MODIFY) != 0 { changes.insert(.written) }
        if mask & UInt32(IN_ATTRIB) != 0 { changes.insert(.attributes) }
        if mask & UInt32(IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO) != 0 { changes.insert(.entry) }
        self = changes
    }

    package init(rawValue: UInt8) { self.rawValue = rawValue }
}

/// A subscription to the engine; cancelling it (or dropping it) unsubscribes.
package final class EngineSubscription: WormholeTransitingObservation, Sendable {
    private let id: UInt64
    private let cancelled = Atomic<Bool>(false)
    package init(id: UInt64) { self.id = id }
    package func cancel() {
        guard !cancelled.exchange(true, ordering: .acquiringAndReleasing) else { return }
        InotifyEngine.shared.unsubscribe(id)
    }
    deinit { cancel() }
}

/// How many times the reader thread's wait (its loop's or a nested one's) has returned in
/// this process: what a test reads to tell whether an operation woke the thread. One
/// relaxed add per wake-up, by the reader thread alone.
package enum ReaderThreadWakeUps {
    package static let counter = Atomic<Int>(0)
    package static var count: Int { counter.load(ordering: .relaxed) }
}

/// The process's single inotify instance and its reader thread, shared by every
/// notification center, observer and wormhole listener in the process.
///
/// The kernel allows 128 inotify instances per user (every process of the user shares
/// them), so one per listener would run out; one per process, fanned out in user space,
/// does not. The reader thread blocks in `poll` on the inotify descriptor and on a
/// ``WakeChannel``, without a timeout: an idle process makes no system call. The instance
/// and the thread exist only while something is subscribed. When the last subscriber
/// goes, the channel wakes the thread, which closes the instance and exits at once; a
/// subscription made before it looked is kept, on the same instance.
///
/// There is never more than one instance: a subscription that comes while the reader
/// thread is closing the last one waits until it has. The reader thread itself never
/// waits: it decides to close only in its own loop, never while it calls handlers, and
/// a handler that cancels the last subscription and subscribes again (a listener that
/// replaces itself) finds the instance still open and keeps it.
///
/// What is watched and who hears what is a ``WatchTable``, a plain value; the engine
/// owns the descriptors, the thread and the lock around the table.
///
/// Handlers are chosen under the lock and called after it is released, on the reader
/// thread: a listener without a queue runs right there (no hop); others schedule work.
package final class InotifyEngine: Sendable {
    package static let shared = InotifyEngine()

    package typealias Handler = @Sendable (DirectoryEvent) -> Void

    private final class Session: Sendable {
        let inotify: Inotify
        let channel: WakeChannel
        /// Signalled once the reader thread has closed both.
        let closed = DispatchSemaphore(value: 0)
        init(inotify: Inotify, channel: WakeChannel) {
            self.inotify = inotify
            self.channel = channel
        }
    }

    private struct State {
        /// The instance and its reader thread, from the first subscription until the
        /// thread has closed the instance.
        var session: Session?
        /// The reader thread found nothing subscribed and is closing the instance: a new
        /// subscription waits for it.
        var closing = false
        var table = WatchTable<Handler>()
    }

    private let state = Locked(State(), rank: .inotifyTable)
    /// The reader thread (`pthread_self`) while it runs; 0 when none does.
    private let readerThread = Atomic<UInt>(0)

    /// Whether the caller runs on the reader thread: in a handler (a listener or
    /// responder without a queue).
    package var isOnReaderThread: Bool { readerThread.load(ordering: .relaxed) == UInt(pthread_self()) }

    /// Starts telling `handler` of the `changes` of the files `names` of `directory` (of
    /// every file, when empty), and always when the directory went away or came back
    /// (``DirectoryEvent/rescan``). A subscriber that asks for no changes hears of the
    /// directory alone. The watch is in place when this returns; dropping or cancelling
    /// the subscription ends it.
    package func subscribe(directory: String, names: [String], changes: FileChanges, handler: @escaping Handler) throws(WormholeError) -> EngineSubscription {
        EngineSubscription(id: try subscriptionNumber(directory: directory, names: names, changes: changes, handler: handler))
    }

    private enum Attempt {
        case subscribed(UInt64)
        case failed(WormholeError)
        /// The previous instance is being closed: try again once it is.
        case wait(Session)
    }

    private func subscriptionNumber(directory: String, names: [String], changes: FileChanges, handler: @escaping Handler) throws(WormholeError) -> UInt64 {
        while true {
            let attempt: Attempt = state.withLock { state in
                if state.closing, let closing = state.session { return .wait(closing) }
                do throws(WormholeError) {
                    let session = try Self.startSessionIfNeeded(&state)
                    let id = try state.table.subscribe(directory: directory, names: names, changes: changes, handler: handler,
                                                       kernel: session.inotify)
                    return .subscribed(id)
                } catch {
                    if state.table.isEmpty { state.session?.channel.wake() }
                    return .failed(error)
                }
            }
            switch attempt {
            case .subscribed(let id):
                return id
            case .failed(let error):
                throw error
            case .wait(let session):
                // Every waiter passes the signal on.
                session.closed.wait()
                session.closed.signal()
            }
        }
    }

    /// Stops delivering to a subscription (``EngineSubscription/cancel()`` calls it). A
    /// handler already chosen for an event may still run once after this returns. The
    /// last one wakes the reader thread, which closes the instance.
    fileprivate func unsubscribe(_ id: UInt64) {
        state.withLock { state in
            guard let session = state.session, !state.closing else { return }
            state.table.unsubscribe(id, kernel: session.inotify)
            if state.table.isEmpty { session.channel.wake() }
        }
    }

    // MARK: - Session

    private static func startSessionIfNeeded(_ state: inout State) throws(WormholeError) -> Session {
        if let session = state.session { return session }
        let inotify = try Inotify()
        let channel: WakeChannel
        do throws(WormholeError) {
            channel = try WakeChannel()
        } catch {
            inotify.close()
            throw error
        }
        let session = Session(inotify: inotify, channel: channel)
        let failure = DetachedThread.start { InotifyEngine.shared.run(session) }
        guard failure == 0 else {
            inotify.close()
            channel.close()
            let errno = Errno(rawValue: failure)
            throw WormholeError(.systemError, "cannot start the thread that reads inotify events: \(errno) (see 'ulimit -u')", errno: errno)
        }
        state.session = session
        return session
    }

    // MARK: - Reader thread

    /// The reader thread: waits for events or a wake-up, hands each batch of events to
    /// the subscribers on this thread, and closes the instance once nothing is
    /// subscribed. Two system calls per wake-up: `poll`, then `read`.
    private func run(_ session: Session) {
        let capacity = 64 * 1024
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 8)
        readerThread.store(UInt(pthread_self()), ordering: .relaxed)
        while state.withLock({ state in
            // The table is kept when the instance closes: its subscription numbers go
            // on rising, so a number is never reused and a late second unsubscribe
            // cannot hit another subscription.
            state.closing = state.table.isEmpty
            return !state.closing
        }) {
            serveOnce(session, buffer: buffer, capacity: capacity, milliseconds: -1)
        }
        buffer.deallocate()
        readerThread.store(0, ordering: .relaxed)
        session.inotify.close()
        session.channel.close()
        state.withLock { state in
            state.session = nil
            state.closing = false
        }
        session.closed.signal()
    }

    /// Why it exists: a listener or responder without a queue that asks a responder of
    /// its own process gets its reply in tens of microseconds through it, where waiting as
    /// other threads do left 16 to 21 of 30 such requests waiting 250 ms each for the
    /// responder's redelivery timer (`Benchmarks/run --sections clever`;
    /// Docs/Performance.md, "What the clever parts buy").
    ///
    /// Called on the reader thread from inside a handler that waits for something only
    /// another handler can bring (a blocking request made by a listener or responder
    /// without a queue, whose reply is read by the reply listener, on this thread): reads
    /// and hands out events here, nested, until `done()` holds. ``wakeReaderThread()``
    /// makes it look at `done()` again; so does every tenth of a second. Handlers of one
    /// subscriber never overlap for all that: a listener's drain already running lower on
    /// this stack only notes the wake-up and reads once more when it resumes.
    package func serveNested(until done: () -> Bool) {
        guard isOnReaderThread, let session = state.withLock({ $0.session }) else { return }
        let capacity = 64 * 1024
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 8)
        defer { buffer.deallocate() }
        // A wake-up meant for the loop below it (its last subscriber went) is emptied
        // here too: that loop looks at the table again when this handler returns.
        while !done(), serveOnce(session, buffer: buffer, capacity: capacity, milliseconds: 100) {}
    }

    /// Waits for events or a wake-up (at most `milliseconds`; -1: no limit), then hands
    /// out the events read. Returns false when the instance could not be waited on or
    /// read, and was abandoned.
    @discardableResult
    private func serveOnce(_ session: Session, buffer: UnsafeMutableRawPointer, capacity: Int, milliseconds: Int32) -> Bool {
        let ready: WakeChannel.Readiness
        switch session.channel.wait(alongside: session.inotify.descriptor, milliseconds: milliseconds) {
        case .success(let readiness):
            ready = readiness
            ReaderThreadWakeUps.counter.add(1, ordering: .relaxed)
        case .failure(let errno):
            abandon(WormholeError.system("wait for inotify events", errno))
            return false
        }
        if ready.woken { session.channel.drain() }
        guard ready.events else { return true }
        switch session.inotify.read(into: buffer, capacity: capacity) {
        case .success(let count):
            if count > 0 { handle(Self.parse(buffer, count: count), session: session) }
            return true
        case .failure(let errno):
            abandon(WormholeError.system("read inotify events", errno))
            return false
        }
    }

    /// Wakes the reader thread's wait (``serveNested(until:)``'s, or its loop's, which
    /// then only looks at the table again).
    package func wakeReaderThread() {
        state.withLock { $0.session }?.channel.wake()
    }

    /// The events of an inotify read (`count` bytes of `buffer`).
    package static func parse(_ buffer: UnsafeMutableRawPointer, count: Int) -> [RawEvent] {
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

    /// The instance cannot be waited on or read any more (which the kernel does not do
    /// to a valid descriptor and a buffer of 64 KiB): every subscriber is told that no
    /// more events will come, rather than left waiting, and the instance is closed; a
    /// later subscription starts a new one.
    private func abandon(_ error: WormholeError) {
        let handlers = state.withLock { $0.table.removeAll() }
        for handler in handlers { handler(.failed(error)) }
    }

    /// Decides under the lock who hears what; calls the handlers after releasing it.
    private func handle(_ events: [RawEvent], session: Session) {
        let deliveries = state.withLock { state -> [(Handler, DirectoryEvent)] in
            state.table.handle(events, kernel: session.inotify)
        }
        for (handler, event) in deliveries { handler(event) }
    }
}

extension Inotify: WatchKernel {
    package func isDirectory(_ path: String) -> Bool {
        guard case .success(let status) = Syscalls.linkStatus(path) else { return false }
        return status.isDirectory
    }

    package func isShared(_ path: String) -> Bool {
        guard case .success(let status) = Result(catching: { () throws(Errno) in try Stat(FilePath(path), followTargetSymlink: true) }) else { return false }
        return status.mode.rawValue & 0o022 != 0
    }
}
