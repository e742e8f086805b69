#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// The clever section: each of the library's less obvious parts measured with it and
/// without it in the same run, interleaved over the rounds (with, without, with, ...), so
/// that load from elsewhere falls on both alike. Every row's note gives each round's
/// figure: a difference smaller than their spread is no measurable gain.
///
/// - The standard JSON form's own coder (`Sources/Wormhole/Coding/`) against Foundation's
///   `JSONEncoder` and `JSONDecoder` of the same form (`clever-coding`).
/// - NFC by the standard library's SPI `_nfcCodeUnits` against Foundation's
///   `precomposedStringWithCanonicalMapping` (`clever-nfc`), and what linking Foundation
///   costs a program that starts, composes one identifier and ends (`nfc_essentials` and
///   `nfc_foundation`, which Benchmarks/run builds with `swiftc -static-stdlib` into the
///   C peers' directory).
/// - The container's watch made at a wormhole's second pass against its first
///   (`clever-send-once`, with `WORMHOLE_BENCH_CONTAINER_WATCH_AT_FIRST_PASS`): a process
///   that passes one message, from spawn to exit.
/// - A blocking request on the reader thread serving the process's events nested
///   against waiting as other threads do (`clever-nested`, with
///   `WORMHOLE_BENCH_NO_NESTED_SERVING`): its responder in another process, and in the
///   same one.
///
/// The requester's polling (`replySpinTime`) is measured by the requests section, which
/// runs its requesters with it and without it, interleaved.
extension Suite {
    mutating func clever(_ runner: Runner, _ fileSystem: String) throws(BenchError) {
        let directory = runner.base + "/clever"
        func fresh() {
            removeTree(directory)
            mkdir(directory, 0o700)
        }
        defer { removeTree(directory) }

        // The coder.
        let codingCount = quick ? 500 : 2000
        printError("  JSON coding of a small Codable message: \(codingCount) batches of 100 passes, \(codingCount) decodes, \(rounds) rounds")
        var coding: [String: [[String: String]]] = [:]
        for _ in 1...rounds {
            for coder in ["own", "foundation"] {
                fresh()
                let child = try Child(["clever-coding", "--dir", directory, "--count", String(codingCount), "--coder", coder])
                let result = fields(of: try child.expect("RESULT", timeout: 600))
                child.wait()
                coding[coder, default: []].append(result)
                printError("    \(coder): \(result)")
            }
        }
        for (coder, label) in [("own", "the library's coder of the standard form"), ("foundation", "Foundation's JSONEncoder/JSONDecoder, same form")] {
            let runs = coding[coder] ?? []
            func values(_ key: String) -> [Double] { runs.compactMap { Double($0[key] ?? "") } }
            let encode = zip(values("pass_ns"), values("raw_ns")).map { ($0 - $1) / 1000 }
            addRoundsRow("clever", fileSystem, "encode (passMessages minus passPayloads of its bytes, batches of 100), \(label)", encode, unit: "us")
            addRoundsRow("clever", fileSystem, "passMessages, per message, \(label)", values("pass_ns").map { $0 / 1000 }, unit: "us")
            addRoundsRow("clever", fileSystem, "decode (record.decode(as:using:)), \(label)", values("decode_ns").map { $0 / 1000 }, unit: "us")
        }
        addRoundsRow("clever", fileSystem, "passPayloads of the same bytes, per message (no coding)",
                     (coding["own"] ?? []).compactMap { Double($0["raw_ns"] ?? "") }.map { $0 / 1000 }, unit: "us")

        // NFC.
        let nfcCount = quick ? 5000 : 50000
        printError("  NFC of \(CleverRoles.unicodeIdentifiers.count) identifiers that are not ASCII, \(nfcCount) times, \(rounds) rounds")
        var nfc: [String: [Double]] = [:]
        for _ in 1...rounds {
            for method in ["stdlib", "foundation"] {
                let child = try Child(["clever-nfc", "--method", method, "--count", String(nfcCount)])
                let result = fields(of: try child.expect("RESULT", timeout: 600))
                child.wait()
                if result["agree"] != "yes" { printError("    the two normalizations disagree on an identifier") }
                nfc[method, default: []].append(Double(result["ns"] ?? "") ?? 0)
                printError("    \(method): \(result)")
            }
        }
        addRoundsRow("clever", fileSystem, "NFC of an identifier, the standard library's _nfcCodeUnits", (nfc["stdlib"] ?? []).map { $0 / 1000 }, unit: "us")
        addRoundsRow("clever", fileSystem, "NFC of an identifier, Foundation's precomposedStringWithCanonicalMapping", (nfc["foundation"] ?? []).map { $0 / 1000 }, unit: "us")

        // Whole processes: the cost of linking Foundation, and of the container's watch.
        let runs = quick ? 10 : 40
        var programs: [(label: String, path: String, arguments: [String], environment: [String])] = [
            ("/bin/true (any process)", "/bin/true", [], []),
        ]
        if let bin = peers.cBin {
            for (name, label) in [("nfc_essentials", "a program that composes one identifier: FoundationEssentials and _nfcCodeUnits, swiftc -static-stdlib"),
                                  ("nfc_foundation", "a program that composes one identifier: Foundation and precomposedStringWithCanonicalMapping, swiftc -static-stdlib")] {
                let path = bin + "/" + name
                if access(path, X_OK) == 0 { programs.append((label, path, ["küche.temperatur"], [])) } else { printError("Note: \(path) is missing: skipped") }
            }
        }
        programs += [
            ("a process that passes one message, the container watched from the second pass (the library)", Child.selfPath,
             ["clever-send-once", "--dir", directory], []),
            ("a process that passes one message, the container watched from the first pass", Child.selfPath,
             ["clever-send-once", "--dir", directory], ["WORMHOLE_BENCH_CONTAINER_WATCH_AT_FIRST_PASS=1"]),
            ("a process that passes two messages, the container watched from the second pass (the library)", Child.selfPath,
             ["clever-send-once", "--dir", directory, "--passes", "2"], []),
            ("a process that passes two messages, the container watched from the first pass", Child.selfPath,
             ["clever-send-once", "--dir", directory, "--passes", "2"], ["WORMHOLE_BENCH_CONTAINER_WATCH_AT_FIRST_PASS=1"]),
        ]
        if let cli {
            let send = ["send", "--directory", directory, "bench.once", "hello"]
            programs += [
                ("wormhole send (swift build -c release), the container watched from the second pass (the library)", cli, send, []),
                ("wormhole send (swift build -c release), the container watched from the first pass", cli, send, ["WORMHOLE_BENCH_CONTAINER_WATCH_AT_FIRST_PASS=1"]),
            ]
        }
        printError("  whole processes, \(runs) runs each, \(rounds) rounds interleaved")
        fresh()
        var times: [String: [[UInt64]]] = [:]
        for program in programs { _ = try spawnTimed(program.path, program.arguments, program.environment) }
        for _ in 1...rounds {
            var round: [String: [UInt64]] = [:]
            // One run of each in turn, so that each round's programs meet the same load.
            for _ in 0..<runs {
                for program in programs {
                    round[program.label, default: []].append(try spawnTimed(program.path, program.arguments, program.environment))
                }
            }
            for program in programs {
                let sorted = (round[program.label] ?? []).sorted()
                times[program.label, default: []].append(sorted)
                printError(String(format: "    %@: p50 %.0f us", program.label, Double(percentile(sorted, 50)) / 1000))
            }
        }
        for program in programs {
            let medians = (times[program.label] ?? []).map { Double(percentile($0, 50)) / 1000 }
            var size = ""
            if program.path != Child.selfPath, program.path != cli, let attributes = try? FileManager.default.attributesOfItem(atPath: program.path),
               let bytes = attributes[.size] as? Int {
                size = String(format: "; %.1f MB", Double(bytes) / 1e6)
            }
            addRoundsRow("clever", fileSystem, program.label, medians, unit: "us", extra: "p50 from spawn to exit of \(runs) runs a round" + size)
        }

        // A blocking request on the reader thread.
        let nestedCount = quick ? 200 : 1000
        printError("  blocking requests from a listener on the reader thread: \(nestedCount) to a responder in another process, \(rounds) rounds")
        var nested: [Bool: [Double]] = [:]
        var nestedFailed: [Bool: Int] = [:]
        for _ in 1...rounds {
            for serving in [true, false] {
                fresh()
                let server = try Child(["rr-serve", "--mechanism", "wormhole", "--dir", directory])
                _ = try server.expect("READY", timeout: 60)
                let caller = try withEnvironment(serving ? nil : "WORMHOLE_BENCH_NO_NESTED_SERVING") { () throws(BenchError) in
                    try Child(["clever-nested", "--dir", directory, "--count", String(nestedCount)])
                }
                let result = fields(of: try caller.expect("RESULT", timeout: 600))
                let samples = try caller.expect("SAMPLES", timeout: 60).dropFirst("SAMPLES ".count).split(separator: ",").compactMap { UInt64($0) }.sorted()
                caller.wait()
                server.terminate()
                nested[serving, default: []].append(Double(percentile(samples, 50)) / 1000)
                nestedFailed[serving, default: 0] += Int(result["failed"] ?? "") ?? 0
                printError(String(format: "    %@: p50 %.1f us, %@ failed", serving ? "nested serving" : "waiting as other threads", Double(percentile(samples, 50)) / 1000, result["failed"] ?? "?"))
            }
        }
        addRoundsRow("clever", fileSystem, "request from the reader thread, responder in another process, serving nested (the library)", nested[true] ?? [], unit: "us",
                     extra: "\(nestedFailed[true] ?? 0) failed")
        addRoundsRow("clever", fileSystem, "request from the reader thread, responder in another process, waiting as other threads do", nested[false] ?? [], unit: "us",
                     extra: "\(nestedFailed[false] ?? 0) failed")
        let localCount = quick ? 10 : 30, localTimeout = 2.0
        printError("  the same with the responder in the same process (\(localCount) requests, timeout \(localTimeout) s), \(rounds) rounds")
        var local: [Bool: [[UInt64]]] = [:]
        var localFailed: [Bool: Int] = [:]
        for _ in 1...rounds {
            for serving in [true, false] {
                fresh()
                let caller = try withEnvironment(serving ? nil : "WORMHOLE_BENCH_NO_NESTED_SERVING") { () throws(BenchError) in
                    try Child(["clever-nested", "--dir", directory, "--count", String(localCount), "--local", "--timeout", String(localTimeout)])
                }
                let result = fields(of: try caller.expect("RESULT", timeout: 600))
                let samples = try caller.expect("SAMPLES", timeout: 60).dropFirst("SAMPLES ".count).split(separator: ",").compactMap { UInt64($0) }.sorted()
                caller.wait()
                local[serving, default: []].append(samples)
                localFailed[serving, default: 0] += Int(result["failed"] ?? "") ?? 0
                printError(String(format: "    %@: p50 %.1f us, p90 %.1f us, max %.1f us, %d over 100 ms, %@ failed", serving ? "nested serving" : "waiting as other threads",
                                  Double(percentile(samples, 50)) / 1000, Double(percentile(samples, 90)) / 1000, Double(samples.last ?? 0) / 1000,
                                  samples.filter { $0 > 100_000_000 }.count, result["failed"] ?? "?"))
            }
        }
        for serving in [true, false] {
            let label = "request from the reader thread, responder in the same process, " + (serving ? "serving nested (the library)" : "waiting as other threads do")
            let runs = local[serving] ?? []
            let slow = runs.map { $0.filter { $0 > 100_000_000 }.count }
            addRoundsRow("clever", fileSystem, label + ", p90", runs.map { Double(percentile($0, 90)) / 1000 }, unit: "us",
                         extra: "over 100 ms, a round: " + slow.map(String.init).joined(separator: " / ") + " of \(localCount); \(localFailed[serving] ?? 0) failed")
            addRoundsRow("clever", fileSystem, label + ", p50", runs.map { Double(percentile($0, 50)) / 1000 }, unit: "us")
        }
    }

