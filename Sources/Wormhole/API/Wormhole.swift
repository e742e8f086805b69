import Dispatch
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Logging
import Synchronization
@_spi(Backend) import WormholeCore
@_spi(Backend) import WormholeFiles

/// Messages between processes through a shared directory: the app and its extensions,
/// a daemon and its helpers.
///
/// A message is persisted under an identifier, then a payload-free notification wakes
/// every listener, in this process and in others, which reads it from the store.
///
/// ```swift
/// struct Note: Codable, Sendable { var text: String }
///
/// let wormhole = try Wormhole(applicationGroupIdentifier: "group.com.example.notes",
///                             optionalDirectory: "wormhole")
/// let token = try wormhole.listenForMessage(withIdentifier: "note", as: Note.self) { note in
///     print(note.text)
/// }
/// try wormhole.passMessage(Note(text: "hi"), identifier: "note")
/// token.cancel()
/// ```
///
/// Every listener receives every message passed while it listens, exactly once, in the
/// one order per identifier that all listeners agree on. `Data` and `String` messages
/// travel as their bytes; other types as JSON, with sorted keys and ISO 8601 dates
/// unless the wormhole is given another ``JSONCoding``. A listener lives until its token is
/// cancelled, ``stopListeningForMessage(withIdentifier:)`` is called, or the wormhole is
/// released: the wormhole keeps the tokens, so dropping one does not stop its listener.
public final class Wormhole: Sendable {
    /// Limits that every process sharing a directory should agree on.
    public typealias Configuration = WormholeConfiguration
    /// Where a listener starts reading.
    public typealias StartingPoint = WormholeStartingPoint
    /// The JSON encoder and decoder for messages that are neither `Data` nor `String`.
    public typealias JSONCoding = WormholeJSONCoding

    /// Where messages are stored and how listeners are woken: the back end (a service
    /// provider interface, `@_spi(Backend)`).
    @_spi(Backend) public let transiting: any WormholeTransiting

    /// How this wormhole encodes and decodes messages that are neither `Data` nor
    /// `String`: ``WormholeJSONCoding/standard`` unless the initializer was given another.
    public let jsonCoding: JSONCoding

    /// The shared directory, when the back end keeps its records in one (the default
    /// back end does; PostgreSQL's does not).
    public var directory: String? { transiting.containerDirectory }

    /// The Darwin-style notification center of the shared directory (payload-free
    /// notifications by name, the namespace this wormhole's wake-ups share), when the
    /// back end keeps its records in a directory; `nil` otherwise. Made at its first use.
    public var notificationCenter: DarwinNotificationCenter? {
        if let made = madeNotificationCenter.withLock({ $0 }) { return made }
        // Opened outside the lock (it opens the directory); the first one stored is kept.
        guard let directory, let center = try? DarwinNotificationCenter(directory: directory) else { return nil }
        return madeNotificationCenter.withLock { made in
            if made == nil { made = center }
            return made
        }
    }
    private let madeNotificationCenter = Locked<DarwinNotificationCenter?>(nil)

    private struct Registration {
        let identifier: String
        let cancel: @Sendable () -> Void
    }

    private let registrations = Locked<[UInt64: Registration]>([:])
    /// The listeners of reply identifiers that complete this wormhole's requests.
    let replyRouters = ReplyRouters()
    private let nextRegistration = Atomic<UInt64>(1)
    /// What ``waitUntilIdle(for:)`` waits on: the handlers of this wormhole's listeners
    /// and work queue members, counted.
    let handlingActivity = HandlingActivity()

