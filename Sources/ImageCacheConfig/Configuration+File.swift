// Building a Configuration from its three sources, each a set of (key, value) settings applied in order
// over the defaults: the configuration file, then environment variables, then flags. Flags win.
//
// The keys, their forms, defaults and where each may be set are defined once, in ConfigKeys.swift; applying a
// setting looks its key up there.

internal import ImageCacheHTTP
internal import Foundation
internal import ImageCacheTransform
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
    public static var keys: [String] { ConfigKey.all.map(\.name) }

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
        try configuration.resolveTransformSigning(environment: environment)
        try configuration.validate()
        return configuration
    }

    /// Pairs the configured transform keys and salts into `transform.signing`; without them, imgproxy's
    /// IMGPROXY_KEY / IMGPROXY_SALT (one pair) or IMGPROXY_KEYS / IMGPROXY_SALTS (comma-separated pairs), and
    /// IMGPROXY_SIGNATURE_SIZE, are read.
    mutating func resolveTransformSigning(environment: [String: String]) throws(ConfigError) {
        var keys = transformKeyTexts, salts = transformSaltTexts, source = "transform-keys"
        transform.signingFromIMGPROXY = false
        if keys.isEmpty && salts.isEmpty {
            func list(_ name: String) -> [String] {
                (environment[name] ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            }
            keys = list("IMGPROXY_KEYS") + list("IMGPROXY_KEY")
            salts = list("IMGPROXY_SALTS") + list("IMGPROXY_SALT")
            source = "IMGPROXY_KEY"
            transform.signingFromIMGPROXY = !keys.isEmpty
            if let size = environment["IMGPROXY_SIGNATURE_SIZE"], transform.signingFromIMGPROXY {
                guard let bytes = Int(size), (8...32).contains(bytes) else {
                    throw ConfigError(key: "IMGPROXY_SIGNATURE_SIZE", reason: "'\(size)' is not 8 to 32")
                }
                transform.signing.signatureSize = bytes
            }
        }
        switch TransformSigning.pairs(keys: keys, salts: salts) {
        case let .success(pairs): transform.signing.pairs = pairs
        case let .failure(refusal): throw ConfigError(key: source, reason: refusal.reason)
        }
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
        for key in ConfigKey.all {
            if let name = key.environmentVariable, let value = environment[name] {
                result.append(ConfigSetting(key: key.name, value: .scalar(value), source: name))
            }
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

    /// Applies one setting, validating its value (ConfigKey.all says how, per key).
    public mutating func apply(_ setting: ConfigSetting) throws(ConfigError) {
        guard let key = ConfigKey.byName[setting.key] else {
            throw ConfigError(key: setting.source, reason: "unknown key (known keys: \(Configuration.keys.joined(separator: ", ")))")
        }
        do {
            try key.apply(&self, ConfigValue(value: setting.value, source: setting.source))
        } catch let error as ConfigError {
            throw error
        } catch {
            throw ConfigError(key: setting.source, reason: "\(error)")
        }
    }

    /// Checks that only hold for the whole configuration.
    public func validate() throws(ConfigError) {
        if let limit = memoryObjectLimitBytes, limit > memoryLimitBytes {
            throw ConfigError(key: "memory-object-limit", reason: "\(limit) bytes is more than memory-limit (\(memoryLimitBytes) bytes)")
        }
        for (name, segments) in transform.presets.sorted(by: { $0.key < $1.key }) {
            do throws(TransformOptions.Failure) {
                _ = try TransformOptions.parse(segments.map { Substring($0) }, presets: transform.presets,
                                               maxDimension: transform.limits.maxDimension)
            } catch {
                throw ConfigError(key: "transform-presets", reason: "preset \(name): \(error.reason)")
            }
        }
        if transform.enabled && transform.normalisedPrefix.isEmpty && !origins.isEmpty {
            throw ConfigError(key: "transform-prefix", reason: "/ is the transform prefix only when no origin is configured (the origins own the paths)")
        }
        if historyCapacity < 1 || historyCapacity > 2880 {
            throw ConfigError(key: "status-history-length", reason: "\(String(format: "%g", historyLengthSeconds))s at an interval of \(String(format: "%g", historyIntervalSeconds))s is \(historyCapacity) samples: keep it between 1 and 2880 (raise status-history-interval for a longer history)")
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

/// Byte sizes written by people: "256MiB", "50MB", "1G", "1048576".
public enum ByteSize {
    /// A size as the documentation writes it: in the largest binary unit that divides it ("10GiB", "256KiB"), else
    /// in bytes ("1000"); 0 is "0". `parse` reads it back.
    public static func text(_ bytes: Int) -> String {
        for (shift, unit) in [(30, "GiB"), (20, "MiB"), (10, "KiB")] where bytes != 0 && bytes % (1 << shift) == 0 {
            return "\(bytes >> shift)\(unit)"
        }
        return String(bytes)
    }

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
    /// A duration as the documentation writes it: in whole days or hours when it is some ("7d", "1h"), else in
    /// seconds ("60s", "2.5s"); 0 is "0". `parse` reads it back.
    public static func text(_ seconds: Double) -> String {
        if seconds == 0 { return "0" }
        for (length, unit) in [(86_400.0, "d"), (3600.0, "h"), (1.0, "s")] where (seconds / length).rounded() == seconds / length {
            return "\(Int(seconds / length))\(unit)"
        }
        return "\(seconds)s"
    }

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
