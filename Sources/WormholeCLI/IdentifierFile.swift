#if canImport(Glibc)
import Glibc
#endif

/// `--identifier-file PATH`: an identifier read from a file (or standard input, `-`)
/// instead of the command line. A command's arguments are readable by every user of the
/// machine (`ps`, `/proc/PID/cmdline`); a file's contents only by those its mode lets in.
enum IdentifierFile {
    /// The most read: far more than an identifier's 200 bytes, so that a long one is
    /// refused by the library's check with its length, and a wrong file is not read whole.
    static let limit = 4096

    /// The identifier in `path`: its one line, without the newline that ends it.
    static func read(_ path: String) throws -> String {
        let fd = path == "-" ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            throw CommandFailure("cannot read the identifier from '\(path)': \(String(cString: strerror(errno))); check the path given to --identifier-file")
        }
        defer { if fd != STDIN_FILENO { close(fd) } }
        let what = path == "-" ? "standard input" : "'\(path)'"
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
            throw CommandFailure("\(what) holds more than \(limit) bytes; --identifier-file reads a file that holds one identifier, on one line")
        }
        if bytes.last == UInt8(ascii: "\n") { bytes.removeLast() }
        if bytes.last == UInt8(ascii: "\r") { bytes.removeLast() }
        guard !bytes.isEmpty else {
            throw CommandFailure("\(what) holds no identifier; write the identifier in it, on one line")
        }
        guard !bytes.contains(UInt8(ascii: "\n")) else {
            throw CommandFailure("\(what) holds more than one line; --identifier-file reads one identifier, on one line")
        }
        guard let identifier = String(validating: bytes, as: UTF8.self) else {
            throw CommandFailure("\(what) does not hold UTF-8 text; an identifier is UTF-8")
        }
        return identifier
    }
}