    /// A wormhole in an application group's container, as MMWormhole's
    /// `initWithApplicationGroupIdentifier:optionalDirectory:`.
    ///
    /// The container is found as ``WormholeContainer`` describes: the same directory for
    /// every process of the user, whatever its environment (`/run/user/<uid>/app-groups/<group>`
    /// by default), or the group's shared container when an administrator shared it
    /// with a Unix group this process is in (`wormhole share`).
    ///
    /// - Parameters:
    ///   - applicationGroupIdentifier: The group every cooperating process names.
    ///   - optionalDirectory: A sub-directory of the container for this wormhole's files.
    ///   - configuration: Retention and size limits.
    ///   - jsonCoding: The JSON form of messages that are neither `Data` nor `String`
    ///     (``WormholeJSONCoding/standard`` by default).
    ///   - createIfMissing: Whether to create the container when it does not exist
    ///     (`true` by default). A program that only reads passes `false`: it then gets
    ///     ``WormholeError/Code/containerUnavailable`` (with `ENOENT`) instead of an
    ///     empty container that no one else uses.
    /// - Throws: ``WormholeError`` when the group or directory name is invalid or the
    ///   container is unsafe or cannot be created.
    public convenience init(
        applicationGroupIdentifier: String,
        optionalDirectory: String? = nil,
        configuration: Configuration = Configuration(),
        jsonCoding: JSONCoding = .standard,
        createIfMissing: Bool = true
    ) throws(WormholeError) {
        var path: String
        if createIfMissing {
            path = try WormholeContainer.directory(forApplicationGroupIdentifier: applicationGroupIdentifier)
        } else {
            let resolution = try WormholeContainer.resolve(applicationGroupIdentifier: applicationGroupIdentifier)
            // In a sandbox that did not bind the container: say so, not "nothing was sent".
            if let unbound = WormholeContainer.unboundInSandbox(resolution, applicationGroupIdentifier: applicationGroupIdentifier) { throw unbound }
            path = resolution.path
        }
        if let optionalDirectory, !optionalDirectory.isEmpty {
            try Identifier.validate(optionalDirectory, kind: "optional directory")
            path += "/" + optionalDirectory
        }
        try self.init(directory: path, configuration: configuration, jsonCoding: jsonCoding, createIfMissing: createIfMissing)
    }

    /// A wormhole in `directory`, created (0700) when it is missing, as MMWormhole's
    /// wormholes in a directory of one's choosing. A relative path is taken from the
    /// current directory.
    ///
    /// ```swift
    /// let wormhole = try Wormhole(directory: "/srv/notes/wormhole")
    /// ```
    ///
    /// - Parameters:
    ///   - directory: The shared directory; every cooperating process names the same.
    ///   - configuration: Retention and size limits.
    ///   - jsonCoding: The JSON form of messages that are neither `Data` nor `String`
    ///     (``WormholeJSONCoding/standard`` by default).
    ///   - createIfMissing: Whether to create the directory when it does not exist
    ///     (`true` by default; see ``init(applicationGroupIdentifier:optionalDirectory:configuration:jsonCoding:createIfMissing:)``).
    /// - Throws: ``WormholeError`` when the directory is unsafe (a symbolic link, another
    ///   user's, writable by others) or cannot be created, or the configuration is out of
    ///   range.
    public convenience init(directory: String, configuration: Configuration = Configuration(),
                            jsonCoding: JSONCoding = .standard, createIfMissing: Bool = true) throws(WormholeError) {
        self.init(transiting: try FileTransiting(directory: directory, configuration: configuration, createIfMissing: createIfMissing), jsonCoding: jsonCoding)
    }

    /// A wormhole over any back end: ``FileTransiting``, the PostgreSQL back end of the
    /// `WormholePostgres` product, or a ``WormholeTransiting`` of your own.
    ///
    /// - Parameters:
    ///   - transiting: Where messages are stored and how listeners are woken.
    ///   - jsonCoding: The JSON form of messages that are neither `Data` nor `String`
    ///     (``WormholeJSONCoding/standard`` by default).
    @_spi(Backend) public init(transiting: any WormholeTransiting, jsonCoding: JSONCoding = .standard) {
        self.transiting = transiting
        self.jsonCoding = jsonCoding
    }

    deinit {
        for registration in registrations.withLock({ $0.values }) { registration.cancel() }
    }

    // MARK: - Passing and reading

