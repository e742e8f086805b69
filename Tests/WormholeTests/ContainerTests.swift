import Foundation
import Synchronization
import Testing
@_spi(Backend) @testable import Wormhole
@_spi(Backend) @testable import WormholeCore
@_spi(Backend) @testable import WormholeFiles
import WormholeTestSupport

/// Finding and securing the container directory.
@Suite("Container")
struct ContainerTests {
    @Test func environmentOverrideWinsOverXDGRuntimeDirectory() throws {
        let base = TemporaryDirectory()
        let runtime = TemporaryDirectory()
        let path = try WormholeContainer.directory(
            forApplicationGroupIdentifier: "group.example",
            environment: [WormholeContainer.environmentOverride: base.file("groups"), "XDG_RUNTIME_DIR": runtime.path])
        #expect(path == base.file("groups") + "/group.example")
        var status = stat()
        #expect(lstat(path, &status) == 0 && status.st_mode & 0o777 == 0o700)
    }

    @Test("XDG_RUNTIME_DIR, HOME and the rest of the environment do not move a group's container: every process of the user resolves it alike")
    func environmentDoesNotSplitAGroup() throws {
        let runtime = TemporaryDirectory()
        let group = "group.example.split-\(getpid())"
        let plain = try WormholeContainer.resolve(applicationGroupIdentifier: group, environment: [:])
        let other = try WormholeContainer.resolve(applicationGroupIdentifier: group,
                                                  environment: ["XDG_RUNTIME_DIR": runtime.path, "HOME": runtime.path])
        #expect(plain == other)
        #expect(plain.path.hasSuffix("app-groups-\(geteuid())/\(group)") || plain.path == "/run/user/\(geteuid())/app-groups/\(group)")
        let made = try WormholeContainer.directory(forApplicationGroupIdentifier: group, environment: ["XDG_RUNTIME_DIR": runtime.path])
        defer { rmdir(made) }
        #expect(made == plain.path)
        #expect(!FileManager.default.fileExists(atPath: runtime.path + "/app-groups"))
        #expect(try WormholeContainer.resolve(applicationGroupIdentifier: group, environment: [:]).exists)
    }

    @Test("Resolving a group creates nothing; a wormhole that only reads gets 'no container' and leaves none behind")
    func readingDoesNotCreateAContainer() throws {
        let base = TemporaryDirectory()
        let environment = [WormholeContainer.environmentOverride: base.file("groups")]
        let resolution = try WormholeContainer.resolve(applicationGroupIdentifier: "group.com.exmaple.thermo", environment: environment)
        #expect(!resolution.exists && resolution.source == .environmentOverride)
        let error = #expect(throws: WormholeError.self) { try Wormhole(directory: resolution.path, createIfMissing: false) }
        #expect(error?.code == .containerUnavailable && error?.errno == .noSuchFileOrDirectory)
        #expect(!FileManager.default.fileExists(atPath: resolution.path))
        _ = try WormholeContainer.directory(forApplicationGroupIdentifier: "group.com.example.thermo", environment: environment)
        #expect(WormholeContainer.similarGroups(to: "group.com.exmaple.thermo", environment: environment) == ["group.com.example.thermo"])
        #expect(WormholeContainer.similarGroups(to: "group.org.unrelated", environment: environment).isEmpty)
    }

    @Test("A container path is normalised once: relative from the current directory, no '.', no repeated or trailing slash; '..' refused")
    func containerPathIsNormalisedOnce() throws {
        #expect(try ContainerPath("/a/./b//c/").description == "/a/b/c")
        #expect(try ContainerPath("rel/x").description == FileManager.default.currentDirectoryPath + "/rel/x")
        #expect(try ContainerPath("/a/b").parent == "/a" && ContainerPath("/a/b").name == "b" && ContainerPath("/a").parent == "/")
        let error = #expect(throws: WormholeError.self) { try ContainerPath("/a/../b") }
        #expect(error?.description.contains("'..'") == true)
    }

    @Test func fallbackIsAPrivatePerUserDirectory() throws {
        let path = try WormholeContainer.groupsDirectory(environment: [:])
        #expect(path.hasSuffix("/app-groups-\(geteuid())") || path == "/run/user/\(geteuid())/app-groups")
        var status = stat()
        #expect(lstat(path, &status) == 0)
        #expect(status.st_uid == geteuid() && status.st_mode & 0o077 == 0)
    }

