import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
@_spi(Backend) import Wormhole
#if Postgres
import WormholePostgres
#endif

/// The options every command shares to choose the container: the directory where
/// messages and notifications live, or a PostgreSQL database.
///
/// In order: `--directory`, `--postgres`, `--group`, then the environment
/// (`WORMHOLE_DIRECTORY`, `WORMHOLE_POSTGRES_URL`, `WORMHOLE_GROUP`), then the default
/// group, `group.wormhole.default`. A group's container is found by
/// ``WormholeContainer`` (and moved by `WORMHOLE_APP_GROUPS_DIRECTORY`), so two
/// terminals talk with no flags at all. With a PostgreSQL URL the group (and
/// `--optional-directory`) name the container inside the database, so processes on
/// different machines talk through it.
struct ContainerOptions: ParsableArguments {
    /// The group used when neither an option nor the environment names one.
    static let defaultGroup = "group.wormhole.default"
    /// The environment variable that gives `--directory` a default.
    static let directoryVariable = "WORMHOLE_DIRECTORY"
    /// The environment variable that gives `--group` a default.
    static let groupVariable = "WORMHOLE_GROUP"
    /// The environment variable that gives `--postgres` a default.
    static let postgresVariable = "WORMHOLE_POSTGRES_URL"

    @OptionGroup var directoryOptions: DirectoryOptions

    /// Listed in help and completions only by a `wormhole` built with the `Postgres`
    /// trait. Another build still parses it, to say how to build one that has it.
    @Option(
        name: .long,
        help: ArgumentHelp(
            "Keep the messages in this PostgreSQL database instead of a directory, so that processes on different machines talk; the group names the container in it (default: $WORMHOLE_POSTGRES_URL).",
            valueName: "postgres://user:password@host:port/database",
            visibility: postgresVisibility))
    var postgres: String?

    /// Whether this build lists `--postgres`.
    static var postgresVisibility: ArgumentVisibility {
        #if Postgres
        .default
        #else
        .private
        #endif
    }

    var group: String? { directoryOptions.group }
    var directory: String? { directoryOptions.directory }
    var optionalDirectory: String? { directoryOptions.optionalDirectory }

    func validate() throws { try choice.validate() }

    /// Where the messages live, as the options and the environment choose it.
    enum Location: Hashable, CustomStringConvertible {
        case group(String, optionalDirectory: String?)
        case directory(String)
        case postgres(url: String, group: String, optionalDirectory: String?)

        /// Whether this is the default group's container (with no sub-directory), the one
        /// every program that names no group shares.
        var isDefaultGroup: Bool {
            switch self {
            case .group(let group, nil), .postgres(_, let group, nil): group == ContainerOptions.defaultGroup
            default: false
            }
        }

        var description: String {
            switch self {
            case .group(let group, nil): "group \(group)"
            case .group(let group, let sub?): "group \(group), sub-directory \(sub)"
            case .directory(let path): "directory \(path)"
            case .postgres(_, let group, nil): "group \(group) in PostgreSQL"
            case .postgres(_, let group, let sub?): "group \(group), sub-directory \(sub) in PostgreSQL"
            }
        }
    }

    /// The options as plain values: what ``Send/plainForm(_:)`` reads without
    /// argument-parser, and what `location()` and `makeWormhole()` use.
    struct Choice: Equatable {
        var group: String? = nil
        var directory: String? = nil
        var optionalDirectory: String? = nil
        var postgres: String? = nil

        /// Options that contradict each other, or empty values: usage errors.
        func validate() throws {
            if postgres != nil && directory != nil {
                throw ValidationError("--postgres and --directory both choose where the messages live; give only one of them.")
            }
            if let postgres, postgres.isEmpty {
                throw ValidationError("--postgres needs a URL: postgres://user:password@host:port/database")
            }
            if group != nil && directory != nil {
                throw ValidationError("--group and --directory both choose the container; give only one of them.")
            }
            if directory != nil && optionalDirectory != nil {
                throw ValidationError("--optional-directory is a sub-directory of a group's container; with --directory, name the sub-directory in the path instead.")
            }
            if let directory, directory.isEmpty {
                throw ValidationError("--directory needs a path.")
            }
        }