    /// Persists `message` under `identifier` and wakes every listener of it.
    ///
    /// `Data` is stored as its bytes, `String` as UTF-8 text, anything else as JSON by
    /// the wormhole's ``jsonCoding`` (sorted keys and ISO 8601 dates by default).
    /// When this returns, the message is in the store: a process that reads later gets
    /// it, and every current listener will receive it.
    ///
    /// With a `timeToLive` (seconds), the message is stale after it: a position, a "come
    /// now" to whoever is listening, a job that must start soon or not at all. Listeners
    /// that start later, resume (durable names) or take from a work queue then skip it,
    /// and receive a ``WormholeError/Code/messagesExpired`` report with the count in its
    /// place; a work queue counts it (``WormholeWorkQueueStatus/expired``). The expiry is
    /// a wall-clock date in the record (Protocol.md §8.1 `expires`).
    ///
    /// ```swift
    /// try wormhole.passMessage(Ping(), identifier: "presence", timeToLive: 10)
    /// ```
    ///
    /// - Returns: The message's sequence number in the identifier's order.
    /// - Throws: ``WormholeError`` with ``WormholeError/Code/invalidIdentifier``,
    ///   ``WormholeError/Code/messageTooLarge``, ``WormholeError/Code/encodingFailed``,
    ///   ``WormholeError/Code/invalidConfiguration`` (a time to live that is not a
    ///   positive number of seconds) or a system error (a full disk, for one); nothing is
    ///   stored then.
    @discardableResult @available(*, noasync, message: "in an async context, await the async passMessage, which does not block a thread of the cooperative pool")
    public func passMessage<Message: Encodable & Sendable>(_ message: Message, identifier: String, timeToLive: Double? = nil) throws(WormholeError) -> UInt64 {
        try Identifier.validate(identifier)
        let (kind, payload) = try MessageCoding.encode(message, identifier: identifier, using: jsonCoding)
        return try transiting.append(payload, kind: kind, identifier: identifier, attributes: try Self.attributes(timeToLive: timeToLive)).sequence
    }

    /// Persists bytes that are already encoded under `identifier`, marked as `kind`, and
    /// wakes every listener of it: how a tool that relays messages (the `wormhole` CLI's
    /// `send --json`, a bridge from another program) passes them without decoding them.
    ///
    /// ```swift
    /// try wormhole.passPayload(Data(#"{"battery": 87}"#.utf8), kind: .json, identifier: "status")
    /// ```
    ///
    /// A listener then decodes the message as it would one passed with
    /// ``passMessage(_:identifier:timeToLive:)-6gmz7``: a `.json` payload as any `Decodable` type, `.text`
    /// as `String`, any kind as `Data`.
    ///
    /// - Returns: The message's sequence number in the identifier's order.
    /// - Throws: ``WormholeError/Code/encodingFailed`` when the bytes are not what `kind`
    ///   says (`.text` that is not UTF-8, `.json` that is not one JSON value), and
    ///   otherwise as ``passMessage(_:identifier:timeToLive:)-6gmz7``; nothing is stored then.
    @discardableResult @available(*, noasync, message: "in an async context, await the async passPayload, which does not block a thread of the cooperative pool")
    public func passPayload(_ payload: Data, kind: WormholePayloadKind, identifier: String, timeToLive: Double? = nil) throws(WormholeError) -> UInt64 {
        try Identifier.validate(identifier)
        try MessageCoding.check(payload, is: kind, identifier: identifier)
        return try transiting.append(payload, kind: kind, identifier: identifier, attributes: try Self.attributes(timeToLive: timeToLive)).sequence
    }

