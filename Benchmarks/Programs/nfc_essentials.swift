// The clever section's program of a library that imports FoundationEssentials alone:
// starts, composes its argument to NFC with the standard library's normalization
// (`_nfcCodeUnits`, as Identifier.composed does), prints its length, ends.
// Benchmarks/run builds it with `swiftc -O -static-stdlib`, as Scripts/install links.
import FoundationEssentials

let name = CommandLine.arguments.dropFirst().first ?? "küche.temperatur"
let composed = Data(name._nfcCodeUnits)
print(composed.count)
