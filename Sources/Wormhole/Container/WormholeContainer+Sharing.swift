#if canImport(Glibc)
import Glibc
#endif
import SystemPackage

extension WormholeContainer {
    /// The result of ``share(applicationGroupIdentifier:unixGroup:)``.
    public struct Share: Sendable, Hashable {
        /// The shared container's path.
        public let path: String
        /// The Unix group whose members use it.
        public let unixGroup: String
        /// Its group id.
        public let groupID: UInt32
        /// Whether this call changed anything (`false`: it was shared so already).
        public let changed: Bool
    }

    /// Shares an application group with the members of a Unix group: makes (or repairs)
    /// `/run/wormhole/app-groups/<group>`, owned by root, group `unixGroup`, mode 2770,
    /// under parents that are root's and writable by root alone (`/run/wormhole` 0755,
    /// `/run/wormhole/app-groups` 0755). From then on every member's processes resolve
    /// the group to it (``resolve(applicationGroupIdentifier:environment:)``, rule 3).
    /// Running it again changes nothing; with another Unix group it gives the container
    /// and its files to that group. Needs root.
    ///
    /// `/run` is emptied at boot: the container is made again by the next `share`, or at
    /// boot by systemd-tmpfiles with the line ``tmpfilesLine(applicationGroupIdentifier:unixGroup:)``.
    public static func share(applicationGroupIdentifier: String, unixGroup: String) throws(WormholeError) -> Share {
        try Identifier.validate(applicationGroupIdentifier, kind: "application group identifier")
        guard Syscalls.effectiveUserID == 0 else {
            throw WormholeError(.containerInsecure, "sharing an application group makes a directory under /run that only root may make: run it as root (sudo wormhole share ...)")
        }
        guard let groupID = Syscalls.groupID(named: unixGroup) else {
            throw WormholeError(.containerUnavailable, "there is no Unix group '\(unixGroup)'; create it with 'groupadd \(unixGroup)' and add the users with 'usermod -aG \(unixGroup) USER'")
        }
        try rootDirectory("/run/wormhole", mode: 0o755)
        try rootDirectory(sharedGroupsDirectory, mode: 0o755)
        let path = sharedGroupsDirectory + "/" + applicationGroupIdentifier
        var changed = false
        // Made root:group 2770 under a temporary name, then renamed into place: a member
        // never finds it (the resolution's rule 3) before it is the group's, even if
        // this process is killed in between.
        if case .failure(.noSuchFileOrDirectory) = Syscalls.linkStatus(path) {
            let parent = try Syscalls.retrying("open") { open(sharedGroupsDirectory, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
                .mapError { ContainerDirectory.unavailable(sharedGroupsDirectory, $0) }.get()
            defer { close(parent) }
            switch ContainerDirectory.publishDirectory(applicationGroupIdentifier, in: FileDescriptor(rawValue: parent), mode: 0o2770, owner: (0, groupID)) {
            case .success: changed = true
            case .failure(let errno): throw ContainerDirectory.unavailable(path, errno)
            }
        }
        let fd = try Syscalls.retrying("open") { open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
            .mapError { errno -> WormholeError in
                errno == .tooManySymbolicLinkLevels || errno == .notDirectory
                    ? WormholeError(.containerInsecure, "'\(path)' is not a directory (a link or a file someone put there); remove it and share again", path: path)
                    : ContainerDirectory.unavailable(path, errno)
            }.get()
        defer { close(fd) }
        var status = stat()
        fstat(fd, &status)
        if status.st_uid != 0 || status.st_gid != groupID || status.st_mode & 0o7777 != 0o2770 {
            changed = true
            guard fchown(fd, 0, groupID) == 0, fchmod(fd, 0o2770) == 0 else {
                throw WormholeError.system("give the shared container to its group", Errno(rawValue: errno), path: path)
            }
        }
        if status.st_gid != groupID {
            try regroupContents(fd, groupID: groupID, path: path)
        }
        return Share(path: path, unixGroup: unixGroup, groupID: groupID, changed: changed)
    }

    /// Stops sharing an application group: removes its shared container and every
    /// message in it. Members' processes then resolve the group to their own containers
    /// again. Running it when the group is not shared changes nothing; returns whether
    /// something was removed. Needs root.
    @discardableResult
    public static func revokeShare(applicationGroupIdentifier: String) throws(WormholeError) -> Bool {
        try Identifier.validate(applicationGroupIdentifier, kind: "application group identifier")
        guard Syscalls.effectiveUserID == 0 else {
            throw WormholeError(.containerInsecure, "revoking a shared application group removes a directory under /run that only root may remove: run it as root")
        }
        let path = sharedGroupsDirectory + "/" + applicationGroupIdentifier
        guard case .success = Syscalls.linkStatus(path) else { return false }
        try removeTree(path)
        return true
    }

    /// The systemd-tmpfiles lines that make the shared container again at boot
    /// (for `/etc/tmpfiles.d/wormhole-<group>.conf`).
    public static func tmpfilesLine(applicationGroupIdentifier: String, unixGroup: String) -> String {
        """
        d /run/wormhole 0755 root root -
        d \(sharedGroupsDirectory) 0755 root root -
        d \(sharedGroupsDirectory)/\(applicationGroupIdentifier) 2770 root \(unixGroup) -

        """
    }

    /// Makes `path` root's with `mode`, or checks that it is: a link, another owner or a
    /// group or others who may write to it are refused (someone prepared it to take
    /// over the shared containers).
    private static func rootDirectory(_ path: String, mode: mode_t) throws(WormholeError) {
        if case .success = Syscalls.makeDirectory(path, mode: mode) { chmod(path, mode) }
        let status: Stat
        switch Syscalls.linkStatus(path) {
        case .success(let value): status = value
        case .failure(let errno): throw ContainerDirectory.unavailable(path, errno)
        }
        guard status.isDirectory, status.userID.rawValue == 0, status.modeBits & 0o022 == 0 else {
            throw WormholeError(.containerInsecure,
                "'\(path)' is not a directory of root's that only root may write to (owner \(status.userID.rawValue), mode \(String(status.modeBits, radix: 8))): someone may have made it to take over shared groups. Remove it and share again",
                path: path)
        }
        if status.modeBits != mode { chmod(path, mode) }
    }

    /// Gives every file and directory under the container the group `groupID`, with the
    /// modes a shared container's files have: when a group is shared with another Unix
    /// group.
    private static func regroupContents(_ directory: Int32, groupID: UInt32, path: String) throws(WormholeError) {
        guard case .success(let names) = Syscalls.directoryEntries(at: FileDescriptor(rawValue: directory), name: ".") else { return }
        for name in names {
            let fd = openat(directory, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
            guard fd >= 0 else { continue }
            defer { close(fd) }
            var status = stat()
            fstat(fd, &status)
            let isDirectory = status.st_mode & S_IFMT == S_IFDIR
            guard isDirectory || status.st_mode & S_IFMT == S_IFREG else { continue }
            _ = fchown(fd, uid_t.max, groupID)
            _ = fchmod(fd, isDirectory ? 0o2770 : 0o660)
            if isDirectory { try regroupContents(fd, groupID: groupID, path: path + "/" + name) }
        }
    }

    /// Removes `path` and everything under it, without following links.
    private static func removeTree(_ path: String) throws(WormholeError) {
        func remove(in directory: Int32, _ name: String) {
            let fd = openat(directory, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            if fd >= 0 {
                if case .success(let names) = Syscalls.directoryEntries(at: FileDescriptor(rawValue: fd), name: ".") {
                    for child in names where unlinkat(fd, child, 0) != 0 { remove(in: fd, child) }
                }
                close(fd)
            }
            unlinkat(directory, name, AT_REMOVEDIR)
        }
        let location = try ContainerPath(path)
        let parent = open(location.parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard parent >= 0 else { throw ContainerDirectory.unavailable(location.parent, Errno(rawValue: errno)) }
        defer { close(parent) }
        remove(in: parent, location.name)
        if case .success = Syscalls.linkStatus(path) {
            throw WormholeError(.containerUnavailable, "could not remove every file of '\(path)'", path: path)
        }
    }
}
