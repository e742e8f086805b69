#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SystemPackage
import Synchronization

/// What the engine tells a directory subscriber.
enum DirectoryEvent: Sendable {
    /// A file in the directory was posted to (IN_ATTRIB on that name).
    case changed(name: String)
    /// Events may have been lost (queue overflow) or the directory was recreated:
    /// anything may have changed, so look again.
    case rescan
    /// The watched directory is gone and could not be recreated; the subscription ended.
    case failed(WormholeError)
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
/// Handlers are chosen under the lock and called after it is released, on the reader
/// thread: they must only schedule work (dispatch, resume a continuation), never block.
final class InotifyEngine: Sendable {
    static let shared = InotifyEngine()

    typealias Handler = @Sendable (DirectoryEvent) -> Void

    /// The events that mean something to a subscriber: IN_ATTRIB is a post (a touch of
    /// the name's file); the rest say the directory itself went away.
    static let watchMask = UInt32(IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)

    private struct Subscriber {
        let name: String?
        let handler: Handler
    }

    private struct Watch {
        var directory: String
        var subscribers: [UInt64: Subscriber] = [:]
    }

    private struct Session {
        let inotify: Int32
        let wakeWriter: Int32
        let generation: UInt64
    }

    private struct State {
        var session: Session?
        var watches: [Int32: Watch] = [:]
        var watchOfSubscription: [UInt64: Int32] = [:]
        var nextSubscription: UInt64 = 1
        var generation: UInt64 = 0
    }

    private let state = Mutex(State())

    /// Whether a reader thread is running; for tests of the lifecycle.
    var isRunning: Bool { state.withLock { $0.session != nil } }