        /// The location the options select, falling back to the environment and the default.
        func location(environment: [String: String] = ProcessInfo.processInfo.environment) throws -> Location {
            func variable(_ name: String) -> String? { environment[name].flatMap { $0.isEmpty ? nil : $0 } }
            if let directory { return .directory(directory) }
            let chosenGroup = group ?? variable(ContainerOptions.groupVariable) ?? ContainerOptions.defaultGroup
            // A URL from the option, or from the variable unless WORMHOLE_DIRECTORY is the
            // only other choice made (both variables at once are ambiguous).
            if let url = postgres ?? variable(ContainerOptions.postgresVariable) {
                if postgres == nil, group == nil, let path = variable(ContainerOptions.directoryVariable) {
                    throw CommandFailure(
                        "\(ContainerOptions.directoryVariable) (\(path)) and \(ContainerOptions.postgresVariable) both choose where the messages live; unset one, or choose with --directory or --postgres",
                        exitCode: WormholeExitCode.usage)
                }
                return .postgres(url: url, group: chosenGroup, optionalDirectory: optionalDirectory)
            }
            if group == nil, let path = variable(ContainerOptions.directoryVariable) {
                guard optionalDirectory == nil else {
                    throw CommandFailure(
                        "--optional-directory is a sub-directory of a group's container, but \(ContainerOptions.directoryVariable) chose a directory; unset it or add the sub-directory to its path",
                        exitCode: WormholeExitCode.usage)
                }
                return .directory(path)
            }
            return .group(chosenGroup, optionalDirectory: optionalDirectory)
        }

        /// Opens the wormhole in the selected container, creating the container if needed
        /// (and when `create`: commands that only read pass `false`, and a missing
        /// container is then a ``WormholeError`` with `ENOENT`).
        func makeWormhole(create: Bool = true) throws -> Wormhole {
            switch try location() {
            case .directory(let path):
                return try Wormhole(directory: path, createIfMissing: create)
            case .group(let group, let sub):
                return try Wormhole(applicationGroupIdentifier: group, optionalDirectory: sub, createIfMissing: create)
            case .postgres(let url, let group, let sub):
                #if Postgres
                return try Wormhole(postgresURL: url, applicationGroupIdentifier: group, optionalDirectory: sub)
                #else
                _ = (url, group, sub)
                throw CommandFailure(
                    "this wormhole was built without PostgreSQL support, so it cannot use --postgres or \(ContainerOptions.postgresVariable); build it with: swift build --traits Postgres")
                #endif
            }
        }
    }

    var choice: Choice { Choice(group: group, directory: directory, optionalDirectory: optionalDirectory, postgres: postgres) }

    /// The location the options select, falling back to the environment and the default.
    func location(environment: [String: String] = ProcessInfo.processInfo.environment) throws -> Location {
        try choice.location(environment: environment)
    }

    /// Opens the wormhole in the selected container, creating the container if needed.
    func makeWormhole() throws -> Wormhole { try choice.makeWormhole() }

    /// Opens the wormhole in the selected container, which must exist: `read`, `list`,
    /// `status` and `doctor` never create one. A missing container is a failure (exit
    /// status 2) that says where it would be and names the groups that look alike.
    /// - Parameter identifier: The identifier the command reads, for the hint.
    func existingWormhole(identifier: String = "IDENTIFIER") throws -> Wormhole {
        do {
            return try choice.makeWormhole(create: false)
        } catch let error as WormholeError where error.errno == .noSuchFileOrDirectory && error.code == .containerUnavailable {
            throw missingContainer(error, identifier: identifier)
        }
    }

    /// "no container ...; did you mean ...", for ``existingWormhole(identifier:)``.
    func missingContainer(_ error: WormholeError, identifier: String) -> CommandFailure {
        let hint = "Nothing was created; send one with '\(command("send", identifier, "..."))'"
        guard case .group(let group, let sub)? = try? location() else {
            return CommandFailure("\(error.description): nothing has been sent there. \(hint)", exitCode: WormholeExitCode.noMessage)
        }
        let resolution = try? WormholeContainer.resolve(applicationGroupIdentifier: group)
        if let sub, resolution?.exists == true {
            return CommandFailure("the container of group \(group) has no sub-directory '\(sub)' (\(error.path ?? sub)): nothing has been sent to it. \(hint)",
                                  exitCode: WormholeExitCode.noMessage)
        }
        let similar = WormholeContainer.similarGroups(to: group)
        let guess = similar.isEmpty ? "." : "; did you mean \(similar.map { "'\($0)'" }.joined(separator: " or "))?"
        return CommandFailure(
            "no container for group '\(group)' (it would be \(resolution?.path ?? error.path ?? "?")): no process of this user has used it\(guess) \(hint)",
            exitCode: WormholeExitCode.noMessage)
    }

    /// Which option, variable or rule chose the container, as `--verbose` and `doctor`
    /// say it: an override (`--directory`, `WORMHOLE_DIRECTORY`,
    /// `WORMHOLE_APP_GROUPS_DIRECTORY`) is named as one.
    func reason(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        func set(_ name: String) -> Bool { !(environment[name] ?? "").isEmpty }
        guard let location = try? location(environment: environment) else { return "?" }
        switch location {
        case .directory:
            return directory != nil ? "--directory (an override: the group's own container is not used)"
                : "\(Self.directoryVariable) (an override: the group's own container is not used; no --group or --directory given)"
        case .group(let group, _):
            let named = group != Self.defaultGroup || self.group != nil
                ? (self.group != nil ? "--group \(group)" : set(Self.groupVariable) ? "\(Self.groupVariable)=\(group)" : "the default group \(group)")
                : "the default group \(group): no --group, --directory, \(Self.groupVariable) or \(Self.directoryVariable)"
            guard let resolution = try? WormholeContainer.resolve(applicationGroupIdentifier: group, environment: environment) else { return named }
            if resolution.source == .environmentOverride {
                return "\(named), under \(WormholeContainer.environmentOverride) (an override: processes without it use another container)"
            }
            return "\(named), \(resolution)"
        case .postgres:
            return postgres != nil ? "--postgres" : "\(Self.postgresVariable)"
        }
    }

