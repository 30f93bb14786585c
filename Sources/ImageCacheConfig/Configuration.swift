// The daemon's configuration: one Sendable value, built once at start from defaults, the configuration
// file, environment variables and flags (flags win), validated in Configuration+File.swift.
// Every field has a `///` line and its default; the keys that set them (name, form, default, meaning, reload or
// restart, file/environment/flag) are defined once in ConfigKeys.swift.
//
// Each layer owns its settings and their defaults (the Hummingbird way): `server` is the server's `ServerSettings`,
// `upstream` the upstream layer's `UpstreamSettings`, `transform` the transform layer's `TransformSettings`; the
// fields the store reads take their defaults from the store (`DiskCache.Configuration`, `FreshnessPolicy`,
// `MemoryCache.defaultVariantLimit`), and `max-object-size` from the upstream layer's `UpstreamRequest`. The rest
// belong to the proxy and the daemon and have their defaults here. Each default is written once: ConfigKeys renders
// the documented defaults from these values.

internal import Foundation
public import ImageCacheHTTP
public import ImageCacheServer
internal import ImageCacheStore
public import ImageCacheTransform
public import ImageCacheUpstream
public import ImageCacheFleet

public struct Configuration: Sendable, Equatable {
    /// `listen`: address and port to serve on, "HOST:PORT" or "[V6]:PORT". Port 0 picks a free port. Default 127.0.0.1:8080.
    public var listen: ListenAddress = ListenAddress(host: "127.0.0.1", port: 8080)
    /// `tls-listen`: also serve HTTPS (reverse, fetch and forward modes) on this address; nil: no TLS listener.
    /// Needs `tls-cert` and `tls-key`. Restart only.
    public var tlsListen: ListenAddress?
    /// `tls-cert`: the TLS listener's certificate chain (PEM, the leaf first); read again on SIGHUP.
    public var tlsCertificateFile: String = ""
    /// `tls-key`: the TLS listener's private key (PEM); read again on SIGHUP.
    public var tlsKeyFile: String = ""
    /// `origin` / `origins`: reverse-proxy mappings from a path prefix to an origin base URL. Default none.
    public var origins: [OriginMapping] = []
    /// `cache-dir`: directory of the on-disk tier. Default `$CACHE_DIRECTORY` (systemd), else `$XDG_CACHE_HOME/imagecached`, else `~/.cache/imagecached`.
    public var cacheDirectory: String = Configuration.defaultCacheDirectory()
    /// `disk-limit`: byte budget of the on-disk tier (files, headers included); 0 turns the disk tier off. Default the disk tier's, 10 GiB.
    public var diskLimitBytes: Int = Configuration.diskDefaults.limitBytes
    /// `disk-max-age`: disk entries not used for this long are removed, fresh or not, seconds. Default the disk tier's, 7 days.
    public var diskMaxAgeSeconds: Double = Configuration.diskDefaults.maxAgeSeconds
    /// `disk-low-water`: over disk-limit, least recently used entries are evicted down to this fraction of it. Default the disk tier's, 0.9.
    public var diskLowWaterFraction: Double = Configuration.diskDefaults.lowWaterFraction
    /// `disk-fsync`: fsync each disk entry (and its directory) when it is written; slower, survives power loss. Default the disk tier's, false.
    public var diskFsync: Bool = Configuration.diskDefaults.fsync
    /// `memory-limit`: byte budget of the memory tier. Default 256 MiB; under a cgroup memory limit (systemd
    /// `MemoryMax=`), `cgroupMemoryFraction` of that limit instead (see `applyCgroupMemoryLimit`).
    public var memoryLimitBytes: Int = 256 << 20
    /// Whether `memory-limit` was given by a source (file, environment, flag) rather than left to its default.
    public var memoryLimitIsExplicit: Bool = false
    /// `memory-count-limit`: most entries in the memory tier; 0 means no count limit. Default 0.
    public var memoryCountLimit: Int = 0
    /// `max-variants`: most stored variants of one URL (responses with Vary, one per set of request field values),
    /// in memory and on disk each; storing one more evicts the URL's least recently used variant. At least 1.
    /// Default the memory tier's (`MemoryCache.defaultVariantLimit`), 16. Restart only.
    public var maxVariants: Int = MemoryCache.defaultVariantLimit
    /// `memory-object-limit`: larger objects are streamed but not kept in memory. Default: 1/8 of memory-limit.
    public var memoryObjectLimitBytes: Int? = nil
    /// `stale-if-error`: offline policy: how long past its freshness a stored entry may still be served when the
    /// origin cannot be reached or answers 5xx (RFC 5861 stale-if-error for every response); 0 = only when the
    /// response or request says stale-if-error. Default 0.
    public var staleIfErrorSeconds: Double = 0
    /// `stale-while-revalidate`: how long past its freshness a stored entry whose response names no
    /// stale-while-revalidate is served at once while one background request revalidates it (RFC 5861 section 3 for
    /// every response, like Varnish's default grace); never for must-revalidate, proxy-revalidate or s-maxage
    /// entries, nor for requests with max-age, min-fresh or max-stale. 0 = only where the response says so. Default 0.
    public var staleWhileRevalidateSeconds: Double = 0
    /// `max-object-size`: largest upstream body served or stored; larger transfers are stopped. Default the upstream layer's
    /// (`UpstreamRequest.defaultMaxBodyBytes`), 50 MiB.
    public var maxObjectSizeBytes: Int = UpstreamRequest.defaultMaxBodyBytes
    /// `content-types`: media types served and stored; "*/*" turns the image checks off. Default JPEG, PNG, GIF, WebP, AVIF.
    public var contentTypes: [String] = Configuration.defaultContentTypes
    /// `allow-svg`: add image/svg+xml to the allowlist (SVG can carry script). Default false.
    public var allowSVG: Bool = false
    /// `allow-private-networks`: let forward and fetch modes reach loopback, private and link-local addresses. Default false.
    public var allowPrivateNetworks: Bool = false
    /// `allowed-sources`: URL prefixes forward mode, fetch mode and transform sources may reach; empty: any. Default none.
    public var allowedSources: [String] = []
    /// `forward-non-images`: in forward mode, a response the image checks refuse is passed to the client as the origin
    /// sent it, uncached, and every method is passed through (`pass`), or they are answered 502 and 501 (`refuse`).
    /// Fetch mode refuses both either way. Default pass.
    public var forwardNonImages: ForwardNonImages = .pass
    /// `proxy-allow`: client address ranges (CIDR) that may use the forward proxy (absolute-form requests and
    /// CONNECT); others get 403. Default loopback (127.0.0.0/8, ::1/128).
    public var proxyAllow: [AddressRange] = AddressRange.loopback
    /// `connect-ports`: the ports a CONNECT tunnel may reach; others get 403. Default 443.
    public var connectPorts: [Int] = [443]
    /// `max-tunnels`: CONNECT tunnels open at once; past it a CONNECT gets 503. Default 1000.
    public var maxTunnels: Int = 1000
    /// `tunnel-idle-timeout`: a tunnel with no byte either way for this long is closed, seconds. Default 300 (5 minutes).
    public var tunnelIdleTimeoutSeconds: Double = 300
    /// `heuristic-fraction`: fraction of (Date - Last-Modified) used as freshness when the origin gives none. Default
    /// `FreshnessPolicy`'s, 0.1 (as are the defaults of the next four).
    public var heuristicFraction: Double = Configuration.freshnessDefaults.heuristicFraction
    /// `heuristic-max`: cap on heuristic freshness, seconds. Default 86400 (1 day).
    public var heuristicMaxSeconds: Double = Configuration.freshnessDefaults.heuristicMaxSeconds
    /// `targeted-cache-control`: targeted cache-control fields (RFC 9213), in order; for a response from a configured
    /// origin the first one present governs storing and reuse instead of Cache-Control. Default CDN-Cache-Control.
    /// Restart only.
    public var targetedCacheControl: [String] = Configuration.freshnessDefaults.targetedFields
    /// `strip-targeted-cache-control`: remove those fields from what clients receive. Default false. Restart only.
    public var stripTargetedCacheControl: Bool = Configuration.freshnessDefaults.stripsTargetedFields
    /// `negative-ttl`: lifetime of a configured origin's 404 or 410 without explicit freshness, seconds (0: such
    /// responses are stored only with a validator, and heuristically). Default 10. Restart only.
    public var negativeTTLSeconds: Double = Configuration.freshnessDefaults.negativeTTLSeconds
    /// `forward-request-fields`: the request fields forward and fetch modes send upstream (Authorization too, which
    /// makes the request bypass the cache). Default Accept, Accept-Language, User-Agent.
    public var forwardRequestFields: [String] = ["Accept", "Accept-Language", "User-Agent"]
    /// `drop-request-fields`: request fields never sent to a configured origin (reverse mode sends every other
    /// end-to-end field, as nginx's proxy_pass does). Default none.
    public var dropRequestFields: [String] = []
    /// `pass-trace`: pass TRACE requests to configured origins; off, they get 405. Default false.
    public var passTrace = false
    /// The `transform*` keys: image transforms (imgproxy-compatible URLs, libvips). See TransformSettings.
    public var transform = TransformSettings()
    /// `transform-keys` and `transform-salts` as given; paired into `transform.signing` once every source is read
    /// (`resolveTransformSigning`).
    var transformKeyTexts: [String] = []
    var transformSaltTexts: [String] = []
    /// `complete-abandoned-fetches`: keep an upstream transfer running to fill the cache when every client has gone. Default false.
    public var completeAbandonedFetches: Bool = false
    /// `intercept-hosts`: the hosts whose CONNECT tunnels are to be intercepted (names, `*.suffix`, IP literals, `*`).
    /// When set, the daemon loads the local CA from `intercept-ca-dir` at start, or makes one constrained to these
    /// hosts, and refuses to start (or a reload) with a host outside the CA's name constraints. Default none.
    public var interceptHosts: InterceptHosts = .none
    /// `intercept-ca-dir`: directory of the local CA (`ca.pem`, `ca.key`). Default `$STATE_DIRECTORY/ca` (systemd's
    /// `StateDirectory=`), else `$XDG_STATE_HOME/imagecached/ca`, else `~/.local/state/imagecached/ca`; never under
    /// `cache-dir`, which may be cleaned. Restart only.
    public var interceptCADirectory: String = Configuration.defaultCADirectory()
    /// `log-level`: trace, debug, info, notice, warning, error, critical. Default info.
    public var logLevel: String = "info"
    /// `access-log`: one log line per request (method, target, status, X-Cache, bytes, time, client). Default false.
    public var accessLog: Bool = false
    /// `admin-allow`: client address ranges (CIDR) that may use the /_imagecached/ endpoints. Default loopback
    /// (127.0.0.0/8, ::1/128).
    public var adminAllow: [AddressRange] = AddressRange.loopback
    /// `admin-hosts`: host names an admin request may name in `Host` besides IP literals and `localhost` (a name the
    /// operator gave the daemon). Any other name is refused: it is how DNS rebinding reaches the daemon from a web
    /// page. Default none.
    public var adminHosts: [String] = []
    /// `admin-token` (file or environment only, never a flag: a flag shows in `ps`) or `admin-token-file` (a file
    /// holding it): when set, every admin request but `/_imagecached/health` needs `Authorization: Bearer <token>`.
    /// At least 16 characters. Default none.
    public var adminToken: String?
    /// `status-refresh`: how often the status page (/_imagecached/) polls the daemon for new numbers while it is open;
    /// 0: no live updates (the figures are as of the page's load). Default 2 s.
    public var statusRefreshSeconds: Double = 2
    /// `status-history-interval`: time between two samples of the history the status page draws and
    /// /_imagecached/stats/history serves. Default 10 s.
    public var historyIntervalSeconds: Double = 10
    /// `status-history-length`: how far back that history reaches; it holds length / interval samples (at most
    /// 2880). Default 1 h (360 samples).
    public var historyLengthSeconds: Double = 3600
    /// Samples the history keeps.
    public var historyCapacity: Int { Int((historyLengthSeconds / historyIntervalSeconds).rounded(.down)) }
    /// `signing-keys` (file or environment only, never a flag) or `signing-keys-file` (one key per line): the keys
    /// that verify signed fetch URLs, raw bytes, in order (the first signs). Each at least 16 bytes. Default none.
    public var signingKeys: [[UInt8]] = []
    /// `in-flight-limit`: bytes of response bodies in flight (retained by fetches to be stored, waiting to be written
    /// to disk, or handed to clients that have not taken them yet) past which backpressure applies: a fetch stops
    /// keeping a body it would store, and a fetch with a client behind pauses its upstream transfer until that client
    /// catches up. Default 64 MiB.
    public var inFlightLimitBytes: Int = 64 << 20
    /// `require-signature`: true, false, or nil for auto: required when `listen` is not a loopback address.
    /// Default auto.
    public var requireSignature: Bool?

