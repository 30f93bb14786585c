// XXH3-64 (seed 0) of xxHash 0.8 from Debian's libxxhash, for the ring: the only file of this target that imports
// CXXHash (the store has its own, ImageCacheStore/XXH3.swift, for the disk format).

internal import CXXHash

package enum XXH3 {
    package static func hash(_ buffer: UnsafeRawBufferPointer) -> UInt64 {
        // XXH3 accepts a null pointer with a zero length (an empty buffer has no base address).
        XXH3_64bits(buffer.baseAddress, buffer.count)
    }

    package static func hash(_ bytes: [UInt8]) -> UInt64 { bytes.withUnsafeBytes { hash($0) } }
}
