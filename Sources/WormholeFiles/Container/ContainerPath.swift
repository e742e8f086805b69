@_spi(Backend) import WormholeCore
/// A container's path, made absolute and normalised once: every later step (opening it
/// through its parent, creating what is missing, messages that name it) works on this
/// one form.
///
/// A relative path is taken from the current directory; `.` components, repeated and
/// trailing slashes are removed (so `/link/.` cannot pass for the directory behind
/// `link`); `..` is refused, since it would make the last component something other than
/// what the path names.
package struct ContainerPath: Sendable, Hashable, CustomStringConvertible {
    /// The absolute, normalised path.
    package let description: String

    package init(_ path: String) throws(WormholeError) {
        let absolute = path.hasPrefix("/") ? path : Syscalls.currentDirectory() + "/" + path
        var components: [Substring] = []
        for component in absolute.split(separator: "/", omittingEmptySubsequences: true) {
            if component == "." { continue }
            if component == ".." {
                throw WormholeError(.containerUnavailable,
                    "container path '\(path)' contains '..'; give the directory's path without it", path: path)
            }
            components.append(component)
        }
        description = "/" + components.joined(separator: "/")
    }

    private init(normalized: String) { description = normalized }

    /// The path with one more component, which must be a single valid name.
    package func appending(_ name: String) -> ContainerPath {
        ContainerPath(normalized: description == "/" ? "/" + name : description + "/" + name)
    }

    package var isRoot: Bool { description == "/" }

    /// The parent directory's path (`/` for a top-level directory).
    package var parent: String {
        let slash = description.lastIndex(of: "/")!
        return slash == description.startIndex ? "/" : String(description[..<slash])
    }

    /// The last component.
    package var name: String {
        String(description[description.index(after: description.lastIndex(of: "/")!)...])
    }

    /// Makes every missing ancestor of the path (not the path itself), mode 0700.
    package func createAncestors() throws(WormholeError) {
        var prefix = ""
        for component in description.split(separator: "/").dropLast() {
            prefix += "/" + component
            switch Syscalls.makeDirectory(prefix) {
            case .success, .failure(.fileExists): continue
            case .failure(let errno): throw ContainerDirectory.unavailable(prefix, errno)
            }
        }
    }
}
