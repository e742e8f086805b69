import SystemPackage

/// One look at a log without taking its lock: the header, and the records it commits.
struct LogSnapshot {
    let header: LogFormat.Header
    /// The valid records (only when the whole log was read).
    let records: [WormholeRecord]

    /// Reads the log at `path`; `nil` when there is none (or it has no header yet).
    init?(path: String, identifier: String, wholeLog: Bool) throws(WormholeError) {
        let fd: FileDescriptor
        do {
            fd = try FileDescriptor.open(FilePath(path), .readOnly, options: [.noFollow, .closeOnExec])
        } catch {
            let errno = (error as? Errno) ?? .ioError
            if errno == .noSuchFileOrDirectory { return nil }
            throw WormholeError.system("open", errno, path: path)
        }
        defer { try? fd.close() }
        guard let header = try FileTransiting.readHeaderUnlocked(fd, path: path) else { return nil }
        var records: [WormholeRecord] = []
        var latest: WormholeRecord?
        if wholeLog {
            let bytes = try Self.read(fd, from: LogFormat.headerSize, to: Int(header.committedEnd), path: path)
            records = bytes.withUnsafeBytes { buffer in
                LogFormat.scan(buffer, identifier: identifier, path: path).compactMap { try? $0.get() }
            }
        } else if header.lastRecordOffset >= UInt64(LogFormat.headerSize), header.lastSequence > header.clearedThrough {
            let start = Int(header.lastRecordOffset)
            let bytes = try Self.read(fd, from: start, to: Int(header.committedEnd), path: path)
            var failure: WormholeError?
            bytes.withUnsafeBytes { buffer in
                switch LogFormat.parseRecord(buffer, at: 0, identifier: identifier) {
                case .record(let record, _): latest = record
                case .incomplete: failure = .corrupt("the last record is cut short", path: path)
                case .corrupt(let detail, _): failure = .corrupt(detail, path: path)
                }
            }
            if let failure { throw failure }
        }
        self.header = header
        self.records = latest.map { [$0] } ?? records
    }

    /// The newest record that was not cleared.
    func latest() throws(WormholeError) -> WormholeRecord? {
        guard let last = records.last, last.sequence > header.clearedThrough else { return nil }
        return last
    }

    /// The bytes `[start, end)` of the file, fewer if it ends sooner. The array is
    /// filled by `pread` without being zeroed first (a megabyte message is not written
    /// twice).
    static func read(_ fd: FileDescriptor, from start: Int, to end: Int, path: String) throws(WormholeError) -> [UInt8] {
        guard end > start else { return [] }
        var end = end
        if end - start > 1 << 20, case .success(let status) = Syscalls.fileStatus(fd) {
            // A damaged header may claim more than the file holds: allocate only what is there.
            end = min(end, max(start, Int(status.st_size)))
        }
        guard end > start else { return [] }
        var failure: Errno?
        let bytes = [UInt8](unsafeUninitializedCapacity: end - start) { buffer, count in
            switch Syscalls.read(fd, into: UnsafeMutableRawBufferPointer(buffer), at: Int64(start)) {
            case .success(let filled): count = filled
            case .failure(let errno):
                failure = errno
                count = 0
            }
        }
        if let failure { throw WormholeError.system("read", failure, path: path) }
        return bytes
    }
}
