// The server layer's settings (the `server.*` keys) and their defaults. ImageCacheConfig sets them from the keys
// (ConfigKeys.swift, whose documented defaults are rendered from this struct's); the layer reads nothing else.

/// Limits of the HTTP server.
public struct ServerSettings: Sendable, Equatable {
    /// `server.max-request-line`: longest request line, bytes; longer gets 414. Default 8192.
    public var maxRequestLineBytes: Int = 8192
    /// `server.max-header-bytes`: largest header section, bytes; larger gets 431. Default 16384.
    public var maxHeaderBytes: Int = 16_384
    /// `server.max-header-count`: most header fields; more gets 431. Default 100.
    public var maxHeaderCount: Int = 100
    /// `server.max-request-body`: largest request body read (admin endpoints take lists); larger gets 413. Default 1 MiB.
    public var maxRequestBodyBytes: Int = 1 << 20
    /// `server.header-timeout`: seconds to receive a whole request head once it has started. Default 10.
    public var headerTimeoutSeconds: Double = 10
    /// `server.body-timeout`: seconds to receive a whole request body once its head is in (a body trickled a byte at
    /// a time is cut off); 408 beyond. Default 30.
    public var bodyTimeoutSeconds: Double = 30
    /// `server.idle-timeout`: seconds a keep-alive connection may sit idle between requests. Default 60.
    public var idleTimeoutSeconds: Double = 60
    /// `server.write-timeout`: seconds a client may take to accept written bytes before it is dropped. Default 60.
    public var writeTimeoutSeconds: Double = 60
    /// `server.write-buffer`: bytes of a streamed response handed to a client and not yet taken by it, past which the
    /// client is "behind" (see `in-flight-limit`); also the most of a fetch's body between libcurl and the fetch (the
    /// transfer's delivery window). Default 256 KiB.
    public var writeBufferBytes: Int = 256 << 10
    /// `server.max-connections`: connections served at once; more are accepted and closed at once. Default 10000.
    public var maxConnections: Int = 10_000
    /// Where the event loops run (one loop per CPU the process may use, which taskset, systemd's CPUAffinity= and
    /// cpusets narrow).
    public enum CPUAffinity: String, Sendable, Equatable, CaseIterable {
        /// Loop i is pinned to the i-th allowed CPU (nginx's `worker_cpu_affinity auto`). Default.
        case auto
        /// The kernel places and moves the loops.
        case off
    }
    /// `server.cpu-affinity`: auto or off. Default auto.
    public var cpuAffinity: CPUAffinity = .auto
    public init() {}
}
