#if canImport(Glibc)
import Glibc
#endif
import Foundation
@_spi(Backend) import Wormhole
import WormholeTestSupport
import Synchronization

/// The agent's `durable` command:
///
///     durable DIR ID NAME OUT          listen as the durable listener NAME (from the
///                                      history the first time); append "sequence
///                                      payload" to OUT for each message handled,
///                                      "lost N" for a gap; exit after "stop"
func durableCommand() throws {
    let wormhole = try AgentLocation.wormhole(argument(1))
    let append = lineAppender(argument(4))
    let done = DispatchSemaphore(value: 0)
    func listen() throws(WormholeError) -> ListenerToken {
        try wormhole.listenForRecords(withIdentifier: argument(2), durableName: argument(3), startingFrom: .history, onError: { error in
            if let missed = error.missedMessageCount { append("lost \(missed)") } else { append("error \(error.code)") }
        }) { record in
            let payload = String(decoding: record.payload, as: UTF8.self)
            append("\(record.sequence) \(payload)")
            if payload == "stop" { done.signal() }
        }
    }
    // A database session of a killed predecessor lingers for a moment: wait for it.
    var attempt = 0
    var token: ListenerToken?
    while token == nil {
        switch Result(catching: { () throws(WormholeError) in try listen() }) {
        case .success(let taken):
            token = taken
        case .failure(let error):
            guard error.code == .durableNameInUse && attempt < 200 else { throw error }
            attempt += 1
            usleep(25_000)
        }
    }
    _ = FileManager.default.createFile(atPath: argument(4) + ".ready", contents: nil)
    done.wait()
    token?.cancel()
}
