#if canImport(Glibc)
import Glibc
#endif
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
@_spi(Backend) import Wormhole

/// `wormhole send --lines IDENTIFIER`: each line of standard input is a message, passed
/// in batches (``Wormhole/passMessages(_:identifier:)``): one lock and one write for all
/// the lines that have arrived, up to ``batchLimit`` of them, so that a stream of 100,000
/// lines is one process and a few thousand writes, not 100,000 processes.
enum SendLines {
    /// The most lines passed as one batch.
    static let batchLimit = 1024

    /// Reads standard input to its end and passes each line (without its `\n`) as a
    /// message: text when it is UTF-8, else bytes; with `json`, each line must be one
    /// JSON value. A line too long, or not JSON, stops it with an error that names the
    /// line and says how many were passed before it.
    static func pass(identifier: String, json: Bool, printSequence: Bool, container: ContainerOptions.Choice) throws {
        try Failures.reported {
            let wormhole = try container.makeWormhole()
            let limit = Send.limit
            var pending: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 256 << 10)
            var lineNumber = 0
            var passed = 0
            var first: UInt64?
            var last: UInt64?
            func passBatch(_ batch: [(payload: Data, kind: WormholePayloadKind)]) throws {
                guard !batch.isEmpty else { return }
                let sequences = try wormhole.passPayloads(batch, identifier: identifier)
                passed += batch.count
                first = first ?? sequences.lowerBound
                last = sequences.upperBound - 1
            }
            /// The complete lines of `pending` (all of it at the end of the input), in batches.
            func drain(atEnd: Bool) throws {
                var batch: [(payload: Data, kind: WormholePayloadKind)] = []
                var start = 0
                while let newline = pending[start...].firstIndex(of: UInt8(ascii: "\n")) ?? (atEnd && start < pending.count ? pending.count : nil) {
                    lineNumber += 1
                    let line = Data(pending[start..<newline])
                    start = min(newline + 1, pending.count)
                    guard line.count <= limit else {
                        try passBatch(batch)
                        throw CommandFailure("line \(lineNumber) is \(line.count) bytes, more than the largest message (\(limit) bytes); \(passed) lines were passed before it")
                    }
                    var kind: WormholePayloadKind = String(data: line, encoding: .utf8) != nil ? .text : .data
                    if json {
                        if let problem = Send.jsonProblem(line) {
                            try passBatch(batch)
                            throw CommandFailure("line \(lineNumber) is not JSON (\(problem)); \(passed) lines were passed before it")
                        }
                        kind = .json
                    }
                    batch.append((line, kind))
                    if batch.count == batchLimit {
                        try passBatch(batch)
                        batch.removeAll(keepingCapacity: true)
                    }
                }
                try passBatch(batch)
                pending.removeFirst(start)
                guard pending.count <= limit else {
                    throw CommandFailure("line \(lineNumber + 1) is longer than the largest message (\(limit) bytes); \(passed) lines were passed before it")
                }
            }
            if Output.inputIsTerminal {
                Output.error("passing each line of standard input to '\(identifier)'; end with Ctrl-D")
            }
            while true {
                let count = chunk.withUnsafeMutableBytes { read(STDIN_FILENO, $0.baseAddress, $0.count) }
                if count < 0 {
                    if errno == EINTR { continue }
                    throw CommandFailure("cannot read standard input: \(String(cString: strerror(errno))); \(passed) lines were passed")
                }
                if count == 0 { break }
                pending.append(contentsOf: chunk[..<count])
                try drain(atEnd: false)
            }
            try drain(atEnd: true)
            if printSequence, let first, let last { Output.line(first == last ? "\(first)" : "\(first)-\(last)") }
        }
    }
}
