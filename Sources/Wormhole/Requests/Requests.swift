import Synchronization
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
@_spi(Backend) import WormholeCore
@_spi(Backend) import WormholeFiles

/// The names and rules that requesters and responders of every implementation share
/// (Protocol.md §19).
enum Requests {
    /// The work queue of the request identifier whose members are its responders.
    /// Reserved: a work queue of another kind may not take the name (Protocol.md §19), or
    /// its members would take requests as the responders do, and answer none.
    static let respondersQueue = "responders"

    /// The error for a work queue named ``respondersQueue`` that is not the responders'.
    static func reservedQueue(_ identifier: String) -> WormholeError {
        WormholeError(.invalidIdentifier,
                      "the work queue name '\(respondersQueue)' is reserved for the responders of requests to '\(identifier)' (respondToRequests(withIdentifier:)); its members would take requests and answer none: choose another name")
    }

    /// Where the replies to requests of `identifier` are passed.
    static func repliesIdentifier(of identifier: String) -> String {
        identifier + ".replies"
    }

    /// A correlation for a new request: random-looking, never 0 (0 means "none"), and
    /// never the same twice in a process: the SplitMix64 mix of a counter that starts at a
    /// random number drawn once per process. Two processes' correlations meet only if
    /// their counters' ranges overlap, as unlikely as two random draws meeting; drawing
    /// from the kernel for each request (a `getrandom` call) cost a system call a round
    /// trip.
    static func newCorrelation() -> UInt64 {
        while true {
            var mixed = correlationSeed &+ correlationCounter.wrappingAdd(1, ordering: .relaxed).oldValue &* 0x9E37_79B9_7F4A_7C15
            mixed = (mixed ^ (mixed >> 30)) &* 0xBF58_476D_1CE4_E5B9
            mixed = (mixed ^ (mixed >> 27)) &* 0x94D0_49BB_1331_11EB
            mixed ^= mixed >> 31
            if mixed != 0 { return mixed }
        }
    }

    private static let correlationSeed = UInt64.random(in: 0...UInt64.max)
    private static let correlationCounter = Atomic<UInt64>(0)

    /// The error for a request that had no reply within `timeout` seconds, saying whether
    /// any responder was there to answer it.
    static func timedOut(_ identifier: String, after timeout: Double, wormhole: Wormhole) -> WormholeError {
        let members = (try? wormhole.workQueues(identifier: identifier))?
            .first { $0.name == respondersQueue }?.members.count ?? 0
        let seconds = timeout == timeout.rounded() ? String(Int(timeout)) : String(timeout)
        let why = members == 0
            ? "no responder serves '\(identifier)' (start one with respondToRequests(withIdentifier:) or 'wormhole respond \(identifier) -- COMMAND')"
            : "\(members) responder\(members == 1 ? "" : "s") of '\(identifier)' did not answer in time"
        return WormholeError(.timedOut, "no reply to the request to '\(identifier)' within \(seconds) s: \(why)")
    }

    /// The error for a request that was not passed because its requester could not
    /// listen for the reply (no inotify instance or watch left, say): `error`, saying so.
    static func notSent(_ identifier: String, because error: WormholeError) -> WormholeError {
        WormholeError(error.code, "the request to '\(identifier)' was not sent, since its reply could not be awaited: \(error.message)",
                      path: error.path, errno: error.errno)
    }

    /// The text of the error reply sent for a reply that could not be passed.
    static func unpassableReply(_ error: WormholeError) -> String {
        "its reply could not be passed: \(error.description)"
    }

    /// The error a requester receives for an error reply: what the responder said.
    static func failed(_ identifier: String, reply: WormholeRecord) -> WormholeError {
        WormholeError(.requestFailed, "the responder of '\(identifier)' failed: \(String(decoding: reply.payload, as: UTF8.self))")
    }
}
