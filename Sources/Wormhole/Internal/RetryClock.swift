#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// Runs work after a delay, on one thread of its own, without a file descriptor.
///
/// A listener that could not read for want of a descriptor tries again later; that
/// "later" cannot be a Dispatch timer: libdispatch creates its epoll instance on the
/// first timer of the process, and a process out of descriptors at that moment is
/// stopped by it. This clock waits on a condition variable instead. Its thread starts
/// with the first retry and, with nothing to do, sleeps without waking. If the thread
/// cannot be started, the work waits for the next ``schedule(after:_:)``, which tries
/// again.
final class RetryClock: @unchecked Sendable {
    static let shared = RetryClock()

    private struct Item {
        let deadline: Date
        let work: @Sendable () -> Void
    }

    private let condition = NSCondition()
    private var items: [Item] = []
    private var started = false

    /// Runs `work` on the clock's thread once `delay` seconds have passed.
    func schedule(after delay: Double, _ work: @escaping @Sendable () -> Void) {
        condition.lock()
        items.append(Item(deadline: Date().addingTimeInterval(delay), work: work))
        if !started {
            // A plain pthread: nothing in its start needs a descriptor (the process may
            // have none left), and no name is set (glibc may open /proc to set one).
            var thread = pthread_t()
            let context = Unmanaged.passRetained(self).toOpaque()
            if pthread_create(&thread, nil, { context in
                Unmanaged<RetryClock>.fromOpaque(context!).takeRetainedValue().run()
            }, context) == 0 {
                started = true
                pthread_detach(thread)
            } else {
                Unmanaged<RetryClock>.fromOpaque(context).release()
            }
        }
        condition.signal()
        condition.unlock()
    }

    private func run() -> Never {
        condition.lock()
        while true {
            guard let next = items.indices.min(by: { items[$0].deadline < items[$1].deadline }) else {
                condition.wait()
                continue
            }
            if items[next].deadline > Date() {
                _ = condition.wait(until: items[next].deadline)
                continue
            }
            let item = items.remove(at: next)
            condition.unlock()
            item.work()
            condition.lock()
        }
    }
}
