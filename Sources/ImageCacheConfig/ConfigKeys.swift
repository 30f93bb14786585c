// The configuration keys, defined once. Each `ConfigKey` says its name, the form of its value, its default as
// documented, what it means in one line, whether a reload applies it or it needs a restart, where it may be set
// (file, environment, flag), and how a value is checked and applied. Everything else is derived from this table:
//   - `Configuration.apply` (the YAML file, the environment and the flags all become settings applied through it),
//   - the environment variables (IMAGECACHED_ + the name upper-cased, "." and "-" as "_"),
//   - the daemon's flags and its --help (`DaemonCommandLine`: --name with "." as "-"),
//   - the reload's restart-only report and the values a reload keeps (`restartOnlyChanges`, `keepRestartOnlySettings`),
//   - the table of keys in docs/configuration.md (`markdownTable`, checked by ConfigKeysTests), and ConfigKeysTests
//     checks that Config/imagecached.yaml names every key and holds the defaults.
// Sizes: a number of bytes, or with a unit: KiB MiB GiB (1024), KB MB GB (1000), K M G (1024).
// Durations: seconds, or with a unit: ms, s, m, h, d. Unknown keys are refused, so that a typo is reported.
//
// One default per key: a default lives once, as the initial value of its field in its layer's settings struct
// (ServerSettings, UpstreamSettings, TransformSettings, the store's) or in Configuration, and the documented default
// is rendered from `Configuration()` (`defaults` below). The few said in words (a rule, a secret, "the system
// store") are checked against the values by ConfigKeysTests, which also reads every default text back through its
// key and expects `Configuration()`.

internal import ImageCacheHTTP
internal import Foundation
internal import ImageCacheServer
internal import ImageCacheTransform
internal import ImageCacheUpstream
internal import ImageCacheFleet

public struct ConfigKey: Sendable {
    public enum Reload: Sendable, Equatable {
        /// A reload (SIGHUP) puts a new value in force.
        case live
        /// A reload keeps the running value and logs that a restart is needed.
        case restart
    }

    /// Where the key may be set besides the configuration file.
    public enum Exposure: Sendable, Equatable {
        /// Environment variable and flag.
        case everywhere
        /// Environment variable, never a flag (a secret: flags show in `ps`).
        case notAsFlag
        /// The configuration file only (a structured value).
        case fileOnly
    }

    /// "server.idle-timeout".
    public let name: String
    /// The value's form in --help and the table of keys: SIZE, DURATION, N, FRACTION, LIST, FILE, auto|off, ...
    public let form: String
    /// The default as documented.
    public let defaultText: String
    /// What it does, one line.
    public let meaning: String
    public let exposure: Exposure
    /// The flag works bare, meaning `true` (`--disk-fsync`); `--disk-fsync=false` and a following word of its form
    /// (`--disk-fsync false`, `--require-signature auto`) also work.
    public let isSwitch: Bool
    /// Checks a value and puts it in the configuration.
    /// (Throws ConfigError only; typed as `throws` so that the short closures of the table need no annotation.)
    let apply: @Sendable (inout Configuration, ConfigValue) throws -> Void
    /// For restart-only keys: how a reload compares and keeps the running value.
    let restartField: RestartField?

    public var reload: Reload { restartField == nil ? .live : .restart }

    /// "--server-idle-timeout", or nil for keys that are never flags.
    public var flag: String? { exposure == .everywhere ? "--" + name.replacingOccurrences(of: ".", with: "-") : nil }

    /// How the flag is written in --help and the table of keys: "--disk-fsync" (a switch), "--require-signature
    /// [auto|true|false]" (a switch that takes other words too), "--memory-limit SIZE"; nil for keys that are never flags.
    public var flagUsage: String? {
        guard let flag else { return nil }
        if !isSwitch { return flag + " " + form }
        return form == "true|false" ? flag : flag + " [" + form + "]"
    }

    /// The words a switch takes as a following argument (its form's: "true", "false", "auto").
    var switchWords: [String] { isSwitch ? form.split(separator: "|").map(String.init) : [] }

    /// "IMAGECACHED_SERVER_IDLE_TIMEOUT", or nil for file-only keys.
    public var environmentVariable: String? { exposure == .fileOnly ? nil : Configuration.environmentName(of: name) }
}

/// How a reload compares a restart-only key's values and keeps the running one.
struct RestartField: Sendable {
    /// "old -> new" when the values differ.
    let change: @Sendable (_ running: Configuration, _ next: Configuration) -> String?
    let keep: @Sendable (_ next: inout Configuration, _ running: Configuration) -> Void

    static func field<T: Equatable & Sendable>(_ path: any WritableKeyPath<Configuration, T> & Sendable) -> RestartField {
        RestartField(
            change: { running, next in
                running[keyPath: path] == next[keyPath: path] ? nil : "\(running[keyPath: path]) -> \(next[keyPath: path])"
            },
            keep: { next, running in next[keyPath: path] = running[keyPath: path] })
    }
}

/// One setting's value with the parsers of each form; errors name the setting's source.
struct ConfigValue {
    let value: ConfigSetting.Value
    let source: String

    func scalar() throws(ConfigError) -> String {
        switch value {
        case let .scalar(text): return text
        case let .list(items): return items.joined(separator: ",")
        case .origins: throw ConfigError(key: source, reason: "expected a single value")
        }
    }

    func size() throws(ConfigError) -> Int {
        let text = try scalar()
        guard let bytes = ByteSize.parse(text) else {
            throw ConfigError(key: source, reason: "'\(text)' is not a size (like 256MiB, 50MB or 1048576)")
        }
        return bytes
    }

    /// A size of at least `minimum` bytes.
    func size(atLeast minimum: Int) throws(ConfigError) -> Int {
        let bytes = try size()
        guard bytes >= minimum else { throw ConfigError(key: source, reason: "must be at least \(ByteSize.text(minimum))") }
        return bytes
    }

    func integer(min: Int = 0) throws(ConfigError) -> Int {
        let text = try scalar()
        guard let value = Int(text.trimmingCharacters(in: .whitespaces)), value >= min else {
            throw ConfigError(key: source, reason: "'\(text)' is not a whole number >= \(min)")
        }
        return value
    }

