#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
@_spi(Backend) @testable import Wormhole
@_spi(Backend) @testable import WormholeCore
@_spi(Backend) @testable import WormholeFiles
import WormholeTestSupport

/// The walk `wormhole share` and `--revoke` go through a shared container with: one
/// directory descriptor at a time, back up by `..`, never out of the tree.
@Suite("Directory tree walk")
struct DirectoryTreeWalkTests {
    @Test("a directory moved out of the tree while the walk is in it stops the walk: '..' is not the directory it came from, and nothing beside the moved directory is visited or removed")
    func directoryMovedOutStopsTheWalk() throws {
        let base = TemporaryDirectory()
        let tree = base.file("tree")
        let outside = base.file("outside")
        for path in [tree, tree + "/a", tree + "/a/b", outside] { #expect(mkdir(path, 0o700) == 0) }
        #expect(FileManager.default.createFile(atPath: tree + "/a/b/f", contents: Data()))
        #expect(FileManager.default.createFile(atPath: outside + "/victim", contents: Data()))
        let root = open(tree, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        try #require(root >= 0)
        defer { close(root) }

        var visited: [String] = []
        var left: [String] = []
        let outcome = DirectoryTreeWalk.walk(root) { directory, location, status in
            visited.append(location.relativePath)
            if location.name == "f" {
                // A member's process moves the directory the walk is in elsewhere.
                #expect(rename(tree + "/a/b", outside + "/b") == 0)
            }
            if status.st_mode & S_IFMT == S_IFDIR { return true }
            return false
        } leaving: { directory, name in
            left.append(name)
            _ = unlinkat(directory, name, AT_REMOVEDIR)
        }
        #expect(outcome == .moved)
        #expect(visited == ["a", "a/b", "a/b/f"], "\(visited)")
        #expect(left.isEmpty, "nothing was removed after the move: \(left)")
        #expect(FileManager.default.fileExists(atPath: outside + "/victim") && FileManager.default.fileExists(atPath: outside + "/b/f"))
    }

    @Test("a tree 5,000 directories deep is walked to its bottom and removed from the bottom up, with one descriptor open at a time")
    func deepTreeIsWalkedAndRemoved() throws {
        let base = TemporaryDirectory()
        let tree = base.file("tree")
        #expect(mkdir(tree, 0o700) == 0)
        var fd = open(tree, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        // The tree's directories, by inode: the descriptors counted are those open on
        // them, not the process's (the tests running beside this one open theirs).
        var inodes: Set<UInt64> = []
        func note(_ fd: Int32) {
            var status = stat()
            if fstat(fd, &status) == 0 { inodes.insert(UInt64(status.st_ino)) }
        }
        note(fd)
        for _ in 0..<5_000 {
            try #require(mkdirat(fd, "d", 0o700) == 0)
            let child = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            close(fd)
            fd = child
            note(fd)
        }
        close(fd)
        var treeDevice = stat()
        try #require(stat(tree, &treeDevice) == 0)
        let device = treeDevice.st_dev
        func openOnTheTree() -> Int {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
            return names.compactMap { Int32($0) }.filter { number in
                var status = stat()
                return fstat(number, &status) == 0 && status.st_dev == device && inodes.contains(UInt64(status.st_ino))
            }.count
        }
        let root = open(tree, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        defer { close(root) }
        let before = openOnTheTree()
        var deepest = 0
        var mostOpen = 0
        var removed = 0
        let outcome = DirectoryTreeWalk.walk(root) { _, location, _ in
            deepest = max(deepest, location.ancestry.count + 1)
            if deepest % 1_000 == 0 { mostOpen = max(mostOpen, openOnTheTree()) }
            return true
        } leaving: { directory, name in
            if unlinkat(directory, name, AT_REMOVEDIR) == 0 { removed += 1 }
        }
        #expect(outcome == .finished)
        #expect(deepest == 5_000 && removed == 5_000)
        #expect(before == 1 && mostOpen >= 2 && mostOpen <= before + 3, "descriptors open on the tree during the walk: \(mostOpen), before it: \(before)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: tree).isEmpty)
    }
}
