#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Validation of identifiers, notification names and group identifiers: each becomes
/// one file name inside the container, so each must be a single, ordinary path component
/// that displays as what it is (`Docs/Protocol.md` §6).
package enum Identifier {
    /// The longest identifier, in UTF-8 bytes. File names may be 255 bytes; the rest is
    /// kept for the suffixes and temporary-file prefixes the store adds.
    package static let maximumLength = 200

    /// Throws ``WormholeError/Code/invalidIdentifier`` with the reason when `value` cannot
    /// name a file inside the container.
    package static func validate(_ value: String, kind: String = "identifier") throws(WormholeError) {
        // Every pass validates its identifier: one look at each byte decides whether it
        // is acceptable; only a rejected one is examined again, for the reason. An ASCII
        // identifier is always in NFC and free of C1 and bidirectional characters: only
        // one with other characters takes the slower Unicode checks.
        var asciiOnly = true
        let acceptable: Bool? = value.utf8.withContiguousStorageIfAvailable { bytes in
            guard !bytes.isEmpty, bytes.count <= maximumLength, bytes[0] != UInt8(ascii: ".") else { return false }
            for byte in bytes {
                if byte < 0x20 || byte == 0x7F || byte == UInt8(ascii: "/") { return false }
                if byte >= 0x80 { asciiOnly = false }
            }
            return true
        }
        if acceptable == true && (asciiOnly || unicodeAcceptable(value)) { return }
        try explainRejection(value, kind: kind)
    }

    /// C1 control characters (U+0080–U+009F): unprintable, and some terminals act on them.
    package static func isC1Control(_ scalar: Unicode.Scalar) -> Bool {
        (0x80...0x9F).contains(scalar.value)
    }

    /// Bidirectional formatting characters: they make a name display as another
    /// (`txt.exe` shown as `exe.txt`).
    package static func isBidiFormatting(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x061C, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069: true
        default: false
        }
    }

    /// `value` in Unicode Normalization Form C.
    ///
    /// Why the standard library's SPI: Foundation's `precomposedStringWithCanonicalMapping`,
    /// the alternative, links Foundation and ICU, and a static program that composes one
    /// identifier is then 57.9 MB instead of 13.7 MB and starts in 11.9 ms instead of 7.0 ms
    /// (`Benchmarks/run --sections clever`; Docs/Performance.md, "What the clever parts
    /// buy"); `FuzzTests` compares the two, so a change of the SPI's behaviour fails there,
    /// and its removal fails the build.
    ///
    /// The standard library's own normalization (the one its `String` comparison uses),
    /// so that the library needs `FoundationEssentials` alone, not Foundation with ICU:
    /// a command-line tool linked without them starts sooner (Docs/Performance.md).
    package static func composed(_ value: String) -> String {
        String(decoding: value._nfcCodeUnits, as: UTF8.self)
    }

    /// Whether `scalar` was assigned in Unicode ``unicodeVersion`` (General_Category other
    /// than Cn), by the committed table (`Identifier+UnicodeTable.swift`), not by this
    /// runtime's Unicode data.
    ///
    /// Unicode's normalization stability policy makes the NFC form of a string of such
    /// characters the same under every later version; a character assigned later may
    /// compose or reorder under one runtime and not under an older one (Swift 6.3 carries
    /// Unicode 17, Python 3.11 Unicode 14: U+16D67 U+16D67 is NFC to the one and composes
    /// to U+16D68 under the other). So an identifier holds only characters of that
    /// version, and every program, whatever its runtime's Unicode, judges it alike.
    package static func isAssigned(_ scalar: Unicode.Scalar) -> Bool {
        let value = scalar.value
        let bounds = assignedRangeBounds
        // The number of ranges whose first code point is at most `value`.
        var low = 0
        var high = bounds.count / 2
        while low < high {
            let middle = (low + high) / 2
            if bounds[2 * middle] <= value { low = middle + 1 } else { high = middle }
        }
        return low > 0 && value <= bounds[2 * (low - 1) + 1]
    }

    /// Whether `value` is in NFC (compared scalar by scalar: `==` on `String` would call
    /// canonically equivalent forms equal), free of C1 and bidirectional characters, and
    /// of characters that Unicode ``unicodeVersion`` did not assign.
    private static func unicodeAcceptable(_ value: String) -> Bool {
        !value.unicodeScalars.contains { isC1Control($0) || isBidiFormatting($0) || !isAssigned($0) }
            && composed(value).unicodeScalars.elementsEqual(value.unicodeScalars)
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
        if value.unicodeScalars.contains(where: isC1Control) { throw reject("may not contain control characters") }
        if value.unicodeScalars.contains(where: isBidiFormatting) {
            throw reject("may not contain bidirectional formatting characters (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069)")
        }
        if let unassigned = value.unicodeScalars.first(where: { !isAssigned($0) }) {
            throw reject("contains U+\(codePoint(unassigned)), which Unicode \(unicodeVersion) does not assign: an identifier holds only characters of Unicode \(unicodeVersion), which every runtime normalizes alike (Protocol.md §6)")
        }
        let nfc = composed(value)
        if !nfc.unicodeScalars.elementsEqual(value.unicodeScalars) {
            throw WormholeError(.invalidIdentifier, "\(kind) '\(printable(value, escapingMarks: true))' is not in Unicode Normalization Form C (NFC); write it as '\(printable(nfc))'")
        }
    }

    /// `scalar`'s code point in hexadecimal, at least four digits, as in "U+00E9".
    package static func codePoint(_ scalar: Unicode.Scalar) -> String {
        let digits = String(scalar.value, radix: 16, uppercase: true)
        return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }

    /// Whether `scalar` changes how text around it shows rather than showing itself: a
    /// control character (C0, DEL, C1) or a bidirectional formatting character. No
    /// identifier contains one; the `wormhole` command escapes them in messages it prints
    /// to a terminal.
    package static func isUnsafeToDisplay(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || scalar.value == 0x7F || Identifier.isC1Control(scalar) || Identifier.isBidiFormatting(scalar)
    }

    /// The value with control characters escaped, safe to print in an error message.
    /// With `escapingMarks`, combining marks are escaped too, to show how a name that is
    /// not in NFC differs from its composed form.
    package static func printable(_ value: String, escapingMarks: Bool = false) -> String {
        var result = ""
        for scalar in value.unicodeScalars.prefix(80) {
            if Identifier.isUnsafeToDisplay(scalar)
                || escapingMarks && scalar.properties.canonicalCombiningClass != .notReordered {
                result += "\\u{\(String(scalar.value, radix: 16))}"
            } else {
                result.unicodeScalars.append(scalar)
            }
        }
        if value.unicodeScalars.count > 80 { result += "…" }
        return result
    }
}
