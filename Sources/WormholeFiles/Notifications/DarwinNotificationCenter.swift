#if canImport(Glibc)
import Glibc
#endif
import Dispatch
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SystemPackage
@_spi(Backend) import WormholeCore

/// The Linux analogue of Darwin notifications: payload-free, named signals between
/// processes that share a directory, with one 64-bit state value per name.
///
/// A name is a file in the center's directory, `<name>.notification`. Posting a name
/// touches that file (`utimensat`), which inotify reports to every observer of the
/// directory as IN_ATTRIB; nothing else travels. The file's first 8 bytes, little-endian,
/// hold the name's state value. Passing a message to the identifier of the same name
/// through a ``Wormhole`` on the same directory notifies the name's observers too: the
/// append to `<name>.wormhole` is itself the wake-up (IN_MODIFY), as `passMessage` posts
/// the identifier's Darwin notification in MMWormhole.
///
/// ```swift
/// let center = try DarwinNotificationCenter(directory: "/run/user/1000/app-groups/group.example")
/// let observation = try center.addObserver(forName: "refresh") { name in
///     print("\(name) was posted")
/// }
/// try center.setState(42, forName: "refresh")
/// try center.post("refresh")
/// observation.cancel()
/// ```
///
/// **Coalescing.** As with Darwin's `notify_post`, posts in quick succession may reach an
/// observer as one notification, and the count is not knowable. What is guaranteed: after
/// a post, every observer that was observing when it was made is notified at least once
/// after that post. Observers may also be notified without a post (after inotify's queue
/// overflowed, or after the directory was recreated), so a notification means "look
/// again", never "one event". Use ``Wormhole`` when every message matters.
///
/// Every center, observer and wormhole listener of a process shares one inotify instance
/// and one reader thread.
public final class DarwinNotificationCenter: Sendable {
    /// The directory that is this center's namespace of names.
    package let directory: String
    package let container: ContainerDirectory

    /// The suffix of the file that stands for a name.
    package static let fileSuffix = ".notification"

    /// Opens the namespace in `directory`, creating it (mode 0700) when it is missing.
    ///
    /// - Throws: ``WormholeError`` with ``WormholeError/Code/containerInsecure`` or
    ///   ``WormholeError/Code/containerUnavailable`` when the directory is unsafe or
    ///   cannot be created.
    public convenience init(directory: String) throws(WormholeError) {
        self.init(container: try ContainerDirectory(path: directory))
    }

    package init(container: ContainerDirectory) {
        self.container = container
        self.directory = container.path
    }

    /// Opens the namespace of an application group: its container directory.
    public convenience init(applicationGroupIdentifier: String) throws(WormholeError) {
        try self.init(directory: WormholeContainer.directory(forApplicationGroupIdentifier: applicationGroupIdentifier))
    }

    /// The path of the file that stands for `name`.
    package func path(forName name: String) -> String {
        directory + "/" + name + Self.fileSuffix
    }

    /// Posts `name`: every observer of it, in this process and in others, is notified.
    ///
    /// The corresponding Darwin function is `notify_post`.
    /// - Throws: ``WormholeError/Code/invalidIdentifier`` for a name that cannot be a file
    ///   name, or a system error when the file cannot be touched.
    public func post(_ name: String) throws(WormholeError) {
        try Identifier.validate(name, kind: "notification name")
        try post(validatedName: name, path: path(forName: name))
    }

    /// ``post(_:)`` for a name already validated, whose file path the caller keeps.
    package func post(validatedName name: String, path: String) throws(WormholeError) {
        let file = name + Self.fileSuffix
        switch touch(file) {
        case .success:
            return
        case .failure(.noSuchFileOrDirectory):
            // The name's file is missing, or the whole container was deleted or moved
            // away: make it again (observers wait for it), then create the file.
            let created: FileDescriptor
            do throws(WormholeError) {
                created = try open(file, .readWrite, create: true)
            } catch {
                try container.refresh()
                created = try open(file, .readWrite, create: true)
            }
            try? created.close()
            try touch(file).orThrow("post notification", path: path)
        case .failure(let errno):
            throw WormholeError.system("post notification", errno, path: path)
        }
    }

    /// Sets the times of `file` in the container to now, never through a link: IN_ATTRIB.
    private func touch(_ file: String) -> Result<Void, Errno> {
        let directory = container.current.descriptor
        return Syscalls.retrying("utimensat") { utimensat(directory.rawValue, file, nil, AT_SYMLINK_NOFOLLOW) }.map { _ in () }
    }

    /// Sets the 64-bit state value of `name`. It does not post: observers are not woken.
    ///
    /// The corresponding Darwin function is `notify_set_state`.
    public func setState(_ state: UInt64, forName name: String) throws(WormholeError) {
        try Identifier.validate(name, kind: "notification name")
        let path = path(forName: name)
        let fd = try open(name + Self.fileSuffix, .readWrite, create: true)
        defer { try? fd.close() }
        let bytes = withUnsafeBytes(of: state.littleEndian) { Array($0) }
        do {
            _ = try fd.writeAll(toAbsoluteOffset: 0, bytes)
        } catch {
            throw WormholeError.system("set the state of", (error as? Errno) ?? .ioError, path: path)
        }
    }