    /// Whether unsigned fetch and forward requests are refused (require-signature, auto resolved against `listen`).
    public var signaturesRequired: Bool {
        if let requireSignature { return requireSignature }
        let host = listen.host.trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        return !(host == "localhost" || (IPAddress(host)?.isLoopback ?? false))
    }
    /// `shutdown-timeout`: on SIGTERM/SIGINT, how long responses in flight may take to finish before their
    /// connections are closed, seconds. Default 30.
    public var shutdownTimeoutSeconds: Double = 30
    /// The `server.*` keys: the HTTP server's limits. See ServerSettings.
    public var server = ServerSettings()
    /// The `upstream.*` keys: how upstream transfers are made. See UpstreamSettings.
    public var upstream = UpstreamSettings()
    /// The `fleet.*` keys: the fleet's shared tier on memcached (FleetSettings). No servers: no fleet.
    public var fleet = FleetSettings()

    public init() {}

    /// The store's defaults for the keys of the disk tier and of freshness (the directory is not one of them).
    private static let diskDefaults = DiskCache.Configuration(directory: "")
    private static let freshnessDefaults = FreshnessPolicy()

    /// The memory tier's per-object limit in force.
    public var effectiveMemoryObjectLimitBytes: Int { memoryObjectLimitBytes ?? max(memoryLimitBytes / 8, 0) }

