#if canImport(Glibc)
import Glibc
#endif

/// Starts work on a plain, detached POSIX thread of its own.
///
/// Foundation's `Thread` is not in `FoundationEssentials`, the part of Foundation this
/// library needs; and a plain thread needs no file descriptor to start (a process may
/// have none left when a listener retries). No name is set: glibc's
/// `pthread_setname_np` is not visible through Swift's Glibc module.
package enum DetachedThread {
    /// Runs `body` on a new detached thread.
    /// - Returns: 0, or the error number of `pthread_create` when no thread could be
    ///   started (`body` is then not run).
    package static func start(_ body: @escaping @Sendable () -> Void) -> Int32 {
        final class Start {
            package let body: @Sendable () -> Void
            package init(_ body: @escaping @Sendable () -> Void) { self.body = body }
        }
        let context = Unmanaged.passRetained(Start(body)).toOpaque()
        var thread = pthread_t()
        let created = pthread_create(&thread, nil, { context in
            Unmanaged<Start>.fromOpaque(context!).takeRetainedValue().body()
            return nil
        }, context)
        guard created == 0 else {
            Unmanaged<Start>.fromOpaque(context).release()
            return created
        }
        pthread_detach(thread)
        return 0
    }
}
