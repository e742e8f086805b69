import Testing
@_spi(Backend) @testable import Wormhole
@_spi(Backend) @testable import WormholeCore
@_spi(Backend) @testable import WormholeFiles

/// What a compaction keeps, decided from the whole records its walk found: the plan alone,
/// without a file (DamagedLengthTests and KeptPromisesTests run it on real logs).
@Suite("Compaction plan")
struct CompactionPlanTests {
    /// A log of this version whose records `sequences` have payloads of `payload` bytes each,
    /// adjacent from the header on (a sequence left out is a record the walk skipped as damage).
    static func entries(_ sequences: [UInt64], payload: Int = 10) -> [CompactionPlan.Entry] {
        var offset = LogFormat.headerSize
        return sequences.map { sequence in
            defer { offset += LogFormat.recordOverhead + payload }
            return CompactionPlan.Entry(offset: offset, sequence: sequence, length: LogFormat.recordOverhead + payload)
        }
    }

    static func policy(retained: Int, backlog: Int = 100) -> CompactionPolicy {
        var configuration = WormholeConfiguration()
        configuration.retainedMessageCount = retained
        configuration.maximumBacklogMessageCount = backlog
        return CompactionPolicy(configuration: configuration)
    }

    @Test("with no listener, the newest retainedMessageCount records are kept, and the base sequence is just below them")
    func keepsTheRetainedHistory() {
        let policy = Self.policy(retained: 3)
        let plan = CompactionPlan(entries: Self.entries(Array(1...10)), header: policy.newHeader(), lastSequence: 10,
                                  clearing: false, claim: nil, policy: policy)
        #expect(plan.kept.map(\.sequence) == [8, 9, 10])
        #expect(plan.header.baseSequence == 7)
        #expect(plan.copiedBytes == 3 * (LogFormat.recordOverhead + 10))
    }

    @Test("a live listener's unread records are kept below the retained history, up to the backlog cap; past the cap its base says they fell behind")
    func keepsUnreadRecordsWithinTheCap() {
        let policy = Self.policy(retained: 2, backlog: 5)
        let header = policy.newHeader()
        let within = CompactionPlan(entries: Self.entries(Array(1...10)), header: header, lastSequence: 10,
                                    clearing: false, claim: 6, policy: policy)
        #expect(within.kept.map(\.sequence) == [7, 8, 9, 10])
        #expect(within.header.baseSequence == 6)
        let capped = CompactionPlan(entries: Self.entries(Array(1...10)), header: header, lastSequence: 10,
                                    clearing: false, claim: 1, policy: policy)
        #expect(capped.kept.map(\.sequence) == [6, 7, 8, 9, 10])
        #expect(capped.header.baseSequence == 5)
    }

    @Test("records skipped as damage (a damaged length field) between a listener's position and the first kept record leave the base at its position: it is told they are missing, not that it fell behind (§10.2 C6)")
    func damagedRecordsBelowTheFirstKeptAreReportedAsMissing() {
        let policy = Self.policy(retained: 2)
        // Records 3 and 4 are damage the walk skipped; the listener has read up to 2.
        let plan = CompactionPlan(entries: Self.entries([1, 2, 5, 6, 7]), header: policy.newHeader(), lastSequence: 7,
                                  clearing: false, claim: 2, policy: policy)
        #expect(plan.kept.map(\.sequence) == [5, 6, 7])
        #expect(plan.header.baseSequence == 2)
    }

    @Test("a clear keeps nothing up to the last sequence, marks it cleared, and a claim that overflows is ignored")
    func clearingKeepsNothing() {
        let policy = Self.policy(retained: 5)
        let plan = CompactionPlan(entries: Self.entries(Array(1...4)), header: policy.newHeader(), lastSequence: 4,
                                  clearing: true, claim: .max, policy: policy)
        #expect(plan.kept.isEmpty)
        #expect(plan.header.clearedThrough == 4 && plan.header.baseSequence == 4)
        #expect(plan.header.version == LogFormat.version)
    }
}
