#if canImport(Glibc)
import Glibc
#endif
import Foundation
@_spi(Backend) import Wormhole
import WormholeTestSupport
import Synchronization

/// The agent's `worker` command:
///
///     worker DIR ID QUEUE OUT [POISON [HANG [MAX [MS]]]]
///                                      join the work queue QUEUE of ID; append
///                                      "sequence deliveries payload" to OUT as each
///                                      message is taken (before it is handled);
///                                      a payload equal to POISON throws, one equal
///                                      to HANG never returns; MAX deliveries (3 with
///                                      a POISON, else 1,000); each job then takes MS
///                                      milliseconds ('-' for any: none); "lost N"
///                                      and "error CODE" for reports; OUT.ready once
///                                      joined; runs until killed
func workerCommand() throws {
    let wormhole = try AgentLocation.wormhole(argument(1))
    let append = lineAppender(argument(4))
    // [poison] [payload to hang on] [maximum deliveries] [milliseconds each job takes
    // after its line is written]; "-": none
    func optional(_ index: Int) -> String? { arguments.count > index && argument(index) != "-" ? argument(index) : nil }
    let poison = optional(5)
    let hang = optional(6)
    let delay = optional(8).flatMap { UInt32($0) } ?? 0
    struct Poisoned: Error {}
    let maximum = optional(7).flatMap { Int($0) } ?? (poison == nil ? 1_000 : 3)
    // No retry delay: the tests of this worker count losses and repeats, not time
    // (WorkQueueTests and PythonInteropTests test the delays).
    let options = WorkQueueOptions(maximumDeliveries: maximum, redeliveryInterval: 0.05, retryDelay: 0)
    let member = try wormhole.listenForRecords(withIdentifier: argument(2), workQueue: argument(3), options: options, onError: { error in
        if let missed = error.missedMessageCount { append("lost \(missed)") } else { append("error \(error.code) \(error)") }
    }) { record, deliveries in
        let payload = String(decoding: record.payload, as: UTF8.self)
        append("\(record.sequence) \(deliveries) \(payload)")
        if delay > 0 { usleep(delay * 1000) }
        if payload == poison { throw Poisoned() }
        if payload == hang { while true { sleep(60) } }
    }
    _ = FileManager.default.createFile(atPath: argument(4) + ".ready", contents: nil)
    while true { sleep(60) }
    _ = member
}