    func seconds(allowingZero: Bool = false) throws(ConfigError) -> Double {
        let text = try scalar()
        guard let value = DurationText.parse(text), value > 0 || (allowingZero && value == 0), value <= 366 * 86_400 else {
            throw ConfigError(key: source, reason: "'\(text)' is not a positive duration up to a year (like 10, 10s, 500ms or 5m)")
        }
        return value
    }

    func boolean() throws(ConfigError) -> Bool {
        let text = try scalar().lowercased()
        switch text {
        case "true", "yes", "on", "1": return true
        case "false", "no", "off", "0": return false
        default: throw ConfigError(key: source, reason: "'\(text)' is not true or false")
        }
    }

    /// A list of HTTP field names (tokens: letters, digits, "-"); `example` is shown in the error.
    func fieldNames(like example: String) throws(ConfigError) -> [String] {
        let names = try items("a list of field names")
        for name in names where !name.utf8.allSatisfy({ $0 == 0x2D || (0x30...0x39).contains($0) || (0x41...0x5A).contains($0 & 0xDF) }) {
            throw ConfigError(key: source, reason: "'\(name)' is not a field name like \(example)")
        }
        return names
    }

    /// A list value (a YAML list, or a comma-separated scalar): trimmed, empty items dropped.
    func items(_ expected: String) throws(ConfigError) -> [String] {
        let raw: [String]
        switch value {
        case let .list(list): raw = list
        case let .scalar(text): raw = text.split(separator: ",").map { String($0) }
        case .origins: throw ConfigError(key: source, reason: "expected \(expected)")
        }
        return raw.map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }

    func fraction() throws(ConfigError) -> Double {
        let text = try scalar()
        guard let value = Double(text), value >= 0, value <= 1 else {
            throw ConfigError(key: source, reason: "'\(text)' is not a number from 0 to 1")
        }
        return value
    }

    /// A list of address ranges in CIDR notation ("127.0.0.0/8", "::1/128", or a bare address for one host).
    func addressRanges() throws(ConfigError) -> [AddressRange] {
        var ranges: [AddressRange] = []
        for item in try items("a list of address ranges like 127.0.0.1/32") {
            guard let range = AddressRange(item) else {
                throw ConfigError(key: source, reason: "'\(item)' is not an address range like 127.0.0.1/32 or ::1/128")
            }
            ranges.append(range)
        }
        return ranges
    }

    /// One of `choices` (lower-cased).
    func choice<T: RawRepresentable<String>>(_ type: T.Type, _ choices: String) throws(ConfigError) -> T {
        let text = try scalar().lowercased()
        guard let value = T(rawValue: text) else { throw ConfigError(key: source, reason: "'\(text)' is not \(choices)") }
        return value
    }

    /// Refuses a secret given as a flag (flags show in `ps`).
    func notAFlag(_ what: String) throws(ConfigError) {
        if source.hasPrefix("--") {
            throw ConfigError(key: source, reason: "\(what) read from the configuration file or the environment only, never a flag (flags show in ps)")
        }
    }
}