    /// The allowlist in force, SVG included when enabled. Empty means every type (the image checks are off).
    public var effectiveContentTypes: [String] {
        if contentTypes.contains("*/*") { return [] }
        return allowSVG && !contentTypes.contains("image/svg+xml") ? contentTypes + ["image/svg+xml"] : contentTypes
    }

    /// The share of a cgroup memory limit (memory.max) the memory tier takes by default: the rest is left for
    /// connections, transfers in flight (each up to max-object-size), disk reads and the allocator.
    public static let cgroupMemoryFraction = 0.5

    /// Under a cgroup memory limit, a memory-limit left to its default becomes `cgroupMemoryFraction` of it (and a
    /// derived memory-object-limit follows). Returns a line for the log when it changed something.
    @discardableResult
    public mutating func applyCgroupMemoryLimit(_ cgroupLimitBytes: Int?) -> String? {
        guard !memoryLimitIsExplicit, let cgroupLimitBytes, cgroupLimitBytes > 0 else { return nil }
        memoryLimitBytes = Int(Double(cgroupLimitBytes) * Self.cgroupMemoryFraction)
        if let objectLimit = memoryObjectLimitBytes, objectLimit > memoryLimitBytes { memoryObjectLimitBytes = memoryLimitBytes }
        return "memory-limit: \(memoryLimitBytes) bytes, \(Self.cgroupMemoryFraction) of the cgroup memory limit (\(cgroupLimitBytes) bytes); set memory-limit to override"
    }

