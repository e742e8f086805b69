@_spi(Backend) import WormholeCore
@_spi(Backend) import WormholeFiles
/// A blocking request made on the reader thread itself: the thread serves the process's
/// events while it waits.
///
/// Why it exists: a listener or responder without a queue runs on the reader thread, and
/// a blocking request made there waits for a reply that only that thread delivers; so
/// the thread goes on serving the process's events (the reply's among them) until its
/// reply is in, instead of blocking in the request with every other listener of the
/// process waiting behind it. It is a part of its own, so that it can be kept or removed
/// on its measurements.
extension ReplyRouter {
    /// ``WaitMeans/nested`` when the calling thread is the reader thread (the reader
    /// thread then delivers the replies: held until the request ends); `nil` elsewhere.
    func prepareNestedWait() throws(WormholeError) -> WaitMeans? {
        guard transiting.isOnWakingThread else { return nil }
        try holdReaderThread()
        return .nested
    }

    /// Waits for `reply` on the reader thread (`thread`), serving the process's events.
    func waitServingNested(for reply: PendingReply, thread: UInt) -> ReplyOutcome {
        let transiting = self.transiting
        reply.attach(thread: thread) { transiting.wakeWakingThread() }
        transiting.serveWakeUps { reply.outcome != nil }
        return reply.wait()
    }
}
