#if canImport(Glibc)
import Glibc
#endif
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SystemPackage
@_spi(Backend) import WormholeCore

/// Finds and secures the shared directory that processes of one application group use,
/// the Linux analogue of an iOS App Group container.
///
/// Every process of a user resolves a group to the same directory, whatever started it
/// (a desktop session, systemd's system or user manager, cron, sudo, su, SSH without a
/// login): the place depends on the effective user id, never on `XDG_RUNTIME_DIR` or
/// `HOME`. In order (Protocol.md §4):
/// 1. an explicit directory, when the caller gives one (``Wormhole/init(directory:configuration:jsonCoding:createIfMissing:)``);
/// 2. `$WORMHOLE_APP_GROUPS_DIRECTORY/<group>` when that environment variable is set
///    (sandboxes and tests point every group somewhere else with it);
/// 3. `/run/wormhole/app-groups/<group>` when it exists: the group's shared container,
///    made by `wormhole share` for the members of a Unix group (`share(applicationGroupIdentifier:unixGroup:)`);
/// 4. the user's own container that exists already, in this order:
///    `/run/user/<uid>/app-groups/<group>`, then `/dev/shm/app-groups-<uid>/<group>`;
/// 5. when none exists, a new one: `/run/user/<uid>/app-groups/<group>` when
///    `/run/user/<uid>` is a directory of the user's own with mode 0700 (systemd-logind
///    makes it while the user has a session or lingers), else
///    `/dev/shm/app-groups-<uid>/<group>` (`/tmp/...` where `/dev/shm` is missing).
///
/// Directories it creates are mode 0700. Before it uses one, it checks it: a symbolic
/// link, something that is not a directory, a directory owned by another user, or one
/// that other users may write to is refused with ``WormholeError/Code/containerInsecure``
/// and a message that says what to do; a shared container must be root's, setgid, mode
/// 2770, of a Unix group this process is in (``WormholeError/Code/containerInsecure``
/// otherwise, naming the group to join). Inside a sandbox's user namespace, where root's
/// and other users' files show as the overflow uid, the mode and the process's access are
/// checked instead of an owner it cannot see, and a group whose container the sandbox did
/// not bind is ``WormholeError/Code/containerUnavailable``, not a new container only the
/// sandbox would see (Docs/Sandboxes.md).
///
/// ```swift
/// let path = try WormholeContainer.directory(forApplicationGroupIdentifier: "group.com.example.notes")
/// ```
public enum WormholeContainer {
    /// The environment variable that moves every application group's container under
    /// one directory.
    package static let environmentOverride = "WORMHOLE_APP_GROUPS_DIRECTORY"

    /// The directory under which `wormhole share` makes shared containers: root's, mode
    /// 0755 (every user sees which groups are shared; only members see inside one).
    package static let sharedGroupsDirectory = "/run/wormhole/app-groups"

