#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
@_spi(Backend) import Wormhole

/// `wormhole share <group> --unix-group <name>`: shares an application group with the
/// members of a Unix group (root only).
struct Share: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "share",
        abstract: "Share an application group with the members of a Unix group (run as root).",
        discussion: """
            Makes /run/wormhole/app-groups/<group>, owned by root, group <name>, mode \
            2770, under parents only root may write to. From then on every member's \
            processes use it for that group, with no option or code change; other users \
            can neither read, write nor list it. Running it again changes nothing; with \
            another Unix group it gives the container to that group. Each time it walks \
            the whole container: it removes ACL entries (they give access the modes do \
            not show) and names files with several hard links, which it leaves alone. \
            The names must be an identifier and a portable Unix group name. It also writes \
            /etc/tmpfiles.d/wormhole-<group>.conf so that the container is made again at \
            boot (/run is emptied then). --revoke removes the shared container, its \
            messages and that file; members then use their own containers again.

            Examples:
              sudo wormhole share group.com.example.thermo --unix-group thermo
              sudo wormhole share group.com.example.thermo --revoke
            """)

    @Argument(help: "The application group to share.")
    var group: String

    @Option(name: .customLong("unix-group"), help: ArgumentHelp("The Unix group whose members share it.", valueName: "name"))
    var unixGroup: String?

    @Flag(name: .long, help: "Stop sharing: remove the shared container and its messages.")
    var revoke = false

    func validate() throws {
        if revoke && unixGroup != nil {
            throw ValidationError("--revoke takes no --unix-group: it stops sharing the group with anyone.")
        }
        if !revoke && unixGroup == nil {
            throw ValidationError("name the Unix group whose members share the group: --unix-group NAME (or --revoke to stop sharing).")
        }
    }

    func run() throws {
        try Failures.reported {
            if revoke {
                let removed = try WormholeContainer.revokeShare(applicationGroupIdentifier: group)
                let file = try WormholeContainer.tmpfilesPath(applicationGroupIdentifier: group)
                let hadFile = unlink(file) == 0
                Output.line(removed || hadFile
                    ? "stopped sharing \(group): removed \(WormholeContainer.sharedGroupsDirectory)/\(group)\(hadFile ? " and \(file)" : "")"
                    : "\(group) was not shared; nothing changed")
                return
            }
            let share = try WormholeContainer.share(applicationGroupIdentifier: group, unixGroup: unixGroup!)
            let line = try WormholeContainer.tmpfilesLine(applicationGroupIdentifier: group, unixGroup: share.unixGroup)
            let file = try WormholeContainer.tmpfilesPath(applicationGroupIdentifier: group)
            var wroteFile = false
            if (try? String(contentsOfFile: file, encoding: .utf8)) != line,
               FileManager.default.fileExists(atPath: "/etc/tmpfiles.d") {
                wroteFile = (try? line.write(toFile: file, atomically: true, encoding: .utf8)) != nil
            }
            for entries in share.removedAccessControlEntries {
                Output.line("removed ACL entries that gave access beyond Unix group \(share.unixGroup): \(entries)")
            }
            for file in share.filesWithSeveralLinks {
                Output.error("left '\(file)' as it was: a file with several hard links, one of which may be outside the container (a file linked in from elsewhere), so its group and mode were not changed; Wormhole makes no such files: remove it")
            }
            Output.line(share.changed || wroteFile
                ? "shared \(group) with Unix group \(share.unixGroup) (gid \(share.groupID)): \(share.path), root:\(share.unixGroup) 2770\(wroteFile ? "; made again at boot by \(file)" : "")"
                : "\(group) is already shared with Unix group \(share.unixGroup) (gid \(share.groupID)): \(share.path); nothing changed")
        }
    }
}
