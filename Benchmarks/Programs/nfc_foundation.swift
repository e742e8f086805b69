// The clever section's program of a library that imports Foundation (with ICU): starts,
// composes its argument to NFC with `precomposedStringWithCanonicalMapping`, prints its
// length, ends. Benchmarks/run builds it with `swiftc -O -static-stdlib`.
import Foundation

let name = CommandLine.arguments.dropFirst().first ?? "küche.temperatur"
let composed = Data(name.precomposedStringWithCanonicalMapping.utf8)
print(composed.count)
