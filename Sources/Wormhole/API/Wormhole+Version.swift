@_spi(Backend) import WormholeCore
@_spi(Backend) import WormholeFiles
extension Wormhole {
    /// The version of this release of Wormhole: the library, the `wormhole` command
    /// (`wormhole --version`) and the Python package (`wormhole.__version__`) carry this
    /// one number.
    ///
    /// It is the product's version, in the form of Semantic Versioning, not the on-disk
    /// protocol's: the protocol has a version of its own (3, in every log header;
    /// Protocol.md §2), which a release may keep or raise. Processes of different
    /// releases share a container as long as they speak the same protocol version.
    ///
    /// ```swift
    /// print("Wormhole \(Wormhole.version)")   // Wormhole 0.3.0
    /// ```
    ///
    /// This constant is where the number is changed; `Python/wormhole/__init__.py` repeats
    /// it (Python cannot read Swift), and a test (`VersionTests`) fails until both say
    /// the same. How a release is made: Architecture.md, "Versions and releasing".
    public static let version = "0.3.0"
}