    /// A row whose figure is the median of the rounds' `values`, each round's value and
    /// their spread in its note.
    private mutating func addRoundsRow(_ section: String, _ fileSystem: String, _ label: String, _ values: [Double], unit: String, extra: String = "") {
        guard !values.isEmpty else { return }
        var row = Row(section: section, fileSystem: fileSystem, mechanism: label, messages: values.count)
        row.p50 = median(values)
        let spread = (values.max() ?? 0) - (values.min() ?? 0)
        row.note = "rounds: " + values.map { String(format: "%.2f", $0) }.joined(separator: " / ") + String(format: " %@; spread %.2f %@", unit, spread, unit)
        if !extra.isEmpty { row.note += "; " + extra }
        rows.append(row)
        printError("    = \(label): \(String(format: "%.2f", row.p50!)) \(unit) (\(row.note))")
    }

    /// Starts `path` with `arguments` and `environment` added to the harness's, waits for
    /// its exit and returns the time from spawn to exit (ns).
    private func spawnTimed(_ path: String, _ arguments: [String], _ environment: [String]) throws(BenchError) -> UInt64 {
        let begin = Monotonic.now()
        let status = try withEnvironment(environment.first.map { String($0.prefix { $0 != "=" }) }) { () throws(BenchError) in
            try Child(path: path, arguments, quiet: true).wait()
        }
        let took = Monotonic.now() - begin
        if status != 0 { throw BenchError("\(path) \(arguments.joined(separator: " ")) exited with \(status)") }
        return took
    }

    /// Runs `body` with the environment variable `name` set to 1 (none: as it is).
    private func withEnvironment<T>(_ name: String?, _ body: () throws(BenchError) -> T) throws(BenchError) -> T {
        guard let name else { return try body() }
        setenv(name, "1", 1)
        defer { unsetenv(name) }
        return try body()
    }
}
