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
            let passer = Passer(wormhole: try container.makeWormhole(), identifier: identifier, json: json)
            var chunk = [UInt8](repeating: 0, count: 256 << 10)
            if Output.inputIsTerminal {
                Output.error("passing each line of standard input to '\(identifier)'; end with Ctrl-D")
            }
            while true {
                let count = chunk.withUnsafeMutableBytes { read(STDIN_FILENO, $0.baseAddress, $0.count) }
                if count < 0 {
                    if errno == EINTR { continue }
                    throw CommandFailure("cannot read standard input: \(String(cString: strerror(errno))); \(passer.passed) lines were passed")
                }
                if count == 0 { break }
                passer.pending.append(contentsOf: chunk[..<count])
                try passer.drain(atEnd: false)
            }
            try passer.drain(atEnd: true)
            if printSequence, let first = passer.first, let last = passer.last {
                Output.line(first == last ? "\(first)" : "\(first)-\(last)")
            }
        }
    }

    /// The lines read and not passed yet, and what was passed of them so far.
    private final class Passer {
        let wormhole: Wormhole
        let identifier: String
        let json: Bool
        let limit = Send.limit
        /// Bytes read after the last complete line.
        var pending: [UInt8] = []
        var lineNumber = 0
        var passed = 0
        var first: UInt64?
        var last: UInt64?

        init(wormhole: Wormhole, identifier: String, json: Bool) {
            self.wormhole = wormhole
            self.identifier = identifier
            self.json = json
        }

        func passBatch(_ batch: [(payload: Data, kind: WormholePayloadKind)]) throws {
            guard !batch.isEmpty else { return }
            let sequences = try wormhole.passPayloads(batch, identifier: identifier)
            passed += batch.count
            first = first ?? sequences.lowerBound
            last = sequences.upperBound - 1
        }

        /// Passes the complete lines of `pending` (all of it at the end of the input), in
        /// batches; a line too long or (with `json`) not JSON stops it, after the lines before it.
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
    }
}
