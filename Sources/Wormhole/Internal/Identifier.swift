/// Validation of identifiers, notification names and group identifiers: each becomes
/// one file name inside the container, so each must be a single, ordinary path component.
enum Identifier {
    /// The longest identifier, in UTF-8 bytes. File names may be 255 bytes; the rest is
    /// kept for the suffixes and temporary-file prefixes the store adds.
    static let maximumLength = 200

    /// Throws ``WormholeError/Code/invalidIdentifier`` with the reason when `value` cannot
    /// name a file inside the container.
    static func validate(_ value: String, kind: String = "identifier") throws(WormholeError) {
        // Every pass validates its identifier: one look at each byte decides whether it
        // is acceptable; only a rejected one is examined again, for the reason.
        let acceptable: Bool? = value.utf8.withContiguousStorageIfAvailable { bytes in
            guard !bytes.isEmpty, bytes.count <= maximumLength, bytes[0] != UInt8(ascii: ".") else { return false }
            for byte in bytes where byte < 0x20 || byte == 0x7F || byte == UInt8(ascii: "/") { return false }
            return true
        }
        if acceptable == true { return }
        try explainRejection(value, kind: kind)
    }

    /// Throws the reason `value` is not an acceptable identifier (nothing if it is).
    private static func explainRejection(_ value: String, kind: String) throws(WormholeError) {
        func reject(_ why: String) -> WormholeError {
            WormholeError(.invalidIdentifier, "\(kind) '\(printable(value))' \(why)")
        }
        let bytes = value.utf8
        if bytes.isEmpty { throw WormholeError(.invalidIdentifier, "\(kind) may not be empty") }
        if bytes.count > maximumLength {
            throw reject("is \(bytes.count) bytes long; the limit is \(maximumLength) bytes")
        }
        if value == "." || value == ".." { throw reject("may not be '.' or '..'") }
        if bytes.contains(UInt8(ascii: "/")) { throw reject("may not contain '/'") }
        if bytes.first == UInt8(ascii: ".") { throw reject("may not start with '.' (reserved for Wormhole's own files)") }
        if bytes.contains(0) { throw reject("may not contain a NUL byte") }
        if bytes.contains(where: { $0 < 0x20 || $0 == 0x7F }) { throw reject("may not contain control characters") }
    }

    /// The value with control characters escaped, safe to print in an error message.
    static func printable(_ value: String) -> String {
        var result = ""
        for scalar in value.unicodeScalars.prefix(80) {
            if scalar.value < 0x20 || scalar.value == 0x7F {
                result += "\\u{\(String(scalar.value, radix: 16))}"
            } else {
                result.unicodeScalars.append(scalar)
            }
        }
        if value.unicodeScalars.count > 80 { result += "…" }
        return result
    }
}