    /// The 64-bit state value of `name`; 0 when it was never set.
    ///
    /// The corresponding Darwin function is `notify_get_state`.
    public func state(forName name: String) throws(WormholeError) -> UInt64 {
        try Identifier.validate(name, kind: "notification name")
        let path = path(forName: name)
        let fd: FileDescriptor
        guard let opened = try container.openFile(name + Self.fileSuffix, .readOnly) else { return 0 }
        fd = opened.0
        defer { try? fd.close() }
        var value: UInt64 = 0
        let count: Int
        do {
            count = try withUnsafeMutableBytes(of: &value) { try fd.read(fromAbsoluteOffset: 0, into: $0) }
        } catch {
            throw WormholeError.system("read the state of", (error as? Errno) ?? .ioError, path: path)
        }
        return count == 8 ? UInt64(littleEndian: value) : 0
    }

    /// Calls `block` on `queue` each time `name` is posted, until the returned
    /// observation is cancelled.
    ///
    /// The corresponding Darwin function is `notify_register_dispatch`.
    /// - Parameters:
    ///   - name: The name to observe.
    ///   - queue: Where `block` runs; a private serial queue when `nil`. Calls never
    ///     overlap, whatever the queue.
    ///   - onError: Called (on the same queue) when the observation stops because
    ///     nothing can wake it any more: inotify out of watches when the container was
    ///     recreated, or the container's parent removed. Logged when `nil`.
    ///   - block: Receives the name that was posted.
    /// - Returns: The observation; call ``NotificationObservation/cancel()`` to stop.
    @discardableResult
    public func addObserver(
        forName name: String,
        queue: DispatchQueue? = nil,
        onError: (@Sendable (WormholeError) -> Void)? = nil,
        using block: @escaping @Sendable (String) -> Void
    ) throws(WormholeError) -> NotificationObservation {
        try Identifier.validate(name, kind: "notification name")
        let observation = NotificationObservation(name: name, queue: queue, onError: onError, block: block)
        observation.start(try subscribe(name) { [weak observation] notice in
            observation?.receive(notice)
        })
        return observation
    }

    /// The posts of `name`, as an asynchronous sequence. Observing starts when iteration
    /// starts and ends when the consuming task is cancelled or the loop is left.
    ///
    /// ```swift
    /// for try await _ in center.notifications(named: "refresh") { reload() }
    /// ```
    public func notifications(named name: String) -> some AsyncSequence<String, WormholeError> & Sendable {
        DarwinNotifications(center: self, name: name)
    }

    /// What an observer of a name hears.
    package enum Notice: Sendable {
        /// The name was posted, or may have been (the directory came back, events were
        /// lost): look again.
        case posted
        /// Nothing can wake the observer any more.
        case failed(WormholeError)
    }

    /// Subscribes to the engine for the posts of `name`: its notification file, and the
    /// log of the identifier of the same name (a pass posts the identifier's name).
    package func subscribe(_ name: String, handler: @escaping @Sendable (Notice) -> Void) throws(WormholeError) -> EngineSubscription {
        let file = name + Self.fileSuffix
        return try InotifyEngine.shared.subscribe(directory: directory, names: [file, LogFile.name(name)],
                                                  changes: Self.observedChanges) { [container] event in
            // A shared container that root removed is not coming back (Protocol.md §4.2):
            // the observer ends, saying so, as a listener does, instead of hearing a
            // post that nobody made and then nothing.
            if case .rescan = event, let revoked = container.revocation() {
                handler(.failed(revoked))
                return
            }
            if let notice = Self.notice(for: event, notificationFile: file) { handler(notice) }
        }
    }

    /// What an observer hears of the files of its name: their times set (a post to the
    /// notification file) and writes (a pass to the log).
    package static let observedChanges: FileChanges = [.attributes, .written]

    /// What an engine event about the files of a name means to its observers (Protocol
    /// §13.2): times set on the notification file (`utimensat`, `touch`) are a post, and so
    /// is a write to the log of the identifier of the same name (a pass, as `passMessage`
    /// posts the identifier's Darwin notification in MMWormhole). A write to the
    /// notification file sets its state and is not a post.
    package static func notice(for event: DirectoryEvent, notificationFile: String) -> Notice? {
        switch event {
        case .changed(let file, let changes):
            (file == notificationFile ? changes.contains(.attributes) : changes.contains(.written)) ? .posted : nil
        case .rescan: .posted
        case .failed(let error): .failed(error)
        }
    }

    private func open(_ file: String, _ access: ContainerDirectory.Access, create: Bool) throws(WormholeError) -> FileDescriptor {
        guard let (fd, _) = try container.openFile(file, access, create: create) else {
            throw WormholeError.system("open", .noSuchFileOrDirectory, path: container.filePath(file))
        }
        return fd
    }
}
