#if canImport(Glibc)
import Glibc
#endif
import Foundation
@_spi(Backend) import Wormhole
import WormholeTestSupport
import Synchronization

/// The agent's `starved` command:
///
///     starved DIR N                    listen to s1...sN, then open /dev/null
///                                      until the descriptor limit; print "full";
///                                      wait for N retry reports, print "reports K",
///                                      close the fillers, print each message as
///                                      it arrives, and "done" after N
func starvedCommand() throws {
    let wormhole = try AgentLocation.wormhole(argument(1))
    let count = Int(argument(2)) ?? 0
    let say: @Sendable (String) -> Void = { line in FileHandle.standardOutput.write(Data((line + "\n").utf8)) }
    let reports = DispatchSemaphore(value: 0)
    let received = DispatchSemaphore(value: 0)
    var tokens: [ListenerToken] = []
    for index in 1...count {
        tokens.append(try wormhole.listenForRecords(withIdentifier: "s\(index)", onError: { error in
            say("report \(error.description)")
            if error.errno == .tooManyOpenFiles { reports.signal() }
        }) { record in
            say("message \(String(decoding: record.payload, as: UTF8.self))")
            received.signal()
        })
    }
    // A limit just above what is open now, then every descriptor left taken.
    let open = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? 64
    var limit = rlimit()
    getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    limit.rlim_cur = rlim_t(open + 16)
    setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    // Full means full for a while: a descriptor that the runtime held for a moment
    // during start-up and closed later is taken too.
    var fillers: [Int32] = []
    var quietRounds = 0
    while quietRounds < 5 {
        var added = 0
        while true {
            let fd = Glibc.open("/dev/null", O_RDONLY | O_CLOEXEC)
            if fd < 0 { break }
            fillers.append(fd)
            added += 1
        }
        quietRounds = added == 0 && !fillers.isEmpty ? quietRounds + 1 : 0
        usleep(20_000)
    }
    say("full")
    var reported = 0
    while reported < count, reports.wait(timeout: .now() + 20) == .success { reported += 1 }
    say("reports \(reported)")
    fillers.forEach { _ = close($0) }
    var arrived = 0
    while arrived < count, received.wait(timeout: .now() + 20) == .success { arrived += 1 }
    tokens.forEach { $0.cancel() }
    say(arrived == count ? "done" : "only \(arrived)")
}
