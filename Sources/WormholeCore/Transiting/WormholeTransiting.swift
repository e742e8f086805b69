#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Storage and wake-ups for a `Wormhole`: the pluggable layer, as MMWormhole's
/// `MMWormholeTransiting`. A service provider interface: a back end of your own
/// imports it with `@_spi(Backend) import Wormhole`.
///
/// `FileTransiting` (a shared directory and inotify) is the default; the PostgreSQL
/// back end is another. A back end implements this protocol and is passed to
/// `Wormhole(transiting:jsonCoding:)`; the `Wormhole` API does not change. Whatever the
/// back end, it must keep the guarantees: one order per identifier that every reader
/// sees, each record delivered to a reader once, no partial record ever visible, and
/// history bounded by the configuration.
///
/// Every requirement is synchronous and may block its caller's thread for as long as the
/// back end needs (a few system calls; a round trip to a server). The `Wormhole` API
/// calls them from its synchronous methods on the caller's thread, and from its
/// asynchronous ones on threads of its own, never on Swift's cooperative pool: a back end
/// never needs an `async` twin of a requirement. A back end whose events arrive on a
/// thread that must not block (an event loop) moves them to another thread before it
/// calls an observation's handler.
@_spi(Backend) public protocol WormholeTransiting: Sendable {
    /// The limits this back end enforces.
    var configuration: WormholeConfiguration { get }

    /// Stores a message under `identifier` with `attributes`, assigns its sequence
    /// number, then wakes the identifier's observers. Returns the stored record.
    func append(_ payload: Data, kind: WormholePayloadKind, identifier: String,
                attributes: WormholeRecordAttributes) throws(WormholeError) -> WormholeRecord

    /// Stores `batch` under `identifier` as consecutive messages, for every listener,
    /// never expiring; returns their sequence numbers (empty for an empty batch). A back
    /// end that can writes them at once (the default implementation passes them one by one).
    func append(batch: [(payload: Data, kind: WormholePayloadKind)], identifier: String) throws(WormholeError) -> Range<UInt64>

    /// The newest message of `identifier` that was not cleared, or `nil`.
    func latestRecord(identifier: String) throws(WormholeError) -> WormholeRecord?

    /// Makes the retained messages of `identifier` invisible to ``WormholeTransiting/latestRecord(identifier:)-63adk``
    /// and to readers that start later. Does not wake observers.
    func clearMessageContents(identifier: String) throws(WormholeError)

    /// Clears every identifier.
    func clearAllMessageContents() throws(WormholeError)

    /// What is retained for each identifier that has a log.
    func summaries() throws(WormholeError) -> [WormholeIdentifierSummary]

    /// A reader of `identifier`'s records from `start` on. Call it after
    /// ``WormholeTransiting/observe(identifier:handler:)-4fmmi`` so that no wake-up is missed in between.
    func makeReader(identifier: String, startingFrom start: WormholeStartingPoint) throws(WormholeError) -> any WormholeTransitingReader

    /// A durable reader: it resumes after the last message acknowledged under `name`
    /// (``WormholeTransitingReader/acknowledge(_:)-2zic3``), or starts at `start` the first time
    /// the name is used. Throws ``WormholeError/Code/durableNameInUse`` while another
    /// reader holds the name. The default throws: a back end without durable positions.
    func makeReader(identifier: String, startingFrom start: WormholeStartingPoint, durableName name: String) throws(WormholeError) -> any WormholeTransitingReader

    /// Who listens to `identifier` (every identifier when `nil`): live listeners and
    /// durable names. The default reports nothing.
    func listeners(identifier: String?) throws(WormholeError) -> [WormholeListenerStatus]

    /// Joins the work queue `name` of `identifier` as a new member (creating the queue,
    /// the first time, at `start`): see ``WormholeTransitingWorkQueue``. The default
    /// throws: a back end without work queues.
    func joinWorkQueue(identifier: String, name: String, startingFrom start: WormholeStartingPoint) throws(WormholeError) -> any WormholeTransitingWorkQueue

    /// The work queues of `identifier` (of every identifier when `nil`). The default
    /// reports none.
    func workQueues(identifier: String?) throws(WormholeError) -> [WormholeWorkQueueStatus]

    /// Removes the durable position `name` of `identifier` (of every identifier when
    /// `nil`); returns how many were removed. Refused while its listener runs.
    func forgetDurableListener(named name: String, identifier: String?) throws(WormholeError) -> Int

    /// Calls `handler` whenever records may have been added to `identifier`. The file
    /// back end calls it on its inotify reader thread, where listeners without a queue
    /// then read and run; a back end whose events arrive on a thread that must not block
    /// (an event loop) moves them to another thread first.
    func observe(identifier: String, handler: @escaping @Sendable (WormholeTransitingEvent) -> Void) throws(WormholeError) -> any WormholeTransitingObservation

