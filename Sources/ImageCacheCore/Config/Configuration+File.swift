// Building a Configuration from its three sources, each a set of (key, value) settings applied in order
// over the defaults: the configuration file, then environment variables, then flags. Flags win.
//
// Keys (file key / environment variable / flag; all values are validated here, once):
//   listen                       IMAGECACHED_LISTEN                      --listen HOST:PORT
//   origin                       IMAGECACHED_ORIGIN                      --origin URL          (maps "/" to URL)
//   origins  (list of {prefix, url}, file only)
//   cache-dir                    IMAGECACHED_CACHE_DIR                   --cache-dir DIR
//   disk-limit                   IMAGECACHED_DISK_LIMIT                  --disk-limit SIZE
//   disk-max-age                 IMAGECACHED_DISK_MAX_AGE                --disk-max-age DURATION
//   disk-low-water               IMAGECACHED_DISK_LOW_WATER              --disk-low-water FRACTION
//   disk-fsync                   IMAGECACHED_DISK_FSYNC                  --disk-fsync
//   memory-limit                 IMAGECACHED_MEMORY_LIMIT                --memory-limit SIZE
//   memory-count-limit           IMAGECACHED_MEMORY_COUNT_LIMIT          --memory-count-limit N
//   memory-object-limit          IMAGECACHED_MEMORY_OBJECT_LIMIT         --memory-object-limit SIZE
//   max-variants                 IMAGECACHED_MAX_VARIANTS                --max-variants N
//   max-object-size              IMAGECACHED_MAX_OBJECT_SIZE             --max-object-size SIZE
//   stale-if-error               IMAGECACHED_STALE_IF_ERROR              --stale-if-error DURATION
//   content-types  (list or comma-separated)  IMAGECACHED_CONTENT_TYPES  --content-types LIST
//   allow-svg                    IMAGECACHED_ALLOW_SVG                   --allow-svg
//   allow-private-networks       IMAGECACHED_ALLOW_PRIVATE_NETWORKS      --allow-private-networks
//   heuristic-fraction, heuristic-max, complete-abandoned-fetches, log-level, access-log
//   admin-allow  (list or comma-separated CIDRs)  IMAGECACHED_ADMIN_ALLOW  --admin-allow LIST
//   admin-hosts  (list or comma-separated names)  IMAGECACHED_ADMIN_HOSTS  --admin-hosts LIST
//   admin-token  (file or environment only)       IMAGECACHED_ADMIN_TOKEN  (no flag: it would show in ps)
//   admin-token-file             IMAGECACHED_ADMIN_TOKEN_FILE            --admin-token-file FILE
//   signing-keys  (list; file or environment only)  IMAGECACHED_SIGNING_KEYS  (no flag)
//   signing-keys-file            IMAGECACHED_SIGNING_KEYS_FILE           --signing-keys-file FILE
//   require-signature  (auto, true, false)  IMAGECACHED_REQUIRE_SIGNATURE  --require-signature auto|true|false
//   in-flight-limit              IMAGECACHED_IN_FLIGHT_LIMIT             --in-flight-limit SIZE
//   shutdown-timeout             IMAGECACHED_SHUTDOWN_TIMEOUT            --shutdown-timeout DURATION
//   server.max-request-line, server.max-header-bytes, server.max-header-count, server.max-request-body,
//   server.write-buffer, server.header-timeout, server.body-timeout, server.idle-timeout, server.write-timeout, server.max-connections, server.cpu-affinity
//   upstream.connect-timeout, upstream.timeout, upstream.low-speed-limit, upstream.low-speed-time,
//   upstream.max-redirects, upstream.max-transfers, upstream.max-host-connections, upstream.queue-order,
//   upstream.queue-timeout, upstream.user-agent, upstream.ca-bundle
// Every key has the environment variable IMAGECACHED_ + the key upper-cased with "." and "-" as "_",
// and the flag --key with "." as "-" (server.idle-timeout: IMAGECACHED_SERVER_IDLE_TIMEOUT, --server-idle-timeout).
// Sizes: a number of bytes, or with a unit: KiB MiB GiB (1024), KB MB GB (1000), K M G (1024).
// Durations: seconds, or with a unit: ms, s, m, h, d.
// Unknown keys are refused, so that a typo is reported instead of silently ignored.

