extension WormholeRecord {
    /// Whether the record's time to live has passed at `now` (ns since 1970).
    func isExpired(at now: Int64) -> Bool {
        false
    }
}
