#if canImport(Glibc)
import Glibc
#endif

/// `--identifier-file PATH`: identifiers read from a file (or standard input, `-`)
/// instead of the command line. A command's arguments are readable by every user of the
/// machine (`ps`, `/proc/PID/cmdline`); a file's contents only by those its mode lets in.
enum IdentifierFile {
    /// The most read: room for hundreds of identifiers (of 200 bytes at most each), and a
    /// wrong file is not read whole.
    static let limit = 65_536

    /// The identifier in `path`: its one line, without the newline that ends it.
    static func read(_ path: String) throws -> String {
        let lines = try readLines(path)
        guard lines.count == 1 else {
            throw CommandFailure("\(name(path)) holds more than one line; --identifier-file reads one identifier, on one line")
        }
        return lines[0]
    }

    /// The identifiers in `path`, one a line (for `listen`, which takes several).
    static func readLines(_ path: String) throws -> [String] {
        let fd = path == "-" ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            throw CommandFailure("cannot read the identifier from '\(path)': \(String(cString: strerror(errno))); check the path given to --identifier-file")
        }
        defer { if fd != STDIN_FILENO { close(fd) } }
        let what = name(path)
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: limit + 1)
        while bytes.count <= limit {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw CommandFailure("cannot read the identifier from \(what): \(String(cString: strerror(errno)))")
            }
            if count == 0 { break }
            bytes += chunk[..<count]
        }
        guard bytes.count <= limit else {
            throw CommandFailure("\(what) holds more than \(limit) bytes; --identifier-file reads a file of identifiers, one a line")
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw CommandFailure("\(what) does not hold UTF-8 text; an identifier is UTF-8")
        }
        // Each line without its newline (and a carriage return before it); a final
        // newline ends the last line, and makes no empty one.
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false).map { line in
            line.hasSuffix("\r") ? String(line.dropLast()) : String(line)
        }
        if text.hasSuffix("\n") { lines.removeLast() }
        guard !lines.isEmpty, !lines.contains(where: \.isEmpty) else {
            throw CommandFailure("\(what) holds \(lines.isEmpty ? "no identifier" : "an empty line"); write one identifier a line in it")
        }
        return lines
    }

    private static func name(_ path: String) -> String {
        path == "-" ? "standard input" : "'\(path)'"
    }
}
