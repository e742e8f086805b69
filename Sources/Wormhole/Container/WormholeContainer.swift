#if canImport(Glibc)
import Glibc
#endif
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SystemPackage
import Logging

/// Finds and secures the shared directory that processes of one application group use,
/// the Linux analogue of an iOS App Group container.
///
/// The directory for a group is resolved in this order:
/// 1. an explicit directory, when the caller gives one (``Wormhole/init(directory:configuration:jsonCoding:)``);
/// 2. `$WORMHOLE_APP_GROUPS_DIRECTORY/<group>` when that environment variable is set
///    (sandboxes and tests point every group somewhere else with it);
/// 3. `$XDG_RUNTIME_DIR/app-groups/<group>`: tmpfs, private to the user, fast;
/// 4. `/dev/shm/app-groups-<uid>/<group>` (or `/tmp/app-groups-<uid>/<group>` where
///    `/dev/shm` is missing) when `XDG_RUNTIME_DIR` is unset.
///
/// Directories it creates are mode 0700. Before it uses one, it checks it with `lstat`:
/// a symbolic link, something that is not a directory, a directory owned by another
/// user, or one that other users may write to is refused with
/// ``WormholeError/Code/containerInsecure`` and a message that says what to do.
///
/// ```swift
/// let path = try WormholeContainer.directory(forApplicationGroupIdentifier: "group.com.example.notes")
/// ```
public enum WormholeContainer {
    /// The environment variable that moves every application group's container under
    /// one directory.
    public static let environmentOverride = "WORMHOLE_APP_GROUPS_DIRECTORY"

    /// Resolves, creates if needed and checks the container of an application group.
    ///
    /// - Parameters:
    ///   - applicationGroupIdentifier: The group, such as `group.com.example.notes`. It is
    ///     one path component: the rules of identifiers apply.
    ///   - environment: The environment to read; the process's own by default.
    /// - Returns: The absolute path of the container directory.
    /// - Throws: ``WormholeError`` with ``WormholeError/Code/invalidIdentifier``,
    ///   ``WormholeError/Code/containerInsecure`` or ``WormholeError/Code/containerUnavailable``.
    public static func directory(
        forApplicationGroupIdentifier applicationGroupIdentifier: String,
        environment: [String: String] = currentEnvironment()
    ) throws(WormholeError) -> String {
        try Identifier.validate(applicationGroupIdentifier, kind: "application group identifier")
        let base = try groupsDirectory(environment: environment)
        let path = base + "/" + applicationGroupIdentifier
        try prepare(path, createParents: false)
        return path
    }

    /// The directory under which application group containers live, created and checked.
    public static func groupsDirectory(environment: [String: String] = currentEnvironment()) throws(WormholeError) -> String {
        if let override = environment[environmentOverride], !override.isEmpty {
            guard override.hasPrefix("/") else {
                throw WormholeError(.containerUnavailable, "\(environmentOverride)='\(override)' must be an absolute path")
            }
            try prepare(override, createParents: true)
            return normalized(override)
        }
        let shared = Syscalls.linkStatus("/dev/shm").map(\.isDirectory)
        let parent = (try? shared.get()) == true ? "/dev/shm" : "/tmp"
        // A world-writable parent: the directory is created 0700 and must then be ours,
        // not a symlink or a directory someone else put there first.
        let fallback = "\(parent)/app-groups-\(Syscalls.effectiveUserID)"
        if let runtime = environment["XDG_RUNTIME_DIR"], runtime.hasPrefix("/"),
           case .success(let status) = Syscalls.linkStatus(runtime), status.isDirectory {
            // The XDG Base Directory specification: the runtime directory is owned by the
            // user and has mode 0700. One that is not (another user's home, say) is not used.
            if status.userID.rawValue == Syscalls.effectiveUserID && status.modeBits & 0o077 == 0 {
                let path = normalized(runtime) + "/app-groups"
                try prepare(path, createParents: false)
                return path
            }
            Logger(label: "Wormhole").warning(
                "XDG_RUNTIME_DIR '\(runtime)' is not owned by this user with mode 0700 (owner \(status.userID.rawValue), mode \(String(status.modeBits, radix: 8))), as the XDG Base Directory specification requires; using \(fallback) instead")
        }
        try prepare(fallback, createParents: false)
        return fallback
    }

    /// Creates `path` (0700) if it is missing and checks that it is safe to use.
    static func prepare(_ path: String, createParents: Bool) throws(WormholeError) {
        switch Syscalls.makeDirectory(path) {
        case .success, .failure(.fileExists):
            break
        case .failure(.noSuchFileOrDirectory) where createParents:
            try createAncestors(of: path)
            switch Syscalls.makeDirectory(path) {
            case .success, .failure(.fileExists): break
            case .failure(let errno): throw unavailable(path, errno)
            }
        case .failure(let errno):
            throw unavailable(path, errno)
        }
        try check(path)
    }

    /// Checks with `lstat` that `path` is a real directory owned by this user that no
    /// other user can write to.
    static func check(_ path: String) throws(WormholeError) {
        let status: Stat
        switch Syscalls.linkStatus(path) {
        case .success(let value): status = value
        case .failure(let errno): throw unavailable(path, errno)
        }
        if status.isSymbolicLink {
            throw ContainerDirectory.symbolicLinkRefused(path)
        }
        try ContainerDirectory.checkOwnership(status, path: path)
    }

    private static func createAncestors(of path: String) throws(WormholeError) {
        var prefix = ""
        for component in path.split(separator: "/").dropLast() {
            prefix += "/" + component
            switch Syscalls.makeDirectory(prefix) {
            case .success, .failure(.fileExists): continue
            case .failure(let errno): throw unavailable(prefix, errno)
            }
        }
    }

    private static func unavailable(_ path: String, _ errno: Errno) -> WormholeError {
        WormholeError(.containerUnavailable, "cannot create or open container '\(path)': \(errno.description)", path: path, errno: errno)
    }

    /// `path` made absolute (a relative path is taken from the current directory) and
    /// without trailing slashes: every later step, creating parents among them, works on
    /// the absolute path.
    static func normalized(_ path: String) -> String {
        var result = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
        while result.count > 1 && result.hasSuffix("/") { result.removeLast() }
        return result
    }

    /// The environment of this process.
    public static func currentEnvironment() -> [String: String] {
        ProcessInfo.processInfo.environment
    }
}
