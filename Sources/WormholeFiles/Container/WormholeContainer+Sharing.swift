#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
@_spi(Backend) import WormholeCore

extension WormholeContainer {
    /// The result of ``share(applicationGroupIdentifier:unixGroup:)``.
    package struct Share: Sendable, Hashable {
        /// The shared container's path.
        package let path: String
        /// The Unix group whose members use it.
        package let unixGroup: String
        /// Its group id.
        package let groupID: UInt32
        /// Whether this call changed anything (`false`: it was shared so already).
        package let changed: Bool
        /// The container's files and directories whose ACL entries this call removed,
        /// each with the entries as `getfacl` writes them: they gave users or groups
        /// other than the Unix group access that the modes do not show.
        package let removedAccessControlEntries: [String]
        /// Regular files with several hard links, which this call left as they were:
        /// another of their names may be outside the container (a file linked in from
        /// elsewhere), so changing their group or mode could change a file outside it.
        /// Wormhole makes no such files; remove them.
        package let filesWithSeveralLinks: [String]
    }

    /// Shares an application group with the members of a Unix group: makes (or repairs)
    /// `/run/wormhole/app-groups/<group>`, owned by root, group `unixGroup`, mode 2770,
    /// under parents that are root's and writable by root alone (`/run/wormhole` 0755,
    /// `/run/wormhole/app-groups` 0755). From then on every member's processes resolve
    /// the group to it (``resolve(applicationGroupIdentifier:environment:)``, rule 3).
    /// Running it again changes nothing; with another Unix group it gives the container
    /// and its files to that group. Needs root.
    ///
    /// It walks the whole container every time, one directory descriptor at a time
    /// whatever its depth, without following links: it removes every ACL entry (which
    /// would give a non-member access the mode does not show, ``Share/removedAccessControlEntries``),
    /// gives files and directories of another group the group and the modes 0660 and
    /// 2770, and leaves regular files with several hard links as they are
    /// (``Share/filesWithSeveralLinks``).
    ///
    /// `/run` is emptied at boot: the container is made again by the next `share`, or at
    /// boot by systemd-tmpfiles with the line ``tmpfilesLine(applicationGroupIdentifier:unixGroup:)``.
    package static func share(applicationGroupIdentifier: String, unixGroup: String) throws(WormholeError) -> Share {
        try Identifier.validate(applicationGroupIdentifier, kind: "application group identifier")
        try validate(unixGroupName: unixGroup)
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
        var removedEntries: [String] = []
        let entries = AccessControlLists.extendedEntries(fd)
        if !entries.isEmpty {
            AccessControlLists.remove(fd)
            removedEntries.append("\(path): \(entries.joined(separator: ","))")
        }
        if status.st_uid != 0 || status.st_gid != groupID || status.st_mode & 0o7777 != 0o2770 || !entries.isEmpty {
            changed = true
            guard fchown(fd, 0, groupID) == 0, fchmod(fd, 0o2770) == 0 else {
                throw WormholeError.system("give the shared container to its group", Errno(rawValue: errno), path: path)
            }
        }
        let contents = try settleContents(fd, groupID: groupID, path: path)
        removedEntries += contents.removedEntries
        changed = changed || contents.changed
        return Share(path: path, unixGroup: unixGroup, groupID: groupID, changed: changed,
                     removedAccessControlEntries: removedEntries, filesWithSeveralLinks: contents.linked)
    }

    /// Something in a shared container that gives access beyond its Unix group, or that
    /// ``share(applicationGroupIdentifier:unixGroup:)`` must leave as it is: what
    /// ``findings(inSharedContainer:)`` reports.
    package struct SharedContainerFinding: Sendable, Hashable, CustomStringConvertible {
        /// What was found.
        package enum Kind: Sendable, Hashable {
            /// ACL entries beyond the mode, as `getfacl` writes them (`user:mallory:rw-`):
            /// they give users or groups access that the mode does not show.
            case accessControlEntries([String])
            /// A regular file with this many hard links: another of its names may be
            /// outside the container.
            case severalLinks(Int)
        }
        /// The file or directory.
        package let path: String
        /// What is wrong with it.
        package let kind: Kind

        package var description: String {
            switch kind {
            case .accessControlEntries(let entries):
                "'\(path)' has ACL entries (\(entries.joined(separator: ", "))) that give access its mode does not show"
            case .severalLinks(let count):
                "'\(path)' is a file with \(count) hard links: one may be outside the container (a file linked in from elsewhere); Wormhole makes no such files"
            }
        }
    }