    /// Persists `messages` under `identifier` as consecutive messages and wakes every
    /// listener of it once: a stream of messages passed in batches (`wormhole send
    /// --lines`) costs one lock and one write per batch instead of per message.
    ///
    /// ```swift
    /// let sequences = try wormhole.passMessages(readings, identifier: "sensor")
    /// ```
    ///
    /// Each message is its own record: listeners receive them one by one, in order, as if
    /// each had been passed by ``passMessage(_:identifier:timeToLive:)-6gmz7``; none of another
    /// writer's messages falls between them.
    ///
    /// - Returns: The messages' sequence numbers (an empty range for no messages).
    /// - Throws: As ``passMessage(_:identifier:timeToLive:)-6gmz7``, with nothing stored, when any
    ///   message cannot be encoded or is too large. When the write fails part-way (a
    ///   full disk), the messages written before stay passed and the error says how many.
    @discardableResult
    public func passMessages<Message: Encodable & Sendable>(_ messages: [Message], identifier: String) throws(WormholeError) -> Range<UInt64> {
        try Identifier.validate(identifier)
        var batch: [(payload: Data, kind: WormholePayloadKind)] = []
        batch.reserveCapacity(messages.count)
        for message in messages {
            let (kind, payload) = try MessageCoding.encode(message, identifier: identifier, using: jsonCoding)
            batch.append((payload, kind))
        }
        return try transiting.append(batch: batch, identifier: identifier)
    }

    /// ``passMessages(_:identifier:)`` for bytes already encoded, each marked with
    /// its kind (as ``passPayload(_:kind:identifier:timeToLive:)-9iedl``).
    @discardableResult
    public func passPayloads(_ payloads: [(payload: Data, kind: WormholePayloadKind)], identifier: String) throws(WormholeError) -> Range<UInt64> {
        try Identifier.validate(identifier)
        for entry in payloads { try MessageCoding.check(entry.payload, is: entry.kind, identifier: identifier) }
        return try transiting.append(batch: payloads, identifier: identifier)
    }

    /// The latest message passed under `identifier`, or `nil` when there is none (or it
    /// was cleared, or it has expired: an older message is not the latest).
    ///
    /// - Throws: ``WormholeError/Code/decodingFailed`` when it is not a `Message`, or
    ///   ``WormholeError/Code/corruptRecord`` when it cannot be read.
    @available(*, noasync, message: "in an async context, await the async form, which does not block a thread of the cooperative pool")
    public func message<Message: Decodable>(withIdentifier identifier: String, as type: Message.Type = Message.self) throws(WormholeError) -> Message? {
        try record(withIdentifier: identifier)?.decode(as: type, using: jsonCoding)
    }

    /// The latest record of `identifier`, with its sequence number, date and sender;
    /// `nil` when there is none, it was cleared, or its time to live has passed (Protocol.md
    /// §11.1: a reader that comes after its expiry does not get it, and an older message
    /// is not the latest).
    @available(*, noasync, message: "in an async context, await the async form, which does not block a thread of the cooperative pool")
    public func record(withIdentifier identifier: String) throws(WormholeError) -> WormholeRecord? {
        try Identifier.validate(identifier)
        return Self.unexpired(try transiting.latestRecord(identifier: identifier))
    }

    /// `record`, unless its expiry has passed. Applied here for every back end, whatever
    /// its ``WormholeTransiting/latestRecord(identifier:)-63adk`` does.
    static func unexpired(_ record: WormholeRecord?) -> WormholeRecord? {
        guard let record, !record.isExpired(at: Syscalls.wallClockNanoseconds()) else { return nil }
        return record
    }

    /// Removes the messages of `identifier`: ``message(withIdentifier:as:)-6yg5b`` returns
    /// `nil` after this, and listeners that start from history see nothing older.
    /// Listeners do not hear of it; sequence numbers go on.
    @available(*, noasync, message: "in an async context, await the async form, which does not block a thread of the cooperative pool")
    public func clearMessageContents(forIdentifier identifier: String) throws(WormholeError) {
        try Identifier.validate(identifier)
        try transiting.clearMessageContents(identifier: identifier)
    }

    /// Clears every identifier. Files in the directory that are not message logs are
    /// left alone.
    @available(*, noasync, message: "in an async context, await the async form, which does not block a thread of the cooperative pool")
    public func clearAllMessageContents() throws(WormholeError) {
        try transiting.clearAllMessageContents()
    }

