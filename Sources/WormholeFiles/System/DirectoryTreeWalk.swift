#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
@_spi(Backend) import WormholeCore

/// A depth-first walk of a directory tree that holds one directory descriptor at a time
/// and never builds a path: no depth and no path length stops it (a member of a shared
/// group can nest 30,000 directories, far past `PATH_MAX` and the descriptor limit).
///
/// It goes down with `openat(O_NOFOLLOW)` and back up with `openat("..")`, and checks
/// that the directory it comes back to is the one it came from (device and inode): a
/// directory moved away while the walk was in it (a member's `rename` to elsewhere on the
/// filesystem) would otherwise lead it out of the tree. It then stops and says so, having
/// acted on nothing outside the tree.
package enum DirectoryTreeWalk {
    /// How a walk ended.
    package enum Outcome: Equatable {
        /// Every entry was visited.
        case finished
        /// A directory was moved while the walk was in it: the walk stopped there.
        case moved
        /// The walk could not go on (the error of `openat` or `fstat`).
        case failed(Errno)
    }

    /// Where an entry is: the names of the directories from the walk's root down to the
    /// one that holds it.
    package struct Location {
        package let ancestry: [String]
        package let name: String

        /// The entry's path relative to the walk's root (built only when asked for: a
        /// deep tree's paths are long).
        package var relativePath: String { (ancestry + [name]).joined(separator: "/") }
    }

    /// Walks the tree below the open directory `root` (which stays open and is not
    /// visited itself).
    ///
    /// - Parameters:
    ///   - root: A directory descriptor.
    ///   - entry: Called for each entry of each directory with the descriptor of the
    ///     directory that holds it, where it is, and its status (`fstatat` with
    ///     `AT_SYMLINK_NOFOLLOW`). Returns whether to go into it (for a directory).
    ///   - leaving: Called once a directory's entries were all visited, with the
    ///     descriptor of the directory that holds it and its name (to remove it).
    package static func walk(_ root: Int32,
                     entry: (_ directory: Int32, _ location: Location, _ status: stat) -> Bool,
                     leaving: (_ parent: Int32, _ name: String) -> Void = { _, _ in }) -> Outcome {
        /// A directory above the current one: who it is, and what is left of its entries.
        struct Frame {
            package let device: UInt
            package let inode: UInt
            package var remaining: [String]
        }
        var current = fcntl(root, F_DUPFD_CLOEXEC, 0)
        guard current >= 0 else { return .failed(Errno(rawValue: errno)) }
        defer { close(current) }
        var currentStatus = stat()
        guard fstat(current, &currentStatus) == 0 else { return .failed(Errno(rawValue: errno)) }
        var remaining = names(in: current)
        var ancestors: [Frame] = []
        var ancestry: [String] = []
        while true {
            if let name = remaining.popLast() {
                var status = stat()
                guard fstatat(current, name, &status, AT_SYMLINK_NOFOLLOW) == 0 else { continue }
                guard entry(current, Location(ancestry: ancestry, name: name), status),
                      status.st_mode & S_IFMT == S_IFDIR else { continue }
                let child = openat(current, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                guard child >= 0 else { continue }
                var childStatus = stat()
                guard fstat(child, &childStatus) == 0,
                      childStatus.st_dev == status.st_dev, childStatus.st_ino == status.st_ino else {
                    close(child)        // replaced since its fstatat: not the entry visited
                    continue
                }
                ancestors.append(Frame(device: UInt(currentStatus.st_dev), inode: UInt(currentStatus.st_ino), remaining: remaining))
                ancestry.append(name)
                close(current)
                current = child
                currentStatus = childStatus
                remaining = names(in: child)
            } else {
                guard let frame = ancestors.popLast(), let name = ancestry.popLast() else { return .finished }
                let parent = openat(current, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
                guard parent >= 0 else { return .failed(Errno(rawValue: errno)) }
                var parentStatus = stat()
                guard fstat(parent, &parentStatus) == 0,
                      UInt(parentStatus.st_dev) == frame.device, UInt(parentStatus.st_ino) == frame.inode else {
                    close(parent)
                    return .moved
                }
                close(current)
                current = parent
                currentStatus = parentStatus
                remaining = frame.remaining
                leaving(current, name)
            }
        }
    }

    /// The names in the open directory `fd` (none when it cannot be read).
    private static func names(in fd: Int32) -> [String] {
        guard case .success(let names) = Syscalls.directoryEntries(at: FileDescriptor(rawValue: fd), name: ".") else { return [] }
        return names
    }
}
