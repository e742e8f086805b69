extension WormholeRecord {
    /// Whether the record's time to live has passed at `now` (ns since 1970, wall clock).
    func isExpired(at now: Int64) -> Bool {
        guard let expires else { return false }
        return expires.nanosecondsSince1970 <= now
    }

    /// What a reader hands a listener: `results` without the records whose expiry has
    /// passed, with one ``WormholeError/Code/messagesExpired`` report saying how many in
    /// place of the first. Every back end's reader applies it (a work queue counts expired
    /// messages itself).
    public static func withoutExpired(_ results: [Result<WormholeRecord, WormholeError>],
                                      identifier: String) -> [Result<WormholeRecord, WormholeError>] {
        guard results.contains(where: { (try? $0.get())?.expires != nil }) else { return results }
        let now = Syscalls.wallClockNanoseconds()
        var kept: [Result<WormholeRecord, WormholeError>] = []
        var expired: UInt64 = 0
        var reportAt: Int?
        for result in results {
            if case .success(let record) = result, record.isExpired(at: now) {
                if reportAt == nil {
                    reportAt = kept.count
                    kept.append(.failure(WormholeError(.messagesExpired, "")))
                }
                expired += 1
                continue
            }
            kept.append(result)
        }
        guard let reportAt else { return kept }
        kept[reportAt] = .failure(WormholeError(.messagesExpired,
            "\(expired) message\(expired == 1 ? "" : "s") of '\(identifier)' expired before this listener read \(expired == 1 ? "it" : "them"); expired messages are not delivered",
            missedMessageCount: expired))
        return kept
    }
}
