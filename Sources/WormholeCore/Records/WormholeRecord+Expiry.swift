extension WormholeRecord {
    /// Whether the record's time to live has passed at `now` (ns since 1970, wall clock).
    package func isExpired(at now: Int64) -> Bool {
        guard let expires else { return false }
        return expires.nanosecondsSince1970 <= now
    }

    /// What a reader hands a listener: `results` without the records whose expiry has
    /// passed, with one ``WormholeError/Code/messagesExpired`` report in place of each run
    /// of them (expired records with nothing else between them), saying how many. The
    /// report's ``WormholeError/sequence`` is the newest of its run, so that a listener
    /// that stops at a given message (`wormhole listen --no-follow`) knows it has passed
    /// it. Every back end's reader applies it (a work queue counts expired messages
    /// itself).
    @_spi(Backend) public static func withoutExpired(_ results: [Result<WormholeRecord, WormholeError>],
                                      identifier: String) -> [Result<WormholeRecord, WormholeError>] {
        guard results.contains(where: { (try? $0.get())?.expires != nil }) else { return results }
        let now = Syscalls.wallClockNanoseconds()
        var kept: [Result<WormholeRecord, WormholeError>] = []
        // The run being counted: how many, and the newest.
        var run: (count: UInt64, newest: UInt64)?
        func endRun() {
            guard let (count, newest) = run else { return }
            kept.append(.failure(WormholeError(.messagesExpired,
                "\(count) message\(count == 1 ? "" : "s") of '\(identifier)' expired before this listener read \(count == 1 ? "it" : "them"); expired messages are not delivered",
                missedMessageCount: count, sequence: newest)))
            run = nil
        }
        for result in results {
            if case .success(let record) = result, record.isExpired(at: now) {
                run = ((run?.count ?? 0) + 1, record.sequence)
                continue
            }
            endRun()
            kept.append(result)
        }
        endRun()
        return kept
    }
}