internal import Foundation
internal import Yams

/// One setting from one source, before validation.
public struct ConfigSetting: Sendable, Equatable {
    public enum Value: Sendable, Equatable {
        case scalar(String)
        case list([String])
        case origins([OriginMapping])
    }
    /// Canonical key ("server.idle-timeout").
    public var key: String
    public var value: Value
    /// How the user spelled it, for errors ("--server-idle-timeout", "IMAGECACHED_...", "file.yaml: server.idle-timeout").
    public var source: String
    public init(key: String, value: Value, source: String) {
        self.key = key
        self.value = value
        self.source = source
    }
}

extension Configuration {
    /// Every key the configuration understands, in the order of the documentation.
    public static let keys: [String] = [
        "listen", "origin", "origins", "cache-dir", "disk-limit", "disk-max-age", "disk-low-water", "disk-fsync", "memory-limit", "memory-count-limit", "memory-object-limit", "max-variants",
        "max-object-size", "stale-if-error", "content-types", "allow-svg", "allow-private-networks", "heuristic-fraction",
        "heuristic-max", "complete-abandoned-fetches", "log-level", "access-log", "admin-allow", "admin-hosts", "admin-token", "admin-token-file",
        "signing-keys", "signing-keys-file", "require-signature", "in-flight-limit", "shutdown-timeout",
        "server.max-request-line", "server.max-header-bytes", "server.max-header-count", "server.max-request-body",
        "server.write-buffer", "server.header-timeout", "server.body-timeout", "server.idle-timeout", "server.write-timeout", "server.max-connections",
        "server.cpu-affinity", "upstream.connect-timeout", "upstream.timeout", "upstream.low-speed-limit", "upstream.low-speed-time",
        "upstream.max-redirects", "upstream.max-transfers", "upstream.max-host-connections", "upstream.queue-order",
        "upstream.queue-timeout", "upstream.user-agent", "upstream.ca-bundle",
    ]

    /// The configuration from defaults, then `file` (if any), then `environment`, then `flags`.
    /// `cgroupMemoryLimitBytes` (the process's cgroup memory.max, if any) sets the memory tier's default budget.
    /// `refusingEmptyFile` (a reload, `imagecached config check`): a file with no setting at all is an error, not
    /// "every default": it is most likely being written (a half-written file that would drop every origin).
    public static func load(file: String?, environment: [String: String], flags: [ConfigSetting],
                            cgroupMemoryLimitBytes: Int? = nil, refusingEmptyFile: Bool = false) throws(ConfigError) -> Configuration {
        var configuration = Configuration()
        if let file {
            let fileSettings = try settings(fromFile: file)
            if refusingEmptyFile && fileSettings.isEmpty {
                throw ConfigError(key: file, reason: "the file holds no setting (empty, or only comments); refused, since a file being written would reset every setting (write configuration files atomically: a new file, then rename it over the old one)")
            }
            for setting in fileSettings { try configuration.apply(setting) }
        }
        for setting in try settings(fromEnvironment: environment) { try configuration.apply(setting) }
        for setting in flags { try configuration.apply(setting) }
        configuration.applyCgroupMemoryLimit(cgroupMemoryLimitBytes)
        try configuration.validate()
        return configuration
    }

    /// Signing keys as configured (URLSigning.decodeKey), each at least `URLSigning.minimumKeyBytes`.
    static func signingKeys(_ texts: [String], source: String) throws(ConfigError) -> [[UInt8]] {
        var keys: [[UInt8]] = []
        for (index, text) in texts.enumerated() {
            guard let key = URLSigning.decodeKey(text) else {
                throw ConfigError(key: source, reason: "key \(index + 1) is not hex:..., base64:..., text:... or plain hex or base64")
            }
            guard key.count >= URLSigning.minimumKeyBytes else {
                throw ConfigError(key: source, reason: "key \(index + 1) is \(key.count) bytes; at least \(URLSigning.minimumKeyBytes) are needed")
            }
            keys.append(key)
        }
        return keys
    }

