#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import WormholeTestSupport

/// Containers used from inside a sandbox made by bubblewrap (`bwrap`), as Flatpak makes
/// one: a private `/tmp`, `/dev/shm` and `/run` (tmpfs), and only the group's container
/// bound in. Two kinds: root in a mount namespace of its own without a user namespace,
/// and an unprivileged member of the group in a user namespace (`--unshare-user
/// --unshare-pid --unshare-ipc`), where root's and other users' files show as the
/// overflow uid 65534 (Security.md, "Sandboxes"). Each passes, listens, requests both
/// ways, resumes a durable name and works a queue with a process outside the sandbox,
/// in a personal and in a shared container. Needs root, useradd and bwrap (Scripts/test
/// installs bubblewrap); every user, group and container made is removed after.
@Suite("Sandboxes (bwrap, user namespaces)", .serialized,
       .enabled(if: geteuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/sbin/useradd")
                && FileManager.default.isExecutableFile(atPath: "/usr/bin/bwrap"),
                "needs root, useradd and bwrap (apt-get install bubblewrap)"))
struct SandboxTests {
    /// Who runs inside the sandbox.
    enum Inside: String, CaseIterable, CustomTestStringConvertible {
        /// Root, in a mount namespace of its own, in the initial user namespace.
        case rootWithoutUserNamespace
        /// A member of the Unix group, in a user namespace of its own.
        case memberInUserNamespace

        var testDescription: String { rawValue }
    }

    /// The container the group resolves to.
    enum Kind: String, CaseIterable, CustomTestStringConvertible {
        case personal, shared
        var testDescription: String { rawValue }
    }

    /// A command that sets a test up failed.
    struct SetupFailure: Error, CustomStringConvertible {
        let description: String
    }

    /// A Unix group, a member, an outsider and a group name, made for one test and
    /// removed after it, with the shared container when the group is shared.
    final class Setup: Sendable {
        let suffix = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        var unixGroup: String { "whbg\(suffix)" }
        var member: String { "whbm\(suffix)" }
        var outsider: String { "whbo\(suffix)" }
        var group: String { "group.test.sandbox-\(suffix)" }
        var sharedContainer: String { "/run/wormhole/app-groups/\(group)" }
        let sandbox = Sandbox()
        let program = Products.runnableByAnyone("wormhole")

        init() throws {
            for command in [["/usr/sbin/groupadd", unixGroup], ["/usr/sbin/useradd", "--no-create-home", "--groups", unixGroup, member],
                            ["/usr/sbin/useradd", "--no-create-home", outsider]] {
                let status = try SharedGroupTests.Deployment.system(command)
                guard status == 0 else { throw SetupFailure(description: "\(command.joined(separator: " ")) exited with status \(status)") }
            }
        }

        deinit {
            _ = try? SharedGroupTests.Deployment.system([Products.path("wormhole"), "share", group, "--revoke"])
            for user in [member, outsider] {
                if let uid = SharedGroupTests.Deployment.uid(user) {
                    for root in ["/dev/shm", "/tmp"] { try? FileManager.default.removeItem(atPath: "\(root)/app-groups-\(uid)") }
                    try? FileManager.default.removeItem(atPath: "/run/user/\(uid)/app-groups/\(group)")
                }
                _ = try? SharedGroupTests.Deployment.system(["/usr/sbin/userdel", user])
            }
            _ = try? SharedGroupTests.Deployment.system(["/usr/sbin/groupdel", unixGroup])
            for root in ["/dev/shm/app-groups-0", "/run/user/0/app-groups"] {
                try? FileManager.default.removeItem(atPath: "\(root)/\(group)")
            }
        }

        /// The personal container of `user` for the group, as the resolution finds it
        /// (Protocol.md §4: `/run/user/<uid>` when it is the user's own, else `/dev/shm`).
        func personalContainer(of user: String?) -> String {
            let uid = user.flatMap { SharedGroupTests.Deployment.uid($0) } ?? 0
            var status = stat()
            if lstat("/run/user/\(uid)", &status) == 0, status.st_mode & S_IFMT == S_IFDIR, status.st_uid == uid, status.st_mode & 0o077 == 0 {
                return "/run/user/\(uid)/app-groups/\(group)"
            }
            return "/dev/shm/app-groups-\(uid)/\(group)"
        }

