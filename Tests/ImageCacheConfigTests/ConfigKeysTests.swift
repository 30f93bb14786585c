// The table of configuration keys is the one definition: the flags and --help, the environment, the reload's
// restart-only report, the table in docs/configuration.md and Config/imagecached.yaml all agree with it.

import Foundation
import Testing
import ImageCacheTestSupport
@testable import ImageCacheConfig
import ImageCacheHTTP
import ImageCacheServer
import ImageCacheUpstream

@Suite("Configuration keys, defined once", .timeLimit(.minutes(1)))
struct ConfigKeysTests {
    static let root = RepositoryPath.root

    @Test("names, flags and environment variables are unique, and every key says its default and meaning")
    func wellFormed() {
        let keys = ConfigKey.all
        #expect(Set(keys.map(\.name)).count == keys.count)
        #expect(Set(keys.compactMap(\.flag)).count == keys.compactMap(\.flag).count)
        #expect(Set(keys.compactMap(\.environmentVariable)).count == keys.compactMap(\.environmentVariable).count)
        for key in keys {
            #expect(!key.defaultText.isEmpty && !key.meaning.isEmpty && !key.form.isEmpty, "\(key.name)")
        }
        // Secrets are never flags; the structured origins list is the file's only.
        #expect(keys.filter { $0.flag == nil }.map(\.name) == ["origins", "transform-keys", "transform-salts", "admin-token", "signing-keys"])
        #expect(ConfigKey.byName["server.idle-timeout"]?.flag == "--server-idle-timeout")
        #expect(ConfigKey.byName["server.idle-timeout"]?.environmentVariable == "IMAGECACHED_SERVER_IDLE_TIMEOUT")
    }

    /// The keys whose default the table says in words rather than as a value (a rule, a secret, a place).
    static let defaultsInWords = ["origin", "origins", "cache-dir", "memory-limit", "memory-object-limit", "admin-token",
                                  "admin-token-file", "signing-keys-file", "upstream.user-agent", "upstream.ca-bundle", "intercept-ca-dir", "tls-listen"]

    @Test("one default per key: every default the table states reads back through its own key as the default in force")
    func defaultsReadBack() throws {
        for key in ConfigKey.all where !Self.defaultsInWords.contains(key.name) {
            // Given the defaults
            var configuration = Configuration()
            // When the key's documented default is applied ("none": an empty list)
            let value: ConfigSetting.Value = key.defaultText.hasPrefix("none") ? .list([]) : .scalar(key.defaultText)
            try configuration.apply(ConfigSetting(key: key.name, value: value, source: "the default of \(key.name)"))
            // Then nothing changed
            #expect(configuration == Configuration(), "\(key.name): \(key.defaultText)")
        }
    }