    /// What is retained per identifier: count, bytes, last update.
    @available(*, noasync, message: "in an async context, await the async form, which does not block a thread of the cooperative pool")
    public func summaries() throws(WormholeError) -> [WormholeIdentifierSummary] {
        try transiting.summaries()
    }

    // MARK: - From Swift concurrency

    // The same calls for callers in an `async` context, chosen there by overload
    // resolution (`try await wormhole.passMessage(...)`): each runs the synchronous call
    // on a thread of the library's own (BlockingWork) and suspends the caller meanwhile,
    // so that a wait for another process's lock, or for a server, never holds a thread of
    // the cooperative pool. The synchronous forms are `noasync`.

    /// ``passMessage(_:identifier:timeToLive:)-6gmz7`` from an asynchronous context.
    @discardableResult
    public func passMessage<Message: Encodable & Sendable>(_ message: Message, identifier: String, timeToLive: Double? = nil) async throws(WormholeError) -> UInt64 {
        try await BlockingWork.run { [self] () throws(WormholeError) in try passMessage(message, identifier: identifier, timeToLive: timeToLive) }
    }

    /// ``passPayload(_:kind:identifier:timeToLive:)-9iedl`` from an asynchronous context.
    @discardableResult
    public func passPayload(_ payload: Data, kind: WormholePayloadKind, identifier: String, timeToLive: Double? = nil) async throws(WormholeError) -> UInt64 {
        try await BlockingWork.run { [self] () throws(WormholeError) in try passPayload(payload, kind: kind, identifier: identifier, timeToLive: timeToLive) }
    }

    /// ``message(withIdentifier:as:)-6yg5b`` from an asynchronous context.
    public func message<Message: Decodable>(withIdentifier identifier: String, as type: Message.Type = Message.self) async throws(WormholeError) -> Message? {
        try await record(withIdentifier: identifier)?.decode(as: type, using: jsonCoding)
    }

    /// ``record(withIdentifier:)-8a1`` from an asynchronous context.
    public func record(withIdentifier identifier: String) async throws(WormholeError) -> WormholeRecord? {
        try await BlockingWork.run { [self] () throws(WormholeError) in try record(withIdentifier: identifier) }
    }

    /// ``clearMessageContents(forIdentifier:)-le71`` from an asynchronous context.
    public func clearMessageContents(forIdentifier identifier: String) async throws(WormholeError) {
        try await BlockingWork.run { [self] () throws(WormholeError) in try clearMessageContents(forIdentifier: identifier) }
    }

    /// ``clearAllMessageContents()-6oy7d`` from an asynchronous context.
    public func clearAllMessageContents() async throws(WormholeError) {
        try await BlockingWork.run { [self] () throws(WormholeError) in try clearAllMessageContents() }
    }

    /// ``summaries()-on3z`` from an asynchronous context.
    public func summaries() async throws(WormholeError) -> [WormholeIdentifierSummary] {
        try await BlockingWork.run { [self] () throws(WormholeError) in try summaries() }
    }

    // MARK: - Listening

