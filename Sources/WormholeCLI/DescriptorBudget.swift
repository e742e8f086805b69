#if canImport(Glibc)
import Glibc
#endif
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The descriptors a command will hold, checked against the process's limit before it
/// starts: a listener out of descriptors would otherwise wait for one that never frees.
enum DescriptorBudget {
    /// What a listener holds: its claim and its log.
    static let perListener = 2
    /// The inotify instance, the container, a log opened by a pass, and room to spare.
    static let overhead = 8

    /// Raises the soft limit (up to the hard one) when `listeners` listeners need more
    /// than it allows; throws, naming the figures and the fix, when even the hard limit
    /// is too low.
    static func reserve(listeners: Int) throws(CommandFailure) {
        let open = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? 3
        let needed = open + listeners * perListener + overhead
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur < rlim_t(needed) else { return }
        if limit.rlim_max >= rlim_t(needed) {
            limit.rlim_cur = rlim_t(needed)
            if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 { return }
        }
        throw CommandFailure(
            "listening to \(listeners) identifier\(listeners == 1 ? "" : "s") needs about \(needed) file descriptors (\(perListener) for each, \(open) open already, \(overhead) to spare), but this process may open only \(limit.rlim_max) ('ulimit -n'); raise the limit (ulimit -n \(max(needed, 1024))), or listen to fewer identifiers in one command")
    }
}