    public static let defaultContentTypes = ["image/jpeg", "image/png", "image/gif", "image/webp", "image/avif"]

    public static func defaultCacheDirectory() -> String {
        defaultCacheDirectory(environment: ProcessInfo.processInfo.environment)
    }

    public static func defaultCacheDirectory(environment: [String: String]) -> String {
        if let systemd = environment["CACHE_DIRECTORY"], !systemd.isEmpty {
            return String(systemd.split(separator: ":").first ?? Substring(systemd))
        }
        if let xdg = environment["XDG_CACHE_HOME"], !xdg.isEmpty { return xdg + "/imagecached" }
        let home = environment["HOME"] ?? "/tmp"
        return home + "/.cache/imagecached"
    }
}

extension Configuration {
    public static func defaultCADirectory() -> String {
        defaultCADirectory(environment: ProcessInfo.processInfo.environment)
    }

    /// `$STATE_DIRECTORY/ca` (the first of systemd's list), else `$XDG_STATE_HOME/imagecached/ca`, else
    /// `$HOME/.local/state/imagecached/ca`.
    public static func defaultCADirectory(environment: [String: String]) -> String {
        if let systemd = environment["STATE_DIRECTORY"], !systemd.isEmpty {
            return String(systemd.split(separator: ":").first ?? Substring(systemd)) + "/ca"
        }
        if let xdg = environment["XDG_STATE_HOME"], !xdg.isEmpty { return xdg + "/imagecached/ca" }
        let home = environment["HOME"] ?? "/tmp"
        return home + "/.local/state/imagecached/ca"
    }
}

/// A reverse-proxy mapping: requests whose path starts with `prefix` go to `url` + the rest of the path.
public struct OriginMapping: Sendable, Equatable {
    /// Path prefix, starting with "/". "/" maps everything.
    public var prefix: String
    /// Base URL of the origin, http or https, without query.
    public var url: String
    public init(prefix: String, url: String) {
        self.prefix = prefix
        self.url = url
    }
}
