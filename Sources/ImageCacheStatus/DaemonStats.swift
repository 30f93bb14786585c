// DaemonStats: the /_imagecached/stats document (also what `imagecached stats` reads and the status page polls), and
// the encoding every stats document shares (StatsJSON). Pure values: ProxyMetrics (ImageCacheCore) fills one from
// its counters and the tiers' own stats structs, on the proxy queue; everything here reads it on any queue.

public import Foundation

/// Upstream traffic to one host.
public struct HostStats: Sendable, Codable, Equatable {
    public var host: String
    public var transfers = 0
    public var bytes = 0

    package init(host: String, transfers: Int = 0, bytes: Int = 0) {
        (self.host, self.transfers, self.bytes) = (host, transfers, bytes)
    }
}

/// A histogram's cumulative buckets, count and sum as read at one moment (ProxyMetrics' `Histogram.snapshot`).
package struct HistogramSnapshot: Sendable, Codable, Equatable {
    /// (upper bound, cumulative count); the last bound is +Inf.
    package var buckets: [Bucket]
    package var count: Int
    package var sum: Double
    package struct Bucket: Sendable, Codable, Equatable {
        package var le: Double
        package var count: Int
        package init(le: Double, count: Int) { (self.le, self.count) = (le, count) }
    }
    package init(buckets: [Bucket], count: Int, sum: Double) { (self.buckets, self.count, self.sum) = (buckets, count, sum) }
    /// No observations.
    package static let empty = HistogramSnapshot(buckets: [], count: 0, sum: 0)
}

/// The /_imagecached/stats document (also what `imagecached stats` reads).
public struct DaemonStats: Sendable, Codable, Equatable {
    public struct Upstream: Sendable, Codable, Equatable {
        /// Transfers ended, by result ("ok" or an error kind).
        public var transfers: [String: Int] = [:]
        /// Body bytes received from origins.
        public var bytes = 0
        package var seconds = HistogramSnapshot.empty
        /// Fetches (upstream or disk) in flight now.
        public var inFlight = 0
        /// Transfers paused for backpressure since start.
        public var paused = 0
        /// Bytes of bodies in flight now (see ProxyMetrics.inFlightBytes).
        public var inFlightBytes = 0
        public var count: Int { seconds.count }
        public var totalSeconds: Double { seconds.sum }
    }
    public struct Coalescing: Sendable, Codable, Equatable {
        package var waitersPerFetch = HistogramSnapshot.empty
        /// Fetches finished and the clients they served.
        public var fetches: Int { waitersPerFetch.count }
        public var waiters: Int { Int(waitersPerFetch.sum.rounded()) }
    }
    public var version = ""
    public var uptimeSeconds = 0.0
    /// When the counters were read, seconds since 1970 (the daemon's wall clock; absent in documents from daemons
    /// before it).
    public var time: Double?
    /// Requests by outcome (hit, disk_hit, stale, miss, coalesced, revalidated, expired, bypass, pass, error, not_image).
    public var requests: [String: Int] = [:]
    /// Body bytes written to clients, by outcome.
    public var servedBytes: [String: Int] = [:]
    public var upstream = Upstream()
    public var coalescing = Coalescing()
    /// The tiers, as they count themselves (MemoryCache.stats, DiskCache.stats); no disk tier: nil.
    public var memory = MemoryCacheStats()
    public var disk: DiskCacheStats?
    /// Errors by kind.
    public var errors: [String: Int] = [:]
    /// Hosts with the most upstream transfers.
    public var topHosts: [HostStats] = []
    public var prefetched = 0
    public var reloads = 0
    public var reloadFailures = 0
    /// CONNECT tunnels (absent in documents from daemons without them).
    public var tunnels: Tunnels?

    /// CONNECT tunnels: open now and the cap, how CONNECTs ended, how tunnels closed, bytes each way.
    public struct Tunnels: Sendable, Codable, Equatable {
        /// Tunnels open now, blind and intercepted (an intercepted CONNECT counts from its 200's decision, its leaf
        /// being minted included).
        public var open = 0
        /// `max-tunnels`.
        public var limit = 0
        /// CONNECTs by result (tunnel, intercept, refused_client, bad_target, refused_port, refused_source,
        /// refused_address, at_cap, dial_failed, mint_failed).
        public var connects: [String: Int] = [:]
        /// Blind tunnels closed, by how (closed, idle, error, shutdown).
        public var ends: [String: Int] = [:]
        /// Bytes from clients to upstreams, and back.
        public var bytesUp = 0
        public var bytesDown = 0
        /// Of `open`, the intercepted (absent in documents from daemons without interception).
        public var intercepted: Int?
        /// Intercepted tunnels closed, by how.
        public var interceptedEnds: [String: Int]?

