#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
@_spi(Backend) import WormholeCore

/// The file back end's change waiter (``WormholeTransiting/takeChangeWaiter(identifier:)``):
/// what a thread blocked in a request waits on, so that the reply's append wakes that
/// thread itself: an inotify instance of its own watching the reply log, and a
/// ``WakeChannel`` on which a reply delivered by another thread wakes it.
///
/// While the router's reply listener is subscribed to the process's reader thread (a
/// request that needs it, or an idle router), that thread is woken by the same append and
/// delivers the reply if it gets there first; otherwise the waiters alone read the
/// replies. A round trip is two wake-ups, the responder's and the requester's, not four.
///
/// Waiters belong to the process, not to a router: an inotify instance counts against a
/// limit that every process of the user shares (128 by default), so there are never more
/// than ``maximumInUse`` (the requests blocked beyond that wait for the reader thread, as
/// asynchronous ones do), and at most ``maximumKept`` idle ones are kept, each watching
/// the log of its last request. Three descriptors each.
final class LogWaiter: WormholeChangeWaiter {
    private let inotify: Inotify
    private let channel: WakeChannel
    /// The log watched and its watch; replaced when the log was (compaction renames a new
    /// file over it), or when the waiter serves a request of another identifier. Touched
    /// only by the thread using the waiter.
    private nonisolated(unsafe) var path: String?
    private nonisolated(unsafe) var watch: Int32 = -1

    private init?() {
        guard let inotify = try? Inotify() else { return nil }
        guard let channel = try? WakeChannel() else {
            inotify.close()
            return nil
        }
        self.inotify = inotify
        self.channel = channel
    }

    deinit {
        inotify.close()
        channel.close()
    }

    // MARK: - The process's waiters

    static let maximumInUse = 8
    static let maximumKept = 4
    private static let pool = Locked<(idle: [LogWaiter], inUse: Int)>(([], 0))

    /// A waiter watching the log at `path`, and whether it was already watching it before
    /// this call (then an append since is an event in its queue); `nil` when
    /// ``maximumInUse`` are in use, or the kernel gives no instance, channel or watch.
    static func take(watching path: String) -> (waiter: LogWaiter, watchedBefore: Bool)? {
        let (kept, allowed) = pool.withLock { pool -> (LogWaiter?, Bool) in
            guard pool.inUse < maximumInUse else { return (nil, false) }
            pool.inUse += 1
            let index = pool.idle.lastIndex { $0.path == path } ?? pool.idle.indices.last
            return (index.map { pool.idle.remove(at: $0) }, true)
        }
        guard allowed else { return nil }
        if let kept, kept.path == path { return (kept, true) }
        guard let waiter = kept ?? LogWaiter(), waiter.watch(path) else {
            pool.withLock { $0.inUse -= 1 }
            return nil
        }
        return (waiter, false)
    }

    /// Gives this waiter, taken with ``take(watching:)``, back to the process's pool.
    package func giveBack() {
        Self.pool.withLock { pool in
            pool.inUse -= 1
            if pool.idle.count < Self.maximumKept { pool.idle.append(self) }
        }
    }

    // MARK: - Waiting

    /// Wakes the thread waiting in ``wait(milliseconds:spinningUntil:)``, from another thread.
    package func wake() { channel.wake() }

    /// Waits until the log is written, ``wake()`` is called, or `milliseconds` pass; then
    /// empties what woke it, so that the next wait blocks. Events are read before the
    /// caller reads the log: an append after that read wakes the next wait. Returns
    /// whether the log may have been replaced (an event other than a write, or none
    /// within the time: a replacement whose watch was missed): read it at its name.
    ///
    /// Until `spinEnd` (``MonotonicCondition/now()``; 0: not at all) it polls instead of
    /// sleeping, yielding its CPU between polls to any thread waiting for one there: an
    /// append meanwhile finds no thread to wake, and this one none to be woken.
    package func wait(milliseconds: Int32, spinningUntil spinEnd: UInt64) -> Bool {
        var outcome = channel.wait(alongside: inotify.descriptor, milliseconds: spinEnd == 0 ? milliseconds : 0)
        while spinEnd != 0, case .success(let ready) = outcome, !ready.events, !ready.woken {
            guard MonotonicCondition.now() < spinEnd else {
                outcome = channel.wait(alongside: inotify.descriptor, milliseconds: milliseconds)
                break
            }
            sched_yield()
            outcome = channel.wait(alongside: inotify.descriptor, milliseconds: 0)
        }
        guard case .success(let ready) = outcome else { return true }
        if ready.woken { channel.drain() }
        guard ready.events else { return !ready.woken }
        return readEvents()
    }

    /// Reads the events that are there; any of the current watch but a write means the
    /// log may have been replaced, and its path is watched again. (Events of a watch
    /// given up, such as its IN_IGNORED, are not about this log.)
    private func readEvents() -> Bool {
        let capacity = 4096
        var replaced = false
        withUnsafeTemporaryAllocation(byteCount: capacity, alignment: 8) { buffer in
            guard case .success(let count) = inotify.read(into: buffer.baseAddress!, capacity: capacity) else {
                replaced = true
                return
            }
            replaced = InotifyEngine.parse(buffer.baseAddress!, count: count).contains { $0.watch == watch && $0.mask & UInt32(IN_MODIFY) == 0 }
        }
        if replaced, let path { _ = watch(path) }
        return replaced
    }

    /// Watches the file now at `path` instead of what was watched (a new watch descriptor
    /// when it is another file). With no file there yet (no reply was ever written to the
    /// identifier), watches its directory for one to appear, and then the file (an event
    /// of that watch is read as a replacement). Returns whether it could.
    private func watch(_ path: String) -> Bool {
        let fileMask = UInt32(IN_MODIFY) | UInt32(IN_ATTRIB) | UInt32(IN_DELETE_SELF) | UInt32(IN_MOVE_SELF)
        var made = try? inotify.addWatch(path, mask: fileMask)
        if made == nil, let slash = path.lastIndex(of: "/"),
           let directory = try? inotify.addWatch(String(path[..<slash]), mask: UInt32(IN_CREATE) | UInt32(IN_MOVED_TO) | UInt32(IN_ONLYDIR)) {
            // Created in between: the file's watch after all.
            if let file = try? inotify.addWatch(path, mask: fileMask) {
                if directory != watch { inotify.removeWatch(directory) }
                made = file
            } else {
                made = directory
            }
        }
        guard let made else {
            if watch >= 0 { inotify.removeWatch(watch) }
            (self.path, watch) = (nil, -1)
            return false
        }
        if watch >= 0, watch != made { inotify.removeWatch(watch) }
        (self.path, watch) = (path, made)
        return true
    }
}
