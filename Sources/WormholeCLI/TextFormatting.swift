/// The few text operations the command needs beyond the standard library, written here
/// so that it links `FoundationEssentials` alone (no Foundation, no ICU), which keeps
/// its start-up short.
enum TextFormatting {
    /// `text` with each `scalar` replaced by `replacement`, compared scalar by scalar:
    /// a quote or a newline is found even where a combining mark follows it, which a
    /// comparison of `Character`s would miss.
    static func replacing(_ scalar: Unicode.Scalar, with replacement: String, in text: String) -> String {
        guard text.unicodeScalars.contains(scalar) else { return text }
        var result = String.UnicodeScalarView()
        for each in text.unicodeScalars {
            if each == scalar { result.append(contentsOf: replacement.unicodeScalars) } else { result.append(each) }
        }
        return String(result)
    }

    /// `value` with `places` decimals, rounded to the nearest (as `%.2f` for places 2).
    static func decimal(_ value: Double, places: Int) -> String {
        let scale = (0..<places).reduce(1.0) { product, _ in product * 10 }
        let scaled = (abs(value) * scale).rounded()
        guard scaled.isFinite, scaled < 1e18 else { return "\(value)" }
        let units = UInt64(scaled)
        let whole = units / UInt64(scale), fraction = units % UInt64(scale)
        let sign = value < 0 && units != 0 ? "-" : ""
        guard places > 0 else { return "\(sign)\(whole)" }
        return "\(sign)\(whole)." + zeroPadded(String(fraction), to: places)
    }

    /// `value` as `\uXXXX`, four lowercase hexadecimal digits at least (as `\\u%04x`).
    static func jsonEscape(_ value: UInt32) -> String {
        "\\u" + zeroPadded(String(value, radix: 16), to: 4)
    }

    private static func zeroPadded(_ digits: String, to width: Int) -> String {
        String(repeating: "0", count: max(0, width - digits.count)) + digits
    }
}
