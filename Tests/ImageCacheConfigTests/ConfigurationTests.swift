import Foundation
import Testing
import ImageCacheTestSupport
@testable import ImageCacheConfig
import ImageCacheHTTP
import ImageCacheServer
import ImageCacheTransform
import ImageCacheUpstream

@Suite("Configuration", .timeLimit(.minutes(1)))
struct ConfigurationTests {
    @Test("defaults match the documented contract")
    func defaults() throws {
        // Given no file, environment or flags
        let configuration = try Configuration.load(file: nil, environment: [:], flags: [])
        // Then
        #expect(configuration.listen == ListenAddress(host: "127.0.0.1", port: 8080))
        #expect(configuration.memoryLimitBytes == 256 << 20)
        #expect(configuration.maxObjectSizeBytes == 50 << 20)
        #expect(configuration.allowPrivateNetworks == false)
        #expect(configuration.effectiveContentTypes == Configuration.defaultContentTypes)
        #expect(configuration.upstream.queueOrder == .fifo)
        #expect(configuration.server.cpuAffinity == .auto)
    }

    @Test("server.cpu-affinity takes auto or off from the file, the environment and the flag")
    func cpuAffinity() throws {
        let file = try Configuration.settings(fromYAML: "server:\n  cpu-affinity: off\n", name: "f.yaml")
        var configuration = Configuration()
        for setting in file { try configuration.apply(setting) }
        #expect(configuration.server.cpuAffinity == .off)
        for setting in try Configuration.settings(fromEnvironment: ["IMAGECACHED_SERVER_CPU_AFFINITY": "AUTO"]) {
            try configuration.apply(setting)
        }
        #expect(configuration.server.cpuAffinity == .auto)
        try configuration.apply(ConfigSetting(key: "server.cpu-affinity", value: .scalar("off"), source: "--server-cpu-affinity"))
        #expect(configuration.server.cpuAffinity == .off)
    }

    @Test("flags win over environment, which wins over the file")
    func precedence() throws {
        // Given the same key from three sources
        let file = try Configuration.settings(fromYAML: "memory-limit: 1MiB\nlisten: 127.0.0.1:1000\nserver:\n  idle-timeout: 5s\n", name: "f.yaml")
        var configuration = Configuration()
        for setting in file { try configuration.apply(setting) }
        for setting in try Configuration.settings(fromEnvironment: ["IMAGECACHED_MEMORY_LIMIT": "2MiB", "IMAGECACHED_LISTEN": "127.0.0.1:2000"]) {
            try configuration.apply(setting)
        }
        try configuration.apply(ConfigSetting(key: "memory-limit", value: .scalar("3MiB"), source: "--memory-limit"))
        // Then
        #expect(configuration.memoryLimitBytes == 3 << 20)
        #expect(configuration.listen.port == 2000)
        #expect(configuration.server.idleTimeoutSeconds == 5)
    }

    @Test("the shipped Config/imagecached.yaml loads and states exactly the defaults")
    func shippedFileLoads() throws {
        // Given the repository's configuration file
        let path = RepositoryPath.at("Config/imagecached.yaml").path
        // When
        var configuration = Configuration()
        for setting in try Configuration.settings(fromFile: path) { try configuration.apply(setting) }
        // Then every value it sets is the default
        #expect(configuration == Configuration())
    }

