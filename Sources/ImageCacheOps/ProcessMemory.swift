// ProcessMemory: how the process's allocator returns memory (one call, made once at start by the executable).

#if os(Linux)
internal import CEpoll
#endif

public enum ProcessMemory {
    /// Blocks of this size and more get their own mapping, returned to the system when freed.
    public static let mmapThresholdBytes = 256 << 10

    /// Fixes glibc's mmap threshold at `mmapThresholdBytes`. Left alone, the threshold grows with the largest block
    /// freed (up to 32 MiB); multi-MiB bodies then come from the heap, and after a burst of them (many large images
    /// in flight at once) resident memory stays near the burst's peak. Returns false when the allocator refused.
    @discardableResult
    public static func returnLargeBlocksToSystem() -> Bool {
        #if os(Linux)
        icd_set_mmap_threshold(Int32(mmapThresholdBytes)) == 1
        #else
        true
        #endif
    }
}
