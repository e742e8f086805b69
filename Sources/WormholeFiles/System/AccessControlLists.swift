#if canImport(Glibc)
import Glibc
#endif
@_spi(Backend) import WormholeCore

/// POSIX access control lists, read and removed through their extended attributes
/// (`system.posix_acl_access`, `system.posix_acl_default`): an entry for a named user or
/// group gives access that the mode does not show, and a shared container's mode is what
/// keeps non-members out.
///
/// The kernel stores no attribute for an ACL that says no more than the mode; any
/// attribute is an ACL with more.
///
/// (`<sys/xattr.h>` is not in Swift's Glibc module: its functions are looked up by name.)
package enum AccessControlLists {
    package static let accessAttribute = "system.posix_acl_access"
    package static let defaultAttribute = "system.posix_acl_default"

    private typealias FileGet = @convention(c) (Int32, UnsafePointer<CChar>, UnsafeMutableRawPointer?, Int) -> Int
    private typealias PathGet = @convention(c) (UnsafePointer<CChar>, UnsafePointer<CChar>, UnsafeMutableRawPointer?, Int) -> Int
    private typealias FileRemove = @convention(c) (Int32, UnsafePointer<CChar>) -> Int32

    /// The C library's function `name`.
    private static func function<Function>(_ name: String, as type: Function.Type) -> Function? {
        guard let process = dlopen(nil, RTLD_NOW), let symbol = dlsym(process, name) else { return nil }
        return unsafeBitCast(symbol, to: type)
    }

    /// The entries of the open file's ACLs beyond its mode, as `getfacl` writes them
    /// (`user:mallory:rw-`, `default:group:staff:rwx`); empty when it has none. The
    /// corresponding C function is `fgetxattr`.
    package static func extendedEntries(_ fd: Int32) -> [String] {
        guard let fgetxattr = function("fgetxattr", as: FileGet.self) else { return [] }
        return [accessAttribute, defaultAttribute].flatMap { attribute in
            describe(read { fgetxattr(fd, attribute, $0, $1) }, isDefault: attribute == defaultAttribute)
        }
    }

    /// The same for `name` in the open directory `directory`, without opening the file
    /// (one another user may not open) and without following a link: through
    /// `/proc/self/fd`, as no `*at` form of `lgetxattr` exists before Linux 6.13.
    package static func extendedEntries(in directory: Int32, name: String) -> [String] {
        guard let lgetxattr = function("lgetxattr", as: PathGet.self) else { return [] }
        let path = "/proc/self/fd/\(directory)/\(name)"
        return [accessAttribute, defaultAttribute].flatMap { attribute in
            describe(read { lgetxattr(path, attribute, $0, $1) }, isDefault: attribute == defaultAttribute)
        }
    }

    /// Removes both ACLs of the open file; whether it had one. The corresponding C
    /// function is `fremovexattr`.
    @discardableResult
    package static func remove(_ fd: Int32) -> Bool {
        guard let fremovexattr = function("fremovexattr", as: FileRemove.self) else { return false }
        var removed = false
        for attribute in [accessAttribute, defaultAttribute] where fremovexattr(fd, attribute) == 0 { removed = true }
        return removed
    }

    /// The attribute's bytes, `nil` when the file has none (or it cannot be read).
    private static func read(_ get: (UnsafeMutableRawPointer?, Int) -> Int) -> [UInt8]? {
        var bytes = [UInt8](repeating: 0, count: 512)
        while true {
            let count = bytes.withUnsafeMutableBytes { get($0.baseAddress, $0.count) }
            if count >= 0 { return Array(bytes.prefix(count)) }
            guard errno == ERANGE, bytes.count < 1 << 20 else { return nil }
            bytes = [UInt8](repeating: 0, count: bytes.count * 4)
        }
    }

    /// The entries of a `posix_acl_xattr` value (a 4-byte version, then 8-byte entries:
    /// tag, permissions, id, little-endian) that go beyond the mode: named users and
    /// groups, and for a default ACL every entry (it sets the modes of new files).
    private static func describe(_ value: [UInt8]?, isDefault: Bool) -> [String] {
        guard let value, value.count >= 4 else { return [] }
        var entries: [String] = []
        var offset = 4
        while offset + 8 <= value.count {
            let tag = UInt16(value[offset]) | UInt16(value[offset + 1]) << 8
            let permissions = UInt16(value[offset + 2]) | UInt16(value[offset + 3]) << 8
            let id = (0..<4).reduce(UInt32(0)) { $0 | UInt32(value[offset + 4 + $1]) << (8 * $1) }
            offset += 8
            let rights = (permissions & 4 != 0 ? "r" : "-") + (permissions & 2 != 0 ? "w" : "-") + (permissions & 1 != 0 ? "x" : "-")
            let entry: String
            switch tag {
            case 0x02: entry = "user:\(getpwuid(id).map { String(cString: $0.pointee.pw_name) } ?? String(id)):\(rights)"
            case 0x08: entry = "group:\(getgrgid(id).map { String(cString: $0.pointee.gr_name) } ?? String(id)):\(rights)"
            case 0x01 where isDefault: entry = "user::\(rights)"
            case 0x04 where isDefault: entry = "group::\(rights)"
            case 0x10 where isDefault: entry = "mask::\(rights)"
            case 0x20 where isDefault: entry = "other::\(rights)"
            default: continue
            }
            entries.append(isDefault ? "default:" + entry : entry)
        }
        // An access ACL holds a named entry whenever it is stored; one without is said so.
        if entries.isEmpty { return [isDefault ? "default ACL" : "ACL"] }
        return entries
    }
}