    @Test func symbolicLinkInPlaceOfTheContainerIsRefused() throws {
        let parent = TemporaryDirectory()
        let target = parent.file("real")
        try FileManager.default.createDirectory(atPath: target, withIntermediateDirectories: false)
        try FileManager.default.createSymbolicLink(atPath: parent.file("link"), withDestinationPath: target)
        let error = #expect(throws: WormholeError.self) { try Wormhole(directory: parent.file("link")) }
        #expect(error?.code == .containerInsecure)
        #expect(error?.description.contains("symbolic link") == true)
    }

    @Test func worldOrGroupWritableContainerIsRefused() throws {
        for mode: mode_t in [0o777, 0o770, 0o702] {
            let parent = TemporaryDirectory()
            let path = parent.file("open")
            mkdir(path, 0o700)
            chmod(path, mode)
            let error = #expect(throws: WormholeError.self) { try Wormhole(directory: path) }
            #expect(error?.code == .containerInsecure)
            #expect(error?.description.contains("chmod go-w") == true)
        }
    }

    @Test(.enabled(if: geteuid() == 0, "needs root to give a directory to another user"))
    func containerOwnedByAnotherUserIsRefused() throws {
        let parent = TemporaryDirectory()
        let path = parent.file("foreign")
        mkdir(path, 0o700)
        chown(path, 65534, 65534)
        let error = #expect(throws: WormholeError.self) { try Wormhole(directory: path) }
        #expect(error?.code == .containerInsecure)
        #expect(error?.description.contains("belongs to user 65534") == true)
    }

    @Test func fileInPlaceOfTheContainerIsRefused() throws {
        let parent = TemporaryDirectory()
        _ = FileManager.default.createFile(atPath: parent.file("file"), contents: Data("x".utf8))
        let error = #expect(throws: WormholeError.self) { try Wormhole(directory: parent.file("file")) }
        #expect(error?.code == .containerInsecure)
        #expect(error?.description.contains("not a directory") == true)
    }

    @Test func symbolicLinkInPlaceOfAMessageFileIsNotFollowed() throws {
        let parent = TemporaryDirectory()
        let wormhole = try Wormhole(directory: parent.file("c"))
        _ = FileManager.default.createFile(atPath: parent.file("outside"), contents: Data("keep".utf8))
        try FileManager.default.createSymbolicLink(atPath: parent.file("c/evil.wormhole"), withDestinationPath: parent.file("outside"))
        let error = #expect(throws: WormholeError.self) { try wormhole.passMessage("x", identifier: "evil") }
        #expect(error?.code == .containerInsecure)
        #expect(try String(contentsOfFile: parent.file("outside"), encoding: .utf8) == "keep")
    }

    /// In a process of its own, whose environment names the groups' directory: the test
    /// process's environment is shared by every test running beside this one.
    @Test func applicationGroupAndOptionalDirectoryMakeTheWormholeDirectory() throws {
        let base = TemporaryDirectory()
        let result = try Agent.run(["group", "group.com.example.notes", "wormhole"],
                                   environment: [WormholeContainer.environmentOverride: base.path])
        #expect(result.status == 0)
        #expect(result.output == base.path + "/group.com.example.notes/wormhole\n")
        #expect(FileManager.default.fileExists(atPath: base.file("group.com.example.notes/wormhole")))
    }

    @Test("the container deleted while listening: the next pass recreates it and listeners receive it",
          .timeLimit(.minutes(1)), arguments: ContainerParent.allCases)
    func deletedContainerIsRecreatedWhileListening(in kind: ContainerParent) async throws {
        let parent = TemporaryDirectory()
        let path = kind.directory(in: parent) + "/container"
        let wormhole = try Wormhole(directory: path)
        let received = Collector<String>()
        let token = try wormhole.listenForMessage(withIdentifier: "n", as: String.self) { received.append($0) }
        try await wormhole.passMessage("before", identifier: "n")
        await received.wait(for: 1)
        try FileManager.default.removeItem(atPath: path)
        await settle(100)
        // Another process's wormhole would do the same: the pass recreates the directory,
        // and the listener watches the new one as soon as it appears.
        try await wormhole.passMessage("after", identifier: "n")
        await received.wait(for: 2)
        #expect(received.all == ["before", "after"])
        try FileManager.default.removeItem(atPath: path)
        await settle(100)
        try await Wormhole(directory: path).passMessage("again", identifier: "n")
        await received.wait(for: 3)
        token.cancel()
        #expect(received.all == ["before", "after", "again"])
        var status = stat()
        #expect(lstat(path, &status) == 0 && status.st_mode & 0o777 == 0o700)
    }

