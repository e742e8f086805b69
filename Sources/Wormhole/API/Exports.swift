// `import Wormhole` is all a user writes: the API's types (WormholeCore) and the
// directory back end's public types (WormholeFiles: the container, Darwin-style
// notifications) come with it.
@_exported import WormholeCore
@_exported import WormholeFiles
