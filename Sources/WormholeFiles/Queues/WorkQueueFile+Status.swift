@_spi(Backend) import WormholeCore

extension WormholeWorkQueueStatus {
    /// The status of the work queues of `identifier` (of every identifier when `nil`), read
    /// from their state files.
    package static func read(transiting: FileTransiting, identifier: String?) -> [WormholeWorkQueueStatus] {
        let container = transiting.container
        let identifiers = identifier.map { [$0] } ?? WorkQueueFile.identifiersWithQueues(container: container)
        var result: [WormholeWorkQueueStatus] = []
        for identifier in identifiers {
            let last = transiting.summary(of: identifier)?.lastSequence ?? 0
            for (name, state, members) in WorkQueueFile.states(container: container, identifier: identifier, liveMembers: true) {
                let live = members ?? []
                let tokens = Set(live.map(\.token))
                let held = Set(state?.entries.filter { tokens.contains($0.member) }.map(\.member) ?? [])
                let inFlight = state?.entries.filter { tokens.contains($0.member) }.count ?? 0
                let waiting = UInt64((state?.entries.count ?? 0) - inFlight)
                let ahead = state.map { last > $0.taken ? last - $0.taken : 0 } ?? 0
                result.append(WormholeWorkQueueStatus(
                    identifier: identifier, name: name,
                    members: live.map { Member(processID: $0.processID, pidNamespace: $0.pidNamespace, isHandling: held.contains($0.token)) },
                    pending: ahead + waiting, inFlight: inFlight,
                    acknowledged: state?.acknowledged ?? 0, deadLettered: state?.deadLettered ?? 0,
                    expired: state?.expired ?? 0, lost: state?.lost ?? 0, isDamaged: state == nil))
            }
        }
        return result
    }
}