    /// A token as configured: surrounding white space (a file's final newline) dropped; at least 16 visible characters.
    static func adminToken(_ text: String, source: String) throws(ConfigError) -> String {
        let token = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard token.utf8.count >= 16, token.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw ConfigError(key: source, reason: "the admin token must be at least 16 visible ASCII characters, without spaces")
        }
        return token
    }

    /// The environment variable of a key: IMAGECACHED_SERVER_IDLE_TIMEOUT for server.idle-timeout.
    public static func environmentName(of key: String) -> String {
        "IMAGECACHED_" + key.uppercased().replacingOccurrences(of: ".", with: "_").replacingOccurrences(of: "-", with: "_")
    }

    static func settings(fromEnvironment environment: [String: String]) throws(ConfigError) -> [ConfigSetting] {
        var result: [ConfigSetting] = []
        for key in keys where key != "origins" {
            let name = environmentName(of: key)
            if let value = environment[name] { result.append(ConfigSetting(key: key, value: .scalar(value), source: name)) }
        }
        return result
    }

    /// Reads a YAML file into settings; nested maps become dotted keys.
    public static func settings(fromFile path: String) throws(ConfigError) -> [ConfigSetting] {
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw ConfigError(key: path, reason: "cannot read the configuration file: \(error.localizedDescription)")
        }
        return try settings(fromYAML: text, name: path)
    }

    public static func settings(fromYAML text: String, name: String) throws(ConfigError) -> [ConfigSetting] {
        let root: Node?
        do {
            root = try Yams.compose(yaml: text)
        } catch {
            throw ConfigError(key: name, reason: "not valid YAML: \(error)")
        }
        guard let root else { return [] }  // an empty file (or only comments) sets nothing
        guard let mapping = root.mapping else { throw ConfigError(key: name, reason: "the top level must be a mapping of keys") }
        var result: [ConfigSetting] = []
        try flatten(mapping, prefix: "", file: name, into: &result)
        return result
    }

    private static func flatten(_ mapping: Node.Mapping, prefix: String, file: String, into result: inout [ConfigSetting]) throws(ConfigError) {
        for (keyNode, valueNode) in mapping {
            guard let name = keyNode.string else { throw ConfigError(key: "\(file): \(prefix)", reason: "keys must be strings") }
            let key = prefix + name
            let source = "\(file): \(key)"
            if key == "origins" {
                result.append(ConfigSetting(key: key, value: .origins(try originList(valueNode, source: source)), source: source))
                continue
            }
            switch valueNode {
            case let .mapping(inner):
                try flatten(inner, prefix: key + ".", file: file, into: &result)
            case let .sequence(sequence):
                var items: [String] = []
                for item in sequence {
                    guard let text = item.string else { throw ConfigError(key: source, reason: "list items must be plain values") }
                    items.append(text)
                }
                result.append(ConfigSetting(key: key, value: .list(items), source: source))
            case let .scalar(scalar):
                // A YAML null (`key:` with nothing, or `~`) leaves the default.
                if scalar.tag.rawValue == Tag.Name.null.rawValue || (scalar.style == .plain && ["", "~", "null"].contains(scalar.string)) { continue }
                result.append(ConfigSetting(key: key, value: .scalar(scalar.string), source: source))
            case .alias:
                throw ConfigError(key: source, reason: "YAML aliases are not supported")
            }
        }
    }

    private static func originList(_ node: Node, source: String) throws(ConfigError) -> [OriginMapping] {
        guard let sequence = node.sequence else {
            throw ConfigError(key: source, reason: "expected a list of {prefix: /path, url: https://host}")
        }
        var list: [OriginMapping] = []
        for item in sequence {
            guard let map = item.mapping, let url = map["url"]?.string else {
                throw ConfigError(key: source, reason: "each origin needs a url (and optionally a prefix, default /)")
            }
            list.append(OriginMapping(prefix: map["prefix"]?.string ?? "/", url: url))
        }
        return list
    }

    /// Applies one setting, validating its value.
    public mutating func apply(_ setting: ConfigSetting) throws(ConfigError) {
        let source = setting.source
        func scalar() throws(ConfigError) -> String {
            switch setting.value {
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
        /// A list value (a YAML list, or a comma-separated scalar): trimmed, empty items dropped.
        func items(_ expected: String) throws(ConfigError) -> [String] {
            let raw: [String]
            switch setting.value {
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

        switch setting.key {
        case "listen":
            let text = try scalar()
            guard let address = ListenAddress.parse(text) else {
                throw ConfigError(key: source, reason: "'\(text)' is not HOST:PORT (like 127.0.0.1:8080 or [::1]:8080)")
            }
            listen = address
        case "origin":
            let url = try scalar()
            try Configuration.checkOriginURL(url, source: source)
            origins.removeAll { $0.prefix == "/" }
            origins.append(OriginMapping(prefix: "/", url: url))
        case "origins":
            guard case let .origins(list) = setting.value else {
                throw ConfigError(key: source, reason: "expected a list of {prefix: /path, url: https://host}")
            }
            for mapping in list {
                try Configuration.checkOriginURL(mapping.url, source: source)
                guard mapping.prefix.hasPrefix("/") else {
                    throw ConfigError(key: source, reason: "prefix '\(mapping.prefix)' must start with /")
                }
                guard !Configuration.isReservedPath(mapping.prefix) else {
                    throw ConfigError(key: source, reason: "prefix '\(mapping.prefix)' is reserved for the daemon (/fetch, /_imagecached/)")
                }
            }
            origins = list
        case "cache-dir":
            let text = try scalar()
            guard !text.isEmpty else { throw ConfigError(key: source, reason: "must not be empty") }
            cacheDirectory = text
        case "disk-limit":
            diskLimitBytes = try size()
        case "disk-max-age": diskMaxAgeSeconds = try seconds()
        case "disk-low-water":
            let value = try fraction()
            guard value > 0 else { throw ConfigError(key: source, reason: "must be more than 0") }
            diskLowWaterFraction = value
        case "disk-fsync": diskFsync = try boolean()
        case "memory-limit":
            memoryLimitBytes = try size()
            memoryLimitIsExplicit = true
        case "memory-count-limit": memoryCountLimit = try integer()
        case "memory-object-limit": memoryObjectLimitBytes = try size()
        case "max-variants": maxVariants = try integer(min: 1)
        case "max-object-size":
            let bytes = try size()
            guard bytes > 0 else { throw ConfigError(key: source, reason: "must be more than 0 bytes") }
            maxObjectSizeBytes = bytes
        case "content-types":
            let types = try items("a list of media types").map { $0.lowercased() }
            guard !types.isEmpty else { throw ConfigError(key: source, reason: "must name at least one media type, or */*") }
            for type in types where type != "*/*" {
                let parts = type.split(separator: "/")
                guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty else {
                    throw ConfigError(key: source, reason: "'\(type)' is not a media type like image/png")
                }
            }
            contentTypes = types
        case "stale-if-error": staleIfErrorSeconds = try seconds(allowingZero: true)
        case "allow-svg": allowSVG = try boolean()
        case "allow-private-networks": allowPrivateNetworks = try boolean()
        case "heuristic-fraction": heuristicFraction = try fraction()
        case "heuristic-max": heuristicMaxSeconds = try seconds()
        case "complete-abandoned-fetches": completeAbandonedFetches = try boolean()
        case "log-level":
            let text = try scalar().lowercased()
            guard ["trace", "debug", "info", "notice", "warning", "error", "critical"].contains(text) else {
                throw ConfigError(key: source, reason: "'\(text)' is not one of trace, debug, info, notice, warning, error, critical")
            }
            logLevel = text
        case "access-log": accessLog = try boolean()
        case "admin-allow":
            var ranges: [AddressRange] = []
            for item in try items("a list of address ranges like 127.0.0.1/32") {
                guard let range = AddressRange(item) else {
                    throw ConfigError(key: source, reason: "'\(item)' is not an address range like 127.0.0.1/32 or ::1/128")
                }
                ranges.append(range)
            }
            adminAllow = ranges
        case "admin-hosts":
            var hosts: [String] = []
            for item in try items("a list of host names").map({ $0.lowercased() }) {
                guard HTTPParser.isValidHost(item), !item.contains(":") else {
                    throw ConfigError(key: source, reason: "'\(item)' is not a host name")
                }
                hosts.append(item)
            }
            adminHosts = hosts
        case "admin-token":
            if source.hasPrefix("--") { throw ConfigError(key: source, reason: "the admin token is read from the configuration file or the environment only, never a flag (flags show in ps)") }
            adminToken = try Self.adminToken(try scalar(), source: source)
        case "signing-keys":
            if source.hasPrefix("--") { throw ConfigError(key: source, reason: "signing keys are read from the configuration file or the environment only, never a flag (flags show in ps)") }
            signingKeys = try Self.signingKeys(try items("a list of keys (hex:..., base64:..., text:...)").flatMap { $0.split(separator: " ").map(String.init) }, source: source)
        case "signing-keys-file":
            let path = try scalar()
            guard let data = FileManager.default.contents(atPath: path) else {
                throw ConfigError(key: source, reason: "cannot read the signing keys file \(path)")
            }
            let lines = String(decoding: data, as: UTF8.self).split(whereSeparator: \.isNewline)
                .map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty && !$0.hasPrefix("#") }
            signingKeys = try Self.signingKeys(lines, source: source)
        case "require-signature":
            let text = try scalar().lowercased()
            if text == "auto" {
                requireSignature = nil
            } else {
                requireSignature = try boolean()
            }
        case "admin-token-file":
            let path = try scalar()
            guard let data = FileManager.default.contents(atPath: path) else {
                throw ConfigError(key: source, reason: "cannot read the admin token file \(path)")
            }
            adminToken = try Self.adminToken(String(decoding: data, as: UTF8.self), source: source)
        case "shutdown-timeout": shutdownTimeoutSeconds = try seconds(allowingZero: true)
        case "server.max-request-line": server.maxRequestLineBytes = try integer(min: 64)
        case "server.max-header-bytes": server.maxHeaderBytes = try integer(min: 256)
        case "server.max-header-count": server.maxHeaderCount = try integer(min: 1)
        case "server.max-request-body": server.maxRequestBodyBytes = try size()
        case "server.header-timeout": server.headerTimeoutSeconds = try seconds()
        case "server.body-timeout": server.bodyTimeoutSeconds = try seconds()
        case "server.write-buffer":
            let bytes = try size()
            guard bytes >= 16 << 10 else { throw ConfigError(key: source, reason: "must be at least 16KiB") }
            server.writeBufferBytes = bytes
        case "in-flight-limit":
            let bytes = try size()
            guard bytes >= 1 << 20 else { throw ConfigError(key: source, reason: "must be at least 1MiB") }
            inFlightLimitBytes = bytes
        case "server.idle-timeout": server.idleTimeoutSeconds = try seconds()
        case "server.write-timeout": server.writeTimeoutSeconds = try seconds()
        case "server.max-connections": server.maxConnections = try integer(min: 1)
        case "server.cpu-affinity":
            let text = try scalar().lowercased()
            guard let affinity = ServerConfiguration.CPUAffinity(rawValue: text) else {
                throw ConfigError(key: source, reason: "'\(text)' is not auto or off")
            }
            server.cpuAffinity = affinity
        case "upstream.connect-timeout": upstream.connectTimeoutSeconds = try seconds()
        case "upstream.timeout": upstream.totalTimeoutSeconds = try seconds()
        case "upstream.low-speed-limit": upstream.lowSpeedLimitBytesPerSecond = try size()
        case "upstream.low-speed-time": upstream.lowSpeedTimeSeconds = Int(try seconds().rounded(.up))
        case "upstream.max-redirects": upstream.maxRedirects = try integer()
        case "upstream.max-transfers": upstream.maxConcurrentTransfers = try integer(min: 1)
        case "upstream.max-host-connections": upstream.maxHostConnections = try integer(min: 1)
        case "upstream.queue-order":
            let text = try scalar().lowercased()
            guard let order = UpstreamConfiguration.QueueOrder(rawValue: text) else {
                throw ConfigError(key: source, reason: "'\(text)' is not fifo or lifo")
            }
            upstream.queueOrder = order
        case "upstream.queue-timeout": upstream.queueTimeoutSeconds = try seconds()
        case "upstream.user-agent": upstream.userAgent = try scalar()
        case "upstream.ca-bundle": upstream.caBundle = try scalar()
        default:
            throw ConfigError(key: source, reason: "unknown key (known keys: \(Configuration.keys.joined(separator: ", ")))")
        }
    }

    /// Checks that only hold for the whole configuration.
    public func validate() throws(ConfigError) {
        if let limit = memoryObjectLimitBytes, limit > memoryLimitBytes {
            throw ConfigError(key: "memory-object-limit", reason: "\(limit) bytes is more than memory-limit (\(memoryLimitBytes) bytes)")
        }
        let prefixes = origins.map(\.prefix)
        if Set(prefixes).count != prefixes.count {
            throw ConfigError(key: "origins", reason: "two origins have the same prefix")
        }
    }

    static func checkOriginURL(_ url: String, source: String) throws(ConfigError) {
        let lower = url.lowercased()
        guard lower.hasPrefix("http://") || lower.hasPrefix("https://") else {
            throw ConfigError(key: source, reason: "'\(url)' is not an http:// or https:// URL")
        }
        guard !url.contains("?"), !url.contains("#") else {
            throw ConfigError(key: source, reason: "'\(url)' must not have a query or fragment")
        }
        do {
            _ = try UpstreamURL.parse(url)
        } catch {
            throw ConfigError(key: source, reason: "'\(url)' is not a usable origin URL: \(error.reason)")
        }
    }

    /// Paths the daemon keeps for itself: /fetch and everything under /_imagecached/.
    public static func isReservedPath(_ path: String) -> Bool {
        path == "/fetch" || path.hasPrefix("/fetch?") || path == "/_imagecached" || path.hasPrefix("/_imagecached/")
    }
}

extension ListenAddress {
    /// "HOST:PORT", "[V6]:PORT", or ":PORT" (all IPv4 interfaces).
    public static func parse(_ text: String) -> ListenAddress? {
        let host: Substring
        let portText: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { return nil }
            host = text[text.index(after: text.startIndex)..<close]
            let rest = text[text.index(after: close)...]
            guard rest.hasPrefix(":") else { return nil }
            portText = rest.dropFirst()
        } else {
            guard let colon = text.lastIndex(of: ":") else { return nil }
            host = text[..<colon]
            portText = text[text.index(after: colon)...]
            if host.contains(":") { return nil }
        }
        guard let port = Int(portText), (0...65535).contains(port) else { return nil }
        return ListenAddress(host: host.isEmpty ? "0.0.0.0" : String(host), port: port)
    }
}

/// Byte sizes written by people: "256MiB", "50MB", "1G", "1048576".
public enum ByteSize {
    public static func parse(_ text: String) -> Int? {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        let digits = trimmed.prefix { $0.isNumber || $0 == "." }
        let unit = trimmed.dropFirst(digits.count).trimmingCharacters(in: .whitespaces).lowercased()
        guard let number = Double(digits), number >= 0 else { return nil }
        let multiplier: Double
        switch unit {
        case "", "b": multiplier = 1
        case "k", "kib": multiplier = 1024
        case "m", "mib": multiplier = 1024 * 1024
        case "g", "gib": multiplier = 1024 * 1024 * 1024
        case "kb": multiplier = 1000
        case "mb": multiplier = 1_000_000
        case "gb": multiplier = 1_000_000_000
        default: return nil
        }
        let bytes = number * multiplier
        guard bytes < Double(Int.max / 2) else { return nil }
        return Int(bytes)
    }
}

/// Durations written by people: "10" (seconds), "500ms", "10s", "5m", "1h", "1d".
public enum DurationText {
    public static func parse(_ text: String) -> Double? {
        let trimmed = text.trimmingCharacters(in: .whitespaces).lowercased()
        let digits = trimmed.prefix { $0.isNumber || $0 == "." }
        guard let number = Double(digits) else { return nil }
        switch trimmed.dropFirst(digits.count) {
        case "", "s": return number
        case "ms": return number / 1000
        case "m": return number * 60
        case "h": return number * 3600
        case "d": return number * 86400
        default: return nil
        }
    }
}
