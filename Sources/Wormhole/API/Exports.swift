// `import Wormhole` is all a user writes: the API's types (WormholeCore) and the
// directory back end's public types (WormholeFiles: the container, Darwin-style
// notifications) come with it. A back end of one's own writes
// `@_spi(Backend) import Wormhole` to see the back-end protocol as well.
@_exported import WormholeCore
@_exported import WormholeFiles
@_spi(Backend) @_exported import WormholeCore
@_spi(Backend) @_exported import WormholeFiles
