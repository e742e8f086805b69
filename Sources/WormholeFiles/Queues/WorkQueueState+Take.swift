@_spi(Backend) import WormholeCore

/// The decisions of a take (Protocol.md §18.3 T1, T2) that need nothing but the state:
/// which entries are free again, and which one a take looks at next. The take reads the
/// log, passes dead letters and writes the state around them.
extension WorkQueueState {
    /// Frees what nobody alive holds: the entries of `token` (a member takes with nothing in
    /// hand, so one it holds never reached it) at once, those of members `isAlive` says
    /// ended after the back-off `delay` gives for their deliveries, as a message given back.
    package mutating func releaseEntries(heldBy token: UInt64, now: Int64, isAlive: (UInt64) -> Bool,
                                 delay: (UInt32) -> Double) {
        for index in entries.indices where entries[index].member != 0 {
            if entries[index].member == token {
                entries[index].member = 0
            } else if !isAlive(entries[index].member) {
                // Its member ended holding it (killed, perhaps by this very message).
                entries[index].member = 0
                entries[index].waitBeforeRedelivery(delay(entries[index].deliveries), now: now)
            }
        }
    }

    /// Decides which entry a take handles next: the lowest sequence held by nobody and not
    /// in `skipped`, whose retry delay ran out at `now` or which has had `maximumDeliveries`
    /// (it goes to the dead letters, not waiting: it will not be handed out again); `nil`
    /// when none.
    package func nextWaitingEntry(at now: Int64, maximumDeliveries: UInt32, skipping skipped: Set<UInt64>) -> Int? {
        entries.indices.filter {
            let entry = entries[$0]
            return entry.member == 0 && !skipped.contains(entry.sequence)
                && (entry.isDue(at: now) || entry.deliveries >= maximumDeliveries)
        }.min(by: { entries[$0].sequence < entries[$1].sequence })
    }
}
