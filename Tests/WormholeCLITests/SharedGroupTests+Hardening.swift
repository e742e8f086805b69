#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing

/// What `wormhole share` writes and walks when names, trees and files are hostile.
extension SharedGroupTests {
    /// A Unix group made for one test, removed when it ends.
    final class ExtraGroup: Sendable {
        let name: String
        init(_ name: String) throws {
            self.name = name
            try Deployment.system(["/usr/sbin/groupadd", name])
        }
        var id: gid_t { getgrnam(name)!.pointee.gr_gid }
        deinit { _ = try? Deployment.system(["/usr/sbin/groupdel", name]) }
    }

    @Test("an application group whose name holds a boot-time line's fields ('victim 2770 root wide -') is written quoted: systemd-tmpfiles run on its file gives the victim's container to no other group; a Unix group name that is not one word is refused",
          .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/systemd-tmpfiles"), "needs systemd-tmpfiles"),
          .timeLimit(.minutes(1)))
    func groupNamesCannotExtendTheBootTimeLine() async throws {
        let deployment = try Deployment()
        let wide = try ExtraGroup("whwide\(deployment.suffix)")
        #expect(try await deployment.share(["--unix-group", deployment.unixGroup]).status == 0)
        let memberGroup = getgrnam(deployment.unixGroup)!.pointee.gr_gid

        let hostile = "\(deployment.group) 2770 root \(wide.name) -"
        let file = "/etc/tmpfiles.d/wormhole-\(hostile).conf"
        defer {
            _ = try? Deployment.system([Products.path("wormhole"), "share", hostile, "--revoke"])
            unlink(file)
        }
        let shared = try await deployment.sandbox.run(["share", hostile, "--unix-group", wide.name], environment: [:])
        #expect(shared.status == 0, "\(shared.stderr)")
        let written = try String(contentsOfFile: file, encoding: .utf8)
        #expect(written.contains("d \"/run/wormhole/app-groups/\(hostile)\" 2770 root \(wide.name) -"), "\(written)")
        // At boot: systemd-tmpfiles reads the file.
        let tmpfiles = try await deployment.sandbox.run(["--create", file], product: "/usr/bin/systemd-tmpfiles", environment: [:])
        #expect(tmpfiles.status == 0, "\(tmpfiles.stderr)")
        var status = stat()
        #expect(lstat(deployment.container, &status) == 0)
        #expect(status.st_gid == memberGroup, "the victim's container went to gid \(status.st_gid) (\(wide.name) is \(wide.id))")
        #expect(lstat("/run/wormhole/app-groups/\(hostile)", &status) == 0 && status.st_gid == wide.id)

        // A backslash, a quote and a percent sign come back as they were.
        let odd = "\(deployment.group) \\x20 \"q\" %n"
        let oddFile = "/etc/tmpfiles.d/wormhole-\(odd).conf"
        defer {
            _ = try? Deployment.system([Products.path("wormhole"), "share", odd, "--revoke"])
            unlink(oddFile)
        }
        #expect(try await deployment.share(["--revoke"]).status == 0)
        #expect(try await deployment.sandbox.run(["share", odd, "--unix-group", deployment.unixGroup], environment: [:]).status == 0)
        rmdir("/run/wormhole/app-groups/\(odd)")
        #expect(try await deployment.sandbox.run(["--create", oddFile], product: "/usr/bin/systemd-tmpfiles", environment: [:]).status == 0)
        #expect(lstat("/run/wormhole/app-groups/\(odd)", &status) == 0 && status.st_gid == memberGroup && status.st_mode & 0o7777 == 0o2770,
                "systemd-tmpfiles made the container again under its own name")
        #expect(try FileManager.default.contentsOfDirectory(atPath: "/run/wormhole/app-groups").filter { $0.hasPrefix(deployment.group) }.sorted() == [hostile, odd].sorted(),
                "and nothing else")

        for name in ["\(wide.name) x", "-\(wide.name)", "1234", "a\nb", "a:b"] {
            let refused = try await deployment.sandbox.run(["share", deployment.group, "--unix-group=\(name)"], environment: [:])
            #expect(refused.status == 64 && refused.stderr.contains("Unix group name"), "\(name): \(refused.status) \(refused.stderr)")
        }
    }
}

extension SharedGroupTests {
    /// The descriptor of the directory `depth` levels of `d` below `path` (-1 when one is missing).
    static func nested(_ path: String, depth: Int) -> Int32 {
        var fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        for _ in 0..<depth where fd >= 0 {
            let child = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            close(fd)
            fd = child
        }
        return fd
    }

