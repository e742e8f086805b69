#if canImport(Glibc)
import Glibc
#endif
@_spi(Backend) import WormholeCore

/// The reply-spin heuristic: decides whether a blocked requester polls for its reply
/// instead of sleeping, and for how long.
///
/// It stays because back-to-back round trips take 28 to 54 µs with it against 95 to 127 µs
/// without, beside a D-Bus call's 167 to 180 µs in the same rounds (Performance.md, "The
/// reply polling restored"): a requester whose CPU is awake anyway and whose replies come
/// fast saves its wake-up by polling for ``WormholeConfiguration/replySpinTime``. A part of
/// its own, used by the router at the blocked wait alone.
final class ReplySpinPolicy: Sendable {
    /// How long a blocked requester polls for its reply (nanoseconds; 0: never).
    let spinTime: UInt64
    /// How long the recent blocking requests took, from their pass to their outcome in
    /// hand (an average weighing the latest an eighth); and when each requesting
    /// thread's last request ended, on the monotonic clock and on the thread's CPU clock.
    private struct Polling {
        var recentWait: UInt64?
        var lastEnded: [UInt: (wall: UInt64, cpu: UInt64)] = [:]
        /// The requests that polled (for the tests).
        var polled = 0
    }
    private let polling = Locked(Polling())

    /// - Parameter spinTime: ``WormholeConfiguration/replySpinTime``, in seconds; no
    ///   polling on a process that runs on one CPU.
    init(spinTime: Double) {
        self.spinTime = Self.mayRunOnAnotherCPU ? UInt64(spinTime * 1e9) : 0
    }

    /// When a blocked requester of `reply` stops polling and sleeps (0: it does not poll):
    /// ``WormholeConfiguration/replySpinTime`` after the pass, when both hold:
    ///
    /// - The recent requests' replies came within that time. A responder that answers
    ///   slowly, or none at all, stops the polling after a request or two; once replies
    ///   come fast again (they are timed when the requester sleeps too), it resumes.
    /// - The calling thread ran, rather than slept, for at least half the time since its
    ///   last request of the identifier ended (back-to-back requests, or work between
    ///   them; a thread's first request does not poll). Its CPU is awake then, and
    ///   polling saves its wake-up. A thread that slept between requests sleeps for the
    ///   reply too: its responder has likely gone to sleep meanwhile and must be woken
    ///   anyway, and the scheduler may then run both on one CPU, which a polling
    ///   requester keeps busy (Performance.md measures both).
    func spinEnd(of reply: PendingReply, thread: UInt) -> UInt64 {
        guard spinTime > 0 else { return 0 }
        let (recent, last) = polling.withLock { ($0.recentWait, $0.lastEnded[thread]) }
        guard let recent, recent <= spinTime, let last else { return 0 }
        // (A thread that ended and left its number to a new one has used less CPU.)
        let cpu = Self.threadCPUTime()
        guard cpu >= last.cpu, cpu - last.cpu >= (reply.began &- last.wall) / 2 else { return 0 }
        polling.withLock { $0.polled += 1 }
        return reply.began &+ spinTime
    }

    /// How many requests polled for their reply.
    var polledRequests: Int { polling.withLock { $0.polled } }

    /// Counts how long `reply` took, from its pass to its outcome (the first request's
    /// time is the average's start), and when the calling thread's request ended. (A few
    /// threads make requests; past 64, all are forgotten, which costs each of them one
    /// request without polling.) Nothing is counted when the requester never polls.
    func noteWait(of reply: PendingReply, thread: UInt) {
        guard spinTime > 0 else { return }
        let now = MonotonicCondition.now(), cpu = Self.threadCPUTime()
        polling.withLock { polling in
            let took = now &- reply.began
            polling.recentWait = polling.recentWait.map { $0 - $0 / 8 + took / 8 } ?? took
            if polling.lastEnded.count >= 64, polling.lastEnded[thread] == nil { polling.lastEnded.removeAll(keepingCapacity: true) }
            polling.lastEnded[thread] = (now, cpu)
        }
    }

    /// Nanoseconds of CPU the calling thread has used.
    private static func threadCPUTime() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }

    /// Whether this process may run on more than one CPU (its affinity mask, which
    /// `taskset`, cgroups' cpusets and containers narrow): on one, a polling requester
    /// would only take the CPU from its responder.
    /// (`sched_getaffinity` needs `_GNU_SOURCE`, which Swift's Glibc module is built
    /// without: it is looked up by name. Without it, the CPUs online count.)
    static let mayRunOnAnotherCPU: Bool = {
        typealias GetAffinity = @convention(c) (pid_t, Int, UnsafeMutableRawPointer?) -> Int32
        var mask = [UInt64](repeating: 0, count: 16)   // 1,024 CPUs, as glibc's cpu_set_t
        if let process = dlopen(nil, RTLD_NOW), let symbol = dlsym(process, "sched_getaffinity") {
            let getAffinity = unsafeBitCast(symbol, to: GetAffinity.self)
            if mask.withUnsafeMutableBytes({ getAffinity(0, $0.count, $0.baseAddress) }) == 0 {
                return mask.reduce(0) { $0 + $1.nonzeroBitCount } > 1
            }
        }
        return sysconf(Int32(_SC_NPROCESSORS_ONLN)) > 1
    }()
}
