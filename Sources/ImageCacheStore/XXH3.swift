// XXH3: the 64-bit XXH3 hash (seed 0) of xxHash 0.8, from Debian's libxxhash, behind the few typed calls the disk
// format needs: a one-shot hash of bytes in memory and an incremental one for a body read through a buffer. The only
// file that imports CXXHash.

internal import CXXHash

enum XXH3 {
    static func hash(_ buffer: UnsafeRawBufferPointer) -> UInt64 {
        // XXH3 accepts a null pointer with a zero length (an empty buffer has no base address).
        XXH3_64bits(buffer.baseAddress, buffer.count)
    }

    static func hash(_ bytes: [UInt8]) -> UInt64 { bytes.withUnsafeBytes { hash($0) } }

    static func hash(_ bytes: ArraySlice<UInt8>) -> UInt64 { bytes.withUnsafeBytes { hash($0) } }

    /// An incremental hash: `update` with the bytes in order, then `finalize`; equal to `hash` of them all. Owns its
    /// library state (about 600 bytes, freed with it); one owner at a time.
    final class Hasher {
        private let state: OpaquePointer

        init() {
            guard let state = XXH3_createState() else { fatalError("XXH3_createState: out of memory") }
            self.state = state
            _ = XXH3_64bits_reset(state)
        }

        deinit { _ = XXH3_freeState(state) }

        func update(_ buffer: UnsafeRawBufferPointer) {
            _ = XXH3_64bits_update(state, buffer.baseAddress, buffer.count)
        }

        func finalize() -> UInt64 { XXH3_64bits_digest(state) }
    }
}
