import Dispatch

/// Where the asynchronous API runs what blocks: threads of their own, never a thread of
/// Swift's cooperative pool (Architecture.md, "One concurrency model").
///
/// Every back-end call is synchronous and may block its thread: a few system calls on the
/// shared directory, which can wait for another process's `flock`, or a round trip to
/// PostgreSQL. An `async` call of the API hands that same synchronous call to this
/// executor and suspends until it returns, so that a writer stopped while holding a log's
/// lock, or a slow server, holds one of these threads, not the pool every task shares.
/// Dispatch makes another thread when all of them are blocked.
package enum BlockingWork {
    private static let queue = DispatchQueue(label: "Wormhole.blocking", attributes: .concurrent)

    /// Runs `body` on a thread of its own and returns what it returned, or throws what it
    /// threw; the caller is suspended meanwhile.
    package static func run<Value: Sendable>(_ body: @escaping @Sendable () throws(WormholeError) -> Value) async throws(WormholeError) -> Value {
        let result: Result<Value, WormholeError> = await withCheckedContinuation { continuation in
            queue.async {
                do throws(WormholeError) {
                    continuation.resume(returning: .success(try body()))
                } catch {
                    continuation.resume(returning: .failure(error))
                }
            }
        }
        return try result.get()
    }

    /// Runs `body`, which blocks without throwing (a cancel that waits for a running
    /// handler), on a thread of its own.
    package static func run(_ body: @escaping @Sendable () -> Void) async {
        await withCheckedContinuation { continuation in
            queue.async {
                body()
                continuation.resume()
            }
        }
    }
}

/// A value handed to ``BlockingWork`` by its only user, which waits for the work to end
/// before it touches the value again (a reader, used by one consumer at a time).
package struct HandedOver<Value>: @unchecked Sendable {
    package let value: Value
    package init(_ value: Value) { self.value = value }
}