    /// Where a group's container is, and which rule chose it.
    package struct Resolution: Sendable, Hashable, CustomStringConvertible {
        /// The rule of the resolution order that chose the path.
        package enum Source: String, Sendable, Hashable {
            /// `WORMHOLE_APP_GROUPS_DIRECTORY` is set.
            case environmentOverride
            /// The group is shared with a Unix group (`wormhole share`).
            case sharedGroup
            /// The user's container under `/run/user/<uid>`.
            case userRuntimeDirectory
            /// The user's container under `/dev/shm` (or `/tmp`).
            case userFallback
        }

        /// The container's absolute path.
        package let path: String
        /// The rule that chose it.
        package let source: Source
        /// Whether the directory existed when it was resolved.
        package let exists: Bool

        package var description: String {
            switch source {
            case .environmentOverride: "\(WormholeContainer.environmentOverride) is set"
            case .sharedGroup: "the group is shared with Unix group members (wormhole share)"
            case .userRuntimeDirectory: "this user's runtime directory, /run/user/\(Syscalls.effectiveUserID)"
            case .userFallback: "this user's fixed directory (no /run/user/\(Syscalls.effectiveUserID) container)"
            }
        }
    }

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
        let resolution = try resolve(applicationGroupIdentifier: applicationGroupIdentifier, environment: environment)
        if let unbound = unboundInSandbox(resolution, applicationGroupIdentifier: applicationGroupIdentifier) { throw unbound }
        if resolution.source != .sharedGroup {
            let groups = try ContainerPath(resolution.path).parent
            try prepare(groups, createParents: resolution.source == .environmentOverride)
        }
        try prepare(resolution.path, createParents: false)
        return resolution.path
    }

    /// Where the container of an application group is, by the resolution order above,
    /// without creating or checking anything.
    ///
    /// - Throws: ``WormholeError`` with ``WormholeError/Code/invalidIdentifier`` or,
    ///   when `WORMHOLE_APP_GROUPS_DIRECTORY` is not absolute,
    ///   ``WormholeError/Code/containerUnavailable``.
    package static func resolve(
        applicationGroupIdentifier: String,
        environment: [String: String] = currentEnvironment()
    ) throws(WormholeError) -> Resolution {
        try Identifier.validate(applicationGroupIdentifier, kind: "application group identifier")
        func exists(_ path: String) -> Bool { (try? Syscalls.linkStatus(path).get()) != nil }
        if let base = try overrideDirectory(environment) {
            let path = base + "/" + applicationGroupIdentifier
            return Resolution(path: path, source: .environmentOverride, exists: exists(path))
        }
        let shared = sharedGroupsDirectory + "/" + applicationGroupIdentifier
        if exists(shared) { return Resolution(path: shared, source: .sharedGroup, exists: true) }
        let runtime = runtimeGroupsDirectory + "/" + applicationGroupIdentifier
        if exists(runtime) { return Resolution(path: runtime, source: .userRuntimeDirectory, exists: true) }
        let fallback = fallbackGroupsDirectory + "/" + applicationGroupIdentifier
        if exists(fallback) { return Resolution(path: fallback, source: .userFallback, exists: true) }
        if hasRuntimeDirectory { return Resolution(path: runtime, source: .userRuntimeDirectory, exists: false) }
        return Resolution(path: fallback, source: .userFallback, exists: false)
    }

    /// The directory under which this user's application group containers are made,
    /// created and checked: `$WORMHOLE_APP_GROUPS_DIRECTORY`, else
    /// `/run/user/<uid>/app-groups` when `/run/user/<uid>` is the user's own, else
    /// `/dev/shm/app-groups-<uid>`.
    package static func groupsDirectory(environment: [String: String] = currentEnvironment()) throws(WormholeError) -> String {
        if let base = try overrideDirectory(environment) {
            try prepare(base, createParents: true)
            return base
        }
        let path = hasRuntimeDirectory ? runtimeGroupsDirectory : fallbackGroupsDirectory
        try prepare(path, createParents: false)
        return path
    }

    /// Every place a container of `applicationGroupIdentifier` may be for this user,
    /// besides where it resolves: the user's other roots, the override, the shared
    /// container, and `$XDG_RUNTIME_DIR/app-groups` (where versions before this
    /// resolution put it). `wormhole doctor` looks in each for a split set-up.
    package static func candidateDirectories(
        forApplicationGroupIdentifier applicationGroupIdentifier: String,
        environment: [String: String] = currentEnvironment()
    ) -> [String] {
        var roots: [String] = []
        if let base = try? overrideDirectory(environment) { roots.append(base) }
        roots += [sharedGroupsDirectory, runtimeGroupsDirectory, fallbackGroupsDirectory, "/tmp/app-groups-\(Syscalls.effectiveUserID)"]
        if let runtime = environment["XDG_RUNTIME_DIR"], runtime.hasPrefix("/"), let path = try? ContainerPath(runtime) {
            roots.append(path.description + "/app-groups")
        }
        var seen = Set<String>()
        return roots.map { $0 + "/" + applicationGroupIdentifier }.filter { seen.insert($0).inserted }
    }

    /// The containers of `applicationGroupIdentifier` that belong to other users, as far
    /// as this process may see them (root sees every one; another user sees none, since
    /// their roots are 0700): under `/run/user/*/app-groups` and `/dev/shm/app-groups-*`.
    package static func otherUsersDirectories(forApplicationGroupIdentifier applicationGroupIdentifier: String) -> [String] {
        let me = Syscalls.effectiveUserID
        var found: [String] = []
        for user in (try? FileManager.default.contentsOfDirectory(atPath: "/run/user")) ?? [] where UInt32(user) != nil && UInt32(user) != me {
            found.append("/run/user/\(user)/app-groups/\(applicationGroupIdentifier)")
        }
        for root in ["/dev/shm", "/tmp"] {
            for name in (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? [] where name.hasPrefix("app-groups-") && name != "app-groups-\(me)" {
                found.append("\(root)/\(name)/\(applicationGroupIdentifier)")
            }
        }
        return found.filter { (try? Syscalls.linkStatus($0).get()) != nil }.sorted()
    }

    /// The names of existing groups that look like `applicationGroupIdentifier` (a typo
    /// away: at most two edits, or one contains the other), in the user's groups
    /// directory, the override and the shared groups: what "did you mean" offers.
    package static func similarGroups(
        to applicationGroupIdentifier: String,
        environment: [String: String] = currentEnvironment()
    ) -> [String] {
        var roots = [sharedGroupsDirectory, runtimeGroupsDirectory, fallbackGroupsDirectory]
        if let base = try? overrideDirectory(environment) { roots = [base] }
        var names = Set<String>()
        for root in roots {
            guard let entries = try? FileManager.default.contentsOfDirectory(atPath: root) else { continue }
            for name in entries where name != applicationGroupIdentifier && !name.hasPrefix(".")
                && looksAlike(name, applicationGroupIdentifier) {
                names.insert(name)
            }
        }
        return names.sorted()
    }

    /// The environment of this process.
    @usableFromInline package static func currentEnvironment() -> [String: String] {
        ProcessInfo.processInfo.environment
    }

    /// Whether `userID`, the owner of a file as `stat` shows it to this process, stands
    /// for an owner it cannot see: the process runs in a user namespace other than the
    /// initial one (a sandbox: Flatpak, `bwrap --unshare-user`) that does not map the
    /// overflow uid, and `userID` is that uid (`/proc/sys/kernel/overflowuid`). Root's
    /// shared container shows so inside a sandbox, and is checked by its mode and access
    /// instead (Docs/Security.md, "Sandboxes: user namespaces"). Always `false` outside a
    /// user namespace.
    package static func ownerIsHiddenByUserNamespace(_ userID: UInt32) -> Bool {
        UserNamespace.hidesOwner(userID)
    }

    /// Whether `groupID`, the group of a file as `stat` shows it, stands for a group this
    /// process cannot see, as ``ownerIsHiddenByUserNamespace(_:)`` says of owners (the
    /// overflow gid, `/proc/sys/kernel/overflowgid`).
    package static func groupIsHiddenByUserNamespace(_ groupID: UInt32) -> Bool {
        UserNamespace.hidesGroup(groupID)
    }

    /// Inside a user namespace other than the initial one (a sandbox: Flatpak, `bwrap
    /// --unshare-user`), the error for a group whose container the sandbox did not bind:
    /// no container of the group exists here (rules 3 to 5), nor the groups directory
    /// where rules 6 and 7 would make one. A container made here would be the sandbox's
    /// alone (its `/run` and `/dev/shm` are its own), and no process outside would hear
    /// it; a shared group's container is made by `wormhole share` alone. `nil` outside a
    /// user namespace, with `WORMHOLE_APP_GROUPS_DIRECTORY` set (an override the sandbox
    /// chose), or when a container or groups directory is there (bound in).
    package static func unboundInSandbox(_ resolution: Resolution, applicationGroupIdentifier: String) -> WormholeError? {
        guard UserNamespace.isNested, !resolution.exists, resolution.source != .environmentOverride,
              let groups = try? ContainerPath(resolution.path).parent,
              case .failure(.noSuchFileOrDirectory) = Syscalls.linkStatus(groups) else { return nil }
        let shared = sharedGroupsDirectory + "/" + applicationGroupIdentifier
        return WormholeError(.containerUnavailable,
            "no container of group '\(applicationGroupIdentifier)' in this sandbox: this process runs in a user namespace (Flatpak, bwrap --unshare-user), and neither '\(shared)' (a shared group's, made by 'wormhole share') nor this user's own ('\(runtimeGroupsDirectory)/\(applicationGroupIdentifier)', '\(fallbackGroupsDirectory)/\(applicationGroupIdentifier)') is here, nor '\(groups)'. One made here would be private to the sandbox, and no process outside it would hear it: the sandbox must bind the group's container (for a shared group, bwrap --bind \(shared) \(shared); Flatpak: the finish-arg --filesystem=\(shared)), or set \(environmentOverride) to a directory it shares (Docs/Sandboxes.md)",
            path: shared)
    }

    // MARK: - The rule's directories

    /// `/run/user/<uid>/app-groups`.
    package static var runtimeGroupsDirectory: String { "/run/user/\(Syscalls.effectiveUserID)/app-groups" }

    /// `/dev/shm/app-groups-<uid>`, or `/tmp/app-groups-<uid>` where `/dev/shm` is missing.
    package static var fallbackGroupsDirectory: String {
        let shm = (try? Syscalls.linkStatus("/dev/shm").get())?.isDirectory == true
        return "\(shm ? "/dev/shm" : "/tmp")/app-groups-\(Syscalls.effectiveUserID)"
    }

    /// Whether `/run/user/<uid>` is a directory of this user's own with no access for
    /// others (what systemd-logind makes, and the XDG Base Directory specification asks).
    package static var hasRuntimeDirectory: Bool {
        guard case .success(let status) = Syscalls.linkStatus("/run/user/\(Syscalls.effectiveUserID)") else { return false }
        return status.isDirectory && status.userID.rawValue == Syscalls.effectiveUserID && status.modeBits & 0o077 == 0
    }

    /// `$WORMHOLE_APP_GROUPS_DIRECTORY`, normalised; `nil` when unset or empty.
    package static func overrideDirectory(_ environment: [String: String]) throws(WormholeError) -> String? {
        guard let override = environment[environmentOverride], !override.isEmpty else { return nil }
        guard override.hasPrefix("/") else {
            throw WormholeError(.containerUnavailable, "\(environmentOverride)='\(override)' must be an absolute path")
        }
        return try ContainerPath(override).description
    }

    /// Creates `path` (0700) if it is missing and checks it as a container (with `lstat`:
    /// a link is refused, never followed).
    package static func prepare(_ path: String, createParents: Bool) throws(WormholeError) {
        let location = try ContainerPath(path)
        switch Syscalls.makeDirectory(location.description) {
        case .success, .failure(.fileExists):
            break
        case .failure(.noSuchFileOrDirectory) where createParents:
            try location.createAncestors()
            switch Syscalls.makeDirectory(location.description) {
            case .success, .failure(.fileExists): break
            case .failure(let errno): throw ContainerDirectory.unavailable(location.description, errno)
            }
        case .failure(let errno):
            throw ContainerDirectory.unavailable(location.description, errno)
        }
        let status: Stat
        switch Syscalls.linkStatus(location.description) {
        case .success(let value): status = value
        case .failure(let errno): throw ContainerDirectory.unavailable(location.description, errno)
        }
        if status.isSymbolicLink { throw ContainerDirectory.symbolicLinkRefused(location.description) }
        _ = try ContainerAccess.of(status, path: location.description)
    }

    /// Whether two group names are a typo apart.
    package static func looksAlike(_ a: String, _ b: String) -> Bool {
        let x = Array(a.utf8), y = Array(b.utf8)
        if abs(x.count - y.count) > 2 { return a.contains(b) || b.contains(a) }
        var previous = Array(0...y.count)
        for i in 1...max(1, x.count) where !x.isEmpty {
            var row = [i] + Array(repeating: 0, count: y.count)
            for j in 1...max(1, y.count) where !y.isEmpty {
                row[j] = min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + (x[i - 1] == y[j - 1] ? 0 : 1))
            }
            previous = row
        }
        return previous[y.count] <= 2
    }
}
