// The upstream layer's settings (the `upstream.*` keys) and their defaults. ImageCacheConfig sets them from the
// keys (ConfigKeys.swift, whose documented defaults are rendered from this struct's); the layer reads nothing else.

internal import ImageCacheHTTP

/// How upstream transfers are made.
public struct UpstreamSettings: Sendable, Equatable {
    public enum QueueOrder: String, Sendable, Equatable, CaseIterable {
        /// First queued, first started (default).
        case fifo
        /// Last queued, first started: the newest request (the image on screen now) goes first.
        case lifo
    }
    /// `upstream.connect-timeout`: seconds to connect (DNS, TCP, TLS). Default 10.
    public var connectTimeoutSeconds: Double = 10
    /// `upstream.timeout`: seconds for a whole transfer. Default 60.
    public var totalTimeoutSeconds: Double = 60
    /// `upstream.low-speed-limit`: bytes/s under which a transfer counts as stalled. Default 1024.
    public var lowSpeedLimitBytesPerSecond: Int = 1024
    /// `upstream.low-speed-time`: seconds below low-speed-limit before the transfer is aborted. Default 20.
    public var lowSpeedTimeSeconds: Int = 20
    /// `upstream.max-redirects`: redirects followed before failing. Default 5.
    public var maxRedirects: Int = 5
    /// `upstream.max-transfers`: upstream transfers running at once; more wait in a queue. Default 64.
    public var maxConcurrentTransfers: Int = 64
    /// `upstream.max-host-connections`: connections to one host at once. Default 8.
    public var maxHostConnections: Int = 8
    /// `upstream.queue-order`: fifo or lifo order of waiting transfers. Default fifo.
    public var queueOrder: QueueOrder = .fifo
    /// `upstream.queue-timeout`: seconds a transfer may wait for a slot before failing with 504. Default 30.
    public var queueTimeoutSeconds: Double = 30
    /// `upstream.user-agent`: User-Agent sent when the client sent none. Default "imagecached/<version>".
    public var userAgent: String = "imagecached/\(imagecachedVersion)"
    /// `upstream.ca-bundle`: CA bundle file for TLS verification; empty uses the system store. Default empty.
    public var caBundle: String = ""
    public init() {}
}
