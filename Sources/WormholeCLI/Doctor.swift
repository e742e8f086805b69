#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
import Dispatch
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Synchronization
@_spi(Backend) import Wormhole

/// `wormhole doctor`: why a listener may never fire, checked one step at a time.
struct Doctor: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "doctor",
        abstract: "Check the container, the inotify limits and the listeners, and watch a test post arrive.",
        discussion: """
            For "the listener never fires": prints the container the options and \
            environment select and why, its owner and mode, this user's inotify limits \
            and use, who listens in it, and the time a test post took to arrive. Run it \
            with the options and environment of each process that should meet: the \
            paths must be the same.

            Exit status: 0 when all is well; 1 with each problem on a line, and its fix.
            """)

    @OptionGroup(title: "Container") var container: ContainerOptions

    func run() throws {
        var problems: [String] = []
        let environment = ProcessInfo.processInfo.environment
        // 1. Which container, and why.
        let (location, wormhole) = try openContainer(environment: environment)
        if let path = wormhole.directory {
            Output.line("  path: \(path)")
            problems += Self.ownership(of: path, location: location)
        }
        // 2. The inotify limits in force and what this user uses of them.
        if wormhole.directory != nil {
            let usage = Self.inotifyUsage()
            let watches = Self.limit("max_user_watches", namespaced: "max_inotify_watches")
            let instances = Self.limit("max_user_instances", namespaced: "max_inotify_instances")
            Output.line("inotify: \(usage.watches) watches of \(watches.value.map(String.init) ?? "?") (\(watches.name)), \(usage.instances) instances of \(instances.value.map(String.init) ?? "?") (\(instances.name)) used by this user's processes")
            problems += Self.inotifyProblems(usage: usage, watches: watches, instances: instances)
        }
        // 3. Who listens here.
        describeListeners(of: wormhole)
        // 4. Other containers of the same group: processes there never hear this one.
        if case .group(let group, let sub) = location {
            problems += Self.otherContainers(of: group, sub: sub, here: wormhole.directory ?? "", environment: environment)
        }
        // 5. A test message, watched as a listener would.
        switch Self.testMessage(wormhole) {
        case .success(let text): Output.line(text)
        case .failure(let problem): problems.append(problem.description)
        }
        if problems.isEmpty {
            Output.line("all is well")
            return
        }
        for problem in problems { Output.error("problem: \(problem)") }
        throw ExitCode.failure
    }

    /// Prints the container the options and environment select, and why, and opens it;
    /// exits with the problem when it cannot.
    private func openContainer(environment: [String: String]) throws -> (ContainerOptions.Location, Wormhole) {
        let location: ContainerOptions.Location
        do {
            location = try container.location()
        } catch let failure as CommandFailure {
            Output.error(failure.description)
            throw ExitCode(failure.exitCode.rawValue)
        }
        Output.line("container: \(location)")
        Output.line("  chosen by: \(container.reason(environment: environment))")
        do {
            return (location, try container.existingWormhole())
        } catch let failure as CommandFailure where failure.exitCode == WormholeExitCode.noMessage {
            Output.line("problem: \(failure.description)")
            throw ExitCode.failure
        } catch let error as WormholeError {
            Output.line("problem: \(error.description)")
            throw ExitCode.failure
        } catch let failure as CommandFailure {
            Output.line("problem: \(failure.description)")
            throw ExitCode.failure
        }
    }

    /// Prints the owner and mode of the container at `path` (and its Unix group when
    /// shared); returns the problems they show: another user's container, ACL entries or
    /// files with several links in a shared one.
    private static func ownership(of path: String, location: ContainerOptions.Location) -> [String] {
        var status = stat()
        guard lstat(path, &status) == 0 else { return [] }
        let mode = String(status.st_mode & 0o7777, radix: 8)
        // Inside a sandbox's user namespace, an owner or group it does not map shows
        // as the overflow id: say so rather than name 'nobody'.
        let hiddenOwner = WormholeContainer.ownerIsHiddenByUserNamespace(status.st_uid)
        let hiddenGroup = WormholeContainer.groupIsHiddenByUserNamespace(status.st_gid)
        let owner = getpwuid(status.st_uid).map { String(cString: $0.pointee.pw_name) } ?? "?"
        Output.line(hiddenOwner
             ? "  owner: not visible from inside this user namespace (uid \(status.st_uid) is the overflow uid); its mode and access are checked instead, mode 0\(mode)"
             : "  owner: \(owner) (uid \(status.st_uid)), mode 0\(mode)")
        guard status.st_mode & S_ISGID != 0 && status.st_mode & 0o070 == 0o070 else {
            guard status.st_uid != geteuid() && !hiddenOwner else { return [] }
            return ["the container belongs to uid \(status.st_uid), not to this user (uid \(geteuid())): run as that user, or choose a container of your own with --group or --directory"]
        }
        let group = hiddenGroup ? "GROUP" : getgrgid(status.st_gid).map { String(cString: $0.pointee.gr_name) } ?? String(status.st_gid)
        Output.line(hiddenGroup
             ? "  shared with the members of a Unix group not visible from inside this user namespace (gid \(status.st_gid) is the overflow gid)"
             : "  shared with the members of Unix group \(group) (gid \(status.st_gid))")
        // ACL entries give access the modes do not show; a file with several
        // links may be another's outside the container.
        let shared = if case .group(let identifier, nil) = location { identifier } else { "GROUP" }
        return ((try? WormholeContainer.findings(inSharedContainer: path)) ?? []).map { finding in
            switch finding.kind {
            case .accessControlEntries:
                "\(finding): only members of \(group) should reach the container. Remove them: sudo wormhole share \(shared) --unix-group \(group)"
            case .severalLinks:
                "\(finding): remove it"
            }
        }
    }

    /// Decides whether this user's inotify `usage` leaves room for a listener under the
    /// `watches` and `instances` limits (a listener needs 2 watches and 1 instance), and
    /// says how to raise a limit that does not.
    static func inotifyProblems(usage: (instances: Int, watches: Int), watches: (value: Int?, name: String),
                                instances: (value: Int?, name: String)) -> [String] {
        var problems: [String] = []
        if let limit = watches.value, usage.watches + 2 > limit {
            problems.append("\(max(0, limit - usage.watches)) of this user's \(limit) inotify watches are left, and a listener needs 2 (its container and the container's parent): raise the limit with 'sysctl -w \(watches.name)=\(max(limit * 2, 8192))', or stop programs that watch many files")
        }
        if let limit = instances.value, usage.instances + 1 > limit {
            problems.append("this user has used \(usage.instances) of \(limit) inotify instances: raise it with 'sysctl -w \(instances.name)=\(max(limit * 2, 128))'")
        }
        return problems
    }

    /// Prints who listens in the container of `wormhole`, and a note when nobody does.
    private func describeListeners(of wormhole: Wormhole) {
        let listeners = (try? wormhole.listeners()) ?? []
        let running = listeners.filter(\.isRunning)
        let identifiers = Set(running.map(\.identifier)).sorted()
        Output.line("listeners: \(running.count) running\(identifiers.isEmpty ? "" : " (on \(identifiers.map { "'\($0)'" }.joined(separator: ", ")))"), \(listeners.filter { $0.durableName != nil }.count) durable name(s); '\(container.command("status"))' shows them")
        if running.isEmpty {
            Output.line("  note: no process listens in this container now. If yours does, it uses another container: run 'wormhole doctor' with its options and environment, and compare the paths")
        }
    }

    /// Prints the other containers of `group` (other users', or other candidates) than
    /// `here`; returns the problem they make when there are any: processes that use
    /// different ones never hear each other.
    private static func otherContainers(of group: String, sub: String?, here: String, environment: [String: String]) -> [String] {
        let suffix = sub.map { "/" + $0 } ?? ""
        let others = (WormholeContainer.candidateDirectories(forApplicationGroupIdentifier: group, environment: environment)
            + WormholeContainer.otherUsersDirectories(forApplicationGroupIdentifier: group))
            .map { $0 + suffix }
            .filter { $0 != here && FileManager.default.fileExists(atPath: $0) }
        for other in others {
            Output.line("  also: \(other) (\(Self.describe(other)))")
        }
        guard !others.isEmpty else { return [] }
        return ["group \(group) has \(others.count + 1) containers (\(([here] + others).joined(separator: ", "))): processes that use different ones never hear each other. Use one: remove the others once no process uses them, unset \(WormholeContainer.environmentOverride) where it differs, or share the group between users with 'wormhole share'"]
    }

    /// Passes a message under `wormhole-doctor` and waits (up to 5 s) for a listener of
    /// this process to receive it; clears it after.
    static func testMessage(_ wormhole: Wormhole) -> Result<String, CommandFailure> {
        let identifier = "wormhole-doctor"
        let arrived = MonotonicEvent()
        let sent = ContinuousClock.now
        let elapsed = Mutex<Duration?>(nil)
        do {
            let token = try wormhole.listenForRecords(withIdentifier: identifier) { _ in
                elapsed.withLock { $0 = ContinuousClock.now - sent }
                arrived.signal()
            }
            defer { token.cancel() }
            try wormhole.passMessage("test", identifier: identifier)
            let waited = arrived.wait(timeout: 5)
            try? wormhole.clearMessageContents(forIdentifier: identifier)
            if waited, let duration = elapsed.withLock({ $0 }) {
                let seconds = Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
                return .success("test: a message passed under '\(identifier)' reached a listener in \(TextFormatting.decimal(seconds * 1000, places: 2)) ms")
            }
            return .failure(CommandFailure("a test message under '\(identifier)' did not reach a listener of this process within 5 s: the container's filesystem may not report changes (NFS, SMB and FUSE are not supported); use a local directory such as /dev/shm"))
        } catch {
            return .failure(CommandFailure("the test message failed: \(error.description)"))
        }
    }

    /// Another container of the group, as a person reads it: its owner and who listens
    /// there, or why it cannot be opened.
    static func describe(_ path: String) -> String {
        var status = stat()
        let owner = lstat(path, &status) == 0
            ? "owner \(getpwuid(status.st_uid).map { String(cString: $0.pointee.pw_name) } ?? String(status.st_uid))" : "owner ?"
        do {
            let other = try Wormhole(directory: path, createIfMissing: false)
            let running = try other.listeners().filter(\.isRunning)
            let pids = Set(running.compactMap(\.processID)).sorted().map(String.init)
            let identifiers = Set(running.map(\.identifier)).sorted().map { "'\($0)'" }
            return running.isEmpty ? "\(owner), no listener running"
                : "\(owner), \(running.count) listener(s) running on \(identifiers.joined(separator: ", ")) in process(es) \(pids.joined(separator: ", "))"
        } catch {
            return "\(owner); cannot be opened by this user: \(error)"
        }
    }

    /// The limit in force and its sysctl name: inside a user namespace the namespace's
    /// own `user.max_inotify_*` may be lower than `fs.inotify.*`.
    static func limit(_ name: String, namespaced: String) -> (value: Int?, name: String) {
        func read(_ path: String) -> Int? {
            (try? String(contentsOfFile: path, encoding: .utf8)).flatMap { Int($0.filter { !$0.isWhitespace }) }
        }
        let global = read("/proc/sys/fs/inotify/\(name)")
        if let namespace = read("/proc/sys/user/\(namespaced)"), global == nil || namespace < global! {
            return (namespace, "user.\(namespaced)")
        }
        return (global, "fs.inotify.\(name)")
    }

    /// The inotify instances and watches held by this user's processes (those whose
    /// descriptors this process may read).
    static func inotifyUsage() -> (instances: Int, watches: Int) {
        var instances = 0
        var watches = 0
        let me = geteuid()
        for pid in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] where Int32(pid) != nil {
            var status = stat()
            guard stat("/proc/\(pid)", &status) == 0, status.st_uid == me else { continue }
            for fd in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd")) ?? [] {
                guard (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\(fd)")) == "anon_inode:inotify" else { continue }
                instances += 1
                let info = (try? String(contentsOfFile: "/proc/\(pid)/fdinfo/\(fd)", encoding: .utf8)) ?? ""
                watches += info.split(separator: "\n").filter { $0.hasPrefix("inotify wd:") }.count
            }
        }
        return (instances, watches)
    }
}