    /// Starts delivering events for `directory` (only those for the file `name`, when
    /// given) to `handler`. The watch is in place when this returns.
    func subscribe(directory: String, name: String?, handler: @escaping Handler) throws(WormholeError) -> UInt64 {
        let result: Result<UInt64, WormholeError> = state.withLock { state in
            do throws(WormholeError) {
                let session = try Self.startSessionIfNeeded(&state)
                let descriptor: Int32
                do throws(WormholeError) {
                    descriptor = try Self.addWatch(session.inotify, directory)
                } catch {
                    if state.watches.isEmpty { Self.stopSession(&state) }
                    throw error
                }
                let id = state.nextSubscription
                state.nextSubscription += 1
                state.watches[descriptor, default: Watch(directory: directory)]
                    .subscribers[id] = Subscriber(name: name, handler: handler)
                state.watchOfSubscription[id] = descriptor
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
            guard let descriptor = state.watchOfSubscription.removeValue(forKey: id) else { return }
            state.watches[descriptor]?.subscribers[id] = nil
            if state.watches[descriptor]?.subscribers.isEmpty == true {
                state.watches[descriptor] = nil
                if let session = state.session { _ = inotify_rm_watch(session.inotify, descriptor) }
            }
            if state.watches.isEmpty { Self.stopSession(&state) }
        }
    }

    // MARK: - Session

    private static func startSessionIfNeeded(_ state: inout State) throws(WormholeError) -> Session {
        if let session = state.session { return session }
        let inotify = inotify_init1(Int32(IN_CLOEXEC))
        if inotify < 0 {
            let errno = Errno(rawValue: Glibc.errno)
            if errno == .tooManyOpenFiles {
                throw WormholeError(.notificationLimitReached,
                    "cannot create an inotify instance: this user has reached the limit of inotify instances (\(limit("max_user_instances"))) or the process its descriptor limit; close other programs that watch files, or raise fs.inotify.max_user_instances with sysctl",
                    errno: errno)
            }
            throw WormholeError.system("create an inotify instance", errno)
        }
        var pipeEnds: [Int32] = [0, 0]
        if pipe(&pipeEnds) != 0 {
            let errno = Errno(rawValue: Glibc.errno)
            close(inotify)
            throw WormholeError.system("create the inotify reader's wake-up pipe", errno)
        }
        for end in pipeEnds { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        state.generation += 1
        let session = Session(inotify: inotify, wakeWriter: pipeEnds[1], generation: state.generation)
        state.session = session
        let wakeReader = pipeEnds[0]
        let thread = Thread { InotifyEngine.shared.run(session, wakeReader: wakeReader) }
        thread.name = "Wormhole inotify reader"
        thread.start()
        return session
    }

    /// Tells the reader thread to close its descriptors and exit; a later subscription
    /// starts a new session.
    private static func stopSession(_ state: inout State) {
        guard let session = state.session else { return }
        state.session = nil
        var byte: UInt8 = 1
        _ = write(session.wakeWriter, &byte, 1)
    }

    private static func addWatch(_ inotify: Int32, _ directory: String) throws(WormholeError) -> Int32 {
        let descriptor = inotify_add_watch(inotify, directory, watchMask)
        if descriptor >= 0 { return descriptor }
        let errno = Errno(rawValue: Glibc.errno)
        switch errno {
        case .noSpace:
            throw WormholeError(.notificationLimitReached,
                "cannot watch '\(directory)': this user has reached the limit of inotify watches (\(limit("max_user_watches"))); raise fs.inotify.max_user_watches with sysctl",
                path: directory, errno: errno)
        case .noSuchFileOrDirectory:
            throw WormholeError(.containerUnavailable, "cannot watch '\(directory)': it does not exist", path: directory, errno: errno)
        default:
            throw WormholeError.system("watch", errno, path: directory)
        }
    }

    private static func limit(_ name: String) -> String {
        let value = (try? String(contentsOfFile: "/proc/sys/fs/inotify/\(name)", encoding: .utf8))?
            .trimmingCharacters(in: .whitespacesAndNewlines)
        return "fs.inotify.\(name) = \(value ?? "?")"
    }

    // MARK: - Reader thread

    private func run(_ session: Session, wakeReader: Int32) {
        let capacity = 64 * 1024
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 8)
        defer {
            buffer.deallocate()
            close(session.inotify)
            close(wakeReader)
            close(session.wakeWriter)
        }
        var descriptors = [
            pollfd(fd: session.inotify, events: Int16(POLLIN), revents: 0),
            pollfd(fd: wakeReader, events: Int16(POLLIN), revents: 0),
        ]
        while true {
            descriptors[0].revents = 0
            descriptors[1].revents = 0
            let ready = poll(&descriptors, 2, -1)
            if ready < 0 {
                if Glibc.errno == EINTR { continue }
                return
            }
            if descriptors[1].revents != 0 { return }
            guard descriptors[0].revents & Int16(POLLIN) != 0 else {
                if descriptors[0].revents != 0 { return }
                continue
            }
            let count = read(session.inotify, buffer, capacity)
            if count < 0 {
                if Glibc.errno == EINTR || Glibc.errno == EAGAIN { continue }
                return
            }
            handle(Self.parse(buffer, count: count), generation: session.generation)
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

    /// Decides under the lock who hears what; calls the handlers after releasing it.
    private func handle(_ events: [RawEvent], generation: UInt64) {
        var deliveries: [(UInt64, Handler, DirectoryEvent)] = []
        var seen = Set<String>()
        func deliver(_ id: UInt64, _ subscriber: Subscriber, _ event: DirectoryEvent) {
            let key: String
            switch event {
            case .changed(let name): key = "\(id)/c/\(name)"
            case .rescan: key = "\(id)/r"
            case .failed: key = "\(id)/f"
            }
            if seen.insert(key).inserted { deliveries.append((id, subscriber.handler, event)) }
        }
        state.withLock { state in
            guard let session = state.session, session.generation == generation else { return }
            for event in events {
                if event.mask & UInt32(IN_Q_OVERFLOW) != 0 {
                    for (_, watch) in state.watches {
                        for (id, subscriber) in watch.subscribers { deliver(id, subscriber, .rescan) }
                    }
                    continue
                }
                guard let watch = state.watches[event.watch] else { continue }
                if event.mask & UInt32(IN_ATTRIB) != 0, let name = event.name {
                    for (id, subscriber) in watch.subscribers where subscriber.name == nil || subscriber.name == name {
                        deliver(id, subscriber, .changed(name: name))
                    }
                }
                let moved = event.mask & UInt32(IN_MOVE_SELF) != 0
                if moved || event.mask & UInt32(IN_IGNORED) != 0 {
                    // The directory was deleted or moved away: recreate it where it was
                    // and watch it again, so that observers go on hearing posts there.
                    state.watches[event.watch] = nil
                    if moved { _ = inotify_rm_watch(session.inotify, event.watch) }
                    do throws(WormholeError) {
                        try WormholeContainer.prepare(watch.directory, createParents: true)
                        let descriptor = try Self.addWatch(session.inotify, watch.directory)
                        for (id, subscriber) in watch.subscribers {
                            state.watches[descriptor, default: Watch(directory: watch.directory)].subscribers[id] = subscriber
                            state.watchOfSubscription[id] = descriptor
                            deliver(id, subscriber, .rescan)
                        }
                    } catch {
                        for (id, subscriber) in watch.subscribers {
                            state.watchOfSubscription[id] = nil
                            deliver(id, subscriber, .failed(error))
                        }
                    }
                }
            }
            if state.watches.isEmpty { Self.stopSession(&state) }
        }
        for (_, handler, event) in deliveries { handler(event) }
    }
}
