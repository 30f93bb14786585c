// A request body sent upstream as it arrives (a client's upload passed through to a configured origin).
//
// The producer (the proxy, from the client's connection) `append`s chunks, then `finish`es or `fail`s; libcurl's read
// callback takes bytes out on the curl thread (`read`). When nothing is there yet the transfer pauses its upload and
// is resumed (`resume`, set by the origin) when bytes or the end arrive. `taken` reports every byte libcurl took, so
// the producer gives that room back to its client (backpressure end to end: a slow origin holds the uploader back).
// Ownership: the queue and flags are shared between the producer's thread and the curl thread, guarded by one Mutex;
// callbacks run outside it.

internal import ImageCacheSystem

public final class StreamedBody: Sendable, Equatable {
    /// What the read callback gets.
    enum Read: Equatable {
        case bytes(Int)
        /// Nothing yet: pause; `resume` runs when there is.
        case wait
        case end
        case failed
    }

    private struct State {
        var chunks: [ArraySlice<UInt8>] = []
        var finished = false
        var failed = false
        /// The read callback paused for want of bytes.
        var waiting = false
        var resume: (@Sendable () -> Void)?
    }

    /// The body's length when known (sent as Content-Length; else the upload is chunked).
    public let length: Int?
    private let state = Locked(State())
    private let taken: @Sendable (Int) -> Void

    /// `taken`: called on the curl thread with the count of bytes libcurl took.
    public init(length: Int?, taken: @escaping @Sendable (Int) -> Void) {
        self.length = length
        self.taken = taken
    }

    public static func == (a: StreamedBody, b: StreamedBody) -> Bool { a === b }

    // MARK: producer (any thread)

    public func append(_ chunk: [UInt8]) {
        guard !chunk.isEmpty else { return }
        update { $0.chunks.append(chunk[...]) }
    }

    public func finish() { update { $0.finished = true } }

    /// The body will not be complete: the upload (and its transfer) fails.
    public func fail() {
        update { state in
            state.failed = true
            state.chunks = []
        }
    }

    private func update(_ change: (inout State) -> Void) {
        let resume = state.withLock { state -> (@Sendable () -> Void)? in
            change(&state)
            guard state.waiting else { return nil }
            state.waiting = false
            return state.resume
        }
        resume?()
    }

    // MARK: the origin (curl thread)

    /// Set once before the transfer starts: how to resume a paused upload.
    func setResume(_ resume: @escaping @Sendable () -> Void) {
        state.withLock { $0.resume = resume }
    }

    /// Copies what is there (up to the buffer's size) into `buffer`.
    func read(into buffer: UnsafeMutableRawBufferPointer) -> Read {
        let read = state.withLock { state -> Read in
            if state.failed { return .failed }
            var copied = 0
            while copied < buffer.count, !state.chunks.isEmpty {
                let chunk = state.chunks[0]
                let count = min(chunk.count, buffer.count - copied)
                chunk.prefix(count).withUnsafeBytes { source in
                    UnsafeMutableRawBufferPointer(rebasing: buffer[copied..<copied + count]).copyMemory(from: source)
                }
                copied += count
                if count == chunk.count {
                    state.chunks.removeFirst()
                } else {
                    state.chunks[0] = chunk.dropFirst(count)
                }
            }
            if copied > 0 { return .bytes(copied) }
            if state.finished { return .end }
            state.waiting = true
            return .wait
        }
        if case let .bytes(count) = read { taken(count) }
        return read
    }
}