    /// Calls `listener` with every message passed under `identifier` from now on (or
    /// from `start`), until the returned token is cancelled.
    ///
    /// Each message is delivered once, in the identifier's order; calls never overlap.
    /// Several listeners may listen to one identifier; a listener also receives the
    /// messages its own process passes.
    ///
    /// ```swift
    /// let token = try wormhole.listenForMessage(withIdentifier: "note", as: Note.self, queue: .main) { note in
    ///     label.text = note.text
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - identifier: The identifier to listen to.
    ///   - type: What to decode each message as (`Data` and `String` take the bytes).
    ///   - name: A durable listener's name, or `nil` (the default) for a listener of this
    ///     process alone. A durable listener's position is kept in the container (the
    ///     PostgreSQL back end keeps it in a table) and moves when `listener` returns:
    ///     started again after its process was killed at any instant, it resumes after
    ///     the last message it handled, so no message is missed and at most the one being
    ///     handled is delivered again. The first time a name is used it starts at
    ///     `start`. What it has not handled is kept while it is not running, up to the
    ///     backlog cap (``WormholeConfiguration/maximumBacklogMessageCount``); past it the
    ///     oldest go, and `onError` first receives ``WormholeError/Code/messagesLost``.
    ///     One process at a time uses a name (another is refused with
    ///     ``WormholeError/Code/durableNameInUse``); ``forgetDurableListener(named:identifier:)``
    ///     releases what it keeps.
    ///   - start: ``WormholeStartingPoint/now`` (default), ``WormholeStartingPoint/latest``,
    ///     ``WormholeStartingPoint/history`` or ``WormholeStartingPoint/after(sequence:)``.
    ///   - queue: Where `listener` runs. When `nil`, it runs on the process's inotify
    ///     reader thread, with no thread hop: keep it short, or name a queue.
    ///   - onError: Called (on the same queue) with a message that could not be read or
    ///     decoded; listening goes on with the next. When `nil`, such errors are logged.
    ///   - listener: Receives each message.
    /// - Returns: A token; ``ListenerToken/cancel()`` stops this listener alone.
    @discardableResult
    public func listenForMessage<Message: Decodable & Sendable>(
        withIdentifier identifier: String,
        as type: Message.Type = Message.self,
        durableName name: String? = nil,
        startingFrom start: StartingPoint = .now,
        queue: DispatchQueue? = nil,
        onError: (@Sendable (WormholeError) -> Void)? = nil,
        listener: @escaping @Sendable (Message) -> Void
    ) throws(WormholeError) -> ListenerToken {
        let report = onError ?? Self.logError
        return try listenForRecords(withIdentifier: identifier, durableName: name, startingFrom: start, queue: queue, onError: report,
                                    listener: decoding(Message.self, listener, report: report))
    }

    /// A record listener that decodes each record for `listener` with ``jsonCoding``; a
    /// record that does not decode goes to `report`.
    func decoding<Message: Decodable & Sendable>(
        _ type: Message.Type, _ listener: @escaping @Sendable (Message) -> Void,
        report: @escaping @Sendable (WormholeError) -> Void
    ) -> @Sendable (WormholeRecord) -> Void {
        { [jsonCoding] record in
            do throws(WormholeError) {
                listener(try record.decode(as: Message.self, using: jsonCoding))
            } catch {
                report(error)
            }
        }
    }

    /// ``listenForMessage(withIdentifier:as:durableName:startingFrom:queue:onError:listener:)``
    /// with the records: the message's bytes with its sequence number, date and sending
    /// process.
    @discardableResult
    public func listenForRecords(
        withIdentifier identifier: String,
        durableName name: String? = nil,
        startingFrom start: StartingPoint = .now,
        queue: DispatchQueue? = nil,
        onError: (@Sendable (WormholeError) -> Void)? = nil,
        listener: @escaping @Sendable (WormholeRecord) -> Void
    ) throws(WormholeError) -> ListenerToken {
        if let name { try Identifier.validate(name, kind: "durable listener name") }
        return try makeListener(identifier: identifier, start: start, durableName: name, queue: queue,
                                onError: onError ?? Self.logError, listener: listener)
    }

    func makeListener(identifier: String, start: StartingPoint, durableName: String?, observeOnDemand: Bool = false,
                      makeReader: (() throws(WormholeError) -> any WormholeTransitingReader)? = nil,
                      queue: DispatchQueue?,
                      onError: @escaping @Sendable (WormholeError) -> Void,
                      listener: @escaping @Sendable (WormholeRecord) -> Void) throws(WormholeError) -> ListenerToken {
        try Identifier.validate(identifier)
        let id = makeRegistrationID()
        let token = try ListenerToken(
            transiting: transiting, identifier: identifier, start: start, durableName: durableName,
            observeOnDemand: observeOnDemand, makeReader: makeReader, queue: queue,
            onError: onError, listener: handlingActivity.counting(listener), activity: handlingActivity,
            onCancel: { [weak self] in self?.unregister(id) })
        // The wormhole keeps the token: a listener lives until it is cancelled, stopped,
        // or the wormhole goes, whether or not the caller keeps the token.
        register(id, identifier) { token.cancel() }
        if token.isCancelled { unregister(id) }
        return token
    }