        public init(open: Int = 0, limit: Int = 0, connects: [String: Int] = [:], ends: [String: Int] = [:],
                    bytesUp: Int = 0, bytesDown: Int = 0, intercepted: Int? = nil, interceptedEnds: [String: Int]? = nil) {
            self.open = open
            self.limit = limit
            self.connects = connects
            self.ends = ends
            self.bytesUp = bytesUp
            self.bytesDown = bytesDown
            self.intercepted = intercepted
            self.interceptedEnds = interceptedEnds
        }
    }

    /// Interception's leaf certificates (absent unless intercept-hosts is set).
    public var leafCertificates: LeafCertificates?

    /// The fleet's shared tier (absent unless fleet.servers names a server).
    public var fleet: Fleet?

    /// The fleet tier: what this host's fetches found there and did with their leases, and each memcached server.
    public struct Fleet: Sendable, Codable, Equatable {
        public struct Server: Sendable, Codable, Equatable {
            public var address = ""
            /// up, down (breaker open: its keys are local-only), probing.
            public var state = "up"
            /// The server's item_size_max (`stats settings`), once read.
            public var itemSizeMax: Int?
            public var operations = 0
            public var failures = 0
            public var timeouts = 0
            public var breakerOpens = 0
            public var bytesRead = 0
            public var bytesWritten = 0
            public init() {}
        }
        public var servers: [Server] = []
        /// Entries found in the tier, verified and served.
        public var hits = 0
        /// Leases won (this host filled for the fleet), and of them after a wait (a takeover: the holder died, hung,
        /// lost its clients or failed).
        public var leaseWins = 0
        public var takeovers = 0
        /// Lookups told to wait for another host's fill.
        public var waits = 0
        /// Pass markers left (a fill that could not be shared) and found.
        public var passMarkers = 0
        public var passMarkersSeen = 0
        public var stored = 0
        public var lostLeases = 0
        public var releases = 0
        /// Lookups the tier could not answer (breaker open, deadline, connection).
        public var unavailable = 0
        /// Values refused (damaged or foreign) and deleted.
        public var damaged = 0
        /// Fleet values refused as older than a purge of their URL (their server missed the purge's delete).
        public var purgedRefused = 0
        /// Fleet values not served because this host had not read the purge logs yet (just started).
        public var catchUpRefused = 0
        /// Leases held now.
        public var leasesHeld = 0
        /// Entry bytes read from the tier.
        public var bytesRead = 0
        public init() {}

        enum CodingKeys: String, CodingKey {
            case servers, hits, leaseWins, takeovers, waits, passMarkers, passMarkersSeen, stored, lostLeases, releases
            case unavailable, damaged, purgedRefused, catchUpRefused, leasesHeld, bytesRead
        }