    @Test("a container with 30,000 nested directories (far past PATH_MAX and the descriptor limit) is given to another Unix group to its deepest directory, and revoked whole",
          .timeLimit(.minutes(8)))
    func deeplyNestedContainerIsRegroupedAndRevoked() async throws {
        let deployment = try Deployment()
        let other = try ExtraGroup("whoth\(deployment.suffix)")
        #expect(try await deployment.share(["--unix-group", deployment.unixGroup]).status == 0)
        let depth = 30_000
        var fd = open(deployment.container, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        for _ in 0..<depth {
            try #require(mkdirat(fd, "d", 0o2770) == 0, "mkdir: \(String(cString: strerror(errno)))")
            let child = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            close(fd)
            fd = child
        }
        let leaf = openat(fd, "log", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o660)
        #expect(leaf >= 0)
        close(leaf)
        close(fd)

        let regrouped = try await deployment.sandbox.run(["share", deployment.group, "--unix-group", other.name], environment: [:], seconds: 120)
        #expect(regrouped.status == 0, "\(regrouped.stderr)")
        let deepest = Self.nested(deployment.container, depth: depth)
        try #require(deepest >= 0)
        var status = stat()
        #expect(fstatat(deepest, "log", &status, AT_SYMLINK_NOFOLLOW) == 0 && status.st_gid == other.id,
                "the deepest file has gid \(status.st_gid), not \(other.name)'s \(other.id)")
        close(deepest)

        // Removing 30,000 directories takes over a minute on an ext4 mounted with discard.
        let revoked = try await deployment.sandbox.run(["share", deployment.group, "--revoke"], environment: [:], seconds: 280)
        #expect(revoked.status == 0 && revoked.output.contains("stopped sharing"), "\(revoked.output) \(revoked.stderr)")
        #expect(!FileManager.default.fileExists(atPath: deployment.container), "the group is no longer shared")
        #expect(!FileManager.default.fileExists(atPath: "/etc/tmpfiles.d/wormhole-\(deployment.group).conf"))
    }

    @Test("sharing again with another Unix group leaves a file hard-linked in from outside the container as it was, and says so",
          .timeLimit(.minutes(1)))
    func fileLinkedInFromOutsideIsLeftAlone() async throws {
        let deployment = try Deployment()
        let other = try ExtraGroup("whoth\(deployment.suffix)")
        #expect(try await deployment.share(["--unix-group", deployment.unixGroup]).status == 0)
        // The desktop user's own private file, on the same filesystem as the container.
        let outside = "/run/wormhole-outside-\(deployment.suffix)"
        defer { unlink(outside) }
        let desktopUID = try #require(Deployment.uid(deployment.desktop))
        let desktopGroup = getpwnam(deployment.desktop)!.pointee.pw_gid
        let made = open(outside, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        #expect(made >= 0 && fchown(made, desktopUID, desktopGroup) == 0 && fchmod(made, 0o600) == 0)
        close(made)
        var status = stat()
        #expect(lstat(outside, &status) == 0 && status.st_uid == desktopUID && status.st_mode & 0o777 == 0o600)
        let linked = try await deployment.run(as: deployment.desktop, [outside, deployment.container + "/linked"], command: "/bin/ln")
        #expect(linked.status == 0, "\(linked.stderr)")

        let shared = try await deployment.share(["--unix-group", other.name])
        #expect(shared.status == 0, "\(shared.stderr)")
        #expect(lstat(outside, &status) == 0)
        #expect(status.st_gid == desktopGroup && status.st_mode & 0o7777 == 0o600,
                "the file outside the container has gid \(status.st_gid) and mode \(String(status.st_mode & 0o7777, radix: 8))")
        #expect(shared.stderr.contains("\(deployment.container)/linked") && shared.stderr.contains("hard links"), "\(shared.stderr)")
        let doctor = try await deployment.sandbox.run(["doctor", "--directory", deployment.container], environment: [:])
        #expect(doctor.status != 0 && doctor.stderr.contains("'\(deployment.container)/linked' is a file with 2 hard links"), "\(doctor.stderr)")
    }

    /// Whether `setfacl` and `getfacl` are here, installed from Debian's `acl` package
    /// when they are not (false only when apt cannot install it).
    static let aclToolsInstalled: Bool = {
        if !FileManager.default.isExecutableFile(atPath: "/usr/bin/setfacl") {
            _ = try? Deployment.system(["/usr/bin/apt-get", "install", "-y", "-q", "acl"])
        }
        return FileManager.default.isExecutableFile(atPath: "/usr/bin/setfacl") && FileManager.default.isExecutableFile(atPath: "/usr/bin/getfacl")
    }()

