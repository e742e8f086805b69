#if canImport(Glibc)
import Glibc
#endif
import SystemPackage

/// A live listener's claim on a log: "keep every record after sequence N until I have
/// read it". One file per listener in `.listeners/<identifier>/`, holding N as 8 bytes
/// little-endian, locked with `flock(LOCK_EX)` for as long as the listener lives.
///
/// Compaction keeps records above the lowest claim of a live listener, so a listener
/// that stalls (or whose process is stopped) loses nothing. A claim whose file is not
/// locked belongs to a process that died; compaction deletes it.
final class ListenerCursor {
    private let fd: FileDescriptor
    private let path: String
    private var closed = false

    static func directory(in container: String, identifier: String) -> String {
        container + "/.listeners/" + identifier
    }

    /// Creates the claim, initially 0 (keep everything), already locked when it appears
    /// under its final name.
    init(container: String, identifier: String) throws(WormholeError) {
        let directory = Self.directory(in: container, identifier: identifier)
        try WormholeContainer.prepare(container + "/.listeners", createParents: true)
        try WormholeContainer.prepare(directory, createParents: false)
        let name = "\(Syscalls.processID)-\(String(UInt64.random(in: 1...UInt64.max), radix: 16))"
        let temporary = directory + "/." + name
        let fd: FileDescriptor
        do {
            fd = try FileDescriptor.open(FilePath(temporary), .readWrite,
                                         options: [.create, .exclusiveCreate, .noFollow, .closeOnExec],
                                         permissions: [.ownerReadWrite])
        } catch {
            throw WormholeError.system("create listener cursor", (error as? Errno) ?? .ioError, path: temporary)
        }
        do throws(WormholeError) {
            try Syscalls.lock(fd).orThrow("lock listener cursor", path: temporary)
            try Self.write(0, to: fd, path: temporary)
            try Syscalls.rename(temporary, directory + "/" + name).orThrow("publish listener cursor", path: temporary)
        } catch {
            _ = Syscalls.unlink(temporary)
            try? fd.close()
            throw error
        }
        self.fd = fd
        self.path = directory + "/" + name
    }

    /// Records that everything up to `sequence` has been read.
    func update(_ sequence: UInt64) {
        guard !closed else { return }
        try? Self.write(sequence, to: fd, path: path)
    }

    /// Withdraws the claim.
    func close() {
        guard !closed else { return }
        closed = true
        _ = Syscalls.unlink(path)
        try? fd.close()
    }

    deinit { close() }

    private static func write(_ sequence: UInt64, to fd: FileDescriptor, path: String) throws(WormholeError) {
        let bytes = withUnsafeBytes(of: sequence.littleEndian) { Array($0) }
        do {
            _ = try fd.writeAll(toAbsoluteOffset: 0, bytes)
        } catch {
            throw WormholeError.system("write listener cursor", (error as? Errno) ?? .ioError, path: path)
        }
    }

    /// The lowest claim among live listeners of `identifier`, deleting the claims of
    /// listeners that died. `nil` when no listener is live.
    static func lowestLiveClaim(container: String, identifier: String) -> UInt64? {
        let directory = directory(in: container, identifier: identifier)
        guard case .success(let names) = Syscalls.directoryEntries(directory) else { return nil }
        var lowest: UInt64?
        for name in names {
            let path = directory + "/" + name
            guard let fd = try? FileDescriptor.open(FilePath(path), .readOnly, options: [.noFollow, .closeOnExec]) else { continue }
            defer { try? fd.close() }
            switch Syscalls.lock(fd, exclusive: false, wait: false) {
            case .success:
                // Nobody holds it: its listener is gone.
                _ = Syscalls.unlink(path)
                Syscalls.unlock(fd)
            case .failure(.wouldBlock):
                // Being created: its listener reads the log only after publishing it, so
                // nothing it needs can be dropped yet.
                if name.hasPrefix(".") { continue }
                var value: UInt64 = 0
                let count = (try? withUnsafeMutableBytes(of: &value) { try fd.read(fromAbsoluteOffset: 0, into: $0) }) ?? 0
                let claim = count == 8 ? UInt64(littleEndian: value) : 0
                lowest = min(lowest ?? claim, claim)
            case .failure:
                continue
            }
        }
        return lowest
    }
}
