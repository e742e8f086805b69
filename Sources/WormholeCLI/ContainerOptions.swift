import ArgumentParser
import Foundation
import Wormhole

/// The options every command shares to choose the container: the directory where
/// messages and notifications live.
///
/// In order: `--directory`, `--group`, then the environment (`WORMHOLE_DIRECTORY`,
/// `WORMHOLE_GROUP`), then the default group, `group.wormhole.default`. A group's
/// container is found by ``WormholeContainer`` (and moved by
/// `WORMHOLE_APP_GROUPS_DIRECTORY`), so two terminals talk with no flags at all.
struct ContainerOptions: ParsableArguments {
    /// The group used when neither an option nor the environment names one.
    static let defaultGroup = "group.wormhole.default"
    /// The environment variable that gives `--directory` a default.
    static let directoryVariable = "WORMHOLE_DIRECTORY"
    /// The environment variable that gives `--group` a default.
    static let groupVariable = "WORMHOLE_GROUP"

    @Option(
        name: .long,
        help: ArgumentHelp(
            "The application group whose container holds the messages (default: $WORMHOLE_GROUP, else \(defaultGroup)).",
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

    func validate() throws {
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

    /// Where the messages live, as the options and the environment choose it.
    enum Location: Hashable, CustomStringConvertible {
        case group(String, optionalDirectory: String?)
        case directory(String)

        var description: String {
            switch self {
            case .group(let group, nil): "group \(group)"
            case .group(let group, let sub?): "group \(group), sub-directory \(sub)"
            case .directory(let path): "directory \(path)"
            }
        }
    }

    /// The location the options select, falling back to the environment and the default.
    func location(environment: [String: String] = ProcessInfo.processInfo.environment) throws -> Location {
        if let directory { return .directory(directory) }
        if let group { return .group(group, optionalDirectory: optionalDirectory) }
        if let path = environment[Self.directoryVariable], !path.isEmpty {
            guard optionalDirectory == nil else {
                throw CommandFailure(
                    "--optional-directory is a sub-directory of a group's container, but \(Self.directoryVariable) chose a directory; unset it or add the sub-directory to its path",
                    exitCode: WormholeExitCode.usage)
            }
            return .directory(path)
        }
        let group = environment[Self.groupVariable].flatMap { $0.isEmpty ? nil : $0 } ?? Self.defaultGroup
        return .group(group, optionalDirectory: optionalDirectory)
    }

    /// Opens the wormhole in the selected container, creating the container if needed.
    func makeWormhole() throws -> Wormhole {
        switch try location() {
        case .directory(let path):
            return try Wormhole(directory: Self.absolute(path))
        case .group(let group, let sub):
            return try Wormhole(applicationGroupIdentifier: group, optionalDirectory: sub)
        }
    }

    /// The notification center of the selected container: the namespace that `post` and
    /// `observe` use, shared with the wormhole's own wake-ups.
    func makeNotificationCenter() throws -> DarwinNotificationCenter {
        let wormhole = try makeWormhole()
        if let files = wormhole.transiting as? FileTransiting { return files.notificationCenter }
        return try DarwinNotificationCenter(directory: wormhole.directory ?? "")
    }

    /// A relative `--directory` is taken from the current directory.
    static func absolute(_ path: String) -> String {
        if path.hasPrefix("/") { return path }
        let current = FileManager.default.currentDirectoryPath
        return current.hasSuffix("/") ? current + path : current + "/" + path
    }
}