    @Test("the defaults said in words say what the defaults are")
    func defaultsInWords() {
        let defaults = Configuration()
        func text(_ name: String) -> String { ConfigKey.byName[name]?.defaultText ?? "" }
        #expect(text("origin") == "none" && text("origins") == "none" && defaults.origins.isEmpty)
        #expect(text("memory-limit") == ByteSize.text(defaults.memoryLimitBytes) + ", or half the cgroup's memory.max")
        #expect(Configuration.cgroupMemoryFraction == 0.5)
        #expect(text("memory-object-limit") == "1/8 of memory-limit" && defaults.memoryObjectLimitBytes == nil)
        #expect(defaults.effectiveMemoryObjectLimitBytes == defaults.memoryLimitBytes / 8)
        #expect(text("admin-token") == "none" && defaults.adminToken == nil)
        #expect(text("tls-listen") == "none" && defaults.tlsListen == nil)
        #expect(text("upstream.user-agent") == "imagecached/VERSION" && defaults.upstream.userAgent == "imagecached/\(imagecachedVersion)")
        #expect(text("upstream.ca-bundle") == "the system store" && defaults.upstream.caBundle.isEmpty)
        #expect(text("cache-dir").hasPrefix("$CACHE_DIRECTORY")
                && Configuration.defaultCacheDirectory(environment: ["CACHE_DIRECTORY": "/var/cache/x"]) == "/var/cache/x")
        #expect(text("intercept-ca-dir") == "$STATE_DIRECTORY/ca, else $XDG_STATE_HOME/imagecached/ca, else ~/.local/state/imagecached/ca")
        #expect(Configuration.defaultCADirectory(environment: ["STATE_DIRECTORY": "/var/lib/imagecached:/var/lib/other", "HOME": "/h"]) == "/var/lib/imagecached/ca")
        #expect(Configuration.defaultCADirectory(environment: ["XDG_STATE_HOME": "/x", "HOME": "/h"]) == "/x/imagecached/ca")
        #expect(Configuration.defaultCADirectory(environment: ["HOME": "/h"]) == "/h/.local/state/imagecached/ca")
    }

    @Test("sizes are written in the largest binary unit that divides them, else in bytes, and read back", arguments: [
        (0, "0"), (1000, "1000"), (1024, "1KiB"), (1536, "1536"), (256 << 10, "256KiB"), (1 << 20, "1MiB"), (10 << 30, "10GiB"),
    ] as [(Int, String)])
    func sizeText(bytes: Int, expected: String) {
        #expect(ByteSize.text(bytes) == expected)
        #expect(ByteSize.parse(expected) == bytes)
    }

    @Test("durations are written in whole days or hours when they are some, else in seconds, and read back", arguments: [
        (0, "0"), (0.5, "0.5s"), (2, "2s"), (60, "60s"), (5400, "5400s"), (3600, "1h"), (86_400, "1d"), (7 * 86_400, "7d"),
    ] as [(Double, String)])
    func durationText(seconds: Double, expected: String) {
        #expect(DurationText.text(seconds) == expected)
        #expect(DurationText.parse(expected) == seconds)
    }

    @Test("the key names are a contract (flags, environment variables, files): renaming one is deliberate")
    func frozenNames() {
        #expect(ConfigKey.all.map(\.name) == [
            "listen", "tls-listen", "tls-cert", "tls-key", "origin", "origins", "cache-dir", "disk-limit", "disk-max-age", "disk-low-water", "disk-fsync",
            "memory-limit", "memory-count-limit", "memory-object-limit", "max-variants", "max-object-size",
            "stale-if-error", "stale-while-revalidate", "content-types", "allow-svg", "allow-private-networks", "allowed-sources",
            "proxy-allow", "forward-non-images", "connect-ports", "max-tunnels", "tunnel-idle-timeout", "heuristic-fraction",
            "heuristic-max", "targeted-cache-control", "strip-targeted-cache-control",
            "transforms", "transform-prefix", "transform-keys", "transform-salts", "transform-signature-size",
            "transform-presets", "transform-only-presets", "transform-workers", "transform-queue", "transform-queue-timeout",
            "transform-timeout", "transform-max-megapixels", "transform-max-result-megapixels", "transform-max-source-bytes", "transform-source-timeout", "transform-max-frames",
            "transform-max-dimension", "transform-allow-svg", "transform-auto-webp", "transform-auto-avif",
            "transform-quality", "transform-avif-effort", "transform-webp-effort", "transform-pixel-cache",
            "negative-ttl", "forward-request-fields",
            "drop-request-fields", "pass-trace", "complete-abandoned-fetches", "intercept-hosts", "intercept-ca-dir", "log-level", "access-log", "admin-allow", "admin-hosts", "admin-token", "admin-token-file",
            "status-refresh", "status-history-interval", "status-history-length", "signing-keys", "signing-keys-file", "require-signature", "in-flight-limit", "shutdown-timeout",
            "server.max-request-line", "server.max-header-bytes", "server.max-header-count",
            "server.max-request-body", "server.write-buffer", "server.header-timeout", "server.body-timeout",
            "server.idle-timeout", "server.write-timeout", "server.max-connections", "server.cpu-affinity",
            "upstream.connect-timeout", "upstream.timeout", "upstream.low-speed-limit", "upstream.low-speed-time",
            "upstream.max-redirects", "upstream.max-transfers", "upstream.max-host-connections",
            "upstream.queue-order", "upstream.queue-timeout", "upstream.user-agent", "upstream.ca-bundle",
            "fleet.servers", "fleet.item-max", "fleet.lease", "fleet.wait", "fleet.deadline",
        ])
        // The switches take no value; every other flag does.
        #expect(ConfigKey.all.filter(\.isSwitch).map(\.name) == ["disk-fsync", "allow-svg", "allow-private-networks",
                                                                  "strip-targeted-cache-control", "transforms",
                                                                  "transform-only-presets", "transform-allow-svg",
                                                                  "transform-auto-webp", "transform-auto-avif", "pass-trace",
                                                                  "complete-abandoned-fetches", "require-signature"])
    }

    @Test("the table of keys in docs/configuration.md is the one the table renders")
    func documentedTable() throws {
        let page = try String(contentsOf: Self.root.appendingPathComponent("docs/configuration.md"), encoding: .utf8)
        let begin = "<!-- config-keys:begin (generated by imagecached config keys) -->\n"
        let section = begin + ConfigKey.markdownTable() + "<!-- config-keys:end -->"
        let upToDate = page.contains(section)   // (a Bool, so that a failure prints the advice, not the whole page)
        #expect(upToDate, "regenerate the table in docs/configuration.md with: imagecached config keys (it goes between the config-keys markers)")
    }

    @Test("Config/imagecached.yaml names every key, and the values it sets are the defaults")
    func exampleFile() throws {
        let path = Self.root.appendingPathComponent("Config/imagecached.yaml").path
        let text = try String(contentsOfFile: path, encoding: .utf8)
        var named: Set<String> = []
        var section = ""
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let indented = line.hasPrefix(" ")
            var body = line.drop { $0 == " " }
            if body.hasPrefix("#") { body = body.dropFirst().drop { $0 == " " } }
            guard let colon = body.firstIndex(of: ":"), body[..<colon].allSatisfy({ $0.isLowercase || $0 == "-" }),
                  colon != body.startIndex else { continue }
            let name = String(body[..<colon])
            if !indented, !line.hasPrefix("#"), body[body.index(after: colon)...].trimmingCharacters(in: .whitespaces).isEmpty {
                section = name + "."
                continue
            }
            if !indented, !line.hasPrefix("#") { section = "" }
            named.insert((indented ? section : "") + name)
        }
        for key in ConfigKey.all {
            #expect(named.contains(key.name), "\(key.name) is missing from Config/imagecached.yaml")
        }
        #expect(try Configuration.load(file: path, environment: [:], flags: []) == Configuration())
    }

    @Test("the daemon's flags: --KEY VALUE, --KEY=VALUE, switches, --config; unknown flags, secrets and missing values refused")
    func commandLine() throws {
        let parsed = try DaemonCommandLine.parse(["--config", "/etc/x.yaml", "--memory-limit", "64MiB", "--disk-fsync",
                                                   "--server-idle-timeout=5s", "--allow-svg=false"])
        #expect(parsed == .run(config: "/etc/x.yaml", flags: [
            ConfigSetting(key: "memory-limit", value: .scalar("64MiB"), source: "--memory-limit"),
            ConfigSetting(key: "disk-fsync", value: .scalar("true"), source: "--disk-fsync"),
            ConfigSetting(key: "server.idle-timeout", value: .scalar("5s"), source: "--server-idle-timeout"),
            ConfigSetting(key: "allow-svg", value: .scalar("false"), source: "--allow-svg"),
        ]))
        // A switch named in an issue stays usable bare; its words may follow it as the next argument.
        #expect(try DaemonCommandLine.parse(["--require-signature", "--listen", "0.0.0.0:8080"]) == .run(config: nil, flags: [
            ConfigSetting(key: "require-signature", value: .scalar("true"), source: "--require-signature"),
            ConfigSetting(key: "listen", value: .scalar("0.0.0.0:8080"), source: "--listen"),
        ]))
        #expect(try DaemonCommandLine.parse(["--require-signature", "auto", "--disk-fsync", "false"]) == .run(config: nil, flags: [
            ConfigSetting(key: "require-signature", value: .scalar("auto"), source: "--require-signature"),
            ConfigSetting(key: "disk-fsync", value: .scalar("false"), source: "--disk-fsync"),
        ]))
        #expect(try DaemonCommandLine.parse(["--require-signature"])
                == .run(config: nil, flags: [ConfigSetting(key: "require-signature", value: .scalar("true"), source: "--require-signature")]))
        #expect(try DaemonCommandLine.parse(["--listen", "127.0.0.1:1", "--help"]) == .help)
        #expect(try DaemonCommandLine.parse(["--version"]) == .version)
        #expect(try DaemonCommandLine.parse(["--upstream-user-agent=--x"])
                == .run(config: nil, flags: [ConfigSetting(key: "upstream.user-agent", value: .scalar("--x"), source: "--upstream-user-agent")]))
        for (arguments, message) in [
            (["--memory-limmit", "1MiB"], "--memory-limmit: unknown flag"),
            (["--admin-token", "0123456789abcdef0123"], "--admin-token: unknown flag"),
            (["--memory-limit"], "--memory-limit: needs a value (SIZE)"),
            (["--cache-dir", "--disk-fsync"], "--cache-dir: needs a value (DIR)"),
            (["-admin-token=0123456789abcdef0123"], "-admin-token: unexpected argument"),
            (["serve"], "serve: unexpected argument"),
        ] {
            #expect { try DaemonCommandLine.parse(arguments) } throws: { "\($0)".contains(message) && !"\($0)".contains("0123") }
        }
    }

    @Test("--help lists every flag with its default, and the keys that are not flags")
    func help() {
        let text = DaemonCommandLine.help(abstract: "x", subcommands: [("purge", "remove")])
        for key in ConfigKey.all {
            if let flag = key.flag {
                #expect(text.contains("  \(key.flagUsage ?? flag)\n"), "\(flag)")
            } else {
                #expect(text.contains("  \(key.name) ("), "\(key.name)")
            }
            #expect(text.contains("Default: \(key.defaultText)."), "\(key.name)")
        }
    }

    @Test("a reload reports each restart-only key that changed, by name, and keeps the running values of those only")
    func restartOnly() {
        let running = Configuration()
        var next = Configuration()
        next.listen = ListenAddress(host: "127.0.0.1", port: 9)
        next.memoryLimitBytes = 1 << 20
        next.upstream.maxRedirects = 1
        next.server.cpuAffinity = .off
        #expect(running.restartOnlyChanges(to: next) == [
            "listen: 127.0.0.1:8080 -> 127.0.0.1:9", "server.cpu-affinity: auto -> off", "upstream.max-redirects: 5 -> 1",
        ])
        next.keepRestartOnlySettings(of: running)
        #expect(next == { var kept = running; kept.memoryLimitBytes = 1 << 20; return kept }())
    }
}
