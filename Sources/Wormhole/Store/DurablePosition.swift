#if canImport(Glibc)
import Glibc
#endif
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SystemPackage

/// A durable listener's position: the last message it handled, kept in the container
/// while it is not running, so that it resumes after that message.
///
/// One file per name and identifier, `.listeners/<identifier>/durable-<name>` (next to
/// the live listeners' claims), 24 bytes little-endian: the position (`u64`, the sequence
/// number of the last message handled), the `logID` of the log it belongs to (`u64`, 0
/// before any log existed), the process id of its last holder (`u32`) and a CRC-32 of
/// those 20 bytes. The running listener holds `flock(LOCK_EX)` on it; a second listener
/// with the name is refused. Compaction treats the position as a claim whether or not a
/// listener runs, within the backlog cap, and never deletes the file: ``forget`` does.
final class DurablePosition {
    static let prefix = "durable-"
    static let size = 24

    struct Value: Equatable {
        var position: UInt64
        var logID: UInt64
        var processID: UInt32
    }

    let name: String
    let identifier: String
    /// What the file held when it was opened; `nil` for a name used for the first time
    /// (or a file that failed its check, which is reported).
    let stored: Value?
    private let fd: FileDescriptor
    private let path: String
    private var closed = false

    /// Opens (creating, 0600) and locks the position of `name`; throws
    /// ``WormholeError/Code/durableNameInUse`` when a running listener holds it.
    init(container: ContainerDirectory, identifier: String, name: String) throws(WormholeError) {
        try Identifier.validate(name, kind: "durable listener name")
        guard let directory = try ListenerCursor.openDirectory(in: container, identifier: identifier, create: true) else {
            throw WormholeError(.containerUnavailable, "cannot create the listener claims of '\(identifier)'", path: container.path)
        }
        defer { try? directory.close() }
        let file = Self.prefix + name
        path = container.filePath(ListenerCursor.claimsDirectory + "/" + identifier + "/" + file)
        let opened = Syscalls.retrying { openat(directory.rawValue, file, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode_t(0o600)) }
        guard case .success(let raw) = opened else {
            if case .failure(let errno) = opened { throw WormholeError.system("open the durable position", errno, path: path) }
            throw WormholeError.system("open the durable position", .ioError, path: path)
        }
        let fd = FileDescriptor(rawValue: raw)
        do throws(WormholeError) {
            guard (try? fd.stat())?.isRegularFile == true else {
                throw WormholeError(.containerInsecure, "'\(path)' is not a regular file; remove it", path: path)
            }
            switch Syscalls.lock(fd, exclusive: true, wait: false) {
            case .success:
                break
            case .failure(.wouldBlock):
                let holder = Self.read(fd).map { " (process \($0.processID))" } ?? ""
                throw WormholeError(.durableNameInUse,
                    "the durable listener '\(name)' of '\(identifier)' is already running\(holder); one process at a time uses a durable name: stop the other, or choose another name",
                    path: path)
            case .failure(let errno):
                throw WormholeError.system("lock the durable position", errno, path: path)
            }
        } catch {
            try? fd.close()
            throw error
        }
        self.fd = fd
        self.name = name
        self.identifier = identifier
        stored = Self.read(fd)
        // Written at once: the holder's process id, and for a new name position 0 (keep
        // everything) until the reader has found where it starts, so that nothing it may
        // start from is compacted away in between.
        store(stored?.position ?? 0, logID: stored?.logID ?? 0)
    }

    deinit { close() }

    /// Records `position` in the log `logID` as handled: one `pwrite`.
    func store(_ position: UInt64, logID: UInt64) {
        guard !closed else { return }
        var bytes = Self.encode(Value(position: position, logID: logID, processID: UInt32(truncatingIfNeeded: Syscalls.cachedProcessID)))
        _ = bytes.withUnsafeMutableBytes { Syscalls.write(fd, UnsafeRawBufferPointer($0), at: 0) }
    }

    /// Unlocks the position (it stays in the container).
    func close() {
        guard !closed else { return }
        closed = true
        try? fd.close()
    }

    static func encode(_ value: Value) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: size)
        bytes.withUnsafeMutableBytes { base in
            base.storeBytes(of: value.position.littleEndian, toByteOffset: 0, as: UInt64.self)
            base.storeBytes(of: value.logID.littleEndian, toByteOffset: 8, as: UInt64.self)
            base.storeBytes(of: value.processID.littleEndian, toByteOffset: 16, as: UInt32.self)
            let crc = CRC32.update(0, UnsafeRawBufferPointer(rebasing: base[0..<20]))
            base.storeBytes(of: crc.littleEndian, toByteOffset: 20, as: UInt32.self)
        }
        return bytes
    }

    static func decode(_ bytes: UnsafeRawBufferPointer) -> Value? {
        guard bytes.count == size else { return nil }
        let crc = UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: 20, as: UInt32.self))
        guard CRC32.update(0, UnsafeRawBufferPointer(rebasing: bytes[0..<20])) == crc else { return nil }
        return Value(position: UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: 0, as: UInt64.self)),
                     logID: UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: 8, as: UInt64.self)),
                     processID: UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: 16, as: UInt32.self)))
    }

    /// The value in an open position file, when it holds a valid one.
    static func read(_ fd: FileDescriptor) -> Value? {
        var bytes = [UInt8](repeating: 0, count: size)
        let count = bytes.withUnsafeMutableBytes { Syscalls.read(fd, into: $0, at: 0) }
        guard (try? count.get()) == size else { return nil }
        return bytes.withUnsafeBytes { decode($0) }
    }
}