    @Test("bad values name the key and the reason", arguments: [
        ("memory-limit", "lots", "'lots' is not a size"),
        ("listen", "nowhere", "is not HOST:PORT"),
        ("origin", "ftp://x", "is not an http:// or https:// URL"),
        ("upstream.queue-order", "random", "is not fifo or lifo"),
        ("server.cpu-affinity", "sometimes", "is not auto or off"),
        ("server.idle-timeout", "-3", "is not a positive duration"),
        ("content-types", "png", "is not a media type"),
        ("no-such-key", "1", "unknown key"),
        ("forward-request-fields", "Accept, Range", "'Range' cannot be forwarded"),
        ("forward-request-fields", "If-None-Match", "'If-None-Match' cannot be forwarded"),
        ("forward-request-fields", "Host", "'Host' cannot be forwarded"),
        ("drop-request-fields", "X Debug", "is not a field name"),
        ("negative-ttl", "-1", "is not a positive duration"),
    ])
    func badValues(key: String, value: String, reason: String) {
        // Given
        var configuration = Configuration()
        // When / Then
        #expect {
            try configuration.apply(ConfigSetting(key: key, value: .scalar(value), source: "--" + key))
        } throws: { error in
            guard let error = error as? ConfigError else { return false }
            return error.key == "--" + key && error.reason.contains(reason)
        }
    }

    @Test("in-flight-limit (64 MiB, at least 1 MiB, reloadable) and server.write-buffer (256 KiB, at least 16 KiB, needs a restart) at their edges")
    func inFlightLimits() throws {
        let defaults = Configuration()
        #expect(defaults.inFlightLimitBytes == 64 << 20)
        #expect(defaults.server.writeBufferBytes == 256 << 10)
        for (key, smallest) in [("in-flight-limit", 1 << 20), ("server.write-buffer", 16 << 10)] {
            var configuration = Configuration()
            try configuration.apply(ConfigSetting(key: key, value: .scalar("\(smallest)"), source: key))
            #expect(key == "in-flight-limit" ? configuration.inFlightLimitBytes == smallest : configuration.server.writeBufferBytes == smallest)
            #expect(throws: ConfigError.self) {
                try configuration.apply(ConfigSetting(key: key, value: .scalar("\(smallest - 1)"), source: key))
            }
        }
        let environment = try Configuration.load(file: nil, environment: ["IMAGECACHED_IN_FLIGHT_LIMIT": "2MiB",
                                                                          "IMAGECACHED_SERVER_WRITE_BUFFER": "32KiB"], flags: [])
        #expect(environment.inFlightLimitBytes == 2 << 20 && environment.server.writeBufferBytes == 32 << 10)
        #expect(defaults.restartOnlyChanges(to: environment) == ["server.write-buffer: 262144 -> 32768"])
    }

    @Test("status-refresh (2 s; 0 or 250 ms to 1 h) and the history (10 s x 1 h; 1 to 2880 samples, restart only) at their edges")
    func statusPageLimits() throws {
        let defaults = try Configuration.load(file: nil, environment: [:], flags: [])
        #expect(defaults.statusRefreshSeconds == 2 && defaults.historyIntervalSeconds == 10 && defaults.historyCapacity == 360)
        func load(_ environment: [String: String]) throws -> Configuration {
            try Configuration.load(file: nil, environment: environment, flags: [])
        }
        #expect(try load(["IMAGECACHED_STATUS_REFRESH": "0"]).statusRefreshSeconds == 0)
        #expect(try load(["IMAGECACHED_STATUS_REFRESH": "250ms"]).statusRefreshSeconds == 0.25)
        #expect(try load(["IMAGECACHED_STATUS_REFRESH": "1h"]).statusRefreshSeconds == 3600)
        #expect { try load(["IMAGECACHED_STATUS_REFRESH": "200ms"]) } throws: { "\($0)".contains("STATUS_REFRESH") }
        #expect { try load(["IMAGECACHED_STATUS_REFRESH": "61m"]) } throws: { "\($0)".contains("STATUS_REFRESH") }
        // 8 h at 10 s is the largest ring; one interval more is refused, naming the key and the count
        let largest = try load(["IMAGECACHED_STATUS_HISTORY_LENGTH": "8h"])
        #expect(largest.historyCapacity == 2880)
        #expect { try load(["IMAGECACHED_STATUS_HISTORY_LENGTH": "28810s"]) }
            throws: { "\($0)".contains("status-history-length") && "\($0)".contains("2881 samples") }
        #expect(try load(["IMAGECACHED_STATUS_HISTORY_INTERVAL": "1m", "IMAGECACHED_STATUS_HISTORY_LENGTH": "1d"]).historyCapacity == 1440)
        #expect(try load(["IMAGECACHED_STATUS_HISTORY_INTERVAL": "1s", "IMAGECACHED_STATUS_HISTORY_LENGTH": "1s"]).historyCapacity == 1)
        #expect { try load(["IMAGECACHED_STATUS_HISTORY_INTERVAL": "1m", "IMAGECACHED_STATUS_HISTORY_LENGTH": "30s"]) }
            throws: { "\($0)".contains("0 samples") }
        #expect { try load(["IMAGECACHED_STATUS_HISTORY_INTERVAL": "500ms"]) } throws: { "\($0)".contains("STATUS_HISTORY_INTERVAL") }
        #expect(defaults.restartOnlyChanges(to: largest) == ["status-history-length: 3600.0 -> 28800.0"])
    }

    @Test("transform keys and salts pair in order from the file or the environment, never a flag; without them imgproxy's IMGPROXY_KEYS / SALTS / SIGNATURE_SIZE; presets, qualities and efforts load")
    func transformSigningAndSettings() throws {
        func load(_ environment: [String: String], flags: [ConfigSetting] = []) throws -> Configuration {
            try Configuration.load(file: nil, environment: environment, flags: flags)
        }
        let first = TransformSigning.Pair(key: [0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77], salt: [0x0A, 0x0B])
        let second = TransformSigning.Pair(key: [0x88, 0x99, 0xAA, 0xBB, 0xCC, 0xDD, 0xEE, 0xFF], salt: [0x0C, 0x0D])
        // Keys and salts paired in order, with a truncated signature size
        let signing = try load(["IMAGECACHED_TRANSFORM_KEYS": "0011223344556677, 8899aabbccddeeff",
                                "IMAGECACHED_TRANSFORM_SALTS": "0a0b,0c0d", "IMAGECACHED_TRANSFORM_SIGNATURE_SIZE": "8"]).transform
        #expect(signing.signing.pairs == [first, second] && signing.signing.signatureSize == 8 && !signing.signingFromIMGPROXY)
        // ... a key without its salt, a short key, or keys on the command line are refused with the reason
        #expect { try load(["IMAGECACHED_TRANSFORM_KEYS": "0011223344556677,8899aabbccddeeff", "IMAGECACHED_TRANSFORM_SALTS": "0a0b"]) }
            throws: { "\($0)".contains("paired in order") }
        #expect { try load(["IMAGECACHED_TRANSFORM_KEYS": "00112233445566", "IMAGECACHED_TRANSFORM_SALTS": "0a0b"]) }
            throws: { "\($0)".contains("at least 8 bytes") }
        #expect { try load([:], flags: [ConfigSetting(key: "transform-keys", value: .scalar("0011223344556677"), source: "--transform-keys")]) }
            throws: { "\($0)".contains("never a flag") }
        #expect { try load(["IMAGECACHED_TRANSFORM_SIGNATURE_SIZE": "7"]) } throws: { "\($0)".contains("TRANSFORM_SIGNATURE_SIZE") }
        // imgproxy's variables when none is configured, its signature size with them
        let imgproxy = try load(["IMGPROXY_KEYS": "0011223344556677, 8899aabbccddeeff", "IMGPROXY_SALTS": "0a0b,0c0d",
                                 "IMGPROXY_SIGNATURE_SIZE": "16"]).transform
        #expect(imgproxy.signing.pairs == [first, second] && imgproxy.signing.signatureSize == 16 && imgproxy.signingFromIMGPROXY)
        #expect { try load(["IMGPROXY_KEY": "0011223344556677", "IMGPROXY_SALT": "0a0b", "IMGPROXY_SIGNATURE_SIZE": "4"]) }
            throws: { "\($0)".contains("IMGPROXY_SIGNATURE_SIZE") }
        // ... and the configured pairs win over them
        let both = try load(["IMAGECACHED_TRANSFORM_KEYS": "0011223344556677", "IMAGECACHED_TRANSFORM_SALTS": "0a0b",
                             "IMGPROXY_KEY": "8899aabbccddeeff", "IMGPROXY_SALT": "0c0d"]).transform
        #expect(both.signing.pairs == [first] && !both.signingFromIMGPROXY)
        // Presets (split into segments), qualities (the others keep imgproxy's defaults) and efforts, at their edges
        let tuned = try load(["IMAGECACHED_TRANSFORM_PRESETS": "thumb=rs:fill:200:200/q:70, default=sm:0",
                              "IMAGECACHED_TRANSFORM_QUALITY": "jpeg=70,avif=1", "IMAGECACHED_TRANSFORM_AVIF_EFFORT": "9",
                              "IMAGECACHED_TRANSFORM_WEBP_EFFORT": "6"]).transform
        #expect(tuned.presets == ["thumb": ["rs:fill:200:200", "q:70"], "default": ["sm:0"]])
        #expect(tuned.quality[.jpeg] == 70 && tuned.quality[.avif] == 1 && tuned.quality[.webp] == 79)
        #expect(tuned.avifEffort == 9 && tuned.webpEffort == 6)
        #expect { try load(["IMAGECACHED_TRANSFORM_QUALITY": "jpeg=101"]) } throws: { "\($0)".contains("TRANSFORM_QUALITY") }
        #expect { try load(["IMAGECACHED_TRANSFORM_AVIF_EFFORT": "10"]) } throws: { "\($0)".contains("0 to 9") }
        #expect { try load(["IMAGECACHED_TRANSFORM_WEBP_EFFORT": "7"]) } throws: { "\($0)".contains("TRANSFORM_WEBP_EFFORT") }
        #expect { try load(["IMAGECACHED_TRANSFORM_PRESETS": "thumb"]) } throws: { "\($0)".contains("NAME=OPTIONS") }
    }

    @Test("transform-source-timeout: 10 s by default, any positive duration (0 refused with the key named), reloadable")
    func transformSourceTimeout() throws {
        let defaults = try Configuration.load(file: nil, environment: [:], flags: [])
        #expect(defaults.transform.sourceTimeoutSeconds == 10)
        let short = try Configuration.load(file: nil, environment: ["IMAGECACHED_TRANSFORM_SOURCE_TIMEOUT": "200ms"], flags: [])
        #expect(short.transform.sourceTimeoutSeconds == 0.2)
        #expect(defaults.restartOnlyChanges(to: short).isEmpty)
        #expect { try Configuration.load(file: nil, environment: ["IMAGECACHED_TRANSFORM_SOURCE_TIMEOUT": "0"], flags: []) }
            throws: { "\($0)".contains("TRANSFORM_SOURCE_TIMEOUT") }
    }

    @Test("max-variants: 16 by default, 1 at least (0 refused with the key named), restart only")
    func maxVariants() throws {
        let defaults = try Configuration.load(file: nil, environment: [:], flags: [])
        #expect(defaults.maxVariants == 16)
        let one = try Configuration.load(file: nil, environment: ["IMAGECACHED_MAX_VARIANTS": "1"], flags: [])
        #expect(one.maxVariants == 1)
        #expect(defaults.restartOnlyChanges(to: one) == ["max-variants: 16 -> 1"])
        #expect { try Configuration.load(file: nil, environment: [:],
                                         flags: [ConfigSetting(key: "max-variants", value: .scalar("0"), source: "--max-variants")]) }
            throws: { "\($0)".contains("--max-variants") && "\($0)".contains(">= 1") }
    }

    @Test("intercept-hosts: none by default, a YAML list or a comma-separated variable, reloadable; a bad item named with the key; intercept-ca-dir restart only")
    func interceptKeys() throws {
        // Given
        let defaults = try Configuration.load(file: nil, environment: [:], flags: [])
        #expect(defaults.interceptHosts.isEmpty)
        // When
        let file = try Configuration.settings(fromYAML: "intercept-hosts: [Images.Example.com, \"*.cdn.example\", 203.0.113.5]\n", name: "x.yaml")
        var fromFile = Configuration()
        for setting in file { try fromFile.apply(setting) }
        let fromEnvironment = try Configuration.load(file: nil, environment: ["IMAGECACHED_INTERCEPT_HOSTS": "images.example.com, *.cdn.example,203.0.113.5",
                                                                              "IMAGECACHED_INTERCEPT_CA_DIR": "/srv/ca"], flags: [])
        // Then
        #expect(fromFile.interceptHosts.description == "images.example.com,*.cdn.example,203.0.113.5")
        #expect(fromEnvironment.interceptHosts == fromFile.interceptHosts)
        #expect(fromEnvironment.interceptCADirectory == "/srv/ca")
        #expect(defaults.restartOnlyChanges(to: fromFile).isEmpty)
        #expect(defaults.restartOnlyChanges(to: fromEnvironment) == ["intercept-ca-dir: \(defaults.interceptCADirectory) -> /srv/ca"])
        #expect { try Configuration.load(file: nil, environment: [:],
                                         flags: [ConfigSetting(key: "intercept-hosts", value: .scalar("a.test,bücher.test"), source: "--intercept-hosts")]) }
            throws: { "\($0)" == "configuration error: --intercept-hosts: 'bücher.test': not ASCII: write an internationalised name in punycode (xn--...)" }
    }

    @Test("an unknown key in the file is reported with the file name")
    func unknownFileKey() throws {
        let settings = try Configuration.settings(fromYAML: "memroy-limit: 1MiB\n", name: "x.yaml")
        var configuration = Configuration()
        #expect(throws: ConfigError.self) { try configuration.apply(settings[0]) }
        #expect(settings[0].source == "x.yaml: memroy-limit")
    }

    @Test("origins map prefixes and refuse the reserved paths")
    func origins() throws {
        let settings = try Configuration.settings(fromYAML: """
            origins:
              - prefix: /a
                url: https://a.example
              - url: https://b.example
            """, name: "o.yaml")
        var configuration = Configuration()
        for setting in settings { try configuration.apply(setting) }
        #expect(configuration.origins == [OriginMapping(prefix: "/a", url: "https://a.example"), OriginMapping(prefix: "/", url: "https://b.example")])
        let reserved = try Configuration.settings(fromYAML: "origins:\n  - prefix: /_imagecached/x\n    url: http://h\n", name: "r.yaml")
        #expect(throws: ConfigError.self) { try configuration.apply(reserved[0]) }
    }

    @Test("sizes and durations parse with their units", arguments: [
        ("256MiB", 256 << 20), ("50MB", 50_000_000), ("1G", 1 << 30), ("1048576", 1_048_576), ("2KiB", 2048),
    ])
    func sizes(text: String, bytes: Int) {
        #expect(ByteSize.parse(text) == bytes)
    }

    @Test("durations", arguments: [("10", 10.0), ("500ms", 0.5), ("5m", 300.0), ("1h", 3600.0), ("1d", 86400.0)])
    func durations(text: String, seconds: Double) {
        #expect(DurationText.parse(text) == seconds)
    }

    @Test("listen addresses", arguments: [
        ("127.0.0.1:8080", ListenAddress(host: "127.0.0.1", port: 8080)),
        ("[::1]:0", ListenAddress(host: "::1", port: 0)),
        (":9000", ListenAddress(host: "0.0.0.0", port: 9000)),
    ])
    func listen(text: String, address: ListenAddress) {
        #expect(ListenAddress.parse(text) == address)
    }
}
