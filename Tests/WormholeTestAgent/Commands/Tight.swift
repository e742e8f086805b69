#if canImport(Glibc)
import Glibc
#endif
import Foundation
@_spi(Backend) import Wormhole
import WormholeTestSupport
import Synchronization

/// The agent's `tight` command:
///
///     tight DIR LIMIT COUNT           with at most LIMIT descriptors (ulimit -n),
///                                      pass COUNT messages over 40 identifiers,
///                                      then open /dev/null; print "passed N
///                                      failed M spare ok|<errno>"
func tightCommand() throws {
    // The limit first: the library sizes its cache of open logs from it.
    var limit = rlimit()
    getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    limit.rlim_cur = rlim_t(Int(argument(2)) ?? 16)
    guard setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { fail("setrlimit: \(String(cString: strerror(errno)))") }
    let wormhole = try Wormhole(directory: argument(1))
    var passed = 0
    var failed: [String] = []
    for index in 0..<(Int(argument(3)) ?? 0) {
        do throws(WormholeError) {
            try wormhole.passMessage("m\(index)", identifier: "id\(index % 40)")
            passed += 1
        } catch {
            failed.append(error.description)
        }
    }
    let spare = Glibc.open("/dev/null", O_RDONLY | O_CLOEXEC)
    let spareResult = spare >= 0 ? "ok" : String(cString: strerror(errno))
    if spare >= 0 { Glibc.close(spare) }
    print("passed \(passed) failed \(failed.count) spare \(spareResult)")
    if let first = failed.first { FileHandle.standardError.write(Data("first failure: \(first)\n".utf8)) }
}