    @Test("a directory made again at the path is opened once however many threads notice it together: one generation, so a claim is made again once")
    func aReplacedContainerIsOpenedOnceByConcurrentRefreshes() throws {
        let parent = TemporaryDirectory()
        let path = parent.file("container")
        let container = try ContainerDirectory(path: path)
        for round in 1...20 {
            let before = container.current.generation
            #expect(rename(path, parent.file("old-\(round)")) == 0 && mkdir(path, 0o700) == 0)
            // Threads of their own (a pool of two would never fill the barrier), released together.
            let ready = Atomic<Int>(0)
            let done = DispatchGroup()
            let threads = 6
            for _ in 0..<threads {
                done.enter()
                Thread.detachNewThread {
                    ready.add(1, ordering: .relaxed)
                    while ready.load(ordering: .relaxed) < threads { sched_yield() }
                    _ = try? container.refresh(create: false)
                    done.leave()
                }
            }
            done.wait()
            #expect(container.current.generation == before + 1, "round \(round): one new directory, one new generation")
            var status = stat()
            #expect(lstat(path, &status) == 0)
            #expect(try Syscalls.status(container.current.descriptor).get().inode.rawValue == status.st_ino)
        }
    }

    @Test("a container deleted under a listener alone stays deleted: listeners never recreate it",
          .timeLimit(.minutes(1)))
    func listenersDoNotRecreateADeletedContainer() async throws {
        let parent = TemporaryDirectory()
        let path = parent.file("container")
        let wormhole = try Wormhole(directory: path)
        let token = try wormhole.listenForMessage(withIdentifier: "n", as: String.self) { _ in }
        try FileManager.default.removeItem(atPath: path)
        await settle(300)
        #expect(!FileManager.default.fileExists(atPath: path))
        token.cancel()
    }

    @Test("the container deleted under a notification center: its next post recreates it and observers hear it",
          .timeLimit(.minutes(1)), arguments: ContainerParent.allCases)
    func deletedContainerIsRecreatedByAPost(in kind: ContainerParent) async throws {
        let parent = TemporaryDirectory()
        let path = kind.directory(in: parent) + "/container"
        let center = try DarwinNotificationCenter(directory: path)
        let heard = Collector<String>()
        let observation = try center.addObserver(forName: "refresh") { heard.append($0) }
        try center.post("refresh")
        #expect(await heard.wait(for: 1) == ["refresh"])
        try FileManager.default.removeItem(atPath: path)
        await settle(200)
        // Observers also hear "look again" when the directory goes and comes back.
        let before = heard.count
        try center.post("refresh")
        #expect(await heard.wait(for: before + 1).count > before)
        var status = stat()
        #expect(lstat(path + "/refresh.notification", &status) == 0)
        observation.cancel()
    }

    @Test("an idle listener in a container under a shared directory (as /tmp) is not woken when other files there come and go",
          .timeLimit(.minutes(1)))
    func idleListenerUnderASharedDirectoryIgnoresOtherFiles() async throws {
        let top = TemporaryDirectory()
        let shared = ContainerParent.shared.directory(in: top)
        let path = shared + "/container"
        let output = top.file("listener.txt")
        let listener = try Agent.start(["listen", path, "x", "1", output])
        #expect(await waitForFile(output + ".ready"))
        await settle(300)
        /// Every context switch of the listener's threads so far: each wake-up of its
        /// reader thread is one.
        func switches() -> Int {
            let tasks = "/proc/\(listener.processIdentifier)/task"
            return ((try? FileManager.default.contentsOfDirectory(atPath: tasks)) ?? []).reduce(0) { total, task in
                let status = (try? String(contentsOfFile: "\(tasks)/\(task)/status", encoding: .utf8)) ?? ""
                return total + status.split(separator: "\n").filter { $0.hasPrefix("voluntary_ctxt_switches") || $0.hasPrefix("nonvoluntary_ctxt_switches") }
                    .compactMap { Int($0.split(separator: ":").last?.trimmingCharacters(in: .whitespaces) ?? "") }.reduce(0, +)
            }
        }
        let before = switches()
        let files = 5_000
        for index in 0..<files {
            let file = shared + "/other-\(index)"
            let fd = open(file, O_CREAT | O_WRONLY | O_CLOEXEC, 0o600)
            close(fd)
            unlink(file)
        }
        await settle(300)
        let woken = switches() - before
        // Measured: 6 to 41 (the latter with the whole suite running); before the parent
        // was watched only when needed, 1,971 for these 5,000 files, 11,000 for 10,000.
        #expect(woken < 250, "the listener switched \(woken) times while \(files) other files were created and deleted")
        try await Wormhole(directory: path).passMessage("end", identifier: "x")
        #expect(await waitForExit(listener) == 0)
        #expect(try listenerLines(output).map(\.payload) == ["end"], "the listener still hears its own container")
        print("shared parent: \(files) other files created and deleted; the idle listener switched \(woken) times")
    }
}