    /// Looks through a shared container, at any depth and without following links, for
    /// ACL entries (on the container, its directories and files) and for regular files
    /// with several hard links: what `wormhole doctor` reports and what
    /// ``share(applicationGroupIdentifier:unixGroup:)`` removes or leaves alone. It only
    /// reads: any member may run it.
    ///
    /// - Throws: ``WormholeError`` when the container cannot be opened.
    package static func findings(inSharedContainer path: String) throws(WormholeError) -> [SharedContainerFinding] {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { throw ContainerDirectory.unavailable(path, Errno(rawValue: errno)) }
        defer { close(fd) }
        var findings: [SharedContainerFinding] = []
        let own = AccessControlLists.extendedEntries(fd)
        if !own.isEmpty { findings.append(SharedContainerFinding(path: path, kind: .accessControlEntries(own))) }
        _ = DirectoryTreeWalk.walk(fd) { directory, location, status in
            let type = status.st_mode & S_IFMT
            if type == S_IFREG && status.st_nlink > 1 {
                findings.append(SharedContainerFinding(path: path + "/" + location.relativePath, kind: .severalLinks(Int(status.st_nlink))))
            }
            if type == S_IFREG || type == S_IFDIR {
                let entries = AccessControlLists.extendedEntries(in: directory, name: location.name)
                if !entries.isEmpty {
                    findings.append(SharedContainerFinding(path: path + "/" + location.relativePath, kind: .accessControlEntries(entries)))
                }
            }
            return type == S_IFDIR
        }
        return findings
    }

