extension WormholeRecord {
    /// Whether the record's time to live has passed at `now` (ns since 1970, wall clock).
    func isExpired(at now: Int64) -> Bool {
        guard let expires else { return false }
        return expires.nanosecondsSince1970 <= now
    }
}