    // MARK: Capabilities: what a back end may offer beyond the requirements above. Each
    // has a default for a back end without it, so that the layer above asks the back
    // end, never its type.

    /// The directory that holds the records, for a back end that keeps them in one; the
    /// default is `nil`.
    var containerDirectory: String? { get }

    /// Whether a listener without a queue of its own may read and run its handler on the
    /// thread that ``observe(identifier:handler:)-4fmmi`` calls its handler on (the file
    /// back end's inotify reader thread), with no hop between a wake-up and its handling.
    /// The default is `false`: a back end whose events arrive on a thread that must not
    /// block (an event loop).
    var handlesOnTheWakingThread: Bool { get }

    /// Calls `handler` with each identifier whose records first appear after this call,
    /// or with `nil` when identifiers may have appeared that it cannot name (events were
    /// lost): what a tap of every identifier follows (`wormhole listen --all`). The
    /// default throws: a back end without a container of its own to watch.
    func observeIdentifiers(handler: @escaping @Sendable (String?) -> Void) throws(WormholeError) -> any WormholeTransitingObservation

    /// A reader for a tap of every identifier: as ``makeReader(identifier:startingFrom:)``
    /// (the default), but where the back end can, it keeps no claim and holds nothing
    /// open between reads, so that following thousands of identifiers costs nothing
    /// while they are quiet.
    func makeTapReader(identifier: String, startingFrom start: WormholeStartingPoint) throws(WormholeError) -> any WormholeTransitingReader

    /// The error that says the container can no longer be used (an administrator revoked
    /// its share), or `nil`: the default, for a back end without one.
    func containerRevocation() -> WormholeError?

    /// Whether ``takeChangeWaiter(identifier:)`` gives waiters: then a reply listener is
    /// woken only while a request needs it, since the threads blocked in requests read
    /// their replies themselves. The default is `false`.
    var offersChangeWaiters: Bool { get }

    /// A waiter for the calling thread, blocked in a request, on `identifier`'s records (the
    /// replies), and whether it watched them before this call (then a change since is in
    /// its queue); `nil` when the back end has none, or none is free now (the back end's
    /// waking thread then delivers the reply). The default is `nil`.
    func takeChangeWaiter(identifier: String) -> (waiter: any WormholeChangeWaiter, watchedBefore: Bool)?

    /// Whether the calling thread is the one this back end calls observation handlers on
    /// (where listeners without a queue run): a blocking request made there must serve the
    /// back end's wake-ups while it waits (``serveWakeUps(until:)``). The default is `false`.
    var isOnWakingThread: Bool { get }

    /// Serves the back end's wake-ups on the calling thread, its waking thread, until
    /// `done` returns `true`; ``wakeWakingThread()`` makes it look at `done` again. The
    /// default returns at once.
    func serveWakeUps(until done: () -> Bool)

    /// Wakes the waking thread, serving in ``serveWakeUps(until:)``, to look at its
    /// condition again. The default does nothing.
    func wakeWakingThread()
}

/// What a thread blocked in a request waits on so that the change of the records it waits
/// for wakes it itself (``WormholeTransiting/takeChangeWaiter(identifier:)``): the file
/// back end's watches the reply log with an inotify instance of its own.
@_spi(Backend) public protocol WormholeChangeWaiter: AnyObject, Sendable {
    /// Waits until the records change, ``wake()`` is called, or `milliseconds` pass; until
    /// `spinEnd` (nanoseconds on the monotonic clock; 0: not at all) it polls for the change
    /// instead of sleeping. Returns whether what holds them may have been replaced: read
    /// them again at their name.
    func wait(milliseconds: Int32, spinningUntil spinEnd: UInt64) -> Bool
    /// Wakes the thread waiting in ``wait(milliseconds:spinningUntil:)``, from another thread.
    func wake()
    /// Gives the waiter back, once its request has its outcome.
    func giveBack()
}

/// Defaults: a batch passed one message at a time; a message for every listener.
@_spi(Backend) extension WormholeTransiting {
    public func append(batch: [(payload: Data, kind: WormholePayloadKind)], identifier: String) throws(WormholeError) -> Range<UInt64> {
        var range: Range<UInt64>?
        for entry in batch {
            let sequence = try append(entry.payload, kind: entry.kind, identifier: identifier).sequence
            range = (range?.lowerBound ?? sequence)..<(sequence + 1)
        }
        return range ?? 0..<0
    }

    /// Stores a message for every listener, that never expires.
    public func append(_ payload: Data, kind: WormholePayloadKind, identifier: String) throws(WormholeError) -> WormholeRecord {
        try append(payload, kind: kind, identifier: identifier, attributes: .message)
    }
}