    /// Stops sharing an application group: removes its shared container and every
    /// message in it. Members' processes then resolve the group to their own containers
    /// again. Running it when the group is not shared changes nothing; returns whether
    /// something was removed. Needs root.
    @discardableResult
    package static func revokeShare(applicationGroupIdentifier: String) throws(WormholeError) -> Bool {
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
    /// (for ``tmpfilesPath(applicationGroupIdentifier:)``).
    ///
    /// No name can add a field or a line: the container's path is written in double
    /// quotes, with `\\`, `\"` and `%%` for a backslash, a quote and a percent sign
    /// (systemd-tmpfiles reads them back as they were, whether or not it expands C
    /// escapes, and expands `%` specifiers in paths). An application group identifier
    /// holds no control character (so no newline or tab), and a Unix group name is one
    /// word of `A-Z a-z 0-9 . _ -` (``validate(unixGroupName:)``); both are checked here
    /// as ``share(applicationGroupIdentifier:unixGroup:)`` checks them.
    ///
    /// - Throws: ``WormholeError/Code/invalidIdentifier`` for either name.
    package static func tmpfilesLine(applicationGroupIdentifier: String, unixGroup: String) throws(WormholeError) -> String {
        try Identifier.validate(applicationGroupIdentifier, kind: "application group identifier")
        try validate(unixGroupName: unixGroup)
        var quoted = ""
        for character in (sharedGroupsDirectory + "/" + applicationGroupIdentifier).unicodeScalars {
            switch character {
            case "\\": quoted += "\\\\"
            case "\"": quoted += "\\\""
            case "%": quoted += "%%"
            default: quoted.unicodeScalars.append(character)
            }
        }
        return """
            d /run/wormhole 0755 root root -
            d \(sharedGroupsDirectory) 0755 root root -
            d "\(quoted)" 2770 root \(unixGroup) -

            """
    }

    /// Where ``tmpfilesLine(applicationGroupIdentifier:unixGroup:)`` goes:
    /// `/etc/tmpfiles.d/wormhole-<group>.conf`.
    ///
    /// - Throws: ``WormholeError/Code/invalidIdentifier`` when the identifier is not one
    ///   (a `/` or a leading `.` would name another file).
    package static func tmpfilesPath(applicationGroupIdentifier: String) throws(WormholeError) -> String {
        try Identifier.validate(applicationGroupIdentifier, kind: "application group identifier")
        return "/etc/tmpfiles.d/wormhole-\(applicationGroupIdentifier).conf"
    }

    /// The longest Unix group name ``validate(unixGroupName:)`` accepts, in bytes.
    package static let maximumUnixGroupNameLength = 64

    /// Checks that `name` can be a Unix group name that ``share(applicationGroupIdentifier:unixGroup:)``
    /// gives a container to, and that a configuration line can hold as one word.
    ///
    /// The rule is POSIX's portable user and group names, as `groupadd` makes them:
    /// letters, digits, `.`, `_` and `-`, not starting with `-`, optionally ending in `$`
    /// (Samba's machine accounts), not all digits (systemd-tmpfiles and `chgrp` would read
    /// it as a group id), at most ``maximumUnixGroupNameLength`` bytes.
    ///
    /// ```swift
    /// try WormholeContainer.validate(unixGroupName: "thermo")          // accepted
    /// try WormholeContainer.validate(unixGroupName: "wide 2770 root")  // throws
    /// ```
    ///
    /// - Throws: ``WormholeError/Code/invalidIdentifier`` naming what is wrong.
    package static func validate(unixGroupName name: String) throws(WormholeError) {
        func reject(_ why: String) -> WormholeError {
            WormholeError(.invalidIdentifier, "Unix group name '\(Identifier.printable(name))' \(why)")
        }
        let bytes = Array(name.utf8)
        guard !bytes.isEmpty else { throw WormholeError(.invalidIdentifier, "the Unix group name may not be empty") }
        guard bytes.count <= maximumUnixGroupNameLength else {
            throw reject("is \(bytes.count) bytes long; the limit is \(maximumUnixGroupNameLength) bytes")
        }
        if bytes[0] == UInt8(ascii: "-") { throw reject("may not start with '-'") }
        let body = bytes.last == UInt8(ascii: "$") ? bytes.dropLast() : bytes[...]
        if let bad = body.first(where: { byte in
            !(byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z") || byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z")
              || byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-"))
        }) {
            let shown = bad == UInt8(ascii: " ") ? "a space" : bad < 0x20 || bad >= 0x7F ? "byte 0x\(String(bad, radix: 16))" : "'\(Character(Unicode.Scalar(bad)))'"
            throw reject("may not contain \(shown): a Unix group name is letters, digits, '.', '_' and '-' (and a final '$')")
        }
        if body.isEmpty || body.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) {
            throw reject("is all digits, which reads as a group id: name the group")
        }
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

    /// Walks the container (``DirectoryTreeWalk``): removes the ACLs of its files and
    /// directories, gives those of another group `groupID` and the modes a shared
    /// container's files have, and leaves regular files with several links as they are.
    private static func settleContents(_ directory: Int32, groupID: UInt32, path: String) throws(WormholeError)
        -> (changed: Bool, removedEntries: [String], linked: [String]) {
        var changed = false
        var removedEntries: [String] = []
        var linked: [String] = []
        let outcome = DirectoryTreeWalk.walk(directory) { parent, location, status in
            let type = status.st_mode & S_IFMT
            guard type == S_IFDIR || type == S_IFREG else { return false }
            if type == S_IFREG && status.st_nlink > 1 {
                linked.append(path + "/" + location.relativePath)
                return false
            }
            let fd = openat(parent, location.name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)
            guard fd >= 0 else { return type == S_IFDIR }
            defer { close(fd) }
            var opened = stat()
            // Checked again on the descriptor: the name may have been given another file
            // (one with several links) since the fstatat.
            guard fstat(fd, &opened) == 0, opened.st_dev == status.st_dev, opened.st_ino == status.st_ino else { return false }
            if type == S_IFREG && opened.st_nlink > 1 {
                linked.append(path + "/" + location.relativePath)
                return false
            }
            let entries = AccessControlLists.extendedEntries(fd)
            if !entries.isEmpty {
                AccessControlLists.remove(fd)
                removedEntries.append("\(path)/\(location.relativePath): \(entries.joined(separator: ","))")
            }
            if opened.st_gid != groupID || !entries.isEmpty {
                _ = fchown(fd, uid_t.max, groupID)
                _ = fchmod(fd, type == S_IFDIR ? 0o2770 : 0o660)
                changed = true
            }
            return type == S_IFDIR
        }
        switch outcome {
        case .finished: break
        case .moved:
            throw WormholeError(.containerUnavailable, "a directory of '\(path)' was moved while share walked it (a member renamed it): share again", path: path)
        case .failed(let errno):
            throw WormholeError.system("walk the shared container", errno, path: path)
        }
        return (changed || !removedEntries.isEmpty, removedEntries, linked)
    }

    /// Removes `path` and everything under it, without following links, at any depth
    /// (``DirectoryTreeWalk``). The container is first made root's and 0700, so that
    /// members can no longer reach into it by path while it goes; a walk that a member's
    /// process (holding a descriptor inside) disturbs by moving a directory starts again.
    private static func removeTree(_ path: String) throws(WormholeError) {
        let location = try ContainerPath(path)
        let parent = open(location.parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard parent >= 0 else { throw ContainerDirectory.unavailable(location.parent, Errno(rawValue: errno)) }
        defer { close(parent) }
        var lastFailure: Errno?
        for _ in 0..<8 {
            let fd = openat(parent, location.name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            if fd < 0 {
                let failure = Errno(rawValue: errno)
                if failure == .noSuchFileOrDirectory { return }
                // Not a directory (a link or a file put in its place): remove the name.
                if failure == .notDirectory || failure == .tooManySymbolicLinkLevels, unlinkat(parent, location.name, 0) == 0 { return }
                throw ContainerDirectory.unavailable(path, failure)
            }
            _ = fchown(fd, 0, 0)
            _ = fchmod(fd, 0o700)
            let outcome = DirectoryTreeWalk.walk(fd) { directory, location, status in
                if status.st_mode & S_IFMT == S_IFDIR { return true }
                _ = unlinkat(directory, location.name, 0)
                return false
            } leaving: { directory, name in
                _ = unlinkat(directory, name, AT_REMOVEDIR)
            }
            close(fd)
            if case .failed(let errno) = outcome { lastFailure = errno }
            if unlinkat(parent, location.name, AT_REMOVEDIR) == 0 || errno == ENOENT { return }
            lastFailure = lastFailure ?? Errno(rawValue: errno)
        }
        throw WormholeError(.containerUnavailable,
            "could not remove every file of '\(path)'\(lastFailure.map { ": \($0)" } ?? ""); its files stay root's and nobody else's (mode 0700): revoke again",
            path: path)
    }
}