extension ConfigKey {
    /// Every key, in the order of the documentation.
    public static let all: [ConfigKey] = [
        key("listen", "HOST:PORT", defaults.listen.description, "address to serve on, HOST:PORT or [V6]:PORT; port 0 picks a free one",
            restart: .field(\.listen)) { configuration, value throws(ConfigError) in
            let text = try value.scalar()
            guard let address = ListenAddress.parse(text) else {
                throw ConfigError(key: value.source, reason: "'\(text)' is not HOST:PORT (like 127.0.0.1:8080 or [::1]:8080)")
            }
            configuration.listen = address
        },
        key("tls-listen", "HOST:PORT", "none", "also serve HTTPS here (reverse, fetch and forward modes); needs tls-cert and tls-key",
            restart: .field(\.tlsListen)) { configuration, value throws(ConfigError) in
            let text = try value.scalar()
            guard let address = ListenAddress.parse(text) else {
                throw ConfigError(key: value.source, reason: "'\(text)' is not HOST:PORT (like 127.0.0.1:8443 or [::1]:8443)")
            }
            configuration.tlsListen = address
        },
        key("tls-cert", "FILE", "none", "certificate chain (PEM, the leaf first) for tls-listen; read again on SIGHUP") { $0.tlsCertificateFile = try $1.scalar() },
        key("tls-key", "FILE", "none", "private key (PEM) for tls-listen; read again on SIGHUP") { $0.tlsKeyFile = try $1.scalar() },
        key("origin", "URL", "none", "reverse proxy: map every request path to this origin base URL (http or https)") { configuration, value throws(ConfigError) in
            let url = try value.scalar()
            try Configuration.checkOriginURL(url, source: value.source)
            configuration.origins.removeAll { $0.prefix == "/" }
            configuration.origins.append(OriginMapping(prefix: "/", url: url))
        },
        key("origins", "LIST", "none", "several origins by path prefix: a list of {prefix, url} (longest prefix wins)",
            exposure: .fileOnly) { configuration, value throws(ConfigError) in
            guard case let .origins(list) = value.value else {
                throw ConfigError(key: value.source, reason: "expected a list of {prefix: /path, url: https://host}")
            }
            for mapping in list {
                try Configuration.checkOriginURL(mapping.url, source: value.source)
                guard mapping.prefix.hasPrefix("/") else {
                    throw ConfigError(key: value.source, reason: "prefix '\(mapping.prefix)' must start with /")
                }
                guard !Configuration.isReservedPath(mapping.prefix) else {
                    throw ConfigError(key: value.source, reason: "prefix '\(mapping.prefix)' is reserved for the daemon (/fetch, /_imagecached/)")
                }
            }
            configuration.origins = list
        },
        key("cache-dir", "DIR", "$CACHE_DIRECTORY, else $XDG_CACHE_HOME/imagecached, else ~/.cache/imagecached",
            "directory of the on-disk tier (created at start)", restart: .field(\.cacheDirectory)) { configuration, value throws(ConfigError) in
            let text = try value.scalar()
            guard !text.isEmpty else { throw ConfigError(key: value.source, reason: "must not be empty") }
            configuration.cacheDirectory = text
        },
        key("disk-limit", "SIZE", ByteSize.text(defaults.diskLimitBytes), "byte budget of the on-disk tier (whole files, headers included); 0 turns it off",
            restart: .field(\.diskLimitBytes)) { $0.diskLimitBytes = try $1.size() },
        key("disk-max-age", "DURATION", DurationText.text(defaults.diskMaxAgeSeconds), "disk entries not used for this long are removed, fresh or not",
            restart: .field(\.diskMaxAgeSeconds)) { $0.diskMaxAgeSeconds = try $1.seconds() },
        key("disk-low-water", "FRACTION", String(defaults.diskLowWaterFraction), "over disk-limit, evict down to this fraction of it",
            restart: .field(\.diskLowWaterFraction)) { configuration, value throws(ConfigError) in
            let fraction = try value.fraction()
            guard fraction > 0 else { throw ConfigError(key: value.source, reason: "must be more than 0") }
            configuration.diskLowWaterFraction = fraction
        },
        key("disk-fsync", "true|false", String(defaults.diskFsync), "fsync each disk entry as it is written (slower, survives power loss)",
            isSwitch: true, restart: .field(\.diskFsync)) { $0.diskFsync = try $1.boolean() },
        key("memory-limit", "SIZE", ByteSize.text(defaults.memoryLimitBytes) + ", or half the cgroup's memory.max", "byte budget of the memory tier") { configuration, value throws(ConfigError) in
            configuration.memoryLimitBytes = try value.size()
            configuration.memoryLimitIsExplicit = true
        },
        key("memory-count-limit", "N", String(defaults.memoryCountLimit), "most entries in the memory tier; 0 means no count limit") { $0.memoryCountLimit = try $1.integer() },
        key("memory-object-limit", "SIZE", "1/8 of memory-limit", "larger objects are streamed to clients but not kept in memory") {
            $0.memoryObjectLimitBytes = try $1.size()
        },
        key("max-variants", "N", String(defaults.maxVariants), "most stored variants of one URL (responses with Vary), in memory and on disk each; the least recently used goes past it",
            restart: .field(\.maxVariants)) { $0.maxVariants = try $1.integer(min: 1) },
        key("max-object-size", "SIZE", ByteSize.text(defaults.maxObjectSizeBytes), "largest upstream object served or stored; a larger transfer is stopped (502)") { configuration, value throws(ConfigError) in
            let bytes = try value.size()
            guard bytes > 0 else { throw ConfigError(key: value.source, reason: "must be more than 0 bytes") }
            configuration.maxObjectSizeBytes = bytes
        },
        key("stale-if-error", "DURATION", DurationText.text(defaults.staleIfErrorSeconds), "offline policy: how long past its freshness a stored entry may be served when the origin fails (0: only where stale-if-error says so)") {
            $0.staleIfErrorSeconds = try $1.seconds(allowingZero: true)
        },
        key("stale-while-revalidate", "DURATION", DurationText.text(defaults.staleWhileRevalidateSeconds), "how long past its freshness a stored entry whose response names no stale-while-revalidate is served at once while one background request revalidates it (0: only where the response says so; never past must-revalidate, proxy-revalidate or s-maxage)") {
            $0.staleWhileRevalidateSeconds = try $1.seconds(allowingZero: true)
        },
        key("content-types", "LIST", list(defaults.contentTypes), "media types served and stored; */* turns the image checks off") { configuration, value throws(ConfigError) in
            let types = try value.items("a list of media types").map { $0.lowercased() }
            guard !types.isEmpty else { throw ConfigError(key: value.source, reason: "must name at least one media type, or */*") }
            for type in types where type != "*/*" {
                let parts = type.split(separator: "/")
                guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty else {
                    throw ConfigError(key: value.source, reason: "'\(type)' is not a media type like image/png")
                }
            }
            configuration.contentTypes = types
        },
        key("allow-svg", "true|false", String(defaults.allowSVG), "also allow image/svg+xml (SVG can carry script)", isSwitch: true) { $0.allowSVG = try $1.boolean() },
        key("allow-private-networks", "true|false", String(defaults.allowPrivateNetworks), "let forward and fetch modes reach loopback, private and link-local addresses",
            isSwitch: true, restart: .field(\.allowPrivateNetworks)) { $0.allowPrivateNetworks = try $1.boolean() },
        key("allowed-sources", "LIST", "none (any)", "URL prefixes forward mode, fetch mode and transform sources may reach (scheme://host[:port][/path], host *.example.com for subdomains); others get 403") { configuration, value throws(ConfigError) in
            let items = try value.items("a list of URL prefixes")
            for item in items {
                let plain = item.replacingOccurrences(of: "://*.", with: "://")
                guard (try? UpstreamURL.parse(plain)) != nil else {
                    throw ConfigError(key: value.source, reason: "'\(item)' is not an http:// or https:// URL prefix")
                }
            }
            configuration.allowedSources = items
        },
        key("proxy-allow", "LIST", list(defaults.proxyAllow.map(\.description)), "address ranges (CIDR) of the clients that may use the forward proxy (absolute-form requests, CONNECT); others get 403") { configuration, value throws(ConfigError) in
            configuration.proxyAllow = try value.addressRanges()
        },
        key("forward-non-images", "pass|refuse", defaults.forwardNonImages.rawValue, "forward mode: pass hands what the image checks refuse to the client as the origin sent it, uncached, and passes every method through; refuse answers those 502 and 501 (fetch mode refuses either way)") {
            $0.forwardNonImages = try $1.choice(ForwardNonImages.self, "pass or refuse")
        },
        key("connect-ports", "LIST", list(defaults.connectPorts.map(String.init)), "ports a CONNECT tunnel (HTTPS_PROXY) may reach; others get 403") { configuration, value throws(ConfigError) in
            var ports: [Int] = []
            for item in try value.items("a list of ports like 443,8443") {
                guard let port = Int(item), (1...65535).contains(port) else {
                    throw ConfigError(key: value.source, reason: "'\(item)' is not a port (1-65535)")
                }
                ports.append(port)
            }
            configuration.connectPorts = ports
        },
        key("max-tunnels", "N", String(defaults.maxTunnels), "CONNECT tunnels open at once; past it a CONNECT gets 503") { $0.maxTunnels = try $1.integer(min: 1) },
        key("tunnel-idle-timeout", "DURATION", DurationText.text(defaults.tunnelIdleTimeoutSeconds), "a tunnel with no byte either way for this long is closed (new tunnels take a reloaded value)") {
            $0.tunnelIdleTimeoutSeconds = try $1.seconds()
        },
        key("heuristic-fraction", "FRACTION", String(defaults.heuristicFraction), "fraction of (Date - Last-Modified) used as freshness when the origin gives none") {
            $0.heuristicFraction = try $1.fraction()
        },
        key("heuristic-max", "DURATION", DurationText.text(defaults.heuristicMaxSeconds), "cap on heuristic freshness") { $0.heuristicMaxSeconds = try $1.seconds() },
        key("targeted-cache-control", "LIST", list(defaults.targetedCacheControl), "targeted cache-control fields (RFC 9213), in order: for a response from a configured origin the first one present governs storing and reuse instead of Cache-Control",
            restart: .field(\.targetedCacheControl)) { configuration, value throws(ConfigError) in
            configuration.targetedCacheControl = try value.fieldNames(like: "CDN-Cache-Control")
        },
        key("strip-targeted-cache-control", "true|false", String(defaults.stripTargetedCacheControl), "remove the targeted cache-control fields from what clients receive",
            isSwitch: true, restart: .field(\.stripTargetedCacheControl)) { $0.stripTargetedCacheControl = try $1.boolean() },
        key("transforms", "true|false", String(defaults.transform.enabled), "serve image transform URLs (imgproxy's syntax) under transform-prefix", isSwitch: true) {
            $0.transform.enabled = try $1.boolean()
        },
        key("transform-prefix", "PATH", defaults.transform.prefix, "the path transform URLs live under; / only when no origin is configured") { configuration, value throws(ConfigError) in
            let text = try value.scalar()
            guard text.hasPrefix("/"), !text.contains("?"), !text.contains("%"), !Configuration.isReservedPath(text) else {
                throw ConfigError(key: value.source, reason: "'\(text)' is not a path of its own (starts with /, no query, not /fetch or /_imagecached)")
            }
            configuration.transform.prefix = text
        },
        key("transform-keys", "LIST", list(defaults.transformKeyTexts), "hex keys that verify transform URLs (HMAC-SHA256, paired in order with transform-salts; else IMGPROXY_KEY); none: URLs are not checked",
            exposure: .notAsFlag) { configuration, value throws(ConfigError) in
            try value.notAFlag("transform keys are")
            configuration.transformKeyTexts = try value.items("a list of hex keys")
        },
        key("transform-salts", "LIST", list(defaults.transformSaltTexts), "hex salts, one per transform key, in the same order (else IMGPROXY_SALT)",
            exposure: .notAsFlag) { configuration, value throws(ConfigError) in
            try value.notAFlag("transform salts are")
            configuration.transformSaltTexts = try value.items("a list of hex salts")
        },
        key("transform-signature-size", "N", String(defaults.transform.signing.signatureSize), "bytes of the HMAC a transform signature carries (imgproxy's IMGPROXY_SIGNATURE_SIZE), 8-32") { configuration, value throws(ConfigError) in
            let size = try value.integer(min: 8)
            guard size <= 32 else { throw ConfigError(key: value.source, reason: "at most 32 (the whole HMAC-SHA256)") }
            configuration.transform.signing.signatureSize = size
        },
        key("transform-presets", "LIST", "none", "named option sets, NAME=OPTIONS (thumb=rs:fill:200:200/q:70); \"default\" applies to every URL") { configuration, value throws(ConfigError) in
            var presets: [String: [String]] = [:]
            for item in try value.items("a list of NAME=OPTIONS") {
                let parts = item.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
                guard parts.count == 2, !parts[0].isEmpty, !parts[0].contains(":"), !parts[0].contains("/") else {
                    throw ConfigError(key: value.source, reason: "'\(item)' is not NAME=OPTIONS")
                }
                presets[parts[0]] = parts[1].split(separator: "/").map(String.init)
            }
            // Checked once every key is read (Configuration.validate: against transform-max-dimension).
            configuration.transform.presets = presets
        },
        key("transform-only-presets", "true|false", String(defaults.transform.onlyPresets), "transform URLs may name presets only (pr:NAME); other options get 400", isSwitch: true) {
            $0.transform.onlyPresets = try $1.boolean()
        },
        key("transform-workers", "N", String(defaults.transform.workers), "transforms run at once; 0: one per CPU this process may use (affinity, cgroup quota)",
            restart: .field(\.transform.workers)) { $0.transform.workers = try $1.integer() },
        key("transform-queue", "N", String(defaults.transform.queueLimit), "transforms admitted beyond the workers (fetching their source or waiting for a worker); past it a request gets 503",
            restart: .field(\.transform.queueLimit)) { $0.transform.queueLimit = try $1.integer() },
        key("transform-queue-timeout", "DURATION", DurationText.text(defaults.transform.queueTimeoutSeconds), "how long a transform waits for a worker before its clients get 503",
            restart: .field(\.transform.queueTimeoutSeconds)) { $0.transform.queueTimeoutSeconds = try $1.seconds() },
        key("transform-timeout", "DURATION", DurationText.text(defaults.transform.limits.timeoutSeconds), "one transform's time (decoding, processing, encoding); past it 422") {
            $0.transform.limits.timeoutSeconds = try $1.seconds()
        },
        key("transform-max-megapixels", "N", megapixels(defaults.transform.limits.maxPixels), "largest source, width x height in millions of pixels (an animation's frames together), read from the header before decoding; 422 past it") { configuration, value throws(ConfigError) in
            let text = try value.scalar()
            guard let megapixels = Double(text), megapixels > 0, megapixels <= 10_000 else {
                throw ConfigError(key: value.source, reason: "'\(text)' is not a number of megapixels in (0, 10000]")
            }
            configuration.transform.limits.maxPixels = Int(megapixels * 1_000_000)
        },
        key("transform-max-result-megapixels", "N", megapixels(defaults.transform.limits.maxResultPixels), "largest result, width x height in millions of pixels (an animation's frames together); 422 past it") { configuration, value throws(ConfigError) in
            let text = try value.scalar()
            guard let megapixels = Double(text), megapixels > 0, megapixels <= 1_000 else {
                throw ConfigError(key: value.source, reason: "'\(text)' is not a number of megapixels in (0, 1000]")
            }
            configuration.transform.limits.maxResultPixels = Int(megapixels * 1_000_000)
        },
        key("transform-max-source-bytes", "SIZE", ByteSize.text(defaults.transform.maxSourceBytes), "largest source a transform reads; 413 past it") { configuration, value throws(ConfigError) in
            configuration.transform.maxSourceBytes = try value.size(atLeast: 1024)
        },
        key("transform-source-timeout", "DURATION", DurationText.text(defaults.transform.sourceTimeoutSeconds), "how long a transform waits for its whole source; past it 504 (the fetch goes on for the cache)") {
            $0.transform.sourceTimeoutSeconds = try $1.seconds()
        },
        key("transform-max-frames", "N", String(defaults.transform.limits.maxFrames), "most frames of an animation kept animated (at most 10000); 422 past it") { configuration, value throws(ConfigError) in
            let frames = try value.integer(min: 1)
            guard frames <= 10_000 else { throw ConfigError(key: value.source, reason: "at most 10000") }
            configuration.transform.limits.maxFrames = frames
        },
        key("transform-max-dimension", "N", String(defaults.transform.limits.maxDimension), "largest width or height of a result and of any size option (16 to 65500); 422 past it") { configuration, value throws(ConfigError) in
            let pixels = try value.integer(min: 16)
            guard pixels <= 65_500 else { throw ConfigError(key: value.source, reason: "at most 65500 (libvips's limit for one side)") }
            configuration.transform.limits.maxDimension = pixels
        },
        key("transform-allow-svg", "true|false", String(defaults.transform.limits.allowSVG), "transform SVG sources (rendered by librsvg); off: 422", isSwitch: true,
            restart: .field(\.transform.limits.allowSVG)) { $0.transform.limits.allowSVG = try $1.boolean() },
        key("transform-auto-webp", "true|false", String(defaults.transform.autoWebP), "a transform URL without a format gets WebP when Accept lists image/webp (Vary: Accept)", isSwitch: true) {
            $0.transform.autoWebP = try $1.boolean()
        },
        key("transform-auto-avif", "true|false", String(defaults.transform.autoAVIF), "a transform URL without a format gets AVIF when Accept lists image/avif (before WebP; Vary: Accept)", isSwitch: true) {
            $0.transform.autoAVIF = try $1.boolean()
        },
        key("transform-quality", "LIST", list(ImageOutputFormat.allCases.compactMap { format in defaults.transform.quality[format].map { "\(format.rawValue)=\($0)" } }), "default quality per output format, FORMAT=1..100") { configuration, value throws(ConfigError) in
            for item in try value.items("a list of FORMAT=QUALITY") {
                let parts = item.split(separator: "=").map { $0.trimmingCharacters(in: .whitespaces) }
                guard parts.count == 2, let format = ImageOutputFormat(name: parts[0]), let q = Int(parts[1]), (1...100).contains(q) else {
                    throw ConfigError(key: value.source, reason: "'\(item)' is not FORMAT=QUALITY (jpeg, png, webp, avif, gif; 1-100)")
                }
                configuration.transform.quality[format] = q
            }
        },
        key("transform-avif-effort", "N", String(defaults.transform.avifEffort), "AVIF encoder effort, 0 (fastest) to 9 (smallest files)") { configuration, value throws(ConfigError) in
            let effort = try value.integer()
            guard effort <= 9 else { throw ConfigError(key: value.source, reason: "0 to 9") }
            configuration.transform.avifEffort = effort
        },
        key("transform-webp-effort", "N", String(defaults.transform.webpEffort), "WebP encoder effort, 0 (fastest) to 6 (smallest files)") { configuration, value throws(ConfigError) in
            let effort = try value.integer()
            guard effort <= 6 else { throw ConfigError(key: value.source, reason: "0 to 6") }
            configuration.transform.webpEffort = effort
        },
        key("transform-pixel-cache", "SIZE", ByteSize.text(defaults.transform.pixelCacheBytes), "decoded pixels of recent JPEG and opaque PNG sources (whole up to an eighth of it, and shrunk) kept for their next variants (one decode for all); 0 keeps none",
            restart: .field(\.transform.pixelCacheBytes)) { $0.transform.pixelCacheBytes = try $1.size() },
        key("negative-ttl", "DURATION", DurationText.text(defaults.negativeTTLSeconds), "how long a configured origin's 404 or 410 without explicit freshness is served from the cache (nginx's proxy_cache_valid 404); 0: not stored without a validator",
            restart: .field(\.negativeTTLSeconds)) { $0.negativeTTLSeconds = try $1.seconds(allowingZero: true) },
        key("forward-request-fields", "LIST", list(defaults.forwardRequestFields), "request fields forward and fetch modes send upstream (and Authorization, which bypasses the cache)") {
            let names = try $1.fieldNames(like: "Accept")
            // The daemon's own (framing, hop-by-hop, Via) and those that would make a shared fetch one client's answer.
            let reserved = ["Host", "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive", "TE", "Trailer",
                            "Upgrade", "Expect", "Via", "Range", "Max-Forwards"]
            for name in names where reserved.contains(where: { $0.caseInsensitiveCompare(name) == .orderedSame })
                || name.lowercased().hasPrefix("if-") || name.lowercased().hasPrefix("proxy-") {
                throw ConfigError(key: $1.source, reason: "'\(name)' cannot be forwarded: the daemon sets it, or it would make a shared fetch one client's answer")
            }
            $0.forwardRequestFields = names
        },
        key("drop-request-fields", "LIST", list(defaults.dropRequestFields), "request fields never sent to a configured origin (reverse mode sends every other end-to-end field)") {
            $0.dropRequestFields = try $1.fieldNames(like: "X-Debug")
        },
        key("pass-trace", "true|false", String(defaults.passTrace), "pass TRACE requests to configured origins; off, they get 405 (a TRACE echoes credentials to a page's script)",
            isSwitch: true) { $0.passTrace = try $1.boolean() },
        key("complete-abandoned-fetches", "true|false", String(defaults.completeAbandonedFetches), "keep an upstream transfer running to fill the cache when every client waiting on it has gone",
            isSwitch: true) { $0.completeAbandonedFetches = try $1.boolean() },
        key("intercept-hosts", "LIST", defaults.interceptHosts.description, "hosts whose CONNECT tunnels are to be intercepted: names, *.suffix (the names below it), IP addresses, or * (every host); when set, the local CA in intercept-ca-dir is loaded, or made for these hosts (name constraints), at start, and a reload that lists a host outside its constraints is refused") { configuration, value throws(ConfigError) in
            let items = try value.items("a list of host names, *.suffix, IP addresses or *")
            do throws(InterceptHosts.Refusal) {
                configuration.interceptHosts = try InterceptHosts.parse(items)
            } catch {
                throw ConfigError(key: value.source, reason: error.reason)
            }
        },
        key("intercept-ca-dir", "DIR", "$STATE_DIRECTORY/ca, else $XDG_STATE_HOME/imagecached/ca, else ~/.local/state/imagecached/ca",
            "directory of the local CA (ca.pem 0644, ca.key 0600, the directory 0700), apart from cache-dir: a lost CA must be trusted again",
            restart: .field(\.interceptCADirectory)) { configuration, value throws(ConfigError) in
            let text = try value.scalar()
            guard !text.isEmpty else { throw ConfigError(key: value.source, reason: "must not be empty") }
            configuration.interceptCADirectory = text
        },
        key("log-level", "LEVEL", defaults.logLevel, "trace, debug, info, notice, warning, error or critical", restart: .field(\.logLevel)) { configuration, value throws(ConfigError) in
            let text = try value.scalar().lowercased()
            guard ["trace", "debug", "info", "notice", "warning", "error", "critical"].contains(text) else {
                throw ConfigError(key: value.source, reason: "'\(text)' is not one of trace, debug, info, notice, warning, error, critical")
            }
            configuration.logLevel = text
        },
        key("access-log", "true|false", String(defaults.accessLog), "one log line per request (text, and the same fields as log metadata)") { $0.accessLog = try $1.boolean() },
        key("admin-allow", "LIST", list(defaults.adminAllow.map(\.description)), "address ranges (CIDR) that may use /_imagecached/; others get 403") { configuration, value throws(ConfigError) in
            configuration.adminAllow = try value.addressRanges()
        },
        key("admin-hosts", "LIST", list(defaults.adminHosts), "host names an admin request may give in Host besides IP literals and localhost; others get 403") { configuration, value throws(ConfigError) in
            var hosts: [String] = []
            for item in try value.items("a list of host names").map({ $0.lowercased() }) {
                guard HTTPParser.isValidHost(item), !item.contains(":") else {
                    throw ConfigError(key: value.source, reason: "'\(item)' is not a host name")
                }
                hosts.append(item)
            }
            configuration.adminHosts = hosts
        },
        key("admin-token", "TEXT", "none", "when set, admin requests (health excepted) need Authorization: Bearer <token> (or Basic with the token as password); at least 16 characters",
            exposure: .notAsFlag) { configuration, value throws(ConfigError) in
            try value.notAFlag("the admin token is")
            configuration.adminToken = try Configuration.adminToken(try value.scalar(), source: value.source)
        },
        key("admin-token-file", "FILE", "none", "a file holding the admin token") { configuration, value throws(ConfigError) in
            let path = try value.scalar()
            guard let data = FileManager.default.contents(atPath: path) else {
                throw ConfigError(key: value.source, reason: "cannot read the admin token file \(path)")
            }
            configuration.adminToken = try Configuration.adminToken(String(decoding: data, as: UTF8.self), source: value.source)
        },
        key("status-refresh", "DURATION", DurationText.text(defaults.statusRefreshSeconds), "how often the status page at /_imagecached/ polls for new numbers; 0: no live updates") { configuration, value throws(ConfigError) in
            let seconds = try value.seconds(allowingZero: true)
            guard seconds == 0 || (seconds >= 0.25 && seconds <= 3600) else {
                throw ConfigError(key: value.source, reason: "\(seconds)s is not 0 or between 250ms and 1h")
            }
            configuration.statusRefreshSeconds = seconds
        },
        key("status-history-interval", "DURATION", DurationText.text(defaults.historyIntervalSeconds), "time between two samples of the history the status page draws (/_imagecached/stats/history)",
            restart: .field(\.historyIntervalSeconds)) { configuration, value throws(ConfigError) in
            let seconds = try value.seconds()
            guard seconds >= 1 && seconds <= 3600 else {
                throw ConfigError(key: value.source, reason: "\(seconds)s is not between 1s and 1h")
            }
            configuration.historyIntervalSeconds = seconds
        },
        key("status-history-length", "DURATION", DurationText.text(defaults.historyLengthSeconds), "how far back that history reaches (length / interval samples, at most 2880)",
            restart: .field(\.historyLengthSeconds)) { $0.historyLengthSeconds = try $1.seconds() },
        key("signing-keys", "LIST", "none", "keys that verify signed fetch URLs (hex:..., base64:..., text:...), at least 16 bytes each; the first signs",
            exposure: .notAsFlag) { configuration, value throws(ConfigError) in
            try value.notAFlag("signing keys are")
            let texts = try value.items("a list of keys (hex:..., base64:..., text:...)").flatMap { $0.split(separator: " ").map(String.init) }
            configuration.signingKeys = try Configuration.signingKeys(texts, source: value.source)
        },
        key("signing-keys-file", "FILE", "none", "a file of signing keys, one per line (# comments)") { configuration, value throws(ConfigError) in
            let path = try value.scalar()
            guard let data = FileManager.default.contents(atPath: path) else {
                throw ConfigError(key: value.source, reason: "cannot read the signing keys file \(path)")
            }
            let lines = String(decoding: data, as: UTF8.self).split(whereSeparator: \.isNewline)
                .map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty && !$0.hasPrefix("#") }
            configuration.signingKeys = try Configuration.signingKeys(lines, source: value.source)
        },
        key("require-signature", "auto|true|false", defaults.requireSignature.map { String($0) } ?? "auto", "refuse unsigned /fetch and forward-proxy requests (403); auto: on unless listen is a loopback address; the bare flag means true", isSwitch: true) { configuration, value throws(ConfigError) in
            configuration.requireSignature = try value.scalar().lowercased() == "auto" ? nil : try value.boolean()
        },
        key("in-flight-limit", "SIZE", ByteSize.text(defaults.inFlightLimitBytes), "bytes of response bodies in flight past which backpressure applies (bodies not kept for the cache, transfers paused while a client is behind); at least 1MiB") {
            $0.inFlightLimitBytes = try $1.size(atLeast: 1 << 20)
        },
        key("shutdown-timeout", "DURATION", DurationText.text(defaults.shutdownTimeoutSeconds), "on SIGTERM, how long responses in flight may take to finish") {
            $0.shutdownTimeoutSeconds = try $1.seconds(allowingZero: true)
        },
        key("server.max-request-line", "N", String(defaults.server.maxRequestLineBytes), "longest request line in bytes (414 beyond)", restart: .field(\.server.maxRequestLineBytes)) {
            $0.server.maxRequestLineBytes = try $1.integer(min: 64)
        },
        key("server.max-header-bytes", "N", String(defaults.server.maxHeaderBytes), "largest request header section in bytes (431 beyond)", restart: .field(\.server.maxHeaderBytes)) {
            $0.server.maxHeaderBytes = try $1.integer(min: 256)
        },
        key("server.max-header-count", "N", String(defaults.server.maxHeaderCount), "most request header fields (431 beyond)", restart: .field(\.server.maxHeaderCount)) {
            $0.server.maxHeaderCount = try $1.integer(min: 1)
        },
        key("server.max-request-body", "SIZE", ByteSize.text(defaults.server.maxRequestBodyBytes), "largest request body (413 beyond): what reverse mode passes to its origin (POST, PUT, ...) and POST /_imagecached/prefetch",
            restart: .field(\.server.maxRequestBodyBytes)) { $0.server.maxRequestBodyBytes = try $1.size() },
        key("server.write-buffer", "SIZE", ByteSize.text(defaults.server.writeBufferBytes), "bytes of a streamed response a client may have been handed and not taken before it is behind; also a fetch's delivery window; at least 16KiB",
            restart: .field(\.server.writeBufferBytes)) { $0.server.writeBufferBytes = try $1.size(atLeast: 16 << 10) },
        key("server.header-timeout", "DURATION", DurationText.text(defaults.server.headerTimeoutSeconds), "time to receive a whole request head", restart: .field(\.server.headerTimeoutSeconds)) {
            $0.server.headerTimeoutSeconds = try $1.seconds()
        },
        key("server.body-timeout", "DURATION", DurationText.text(defaults.server.bodyTimeoutSeconds), "time to receive a whole request body once its head is in (408 beyond)",
            restart: .field(\.server.bodyTimeoutSeconds)) { $0.server.bodyTimeoutSeconds = try $1.seconds() },
        key("server.idle-timeout", "DURATION", DurationText.text(defaults.server.idleTimeoutSeconds), "time a keep-alive connection may sit idle", restart: .field(\.server.idleTimeoutSeconds)) {
            $0.server.idleTimeoutSeconds = try $1.seconds()
        },
        key("server.write-timeout", "DURATION", DurationText.text(defaults.server.writeTimeoutSeconds), "time a client may take to accept written bytes", restart: .field(\.server.writeTimeoutSeconds)) {
            $0.server.writeTimeoutSeconds = try $1.seconds()
        },
        key("server.max-connections", "N", String(defaults.server.maxConnections), "connections served at once; more are closed as they arrive",
            restart: .field(\.server.maxConnections)) { $0.server.maxConnections = try $1.integer(min: 1) },
        key("server.cpu-affinity", "auto|off", defaults.server.cpuAffinity.rawValue, "auto pins event loop i to the i-th CPU the daemon may use; off lets the kernel place them",
            restart: .field(\.server.cpuAffinity)) { $0.server.cpuAffinity = try $1.choice(ServerSettings.CPUAffinity.self, "auto or off") },
        key("upstream.connect-timeout", "DURATION", DurationText.text(defaults.upstream.connectTimeoutSeconds), "upstream connect timeout (DNS, TCP, TLS)", restart: .field(\.upstream.connectTimeoutSeconds)) {
            $0.upstream.connectTimeoutSeconds = try $1.seconds()
        },
        key("upstream.timeout", "DURATION", DurationText.text(defaults.upstream.totalTimeoutSeconds), "upstream whole-transfer timeout", restart: .field(\.upstream.totalTimeoutSeconds)) {
            $0.upstream.totalTimeoutSeconds = try $1.seconds()
        },
        key("upstream.low-speed-limit", "SIZE", String(defaults.upstream.lowSpeedLimitBytesPerSecond), "bytes per second under which an upstream transfer counts as stalled",
            restart: .field(\.upstream.lowSpeedLimitBytesPerSecond)) { $0.upstream.lowSpeedLimitBytesPerSecond = try $1.size() },
        key("upstream.low-speed-time", "DURATION", DurationText.text(Double(defaults.upstream.lowSpeedTimeSeconds)), "time under the low-speed limit before the transfer is aborted",
            restart: .field(\.upstream.lowSpeedTimeSeconds)) { $0.upstream.lowSpeedTimeSeconds = Int(try $1.seconds().rounded(.up)) },
        key("upstream.max-redirects", "N", String(defaults.upstream.maxRedirects), "redirects followed upstream", restart: .field(\.upstream.maxRedirects)) {
            $0.upstream.maxRedirects = try $1.integer()
        },
        key("upstream.max-transfers", "N", String(defaults.upstream.maxConcurrentTransfers), "upstream transfers at once; more wait in a queue", restart: .field(\.upstream.maxConcurrentTransfers)) {
            $0.upstream.maxConcurrentTransfers = try $1.integer(min: 1)
        },
        key("upstream.max-host-connections", "N", String(defaults.upstream.maxHostConnections), "connections to one upstream host at once", restart: .field(\.upstream.maxHostConnections)) {
            $0.upstream.maxHostConnections = try $1.integer(min: 1)
        },
        key("upstream.queue-order", "fifo|lifo", defaults.upstream.queueOrder.rawValue, "order of waiting upstream transfers: fifo, or lifo (newest first)",
            restart: .field(\.upstream.queueOrder)) { $0.upstream.queueOrder = try $1.choice(UpstreamSettings.QueueOrder.self, "fifo or lifo") },
        key("upstream.queue-timeout", "DURATION", DurationText.text(defaults.upstream.queueTimeoutSeconds), "time a transfer may wait for a slot before the client gets 504",
            restart: .field(\.upstream.queueTimeoutSeconds)) { $0.upstream.queueTimeoutSeconds = try $1.seconds() },
        key("upstream.user-agent", "TEXT", "imagecached/VERSION", "User-Agent sent upstream when the client sent none",
            restart: .field(\.upstream.userAgent)) { $0.upstream.userAgent = try $1.scalar() },
        key("upstream.ca-bundle", "FILE", "the system store", "CA bundle file for upstream TLS verification", restart: .field(\.upstream.caBundle)) {
            $0.upstream.caBundle = try $1.scalar()
        },
        key("fleet.servers", "LIST", list(defaults.fleet.servers.map(\.description)), "memcached servers (host:port) of the fleet's shared tier: keys are spread over the list by rendezvous hashing and never rehashed when one fails (its keys go local-only); empty: no fleet") { configuration, value throws(ConfigError) in
            var servers: [FleetServer] = []
            for item in try value.items("a list of host:port like 10.0.0.5:11211,10.0.0.6:11211") {
                guard let server = FleetServer(parsing: item) else {
                    throw ConfigError(key: "fleet.servers", reason: "\(item) is not host:port (an IPv6 address in brackets: [::1]:11211)")
                }
                guard !servers.contains(server) else { throw ConfigError(key: "fleet.servers", reason: "\(item) is listed twice") }
                servers.append(server)
            }
            configuration.fleet.servers = servers
        },
        key("fleet.item-max", "SIZE", ByteSize.text(defaults.fleet.itemMaxBytes), "largest entry kept in the fleet tier; at most the servers' -I (checked at start); larger responses leave a pass marker") {
            $0.fleet.itemMaxBytes = try $1.size(atLeast: 1 << 10)
        },
        key("fleet.lease", "DURATION", DurationText.text(Double(defaults.fleet.leaseSeconds)), "a fill lease's life in memcached (whole seconds, 2s to 1h: memcached's clock ticks once a second), kept alive while the winner's bytes arrive") {
            let seconds = try $1.seconds()
            // (memcached reads a TTL over 30 days as a Unix time: an hour is far beyond any fill.)
            guard seconds <= 3600 else { throw ConfigError(key: "fleet.lease", reason: "at most 1h (a fill lease is refreshed while its bytes arrive)") }
            $0.fleet.leaseSeconds = max(2, Int(seconds.rounded(.up)))
        },
        key("fleet.wait", "DURATION", DurationText.text(defaults.fleet.waitSeconds), "longest a host waits for another host's fill before it fetches alone") {
            $0.fleet.waitSeconds = try $1.seconds(allowingZero: true)
        },
        key("fleet.deadline", "DURATION", DurationText.text(defaults.fleet.deadlineSeconds), "deadline of each fleet operation, plus a value's transfer time at 50 MB/s; a server that misses it counts a failure") {
            $0.fleet.deadlineSeconds = try $1.seconds()
        },
    ]

    /// The defaults, from which the table's default texts are rendered.
    private static let defaults = Configuration()

    /// A list's default text: its items, comma-separated, or "none".
    private static func list(_ items: [String]) -> String { items.isEmpty ? "none" : items.joined(separator: ",") }

    /// Pixels as the `*-megapixels` keys take them: "50" for 50,000,000.
    private static func megapixels(_ pixels: Int) -> String {
        pixels % 1_000_000 == 0 ? String(pixels / 1_000_000) : String(Double(pixels) / 1_000_000)
    }

    /// The keys by name.
    static let byName: [String: ConfigKey] = Dictionary(uniqueKeysWithValues: all.map { ($0.name, $0) })

    private static func key(_ name: String, _ form: String, _ defaultText: String, _ meaning: String,
                            exposure: Exposure = .everywhere, isSwitch: Bool = false, restart: RestartField? = nil,
                            apply: @escaping @Sendable (inout Configuration, ConfigValue) throws -> Void) -> ConfigKey {
        ConfigKey(name: name, form: form, defaultText: defaultText, meaning: meaning, exposure: exposure, isSwitch: isSwitch,
                  apply: apply, restartField: restart)
    }

    /// The table of keys in docs/configuration.md, one row per key.
    public static func markdownTable() -> String {
        var lines = ["| key | flag | default | meaning |", "|---|---|---|---|"]
        for key in all {
            let flag: String
            switch key.exposure {
            case .everywhere: flag = "`" + key.flagUsage! + "`"
            case .notAsFlag: flag = "(file or `\(key.environmentVariable!)` only)"
            case .fileOnly: flag = "(file only)"
            }
            let meaning = key.meaning.replacingOccurrences(of: "|", with: "\\|") + (key.reload == .restart ? "; restart only" : "")
            lines.append("| `\(key.name)` | \(flag.replacingOccurrences(of: "|", with: "\\|")) | \(key.defaultText) | \(meaning) |")
        }
        return lines.joined(separator: "\n") + "\n"
    }
}
