/// `--name value` arguments of a role, as the harness passes them to its children.
struct Options {
    private var values: [String: String] = [:]

    /// Parses `--name value`, `--name=value` and `--flag` (a name followed by another
    /// name or by nothing).
    init(_ arguments: some Sequence<String>) throws(BenchError) {
        let arguments = Array(arguments)
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            guard argument.hasPrefix("--") else { throw BenchError("unexpected argument '\(argument)'") }
            let name = String(argument.dropFirst(2))
            index += 1
            if let equals = name.firstIndex(of: "=") {
                values[String(name[..<equals])] = String(name[name.index(after: equals)...])
            } else if index < arguments.count, !arguments[index].hasPrefix("--") {
                values[name] = arguments[index]
                index += 1
            } else {
                values[name] = ""
            }
        }
    }

    func string(_ name: String) throws(BenchError) -> String {
        guard let value = values[name] else { throw BenchError("missing --\(name)") }
        return value
    }

    func string(_ name: String, default fallback: String) -> String { values[name] ?? fallback }

    func int(_ name: String, default fallback: Int) throws(BenchError) -> Int {
        guard let text = values[name] else { return fallback }
        guard let value = Int(text) else { throw BenchError("--\(name) needs a whole number, not '\(text)'") }
        return value
    }

    func double(_ name: String, default fallback: Double) throws(BenchError) -> Double {
        guard let text = values[name] else { return fallback }
        guard let value = Double(text) else { throw BenchError("--\(name) needs a number, not '\(text)'") }
        return value
    }

    func flag(_ name: String) -> Bool { values[name] != nil }
}