        /// A count a daemon of another version does not write reads as 0 (`imagecached stats` of a newer binary
        /// against a daemon not yet restarted).
        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            func count(_ key: CodingKeys) throws -> Int { try container.decodeIfPresent(Int.self, forKey: key) ?? 0 }
            servers = try container.decodeIfPresent([Server].self, forKey: .servers) ?? []
            (hits, leaseWins, takeovers, waits) = (try count(.hits), try count(.leaseWins), try count(.takeovers), try count(.waits))
            (passMarkers, passMarkersSeen, stored) = (try count(.passMarkers), try count(.passMarkersSeen), try count(.stored))
            (lostLeases, releases, unavailable, damaged) = (try count(.lostLeases), try count(.releases), try count(.unavailable), try count(.damaged))
            (purgedRefused, catchUpRefused) = (try count(.purgedRefused), try count(.catchUpRefused))
            (leasesHeld, bytesRead) = (try count(.leasesHeld), try count(.bytesRead))
        }
    }

    /// The leaves minted for intercepted hosts (docs/design/issue-29-plan.md, D9): made, cached, being made.
    public struct LeafCertificates: Sendable, Codable, Equatable {
        /// Leaves minted since start.
        public var minted = 0
        /// Leaves cached now, for the local CA in force (at most 1024 hosts).
        public var cached = 0
        /// Mints queued or running now (at most 256).
        public var mintsQueued = 0

        public init(minted: Int = 0, cached: Int = 0, mintsQueued: Int = 0) {
            (self.minted, self.cached, self.mintsQueued) = (minted, cached, mintsQueued)
        }
    }
    /// Image transforms (absent in documents from daemons without them).
    public var transforms: Transforms?
    /// The fetches and transforms in flight now, the most waited-on first (at most `ProxyMetrics.inFlightListLimit`).
    public var inFlightFetches: [InFlightFetch]?
    /// The last errors, newest first (at most `ProxyMetrics.recentErrorLimit`).
    public var recentErrors: [ErrorRecord]?

    /// The local CA (absent unless intercept-hosts is set).
    public var interceptCA: InterceptCA?

    /// The TLS listener (`tls-listen`; absent without one).
    public var tls: TLS?
    /// The TLS servers inside intercepted tunnels (absent when nothing is intercepted); no certificate of its own.
    public var interceptedTLS: TLS?

    /// The TLS listener: its handshakes, failures, open connections and certificate.
    public struct TLS: Sendable, Codable, Equatable {
        public var fullHandshakes = 0
        public var resumedHandshakes = 0
        /// Handshake failures by reason (timeout, not_tls, protocol, sni_mismatch, closed).
        public var failures: [String: Int] = [:]
        public var openConnections = 0
        /// The certificate in force: its subject, SHA-256 fingerprint and notAfter (seconds since 1970).
        public var certificateSubject = ""
        public var certificateFingerprint = ""
        public var certificateNotAfter: Double = 0

        public init(fullHandshakes: Int = 0, resumedHandshakes: Int = 0, failures: [String: Int] = [:], openConnections: Int = 0,
                    certificateSubject: String = "", certificateFingerprint: String = "", certificateNotAfter: Double = 0) {
            self.fullHandshakes = fullHandshakes
            self.resumedHandshakes = resumedHandshakes
            self.failures = failures
            self.openConnections = openConnections
            self.certificateSubject = certificateSubject
            self.certificateFingerprint = certificateFingerprint
            self.certificateNotAfter = certificateNotAfter
        }
    }

    /// The local CA that interception's leaves are signed with: where it is, which it is, what it may sign, and when
    /// it expires.
    public struct InterceptCA: Sendable, Codable, Equatable {
        /// Its certificate's file (what clients trust).
        public var certificatePath: String
        /// SHA-256 of the certificate, "AB:CD:..." as openssl prints it.
        public var fingerprint: String
        /// False when intercept-hosts lists `*`: its key can sign for any site.
        public var constrained: Bool
        /// "constrained to 2 names (...)", or the unconstrained warning.
        public var constraints: String
        /// Its notAfter, seconds since 1970.
        public var notAfter: Double
        /// Seconds from the document's time to notAfter (negative once expired).
        public var expirySeconds: Double

        public init(certificatePath: String, fingerprint: String, constrained: Bool, constraints: String, notAfter: Double,
                    expirySeconds: Double = 0) {
            (self.certificatePath, self.fingerprint, self.constrained) = (certificatePath, fingerprint, constrained)
            (self.constraints, self.notAfter, self.expirySeconds) = (constraints, notAfter, expirySeconds)
        }
    }

    /// One fetch (from the origin, or the disk) or transform in flight.
    public struct InFlightFetch: Sendable, Codable, Equatable {
        /// The URL fetched (a transform: its source URL and canonical options).
        public var url: String
        /// "fetch" or "transform".
        public var kind: String
        /// Clients waiting on it (more than one: coalesced).
        public var waiters: Int
        /// Body bytes received so far (a fetch).
        public var receivedBytes: Int
        /// Seconds since it started.
        public var seconds: Double
        public init(url: String, kind: String, waiters: Int, receivedBytes: Int, seconds: Double) {
            self.url = url
            self.kind = kind
            self.waiters = waiters
            self.receivedBytes = receivedBytes
            self.seconds = seconds
        }
    }

    /// One error, as counted in `errors` and logged.
    public struct ErrorRecord: Sendable, Codable, Equatable {
        /// When, seconds since 1970 (the daemon's wall clock).
        public var time: Double
        /// The kind it is counted under in `errors` ("refused_404", "upstream_timeout", ...).
        public var kind: String
        /// The status answered, when a client was answered with one.
        public var status: Int?
        /// The one-line reason (as in the response body and the log), at most 300 characters.
        public var reason: String
        /// The request target or URL it concerned, at most 300 characters.
        public var target: String

        package init(time: Double, kind: String, status: Int?, reason: String, target: String) {
            (self.time, self.kind, self.status, self.reason, self.target) = (time, kind, status, reason, target)
        }
    }

    public struct Transforms: Sendable, Codable, Equatable {
        /// Transforms ended, by output format ("-" when none was chosen) then result ("ok" or the failure's label).
        public var results: [String: [String: Int]] = [:]
        package var seconds = HistogramSnapshot.empty
        /// Source bytes read and result bytes produced.
        public var bytesIn = 0
        public var bytesOut = 0
        public var workers = 0
        public var running = 0
        public var queued = 0
        /// The decoded levels of JPEG and PNG sources kept for their next variants (`transform-pixel-cache`).
        public var pixelCache: PixelCacheStats?
        public var total: Int { results.values.reduce(0) { $0 + $1.values.reduce(0, +) } }
        /// Mean time on a worker, milliseconds (nil before the first).
        public var meanMilliseconds: Int? { seconds.count == 0 ? nil : Int((seconds.sum / Double(seconds.count) * 1000).rounded()) }

        public init() {}
    }

    public init() {}

    /// The JSON of /_imagecached/stats (+Inf histogram bounds written as "+Inf"), with the status page's text for it
    /// beside the raw values (StatsDocument).
    public func json() -> [UInt8] {
        Array(StatsJSON.encode(StatsDocument(self), [.prettyPrinted])) + [UInt8(ascii: "\n")]
    }

    /// Reads what `json()` wrote.
    public static func decode(_ data: Data) throws -> DaemonStats {
        let decoder = JSONDecoder()
        decoder.nonConformingFloatDecodingStrategy = .convertFromString(positiveInfinity: "+Inf", negativeInfinity: "-Inf", nan: "NaN")
        return try decoder.decode(DaemonStats.self, from: data)
    }

    /// Requests answered from stored bytes (hit, disk_hit, stale, revalidated) over all requests answered.
    public var hitRatio: Double {
        let total = requests.values.reduce(0, +)
        let fromCache = ServedOutcome.allCases.filter(\.fromCache).reduce(0) { $0 + (requests[$1.rawValue] ?? 0) }
        return total == 0 ? 0 : Double(fromCache) / Double(total)
    }

    /// Body bytes served from stored bytes.
    public var bytesServedFromCache: Int {
        ServedOutcome.allCases.filter(\.fromCache).reduce(0) { $0 + (servedBytes[$1.rawValue] ?? 0) }
    }
}

/// What /_imagecached/stats sends: every field of the stats and, beside them, `display`: the status page's text for
/// them (StatusView), which the page's script puts in place as it is. Readers of the raw values ignore it.
package struct StatsDocument: Encodable {
    package var stats: DaemonStats

    package init(_ stats: DaemonStats) { self.stats = stats }

    private enum CodingKeys: String, CodingKey { case display }

    package func encode(to encoder: any Encoder) throws {
        try stats.encode(to: encoder)
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(StatusView(stats), forKey: .display)
    }
}

/// The encoding of every stats document (/stats, /stats/history, the status page's embedded data): keys sorted,
/// numbers that are not finite as "+Inf", "-Inf" and "NaN" (a histogram's last bound), "{}" if encoding fails.
package enum StatsJSON {
    package static func encode<Value: Encodable>(_ value: Value, _ formatting: JSONEncoder.OutputFormatting = []) -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = formatting.union(.sortedKeys)
        encoder.nonConformingFloatEncodingStrategy = .convertToString(positiveInfinity: "+Inf", negativeInfinity: "-Inf", nan: "NaN")
        return (try? encoder.encode(value)) ?? Data("{}".utf8)
    }
}
