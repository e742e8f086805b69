#if canImport(Glibc)
import Glibc
#endif
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SystemPackage
@_spi(Backend) import WormholeCore

/// A durable listener's position: the last message it handled, kept in the container
/// while it is not running, so that it resumes after that message.
///
/// One file per name and identifier, `.listeners/<identifier>/durable-<name>` (next to
/// the live listeners' claims), 36 bytes little-endian: the position (`u64`, the sequence
/// number of the last message handled), the `logID` of the log it belongs to (`u64`, 0
/// before any log existed), the process id of its last holder (`u32`) and a CRC-32 of
/// those 20 bytes; then the PID namespace of that process (`u64`) and a CRC-32 of it
/// (earlier versions wrote the first 24 bytes alone, which are still read). The running
/// listener holds `flock(LOCK_EX)` on it; a second listener with the name is refused.
/// Compaction treats the position as a claim whether or not a listener runs, within the
/// backlog cap, and never deletes the file: `forgetDurable` does.
package final class DurablePosition {
    package static let prefix = "durable-"
    /// The size this version writes: the 24 bytes of every version, then the PID
    /// namespace of the last holder (`u64`) and a CRC-32 of it.
    package static let size = 36
    /// The size an earlier version wrote (without the PID namespace); still read.
    package static let legacySize = 24

    package struct Value: Equatable {
        package var position: UInt64
        package var logID: UInt64
        package var processID: UInt32
        /// The PID namespace of ``processID``; 0 when not known.
        package var pidNamespace: UInt64 = 0

        /// "process N", saying when N numbers a process of another PID namespace.
        package var holder: String {
            let elsewhere = pidNamespace != 0 && Syscalls.pidNamespace != 0 && pidNamespace != Syscalls.pidNamespace
            return "process \(processID)" + (elsewhere ? " of another PID namespace" : "")
        }
    }

    package let name: String
    package let identifier: String
    /// What the file held when it was opened; `nil` for a name used for the first time.
    package let stored: Value?
    private let fd: FileDescriptor
    private let path: String
    private var closed = false

    /// Opens and locks the position of `name`, creating it (0600) the first time; throws
    /// ``WormholeError/Code/durableNameInUse`` when a running listener holds it.
    ///
    /// A new position file appears under its name already locked and holding a whole
    /// value (position 0, keep everything): it is written under a temporary name and
    /// linked into place, so that a full disk leaves no empty position behind (one that
    /// a restart would take for a new name, skipping what was passed meanwhile). A file
    /// that holds no valid value is refused with a message that says how to start over.
    package init(container: ContainerDirectory, identifier: String, name: String) throws(WormholeError) {
        try Identifier.validate(name, kind: "durable listener name")
        guard let directory = try ListenerCursor.openDirectory(in: container, identifier: identifier, create: true) else {
            throw WormholeError(.containerUnavailable, "cannot create the listener claims of '\(identifier)'", path: container.path)
        }
        defer { try? directory.close() }
        let file = Self.prefix + name
        let path = container.filePath(ListenerCursor.claimsDirectory + "/" + identifier + "/" + file)
        var fd: FileDescriptor?
        for _ in 0..<8 where fd == nil {
            fd = try Self.openExisting(file, in: directory, path: path)
            if fd == nil { fd = try Self.create(file, in: directory, container: container, path: path) }
        }
        guard let fd else {
            throw WormholeError(.systemError, "'\(path)' kept appearing and disappearing while this process opened it", path: path)
        }
        do throws(WormholeError) {
            switch Syscalls.lock(fd, exclusive: true, wait: false) {
            case .success:
                break
            case .failure(.wouldBlock):
                let holder = Self.read(fd).map { " (\($0.holder))" } ?? ""
                throw WormholeError(.durableNameInUse,
                    "the durable listener '\(name)' of '\(identifier)' is already running\(holder); one process at a time uses a durable name: stop the other, or choose another name",
                    path: path)
            case .failure(let errno):
                throw WormholeError.system("lock the durable position", errno, path: path)
            }
            guard let value = Self.read(fd) else {
                throw WormholeError(.corruptRecord,
                    "the position of the durable listener '\(name)' of '\(identifier)' is damaged (not \(Self.legacySize) bytes or more with a valid checksum), so where it stopped is unknown; 'wormhole forget \(name) \(identifier)' (or forgetDurableListener(named:identifier:)) removes it, and the name then starts anew",
                    path: path)
            }
            self.fd = fd
            self.path = path
            self.name = name
            self.identifier = identifier
            // A file made by ``create(_:in:container:path:)`` holds position 0 in no log: a name
            // used for the first time.
            stored = value.logID == 0 && value.position == 0 && value.processID == 0 ? nil : value
        } catch {
            try? fd.close()
            throw error
        }
        // The holder's process id, written at once.
        try store(stored?.position ?? 0, logID: stored?.logID ?? 0)
    }

    /// The position file `file`, opened; `nil` when there is none.
    private static func openExisting(_ file: String, in directory: FileDescriptor, path: String) throws(WormholeError) -> FileDescriptor? {
        switch Syscalls.open(file, in: directory, .readWrite) {
        case .success(let fd):
            guard (try? Syscalls.status(fd).get())?.isRegularFile == true else {
                try? fd.close()
                throw WormholeError(.containerInsecure, "'\(path)' is not a regular file; remove it", path: path)
            }
            return fd
        case .failure(.noSuchFileOrDirectory):
            return nil
        case .failure(.tooManySymbolicLinkLevels):
            throw WormholeError(.containerInsecure, "'\(path)' is a symbolic link; remove it", path: path)
        case .failure(let errno):
            throw WormholeError.system("open the durable position", errno, path: path)
        }
    }

    /// Makes the position file `file` whole: a temporary file (`.<file>.<pid>-<hex>`,
    /// locked, so that a compactor leaves it alone) holding an empty value, linked to its
    /// name. Returns it opened, or `nil` when another process made it first.
    private static func create(_ file: String, in directory: FileDescriptor, container: ContainerDirectory, path: String) throws(WormholeError) -> FileDescriptor? {
        let temporary = ".\(file).\(Syscalls.processID)-\(String(UInt64.random(in: 1...UInt64.max), radix: 16))"
        // Held while the temporary file has its name: a compactor leaves it alone
        // (Protocol.md §12.3 Q4), in any PID namespace.
        try Syscalls.lock(directory, exclusive: false).mapError { Self.failure("lock the listener claims of", $0, path: path) }.get()
        defer { Syscalls.unlock(directory) }
        let fd = try container.createFile(temporary, in: directory)
            .mapError { Self.failure("create the durable position", $0, path: path) }.get()
        defer { Syscalls.remove(temporary, in: directory) }
        do throws(WormholeError) {
            _ = Syscalls.lock(fd)
            let bytes = encode(Value(position: 0, logID: 0, processID: 0))
            try bytes.withUnsafeBytes { Syscalls.write(fd, $0, at: 0) }.mapError { Self.failure("write the durable position", $0, path: path) }.get()
            switch Syscalls.link(temporary, to: file, in: directory) {
            case .success:
                Syscalls.unlock(fd)
                return fd
            case .failure(.fileExists):
                try? fd.close()
                return nil
            case .failure(let errno):
                throw Self.failure("create the durable position", errno, path: path)
            }
        } catch {
            try? fd.close()
            throw error
        }
    }

    /// The error for a failed call, saying what a full file system means here.
    private static func failure(_ operation: String, _ errno: Errno, path: String) -> WormholeError {
        guard errno == .noSpace || errno == .diskQuotaExceeded else { return WormholeError.system(operation, errno, path: path) }
        return WormholeError(.systemError,
            "cannot \(operation) '\(path)': the filesystem is full (no space or no inodes left: see 'df' and 'df -i'); the durable listener was not started, and no position was lost",
            path: path, errno: errno)
    }

    deinit { close() }

    /// Records `position` in the log `logID` as handled: one `pwrite` over the previous
    /// value (the same size, once the first store of this version has written it).
    ///
    /// - Throws: when the write failed; the file then still holds the previous value
    ///   (the listener repeats, never skips).
    package func store(_ position: UInt64, logID: UInt64) throws(WormholeError) {
        guard !closed else { return }
        let bytes = Self.encode(Value(position: position, logID: logID, processID: UInt32(truncatingIfNeeded: Syscalls.cachedProcessID),
                                      pidNamespace: Syscalls.pidNamespace))
        try bytes.withUnsafeBytes { Syscalls.write(fd, $0, at: 0) }
            .mapError { Self.failure("store the position of the durable listener '\(name)' in", $0, path: path) }.get()
    }

    /// Unlocks the position (it stays in the container).
    package func close() {
        guard !closed else { return }
        closed = true
        try? fd.close()
    }

    package static func encode(_ value: Value) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: size)
        bytes.withUnsafeMutableBytes { base in
            base.storeBytes(of: value.position.littleEndian, toByteOffset: 0, as: UInt64.self)
            base.storeBytes(of: value.logID.littleEndian, toByteOffset: 8, as: UInt64.self)
            base.storeBytes(of: value.processID.littleEndian, toByteOffset: 16, as: UInt32.self)
            let crc = CRC32.update(0, UnsafeRawBufferPointer(rebasing: base[0..<20]))
            base.storeBytes(of: crc.littleEndian, toByteOffset: 20, as: UInt32.self)
            base.storeBytes(of: value.pidNamespace.littleEndian, toByteOffset: 24, as: UInt64.self)
            let extended = CRC32.update(0, UnsafeRawBufferPointer(rebasing: base[24..<32]))
            base.storeBytes(of: extended.littleEndian, toByteOffset: 32, as: UInt32.self)
        }
        return bytes
    }

    /// Decodes a position: its first 24 bytes as every version writes them, then, when
    /// present and whole, the PID namespace (an earlier version's 24 bytes have none).
    package static func decode(_ bytes: UnsafeRawBufferPointer) -> Value? {
        guard bytes.count >= legacySize else { return nil }
        let crc = UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: 20, as: UInt32.self))
        guard CRC32.update(0, UnsafeRawBufferPointer(rebasing: bytes[0..<20])) == crc else { return nil }
        var pidNamespace: UInt64 = 0
        if bytes.count >= size,
           UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: 32, as: UInt32.self)) == CRC32.update(0, UnsafeRawBufferPointer(rebasing: bytes[24..<32])) {
            pidNamespace = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: 24, as: UInt64.self))
        }
        return Value(position: UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: 0, as: UInt64.self)),
                     logID: UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: 8, as: UInt64.self)),
                     processID: UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: 16, as: UInt32.self)),
                     pidNamespace: pidNamespace)
    }

    /// The value in an open position file, when it holds a valid one.
    /// ``read(_:)``, throwing when the file cannot be read at all (an I/O error), which is
    /// not damage: a compaction must not take it for a position that keeps nothing.
    package static func readOrThrow(_ fd: FileDescriptor, path: String) throws(WormholeError) -> Value? {
        var bytes = [UInt8](repeating: 0, count: size)
        let count = try bytes.withUnsafeMutableBytes { Syscalls.read(fd, into: $0, at: 0) }.orThrow("read", path: path)
        guard count >= legacySize else { return nil }
        return bytes.withUnsafeBytes { decode(UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
    }

    package static func read(_ fd: FileDescriptor) -> Value? {
        (try? readOrThrow(fd, path: "")) ?? nil
    }
}
