#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// The baselines' child processes.
///
/// - A pipe or a Unix domain socket between two processes: the physical floor, one
///   `write` and one `read` per message, no file system.
/// - A naive MMWormhole-style mode: one file per identifier, replaced by writing a
///   temporary file and renaming it over the old one; the listener watches the directory
///   with inotify and re-reads the file on each event. The last value wins.
enum BaselineRoles {
    /// `stream-send --count C [--size S] [--interval-ns I]`: writes each message to
    /// descriptor 3 (a pipe or a socket) with one `write`.
    static func streamSend(_ options: Options) throws -> Int32 {
        let count = try options.int("count", default: 2000)
        let size = max(Frame.minimumSize, try options.int("size", default: 16))
        let interval = UInt64(try options.int("interval-ns", default: 0))
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 8)
        defer { buffer.deallocate() }
        memset(buffer, 0x2e, size)
        func send(_ index: UInt64) throws {
            Frame.write(stamp: Monotonic.now(), index: index, into: buffer)
            var offset = 0
            while offset < size {
                let written = write(3, buffer + offset, size - offset)
                if written < 0 {
                    if errno == EINTR { continue }
                    throw BenchError("write: \(String(cString: strerror(errno)))")
                }
                offset += written
            }
        }
        for number in 0..<20 { try send(Frame.warmUpBit | UInt64(number)) }
        Monotonic.sleep(seconds: 0.05)
        try sendPaced(count: count, interval: interval) { index in
            try send(UInt64(index))
        }
        close(3)
        return 0
    }

    /// `stream-receive --count C [--size S]`: reads messages of S bytes from descriptor 3
    /// until C arrived or the sender closed it. The receive time of every message in one
    /// `read` is the time that `read` returned.
    static func streamReceive(_ options: Options) throws -> Int32 {
        let count = try options.int("count", default: 2000)
        let size = max(Frame.minimumSize, try options.int("size", default: 16))
        var tally = Tally(count: count, identifiers: 1)
        let capacity = max(65536, 2 * size)
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 8)
        defer { buffer.deallocate() }
        var filled = 0
        let start = ResourceUsage.current()
        emit("READY")
        while !tally.isComplete {
            let got = read(3, buffer + filled, capacity - filled)
            if got < 0 && errno == EINTR { continue }
            if got <= 0 { break }
            let now = Monotonic.now()
            filled += got
            var position = 0
            while filled - position >= size {
                let (stamp, index) = Frame.read(buffer + position)
                tally.record(index: index, stamp: stamp, at: now)
                position += size
            }
            if position > 0 {
                memmove(buffer, buffer + position, filled - position)
                filled -= position
            }
        }
        emit(tally.report(since: start))
        return 0
    }

    static let naiveName = "bench.archive"

    /// `naive-send --dir D --count C [--size S] [--interval-ns I]`: MMWormhole's
    /// `passMessageObject:identifier:` on Linux: write `.bench.archive.tmp`, rename it to
    /// `bench.archive` (inotify reports the rename to listeners).
    static func naiveSend(_ options: Options) throws -> Int32 {
        let directory = try options.string("dir")
        let count = try options.int("count", default: 2000)
        let size = max(Frame.minimumSize, try options.int("size", default: 16))
        let interval = UInt64(try options.int("interval-ns", default: 0))
        let temporary = directory + "/." + naiveName + ".tmp"
        let final = directory + "/" + naiveName
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 8)
        defer { buffer.deallocate() }
        memset(buffer, 0x2e, size)
        func send(_ index: UInt64) throws {
            Frame.write(stamp: Monotonic.now(), index: index, into: buffer)
            let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
            guard fd >= 0 else { throw BenchError("open \(temporary): \(String(cString: strerror(errno)))") }
            var offset = 0
            while offset < size {
                let written = write(fd, buffer + offset, size - offset)
                if written <= 0 {
                    if errno == EINTR { continue }
                    close(fd)
                    throw BenchError("write: \(String(cString: strerror(errno)))")
                }
                offset += written
            }
            close(fd)
            guard rename(temporary, final) == 0 else { throw BenchError("rename: \(String(cString: strerror(errno)))") }
        }
        for number in 0..<20 { try send(Frame.warmUpBit | UInt64(number)) }
        Monotonic.sleep(seconds: 0.05)
        try sendPaced(count: count, interval: interval) { index in
            try send(UInt64(index))
        }
        return 0
    }

    /// `naive-listen --dir D --count C`: watches D for `IN_MOVED_TO` of `bench.archive`
    /// and re-reads the file after each read of events: MMWormhole's listener. Stops at
    /// the last message (the last value always arrives) or after 3 s of silence.
    static func naiveListen(_ options: Options) throws -> Int32 {
        let directory = try options.string("dir")
        let count = try options.int("count", default: 2000)
        let size = max(Frame.minimumSize, try options.int("size", default: 16))
        let path = directory + "/" + naiveName
        var tally = Tally(count: count, identifiers: 1)
        let inotify = inotify_init1(Int32(IN_CLOEXEC))
        guard inotify >= 0, inotify_add_watch(inotify, directory, UInt32(IN_MOVED_TO)) >= 0 else {
            throw BenchError("inotify on \(directory): \(String(cString: strerror(errno)))")
        }
        let events = UnsafeMutableRawPointer.allocate(byteCount: 65536, alignment: 8)
        let contents = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 8)
        defer { events.deallocate(); contents.deallocate() }
        let start = ResourceUsage.current()
        emit("READY")
        var lastEvent = Monotonic.now()
        var began = false
        while tally.highestIndex < count - 1 {
            var descriptor = pollfd(fd: inotify, events: Int16(POLLIN), revents: 0)
            let ready = poll(&descriptor, 1, 100)
            if ready <= 0 {
                let silent = Double(Monotonic.now() - lastEvent) / 1e9
                if silent > (began ? 3 : 60) { break }
                continue
            }
            let got = read(inotify, events, 65536)
            if got <= 0 { continue }
            lastEvent = Monotonic.now()
            began = true
            var offset = 0
            var mentioned = false
            while offset + MemoryLayout<inotify_event>.size <= got {
                let length = Int(events.loadUnaligned(fromByteOffset: offset + 12, as: UInt32.self))
                let name = String(cString: (events + offset + MemoryLayout<inotify_event>.size).assumingMemoryBound(to: CChar.self))
                if name == naiveName { mentioned = true }
                offset += MemoryLayout<inotify_event>.size + length
            }
            guard mentioned else { continue }
            // Re-read the file: whatever it holds now is the message (last value wins).
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { continue }
            let filled = read(fd, contents, size)
            close(fd)
            guard filled >= Frame.minimumSize else { continue }
            let (stamp, index) = Frame.read(contents)
            tally.record(index: index, stamp: stamp, at: Monotonic.now())
        }
        emit(tally.report(since: start))
        return 0
    }
}
