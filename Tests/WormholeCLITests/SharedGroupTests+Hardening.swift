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