/// Defaults for a back end without durable listeners, listener status or work queues.
@_spi(Backend) extension WormholeTransiting {
    public func makeReader(identifier: String, startingFrom start: WormholeStartingPoint, durableName name: String) throws(WormholeError) -> any WormholeTransitingReader {
        throw WormholeError(.invalidConfiguration, "this back end (\(type(of: self))) does not keep durable listener positions")
    }

    public func listeners(identifier: String?) throws(WormholeError) -> [WormholeListenerStatus] { [] }

    public func forgetDurableListener(named name: String, identifier: String?) throws(WormholeError) -> Int {
        throw WormholeError(.invalidConfiguration, "this back end (\(type(of: self))) does not keep durable listener positions")
    }
    public func joinWorkQueue(identifier: String, name: String, startingFrom start: WormholeStartingPoint) throws(WormholeError) -> any WormholeTransitingWorkQueue {
        throw WormholeError(.invalidConfiguration, "this back end (\(type(of: self))) does not keep work queues")
    }

    public func workQueues(identifier: String?) throws(WormholeError) -> [WormholeWorkQueueStatus] { [] }
}

/// The capabilities' defaults: a back end without a directory of its own.
@_spi(Backend) extension WormholeTransiting {
    public var containerDirectory: String? { nil }
    public var handlesOnTheWakingThread: Bool { false }

    public func observeIdentifiers(handler: @escaping @Sendable (String?) -> Void) throws(WormholeError) -> any WormholeTransitingObservation {
        throw WormholeError(.containerUnavailable, "listening to every identifier needs a container directory; name the identifiers instead")
    }

    public func makeTapReader(identifier: String, startingFrom start: WormholeStartingPoint) throws(WormholeError) -> any WormholeTransitingReader {
        try makeReader(identifier: identifier, startingFrom: start)
    }

    public func containerRevocation() -> WormholeError? { nil }
    public var offersChangeWaiters: Bool { false }
    public func takeChangeWaiter(identifier: String) -> (waiter: any WormholeChangeWaiter, watchedBefore: Bool)? { nil }
    public var isOnWakingThread: Bool { false }
    public func serveWakeUps(until done: () -> Bool) {}
    public func wakeWakingThread() {}
}

/// A position in one identifier's records. Used by one consumer at a time.
@_spi(Backend) public protocol WormholeTransitingReader: AnyObject {
    /// The records after the position, at most `maximumCount`, oldest first, each either
    /// a record or the error that made it unreadable; the position moves past them.
    /// Empty when there is nothing new.
    func read(maximumCount: Int) throws(WormholeError) -> [Result<WormholeRecord, WormholeError>]

    /// Releases the reader's resources; later reads return nothing.
    func close()

    /// The consumer has handled the record `sequence` (the latest one read): a durable
    /// reader moves its stored position there. Others ignore it.
    ///
    /// - Throws: when the position could not be stored (a full disk, a lost connection):
    ///   the position stays where it was, so the record comes again when the name
    ///   resumes; nothing is skipped.
    func acknowledge(_ sequence: UInt64) throws(WormholeError)

    /// Whether records may be waiting although the last read returned fewer than it was
    /// asked for: a reader that stopped at the end of a replaced file (so that one batch
    /// never spans two logs) moves to the new one at the next read, and nothing else
    /// will wake its consumer for it. A consumer reads again while this is `true`.
    var mayHaveMore: Bool { get }

    /// The file (or table) behind the position may have been replaced: the next read,
    /// once it has read what it holds to the end, looks at what is there now.
    func invalidate()

    /// When the last read caught up without publishing its position (a listener's claim
    /// is written at most once per idle interval), how long until a read publishes it:
    /// the consumer reads again after that many seconds, so that `status` shows an idle
    /// listener's exact position. `nil` (the default) when the position is published.
    var unpublishedPositionDelay: Double? { get }
}

@_spi(Backend) extension WormholeTransitingReader {
    public func invalidate() {}
    public func acknowledge(_ sequence: UInt64) throws(WormholeError) {}
    public var mayHaveMore: Bool { false }
    public var unpublishedPositionDelay: Double? { nil }
}

/// What an observation reports.
@_spi(Backend) public enum WormholeTransitingEvent: Sendable {
    /// Records may have been added: read again.
    case wake
    /// What holds the records may have been replaced (a compaction, a deletion, lost
    /// events): tell the reader (``WormholeTransitingReader/invalidate()``), then read.
    case replaced
    /// Observing ended with this error.
    case failed(WormholeError)
}

/// A registration made by ``WormholeTransiting/observe(identifier:handler:)-4fmmi``.
@_spi(Backend) public protocol WormholeTransitingObservation: Sendable {
    /// Stops the wake-ups and releases what they held.
    func cancel()
}