    /// Stops every listener and message sequence of this wormhole for `identifier`, as
    /// MMWormhole's `stopListeningForMessageWithIdentifier:`. Other wormholes and other
    /// processes go on listening.
    public func stopListeningForMessage(withIdentifier identifier: String) {
        let matching = registrations.withLock { registrations in
            registrations.values.filter { $0.identifier == identifier }
        }
        for registration in matching { registration.cancel() }
    }

    /// The messages passed under `identifier`, as an asynchronous sequence.
    ///
    /// Listening starts when iteration starts and stops when the loop ends or the task
    /// is cancelled. A message that cannot be decoded is reported to `onError` (logged
    /// when `nil`) and skipped. With a `durableName`, the sequence starts with the
    /// messages that durable listener has not handled yet; an element counts as handled
    /// when the next one is requested: the one in hand when the process dies (or the
    /// loop is left with `break`) is delivered again next time.
    ///
    /// ```swift
    /// for try await note in wormhole.messages(withIdentifier: "note", as: Note.self) {
    ///     print(note.text)
    /// }
    /// ```
    public func messages<Message: Decodable & Sendable>(
        withIdentifier identifier: String,
        as type: Message.Type = Message.self,
        durableName name: String? = nil,
        startingFrom start: StartingPoint = .now,
        onError: (@Sendable (WormholeError) -> Void)? = nil
    ) -> some AsyncSequence<Message, WormholeError> & Sendable {
        WormholeMessages(wormhole: self, identifier: identifier, start: start, durableName: name, onError: onError ?? Self.logError) { [jsonCoding] record throws(WormholeError) in
            try record.decode(as: Message.self, using: jsonCoding)
        }
    }

    /// The records passed under `identifier`, as an asynchronous sequence: see
    /// ``messages(withIdentifier:as:durableName:startingFrom:onError:)``.
    public func records(
        withIdentifier identifier: String,
        durableName name: String? = nil,
        startingFrom start: StartingPoint = .now,
        onError: (@Sendable (WormholeError) -> Void)? = nil
    ) -> some AsyncSequence<WormholeRecord, WormholeError> & Sendable {
        WormholeMessages(wormhole: self, identifier: identifier, start: start, durableName: name, onError: onError ?? Self.logError) { $0 }
    }

    // MARK: - Identifiers

    /// Throws ``WormholeError/Code/invalidIdentifier`` with the reason when `identifier`
    /// cannot be used: empty, longer than 200 UTF-8 bytes, containing `/`, NUL, a control
    /// character (C0, DEL or C1) or a bidirectional formatting character, `.`, `..` or a
    /// leading `.`, or not in Unicode Normalization Form C (the error names the composed
    /// form; nothing is normalised silently). Every call that takes an
    /// identifier checks it; back ends and tools call this to check one up front.
    ///
    /// - Parameters:
    ///   - identifier: The identifier (or name) to check.
    ///   - kind: What the value is, for the message ("identifier",
    ///     "application group identifier", ...).
    public static func validate(identifier: String, kind: String = "identifier") throws(WormholeError) {
        try Identifier.validate(identifier, kind: kind)
    }

    // MARK: - Registry

    func register(_ id: UInt64, _ identifier: String, cancel: @escaping @Sendable () -> Void) {
        registrations.withLock { $0[id] = Registration(identifier: identifier, cancel: cancel) }
    }

    func unregister(_ id: UInt64) {
        _ = registrations.withLock { $0.removeValue(forKey: id) }
    }

    func makeRegistrationID() -> UInt64 {
        nextRegistration.add(1, ordering: .relaxed).oldValue
    }

    static let logError: @Sendable (WormholeError) -> Void = { error in
        Logger(label: "Wormhole").error("\(error)")
    }
}
