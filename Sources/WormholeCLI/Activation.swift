import ArgumentParser
#if canImport(Glibc)
import Glibc
#endif
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
@_spi(Backend) import Wormhole

/// `wormhole activation <identifier> -- <command>`: writes a systemd path unit that starts
/// a service when a message (or a request) is passed under the identifier, and the
/// service it starts.
struct Activation: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "activation",
        abstract: "Write a systemd path unit and service that start a command when a message is passed under an identifier.",
        discussion: """
            Writes NAME.path, which watches the identifier's log in the container \
            (PathModified=: every append wakes it, and a log that does not exist yet is \
            waited for), and NAME.service, which runs the command after '--' (no shell: \
            each word is quoted for systemd). The service is started by the first \
            message passed while it does not run; give it a durable name or make it a \
            responder, and let it end when idle, so that it handles what was passed \
            while it was down and exits when there is nothing more:

              wormhole activation jobs -- /usr/local/bin/wormhole listen --durable worker --exit-when-idle 30 jobs
              wormhole activation app.state -- /usr/local/bin/wormhole respond --exit-when-idle 30 app.state -- /usr/local/bin/answer

            For requests, the identifier is the request identifier (the one 'respond' \
            serves). NAME is wormhole-<identifier>, escaped as systemd-escape does \
            (--name gives another). The service's environment names the container \
            (WORMHOLE_GROUP or WORMHOLE_DIRECTORY, and WORMHOLE_APP_GROUPS_DIRECTORY \
            when set), so a command that gives no container options uses the watched one.

            --user (the default) writes units for the user's own systemd instance, into \
            ~/.config/systemd/user; --system writes system units into /etc/systemd/system, \
            run as --run-as USER (User=) and, for a group shared with 'wormhole share', \
            with its Unix group (Group=). --output writes them elsewhere. Then:

              systemctl --user daemon-reload && systemctl --user enable --now NAME.path
            """)

    @Argument(help: "The identifier whose messages start the service (for requests: the request identifier).")
    var identifier: String

    @Argument(parsing: .postTerminator, help: "The command the service runs, after '--'.")
    var command: [String] = []

    @Option(name: .long, help: ArgumentHelp("The units' name, without .path or .service (default: wormhole-<identifier>, escaped).", valueName: "name"))
    var name: String?

    @Flag(name: .long, help: "Write units for the user's own systemd instance (the default).")
    var user = false

    @Flag(name: .long, help: "Write system units (run as --run-as USER, with the shared group's Unix group).")
    var system = false

    @Option(name: .long, help: ArgumentHelp("With --system: the user the service runs as (User=).", valueName: "user"))
    var runAs: String?

    @Option(name: .shortAndLong, help: ArgumentHelp("Write the units into this directory (default: ~/.config/systemd/user, or /etc/systemd/system with --system).", valueName: "directory"))
    var output: String?

    @Flag(name: .long, help: "Print the units on standard output instead of writing them.")
    var print = false

    @OptionGroup(title: "Container") var directoryOptions: DirectoryOptions

    /// Never listed: parsed only to say why it is refused.
    @Option(name: .long, help: .private) var postgres: String?

    /// The container options as ``ContainerOptions/Choice`` (no PostgreSQL: a database has
    /// no file for a path unit to watch).
    var choice: ContainerOptions.Choice {
        ContainerOptions.Choice(group: directoryOptions.group, directory: directoryOptions.directory,
                                optionalDirectory: directoryOptions.optionalDirectory)
    }

    func validate() throws {
        if postgres != nil {
            throw ValidationError("activation watches a log file in a container directory, which PostgreSQL does not have; give --group or --directory.")
        }
        try choice.validate()
        if user && system {
            throw ValidationError("--user and --system choose which systemd instance runs the units; give only one of them.")
        }
        if runAs != nil && !system {
            throw ValidationError("--run-as names the user a system unit runs as; add --system (a user unit runs as its user).")
        }
        if command.isEmpty {
            throw ValidationError("Name the command the service runs after '--', such as 'wormhole activation \(identifier) -- /usr/bin/wormhole listen --durable NAME --exit-when-idle 30 \(identifier)'.")
        }
        if print && output != nil {
            throw ValidationError("--print writes the units on standard output; --output names a directory. Give only one of them.")
        }
        if let name, let problem = Self.problem(withUnitName: name) {
            throw ValidationError("--name '\(name)' \(problem)")
        }
        if let runAs, runAs.isEmpty || runAs.contains(where: { !($0.isLetter || $0.isNumber || "_-.".contains($0)) }) || !runAs.allSatisfy(\.isASCII) {
            throw ValidationError("--run-as '\(runAs)' is not a user name (letters, digits, '_', '-' and '.').")
        }
    }

    func run() throws {
        try Failures.reported {
            try Wormhole.validate(identifier: identifier)
            let units = try makeUnits()
            if print {
                Output.write(Data(("# \(units.name).path\n" + units.path + "\n# \(units.name).service\n" + units.service).utf8))
                return
            }
            let directory = try output ?? defaultDirectory()
            try Self.makeDirectories(directory)
            for (suffix, text) in [("path", units.path), ("service", units.service)] {
                try Self.write(text, to: directory + "/" + units.name + "." + suffix)
            }
            let systemctl = system ? "systemctl" : "systemctl --user"
            Output.line("wrote \(directory)/\(units.name).path and \(units.name).service; start watching with:")
            Output.line("  \(systemctl) daemon-reload && \(systemctl) enable --now \(ContainerOptions.shellQuoted(units.name + ".path"))")
        }
    }

    /// The two units' name and text.
    func makeUnits() throws -> (name: String, path: String, service: String) {
        let (directory, environment, unixGroup) = try watchedContainer()
        let log = directory + "/" + identifier + ".wormhole"
        for (what, value) in [("the container's path", directory)] {
            if let bad = value.unicodeScalars.first(where: { $0.value < 0x20 || $0.value == 0x7F || (0x80...0x9F).contains($0.value) }) {
                throw CommandFailure("\(what) '\(value.debugDescription)' holds the control character U+\(String(bad.value, radix: 16, uppercase: true)), which a unit file cannot name; use another directory",
                                     exitCode: WormholeExitCode.usage)
            }
        }
        let name = try self.name ?? Self.defaultName(for: identifier)
        let described = Self.specifierEscaped("'\(identifier)'")
        let path = """
            # Written by 'wormhole activation': starts \(name).service when a message is
            # passed under the identifier whose log this watches (Activation.md).
            [Unit]
            Description=Start \(name).service on a message to the wormhole identifier \(described)

            [Path]
            PathModified=\(Self.specifierEscaped(log))
            Unit=\(name).service

            [Install]
            WantedBy=paths.target

            """
        var service = """
            # Written by 'wormhole activation': started by \(name).path.
            [Unit]
            Description=Handle the messages of the wormhole identifier \(described)

            [Service]
            Type=exec
            ExecStart=\(command.map { Self.quoted($0, inCommand: true) }.joined(separator: " "))

            """
        for (variable, value) in environment {
            service += "Environment=\(Self.quoted(variable + "=" + value, inCommand: false))\n"
        }
        if system {
            if let runAs { service += "User=\(runAs)\n" }
            if let unixGroup { service += "Group=\(unixGroup)\n" }
        }
        return (name, path, service)
    }

    /// The container's directory, what the service's environment says to reach it, and
    /// the Unix group of a shared group's container.
    func watchedContainer() throws -> (directory: String, environment: [(String, String)], unixGroup: String?) {
        var environment: [(String, String)] = []
        let current = WormholeContainer.currentEnvironment()
        if let base = current[WormholeContainer.environmentOverride], !base.isEmpty, choice.directory == nil {
            environment.append((WormholeContainer.environmentOverride, base))
        }
        switch try choice.location() {
        case .directory(let path):
            let absolute = path.hasPrefix("/") ? path : Self.currentDirectory() + "/" + path
            environment.append((ContainerOptions.directoryVariable, absolute))
            try checkRunAsOwnUser(absolute)
            return (absolute, environment, nil)
        case .group(let group, let sub):
            let resolution = try WormholeContainer.resolve(applicationGroupIdentifier: group)
            environment.append((ContainerOptions.groupVariable, group))
            if let sub { try Wormhole.validate(identifier: sub, kind: "optional directory") }
            let directory = resolution.path + (sub.map { "/" + $0 } ?? "")
            guard resolution.source == .sharedGroup else {
                try checkRunAsOwnUser(directory)
                return (directory, environment, nil)
            }
            var status = stat()
            guard stat(resolution.path, &status) == 0, let entry = getgrgid(status.st_gid), let groupName = entry.pointee.gr_name else {
                throw CommandFailure("cannot find the Unix group of the shared container \(resolution.path): \(String(cString: strerror(errno)))")
            }
            return (directory, environment, String(cString: groupName))
        case .postgres:
            throw CommandFailure("activation watches a container directory, which PostgreSQL does not have", exitCode: WormholeExitCode.usage)
        }
    }

    /// A system unit run as another user than this one finds a group's container of its
    /// own, not this user's (Protocol.md §4): only a shared group's, or a directory, is
    /// the same for both. A directory is that user's to check; a group is refused here.
    func checkRunAsOwnUser(_ directory: String) throws {
        guard system, let runAs, case .group(let group, _) = try choice.location(),
              WormholeContainer.currentEnvironment()[WormholeContainer.environmentOverride] == nil else { return }
        guard let entry = getpwnam(runAs) else {
            throw CommandFailure("--run-as '\(runAs)': no such user", exitCode: WormholeExitCode.usage)
        }
        if entry.pointee.pw_uid != geteuid() {
            throw CommandFailure(
                "the container of group \(group) depends on the user (\(directory) is this user's); '\(runAs)' finds another. Share the group with a Unix group ('wormhole share \(group) UNIXGROUP') or give --directory",
                exitCode: WormholeExitCode.usage)
        }
    }

    static func currentDirectory() -> String {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        guard getcwd(&buffer, buffer.count) != nil else { return "." }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    func defaultDirectory() throws -> String {
        if system { return "/etc/systemd/system" }
        let environment = WormholeContainer.currentEnvironment()
        if let config = environment["XDG_CONFIG_HOME"], config.hasPrefix("/") { return config + "/systemd/user" }
        guard let home = environment["HOME"], home.hasPrefix("/") else {
            throw CommandFailure("HOME is not set, so the user's unit directory is unknown; give --output DIRECTORY")
        }
        return home + "/.config/systemd/user"
    }

    // MARK: - Unit file text

    /// `wormhole-` and `identifier` escaped as `systemd-escape` escapes a string.
    static func defaultName(for identifier: String) throws -> String {
        let name = "wormhole-" + escaped(identifier)
        // The longest suffix, ".service", counts: systemd's limit is 255 bytes.
        guard name.utf8.count + ".service".utf8.count <= 255 else {
            throw CommandFailure(
                "the unit name for '\(identifier)' would be \(name.utf8.count + 8) bytes once escaped, more than systemd's 255; give a shorter one with --name",
                exitCode: WormholeExitCode.usage)
        }
        return name
    }

    /// `string` as `systemd-escape` writes it (systemd's `unit_name_escape`): ASCII
    /// letters, digits, `:`, `_` and `.` (but not a leading `.`) stay, `/` becomes `-`, and
    /// every other byte is `\xNN`. The result is a valid unit name prefix with no `%`,
    /// space or line break in it.
    static func escaped(_ string: String) -> String {
        var out = ""
        for (index, byte) in string.utf8.enumerated() {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: ":"), UInt8(ascii: "_"):
                out.unicodeScalars.append(UnicodeScalar(byte))
            case UInt8(ascii: ".") where index > 0:
                out.append(".")
            case UInt8(ascii: "/"):
                out.append("-")
            default:
                out += "\\x" + (byte < 16 ? "0" : "") + String(byte, radix: 16)
            }
        }
        return out
    }

    /// What is wrong with `name` as the units' name, or `nil`.
    static func problem(withUnitName name: String) -> String? {
        if name.isEmpty { return "is empty" }
        if name.hasPrefix(".") { return "starts with '.'" }
        if let bad = name.unicodeScalars.first(where: { !($0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || ":_.-\\".unicodeScalars.contains($0))) }) {
            return "holds '\(bad.escaped(asASCII: true))'; a unit name holds ASCII letters, digits, ':', '_', '.', '-' and '\\' (systemd-escape makes one)"
        }
        if name.utf8.count + 8 > 255 { return "is longer than systemd's 255 bytes with '.service'" }
        return nil
    }

    /// `%` doubled: systemd reads `%x` in a unit's values as a specifier.
    static func specifierEscaped(_ text: String) -> String {
        text.split(separator: "%", omittingEmptySubsequences: false).joined(separator: "%%")
    }

    /// `word` as one quoted word of `ExecStart=` (`inCommand`) or `Environment=`: in
    /// double quotes, with `\`, `"` and control characters escaped as C escapes (so no
    /// line break reaches the file), `%` doubled and, in a command, `$` doubled (systemd
    /// expands `$NAME` there).
    static func quoted(_ word: String, inCommand: Bool) -> String {
        var out = "\""
        for scalar in word.unicodeScalars {
            switch scalar {
            case "\\": out += "\\\\"
            case "\"": out += "\\\""
            case "\n": out += "\\n"
            case "\t": out += "\\t"
            case "\r": out += "\\r"
            case "%": out += "%%"
            case "$" where inCommand: out += "$$"
            case _ where scalar.value < 0x20 || scalar.value == 0x7F:
                out += "\\x" + (scalar.value < 16 ? "0" : "") + String(scalar.value, radix: 16)
            case _ where (0x80...0x9F).contains(scalar.value):
                out += String(scalar).utf8.map { "\\x" + String($0, radix: 16) }.joined()
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }

    // MARK: - Files

    static func makeDirectories(_ path: String) throws {
        var built = path.hasPrefix("/") ? "" : "."
        for component in path.split(separator: "/") {
            built += "/" + component
            if mkdir(built, 0o755) != 0 && errno != EEXIST {
                throw CommandFailure("cannot create \(built): \(String(cString: strerror(errno)))")
            }
        }
    }

    /// Writes `text` to `path` through a temporary file renamed over it: a unit is never
    /// seen half written, and a symbolic link at `path` is replaced, not followed.
    static func write(_ text: String, to path: String) throws {
        let temporary = path + ".tmp-\(getpid())"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw CommandFailure("cannot write \(temporary): \(String(cString: strerror(errno)))") }
        let bytes = Array(text.utf8)
        var written = 0
        while written < bytes.count {
            let count = bytes[written...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else {
                let reason = String(cString: strerror(errno))
                close(fd)
                unlink(temporary)
                throw CommandFailure("cannot write \(temporary): \(reason)")
            }
            written += count
        }
        close(fd)
        guard rename(temporary, path) == 0 else {
            let reason = String(cString: strerror(errno))
            unlink(temporary)
            throw CommandFailure("cannot write \(path): \(reason)")
        }
    }
}