    /// Where `wormhole`'s messages are, as a person reads it: its directory, or the
    /// location the options select (a PostgreSQL container has no directory).
    func place(of wormhole: Wormhole) -> String {
        wormhole.directory ?? (try? location().description) ?? "the container"
    }

    /// A `wormhole` command line to suggest in a hint, with the container options that
    /// were given repeated, so that it reaches the same container:
    /// `command("send", "note", "...")` is `wormhole send --group g note ...` after
    /// `--group g`. A PostgreSQL URL's password is shown as `***`.
    func command(_ words: String...) -> String {
        var options: [String] = []
        if let group { options += ["--group", group] }
        if let optionalDirectory { options += ["--optional-directory", optionalDirectory] }
        if let directory { options += ["--directory", directory] }
        if let postgres { options += ["--postgres", Self.maskingPassword(postgres)] }
        let quoted = options.map(Self.shellQuoted) + words.dropFirst().map { $0 == "..." ? $0 : Self.shellQuoted($0) }
        return (["wormhole", words.first ?? ""] + quoted).joined(separator: " ")
    }

    /// `word` as a shell reads it back: unchanged when it is plain, else in single quotes.
    static func shellQuoted(_ word: String) -> String {
        let plain = !word.isEmpty && word.unicodeScalars.allSatisfy { scalar in
            ("a"..."z").contains(scalar) || ("A"..."Z").contains(scalar) || ("0"..."9").contains(scalar)
                || "-_./:=@%+,".unicodeScalars.contains(scalar)
        }
        return plain ? word : "'" + TextFormatting.replacing("'", with: "'\\''", in: word) + "'"
    }

    /// A URL with its password, if any, replaced by `***`.
    static func maskingPassword(_ url: String) -> String {
        guard let scheme = url.firstRange(of: "://"), let at = url[scheme.upperBound...].firstIndex(of: "@"),
              let colon = url[scheme.upperBound..<at].firstIndex(of: ":") else { return url }
        var masked = url
        masked.replaceSubrange(url.index(after: colon)..<at, with: "***")
        return masked
    }

}

/// `--group`, `--directory` and `--optional-directory`: the container options of every
/// command, `--postgres` aside.
struct DirectoryOptions: ParsableArguments {
    @Option(
        name: .long,
        help: ArgumentHelp(
            "The application group whose container holds the messages (default: $WORMHOLE_GROUP, else \(ContainerOptions.defaultGroup)).",
            valueName: "application-group-identifier"))
    var group: String?

    @Option(
        name: .long,
        help: ArgumentHelp(
            "Use this directory as the container instead of a group's; created 0700 when missing (default: $WORMHOLE_DIRECTORY).",
            valueName: "path"))
    var directory: String?

    @Option(
        name: .customLong("optional-directory"),
        help: ArgumentHelp(
            "A sub-directory of the group's container, as MMWormhole's optionalDirectory.",
            valueName: "name"))
    var optionalDirectory: String?
}

/// The container options of `post` and `observe`: a directory's, since notifications are
/// the files of a container directory, which PostgreSQL does not have. There is no
/// `--postgres`; `WORMHOLE_POSTGRES_URL` is refused with the reason.
struct NotificationContainerOptions: ParsableArguments {
    @OptionGroup var directoryOptions: DirectoryOptions

    /// Never listed: parsed only to say why it is refused.
    @Option(name: .long, help: .private) var postgres: String?

    func validate() throws {
        if postgres != nil {
            throw ValidationError("post and observe use the notification files of a container directory, which PostgreSQL does not have; use send and listen to talk through a database.")
        }
        try choice.validate()
    }

    var choice: ContainerOptions.Choice {
        ContainerOptions.Choice(group: directoryOptions.group, directory: directoryOptions.directory,
                                optionalDirectory: directoryOptions.optionalDirectory)
    }

    /// The notification center of the selected container: the namespace that `post` and
    /// `observe` use, shared with the wormhole's own wake-ups.
    func makeNotificationCenter() throws -> DarwinNotificationCenter {
        if case .postgres = try choice.location() {
            throw CommandFailure(
                "post and observe use the notification files of a container directory, which PostgreSQL does not have (\(ContainerOptions.postgresVariable) is set); use send and listen, or unset it",
                exitCode: WormholeExitCode.usage)
        }
        let wormhole = try choice.makeWormhole()
        guard let center = wormhole.notificationCenter else {
            throw CommandFailure("post and observe use the notification files of a container directory, which this container does not have")
        }
        return center
    }
}