    @Test("ACL entries that root gave a non-member on the container and a log are seen: doctor names them as a problem, share removes them and says so, and the non-member is refused again",
          .enabled(if: SharedGroupTests.aclToolsInstalled, "needs setfacl and getfacl (Debian's acl package), which apt-get could not install"),
          .timeLimit(.minutes(1)))
    func accessControlEntriesForANonMemberAreRemoved() async throws {
        let deployment = try Deployment()
        #expect(try await deployment.share(["--unix-group", deployment.unixGroup]).status == 0)
        let group = ["--group", deployment.group]
        #expect(try await deployment.run(as: deployment.desktop, ["send", "x", "secret"] + group).status == 0)
        let logs = try FileManager.default.contentsOfDirectory(atPath: deployment.container).filter { !$0.hasPrefix(".") }
        let log = try #require(logs.first, "\(logs)")
        #expect(try Deployment.system(["/usr/bin/setfacl", "-m", "u:\(deployment.outsider):rx", deployment.container]) == 0)
        #expect(try Deployment.system(["/usr/bin/setfacl", "-m", "u:\(deployment.outsider):rw", deployment.container + "/" + log]) == 0)
        let read = try await deployment.run(as: deployment.outsider, [deployment.container + "/" + log], command: "/bin/cat")
        #expect(read.status == 0 && read.output.contains("secret"), "the entries give the non-member access: \(read.stderr)")

        let doctor = try await deployment.run(as: deployment.desktop, ["doctor"] + group)
        #expect(doctor.status != 0 && doctor.stderr.contains("user:\(deployment.outsider):r-x") && doctor.stderr.contains("user:\(deployment.outsider):rw-"),
                "\(doctor.output) \(doctor.stderr)")

        let shared = try await deployment.share(["--unix-group", deployment.unixGroup])
        #expect(shared.status == 0 && !shared.output.contains("nothing changed"), "\(shared.output)")
        #expect(shared.output.contains("user:\(deployment.outsider):rw-"), "\(shared.output)")
        let refused = try await deployment.run(as: deployment.outsider, [deployment.container + "/" + log], command: "/bin/cat")
        #expect(refused.status != 0 && refused.stdout.isEmpty)
        let remaining = try await deployment.sandbox.run(["--skip-base", "-R", deployment.container], product: "/usr/bin/getfacl", environment: [:])
        #expect(remaining.status == 0 && !remaining.output.contains("user:"), "\(remaining.output)")
        let again = try await deployment.run(as: deployment.desktop, ["doctor"] + group)
        #expect(!again.stderr.contains(deployment.outsider), "\(again.stderr)")
        #expect(try await deployment.share(["--unix-group", deployment.unixGroup]).output.contains("nothing changed"))
    }
}

extension SharedGroupTests {
    @Test("status names the user whose process runs a listener, as the kernel's lock list says: a durable name another member made first shows the member that runs it now; a position file a member hard-linked from another's under a new name shows no user",
          .timeLimit(.minutes(2)))
    func statusNamesTheUserThatRunsTheListener() async throws {
        let deployment = try Deployment()
        #expect(try await deployment.share(["--unix-group", deployment.unixGroup]).status == 0)
        let group = ["--group", deployment.group]
        func listen(as user: String) throws -> RunningCommand {
            try deployment.start(as: user, ["listen", "--durable", "svc", "--timeout", "60", "--verbose", "jobs"] + group)
        }
        func row(_ name: String) async throws -> String? {
            let status = try await deployment.run(as: deployment.service, ["status", "jobs"] + group)
            return status.lines.first { $0.contains(" \(name) ") }
        }
        // The service makes the durable name and stops; the desktop user runs it now.
        let first = try listen(as: deployment.service)
        #expect(await first.waitForStandardError(containing: "listening to"))
        first.send(SIGTERM)
        _ = await first.finish()
        let second = try listen(as: deployment.desktop)
        #expect(await second.waitForStandardError(containing: "listening to"))
        let running = try #require(try await row("svc"))
        #expect(running.contains(" yes ") && running.contains(" \(deployment.desktop) ") && !running.contains(deployment.service),
                "the user that runs it: \(running)")
        second.send(SIGTERM)
        _ = await second.finish()
        let stopped = try #require(try await row("svc"))
        #expect(stopped.contains(" no ") && stopped.contains(" \(deployment.service) "), "not running: who made its position: \(stopped)")

        // The desktop user gives the service's position file a second name.
        let claims = deployment.container + "/.listeners/jobs/"
        let linked = try await deployment.run(as: deployment.desktop, [claims + "durable-svc", claims + "durable-fake"], command: "/bin/ln")
        #expect(linked.status == 0, "\(linked.stderr)")
        let fake = try #require(try await row("fake"))
        #expect(!fake.contains(deployment.service) && !fake.contains(deployment.desktop), "a file with two names proves no user: \(fake)")
    }
}