        /// `arguments` run by `user` (root when `nil`) with a bare environment (no
        /// WORMHOLE_*), umask 077, outside any sandbox.
        func outside(_ user: String?, _ arguments: [String]) throws -> RunningCommand {
            let bare = ["/usr/bin/env", "-i", "PATH=/usr/bin:/bin", "LANG=C.UTF-8", "/bin/sh", "-c", "umask 077; cd /; exec \"$@\"", "sh"]
            guard let user else { return try sandbox.start(Array(bare.dropFirst()) + arguments, product: bare[0]) }
            return try sandbox.start(["-u", user, "--"] + bare + arguments, product: "/usr/sbin/runuser")
        }

        /// `arguments` run in a bwrap sandbox by `user` (root when `nil`: no user
        /// namespace; a user: `--unshare-user --unshare-pid --unshare-ipc`), with a private
        /// `/tmp`, `/dev/shm` and `/run`, the products bound read-only, and `binding` bound
        /// at its own path when given.
        func inside(_ user: String?, binding: String?, _ arguments: [String]) throws -> RunningCommand {
            var sandboxing = ["/usr/bin/bwrap"]
            if user != nil { sandboxing += ["--unshare-user", "--unshare-pid", "--unshare-ipc"] }
            let products = (program as NSString).deletingLastPathComponent
            sandboxing += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--tmpfs", "/dev/shm",
                           "--tmpfs", "/run", "--ro-bind", products, products, "--die-with-parent"]
            if let binding { sandboxing += ["--bind", binding, binding] }
            return try outside(user, sandboxing + arguments)
        }
    }

    /// Who is inside, who is outside, and the container bound in.
    struct Parties {
        let setup: Setup
        let inside: Inside
        let kind: Kind
        /// The user inside the sandbox (`nil`: root).
        var insider: String? { inside == .rootWithoutUserNamespace ? nil : setup.member }
        /// The process outside: the same user for a personal container; for a shared one
        /// another member (root for the member inside, the member for root inside).
        var outsider: String? {
            switch kind {
            case .personal: insider
            case .shared: inside == .rootWithoutUserNamespace ? setup.member : nil
            }
        }
        var container: String { kind == .shared ? setup.sharedContainer : setup.personalContainer(of: insider) }
        var group: [String] { ["--group", setup.group] }

        /// `wormhole COMMAND --group GROUP ARGUMENTS...` (before a `--` that ends them).
        func command(_ arguments: [String]) -> [String] {
            [setup.program, arguments[0]] + group + arguments.dropFirst()
        }

        func inSandbox(_ arguments: [String], bound: Bool = true) throws -> RunningCommand {
            try setup.inside(insider, binding: bound ? container : nil, command(arguments))
        }

        func outOfSandbox(_ arguments: [String]) throws -> RunningCommand {
            try setup.outside(outsider, command(arguments))
        }

        /// Makes the container outside the sandbox, before it is bound: `wormhole share`
        /// for a shared one; the user's first pass for a personal one.
        func prepare() async throws {
            if kind == .shared {
                let shared = try await setup.sandbox.run(["share", setup.group, "--unix-group", setup.unixGroup], environment: [:])
                #expect(shared.status == 0, "\(shared.stderr)")
            } else {
                let made = try await setup.outside(insider, command(["send", "setup", "made outside"])).finish()
                #expect(made.status == 0, "\(made.stderr)")
            }
        }
    }

    @Test("inside a sandbox, listening, passing, requests both ways, a durable name resumed and a queue member work with a process outside it",
          .timeLimit(.minutes(4)), arguments: Inside.allCases, Kind.allCases)
    func sandboxedProcessesMeetTheOnesOutside(_ inside: Inside, _ kind: Kind) async throws {
        let parties = Parties(setup: try Setup(), inside: inside, kind: kind)
        try await parties.prepare()

        // Listening inside, passing outside.
        let listener = try parties.inSandbox(["listen", "--count", "1", "--timeout", "60", "--verbose", "to-inside"])
        #expect(await listener.waitForStandardError(containing: "listening to"), "\(listener.stderr)")
        let sent = try await parties.outOfSandbox(["send", "to-inside", "hello inside"]).finish()
        #expect(sent.status == 0, "\(sent.stderr)")
        let heard = await listener.finish()
        #expect(heard.status == 0 && heard.lines == ["hello inside"], "\(heard.stderr)")
        #expect(heard.stderr.contains("in \(parties.container)"), "the sandbox resolved the bound container: \(heard.stderr)")

        // Passing inside, listening outside.
        let outsideListener = try parties.outOfSandbox(["listen", "--count", "1", "--timeout", "60", "--verbose", "to-outside"])
        #expect(await outsideListener.waitForStandardError(containing: "listening to"))
        let passed = try await parties.inSandbox(["send", "to-outside", "hello outside"]).finish()
        #expect(passed.status == 0, "\(passed.stderr)")
        let heardOutside = await outsideListener.finish()
        #expect(heardOutside.lines == ["hello outside"], "\(heardOutside.stderr)")

        // A request from inside, answered outside; and one from outside, answered inside.
        let outsideResponder = try parties.outOfSandbox(["respond", "--count", "1", "ask-outside", "--verbose", "--", "/bin/echo", "answered outside"])
        #expect(await outsideResponder.waitForStandardError(containing: "answering requests"))
        let askedFromInside = try await parties.inSandbox(["request", "ask-outside", "question", "--timeout", "30"]).finish()
        #expect(askedFromInside.status == 0 && askedFromInside.lines == ["answered outside"], "\(askedFromInside.stderr)")
        _ = await outsideResponder.finish()
        let insideResponder = try parties.inSandbox(["respond", "--count", "1", "ask-inside", "--verbose", "--", "/bin/echo", "answered inside"])
        #expect(await insideResponder.waitForStandardError(containing: "answering requests"), "\(insideResponder.stderr)")
        let askedFromOutside = try await parties.outOfSandbox(["request", "ask-inside", "question", "--timeout", "30"]).finish()
        #expect(askedFromOutside.status == 0 && askedFromOutside.lines == ["answered inside"], "\(askedFromOutside.stderr)")
        _ = await insideResponder.finish()

        // A durable name inside: it hears m1, stops, and resumes with what was passed
        // while it was not running.
        let durable = try parties.inSandbox(["listen", "--durable", "boxed", "--count", "1", "--timeout", "60", "--verbose", "durable"])
        #expect(await durable.waitForStandardError(containing: "listening to"), "\(durable.stderr)")
        #expect(try await parties.outOfSandbox(["send", "durable", "m1"]).finish().status == 0)
        let first = await durable.finish()
        #expect(first.status == 0 && first.lines == ["m1"], "\(first.stderr)")
        #expect(try await parties.outOfSandbox(["send", "durable", "m2 while away"]).finish().status == 0)
        let resumed = try await parties.inSandbox(["listen", "--durable", "boxed", "--count", "1", "--timeout", "30", "durable"]).finish()
        #expect(resumed.status == 0 && resumed.lines == ["m2 while away"], "\(resumed.stderr)")

        // A work queue member inside takes the jobs passed outside.
        let member = try parties.inSandbox(["listen", "--queue", "workers", "--count", "2", "--timeout", "60", "--verbose", "jobs"])
        #expect(await member.waitForStandardError(containing: "taking messages of"), "\(member.stderr)")
        #expect(try await parties.outOfSandbox(["send", "jobs", "job 1"]).finish().status == 0)
        #expect(try await parties.outOfSandbox(["send", "jobs", "job 2"]).finish().status == 0)
        let worked = await member.finish()
        #expect(worked.status == 0 && worked.lines == ["job 1", "job 2"], "\(worked.stderr)")
        let queues = try await parties.outOfSandbox(["status", "--json", "jobs"]).finish()
        #expect(queues.output.contains("\"acknowledged\":2"), "the queue's state, written inside, read outside: \(queues.output) \(queues.stderr)")

        // doctor, inside, says the owner cannot be seen there rather than name 'nobody'.
        if inside == .memberInUserNamespace && kind == .shared {
            let doctor = try await parties.inSandbox(["doctor"]).finish()
            #expect(doctor.output.contains("owner: not visible from inside this user namespace (uid 65534 is the overflow uid)")
                    && doctor.output.contains("shared with the members of a Unix group not visible from inside this user namespace"),
                    "\(doctor.output) \(doctor.stderr)")
        }
    }

    @Test("a sandbox in a user namespace that did not bind the group's container is told to bind it: nothing is made in its private /run or /dev/shm",
          .timeLimit(.minutes(2)), arguments: Kind.allCases)
    func unboundContainerIsAnErrorThatSaysWhatToBind(_ kind: Kind) async throws {
        let parties = Parties(setup: try Setup(), inside: .memberInUserNamespace, kind: kind)
        try await parties.prepare()
        for arguments in [["send", "x", "lost"], ["listen", "--timeout", "5", "x"], ["read", "x"]] {
            let refused = try await parties.inSandbox(arguments, bound: false).finish()
            #expect(refused.status != 0, "\(arguments): \(refused.output)")
            #expect(refused.stderr.contains("no container of group '\(parties.setup.group)' in this sandbox"), "\(refused.stderr)")
            #expect(refused.stderr.contains("the sandbox must bind the group's container (for a shared group, bwrap --bind \(parties.setup.sharedContainer) \(parties.setup.sharedContainer); Flatpak: the finish-arg --filesystem=\(parties.setup.sharedContainer))"), "\(refused.stderr)")
        }
    }

    @Test("inside a user namespace, a shared container bound into an outsider's sandbox is refused: the kernel denies it access, which the error says",
          .timeLimit(.minutes(2)))
    func outsiderInASandboxIsRefused() async throws {
        let setup = try Setup()
        let parties = Parties(setup: setup, inside: .memberInUserNamespace, kind: .shared)
        try await parties.prepare()
        let refused = try await setup.inside(setup.outsider, binding: setup.sharedContainer, [setup.program, "send", "x", "forged", "--group", setup.group]).finish()
        #expect(refused.status != 0)
        #expect(refused.stderr.contains("container '\(setup.sharedContainer)' belongs to a user not mapped into this user namespace (uid 65534 is the overflow uid")
                && refused.stderr.contains("this process may not read, write and search it"), "\(refused.stderr)")
        var status = stat()
        #expect(lstat(setup.sharedContainer + "/x.wormhole", &status) != 0, "nothing was written")
    }

    @Test("in a user namespace that maps the overflow uid (a rootless container's range), a container shown as that uid's is still refused: it may be a real user's",
          .timeLimit(.minutes(2)))
    func mappedOverflowUserIsNotRelaxed() async throws {
        let directory = TemporaryDirectory("wormhole-sandbox-test")
        chmod(directory.path, 0o755)
        let container = directory.file("c")
        // Root's (unmapped there, so shown as 65534), of the namespace's root's group
        // (host 100000): the namespace's root may use it, as the kernel decides.
        #expect(mkdir(container, 0o700) == 0 && chown(container, 0, 100_000) == 0 && chmod(container, 0o2770) == 0)
        let mappedRange = """
            import ctypes, os, sys
            libc = ctypes.CDLL(None, use_errno=True)
            go_read, go_write = os.pipe()
            ready_read, ready_write = os.pipe()
            pid = os.fork()
            if pid == 0:
                if libc.unshare(0x10000000) != 0:
                    os._exit(70)
                os.write(ready_write, b"u")
                os.read(go_read, 1)
                os.setresgid(0, 0, 0)
                os.setresuid(0, 0, 0)
                os.execv(sys.argv[1], sys.argv[1:])
            os.read(ready_read, 1)
            for name in ("uid_map", "gid_map"):
                with open(f"/proc/{pid}/{name}", "w") as file:
                    file.write("0 100000 65536\\n")
            os.write(go_write, b"g")
            sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
            """
        let sandbox = Sandbox()
        let refused = try await sandbox.run(["python3", "-c", mappedRange, Products.runnableByAnyone("wormhole"), "send", "--directory", container, "x", "y"],
                                            product: "/usr/bin/env")
        #expect(refused.status == 1 && refused.stderr.contains("container '\(container)' belongs to user 65534, not to this user (0)"), "\(refused.stderr)")
    }

    @Test("outside a user namespace, a container with a shared group's mode owned by the overflow uid (nobody) is still refused as another user's",
          .timeLimit(.minutes(2)))
    func overflowOwnerOutsideASandboxIsStillRefused() async throws {
        let setup = try Setup()
        let directory = TemporaryDirectory("wormhole-sandbox-test")
        chmod(directory.path, 0o755)
        let container = directory.file("nobodys")
        let gid = try #require(getgrnam(setup.unixGroup)?.pointee.gr_gid)
        #expect(mkdir(container, 0o700) == 0 && chown(container, 65534, gid) == 0 && chmod(container, 0o2770) == 0)
        for user in [setup.member, nil] as [String?] {
            let refused = try await setup.outside(user, [setup.program, "send", "--directory", container, "x", "y"]).finish()
            #expect(refused.status != 0 && refused.stderr.contains("container '\(container)' belongs to user 65534, not to this user"),
                    "\(user ?? "root"): \(refused.stderr)")
        }
    }
}
