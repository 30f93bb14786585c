// imagecached: parse the command line, load the configuration, run the daemon until a signal stops it.

import ArgumentParser
import Foundation
import ImageCacheCore
import Logging

struct Imagecached: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "imagecached",
        abstract: "A local HTTP image caching proxy: forward proxy, /fetch?url=..., or reverse proxy with --origin.",
        discussion: """
            Settings come from the defaults, then the configuration file (--config), then environment variables \
            (IMAGECACHED_ + the key upper-cased, e.g. IMAGECACHED_MEMORY_LIMIT), then these flags: flags win. \
            Sizes take KiB/MiB/GiB (1024) or KB/MB/GB (1000); durations take ms, s, m, h (plain numbers are seconds).
            """,
        version: imagecachedVersion,
        subcommands: [Purge.self, Stats.self, Prefetch.self, Config.self, Sign.self]
    )

    @Option(help: "Configuration file (YAML). Default: none, or $IMAGECACHED_CONFIG.")
    var config: String?

    @Option(help: "Address to serve on, HOST:PORT or [V6]:PORT; port 0 picks a free one. Default 127.0.0.1:8080.")
    var listen: String?
    @Option(help: "Reverse-proxy mode: map every request path to this origin base URL (http or https).")
    var origin: String?
    @Option(help: "Directory of the on-disk cache. Default $CACHE_DIRECTORY, else $XDG_CACHE_HOME/imagecached, else ~/.cache/imagecached.")
    var cacheDir: String?
    @Option(help: "Byte budget of the on-disk tier. Default 10GiB.")
    var diskLimit: String?
    @Option(help: "Disk entries not used for this long are removed, fresh or not. Default 7d.")
    var diskMaxAge: String?
    @Option(help: "Over --disk-limit, evict down to this fraction of it. Default 0.9.")
    var diskLowWater: String?
    @Flag(help: "fsync each disk entry as it is written (slower, survives power loss). Default off.")
    var diskFsync = false
    @Option(help: "Byte budget of the memory tier. Default 256MiB.")
    var memoryLimit: String?
    @Option(help: "Most entries in the memory tier; 0 means no count limit. Default 0.")
    var memoryCountLimit: String?
    @Option(help: "Objects larger than this are streamed but not kept in memory. Default 1/8 of --memory-limit.")
    var memoryObjectLimit: String?
    @Option(help: "Most stored variants of one URL (responses with Vary), in memory and on disk each; the least recently used goes past it. Default 16.")
    var maxVariants: String?
    @Option(help: "Largest upstream object served or stored; larger transfers are stopped. Default 50MiB.")
    var maxObjectSize: String?
    @Option(help: "Offline policy: how long past its freshness a stored entry may still be served when the origin fails (0 = only where stale-if-error says so). Default 0.")
    var staleIfError: String?
    @Option(help: "Comma-separated media types served and stored; */* turns the image checks off. Default image/jpeg,image/png,image/gif,image/webp,image/avif.")
    var contentTypes: String?
    @Flag(help: "Allow SVG (image/svg+xml), which can carry script. Default off.")
    var allowSvg = false
    @Flag(help: "Let forward and fetch modes reach loopback, private and link-local addresses. Default off.")
    var allowPrivateNetworks = false
    @Option(help: "Fraction of (Date - Last-Modified) used as freshness when the origin gives none. Default 0.1.")
    var heuristicFraction: String?
    @Option(help: "Cap on heuristic freshness. Default 1d (86400).")
    var heuristicMax: String?
    @Flag(help: "Keep an upstream transfer running to fill the cache when every client waiting on it has gone. Default off.")
    var completeAbandonedFetches = false
    @Option(help: "trace, debug, info, notice, warning, error or critical. Default info.")
    var logLevel: String?
    @Option(help: "One log line per request: true or false. Default false.")
    var accessLog: String?
    @Option(help: "Comma-separated address ranges (CIDR) allowed to use /_imagecached/. Default 127.0.0.0/8,::1/128.")
    var adminAllow: String?
    @Option(help: "Comma-separated host names admin requests may name in Host besides IP literals and localhost. Default none.")
    var adminHosts: String?
    @Option(help: "File holding the admin token (admin-token itself is read from the file or the environment only). Default none.")
    var adminTokenFile: String?
    @Option(help: "File of signing keys for signed fetch URLs, one per line (signing-keys itself: file or environment only). Default none.")
    var signingKeysFile: String?
    @Option(help: "Refuse unsigned /fetch and forward-proxy requests: auto, true or false. Default auto (on when listen is not loopback).")
    var requireSignature: String?
    @Option(help: "Bytes of response bodies in flight past which backpressure applies (bodies not kept for the cache, upstream transfers paused while a client is behind). Default 64MiB.")
    var inFlightLimit: String?
    @Option(help: "On SIGTERM, how long requests in flight may take to finish. Default 30s.")
    var shutdownTimeout: String?

    @Option(help: "Longest request line in bytes (414 beyond). Default 8192.")
    var serverMaxRequestLine: String?
    @Option(help: "Largest request header section in bytes (431 beyond). Default 16384.")
    var serverMaxHeaderBytes: String?
    @Option(help: "Most request header fields (431 beyond). Default 100.")
    var serverMaxHeaderCount: String?
    @Option(help: "Largest request body (413 beyond). Default 1MiB.")
    var serverMaxRequestBody: String?
    @Option(help: "Bytes of a streamed response a client may have handed to it and not yet taken before it counts as behind. Default 256KiB.")
    var serverWriteBuffer: String?
    @Option(help: "Time to receive a whole request head. Default 10s.")
    var serverHeaderTimeout: String?
    @Option(help: "Time to receive a whole request body once its head is in (408 beyond). Default 30s.")
    var serverBodyTimeout: String?
    @Option(help: "Time a keep-alive connection may sit idle. Default 60s.")
    var serverIdleTimeout: String?
    @Option(help: "Time a client may take to accept written bytes. Default 60s.")
    var serverWriteTimeout: String?
    @Option(help: "Connections served at once. Default 10000.")
    var serverMaxConnections: String?
    @Option(help: "auto: pin event loop i to the i-th CPU the daemon may use; off: let the kernel place them. Default auto.")
    var serverCpuAffinity: String?

    @Option(help: "Upstream connect timeout (DNS, TCP, TLS). Default 10s.")
    var upstreamConnectTimeout: String?
    @Option(help: "Upstream whole-transfer timeout. Default 60s.")
    var upstreamTimeout: String?
    @Option(help: "Bytes per second under which an upstream transfer counts as stalled. Default 1024.")
    var upstreamLowSpeedLimit: String?
    @Option(help: "Time under the low-speed limit before the transfer is aborted. Default 20s.")
    var upstreamLowSpeedTime: String?
    @Option(help: "Redirects followed upstream. Default 5.")
    var upstreamMaxRedirects: String?
    @Option(help: "Upstream transfers at once; more wait in a queue. Default 64.")
    var upstreamMaxTransfers: String?
    @Option(help: "Connections to one upstream host at once. Default 8.")
    var upstreamMaxHostConnections: String?
    @Option(help: "Order of waiting upstream transfers: fifo or lifo. Default fifo.")
    var upstreamQueueOrder: String?
    @Option(help: "Time a transfer may wait for a slot before failing with 504. Default 30s.")
    var upstreamQueueTimeout: String?
    @Option(help: "User-Agent sent upstream when the client sent none. Default imagecached/VERSION.")
    var upstreamUserAgent: String?
    @Option(help: "CA bundle file for upstream TLS verification. Default: the system store.")
    var upstreamCaBundle: String?

    /// The flags given, as settings keyed like the configuration file.
    func flagSettings() -> [ConfigSetting] {
        let values: [(String, String?)] = [
            ("listen", listen), ("origin", origin), ("cache-dir", cacheDir),
            ("disk-limit", diskLimit), ("disk-max-age", diskMaxAge), ("disk-low-water", diskLowWater),
            ("disk-fsync", diskFsync ? "true" : nil), ("memory-limit", memoryLimit),
            ("memory-count-limit", memoryCountLimit), ("memory-object-limit", memoryObjectLimit),
            ("max-variants", maxVariants),
            ("max-object-size", maxObjectSize), ("stale-if-error", staleIfError), ("content-types", contentTypes),
            ("allow-svg", allowSvg ? "true" : nil), ("allow-private-networks", allowPrivateNetworks ? "true" : nil),
            ("heuristic-fraction", heuristicFraction), ("heuristic-max", heuristicMax),
            ("complete-abandoned-fetches", completeAbandonedFetches ? "true" : nil),
            ("log-level", logLevel), ("access-log", accessLog), ("admin-allow", adminAllow),
            ("admin-hosts", adminHosts), ("admin-token-file", adminTokenFile),
            ("signing-keys-file", signingKeysFile), ("require-signature", requireSignature),
            ("in-flight-limit", inFlightLimit), ("shutdown-timeout", shutdownTimeout),
            ("server.max-request-line", serverMaxRequestLine), ("server.max-header-bytes", serverMaxHeaderBytes),
            ("server.max-header-count", serverMaxHeaderCount), ("server.max-request-body", serverMaxRequestBody),
            ("server.write-buffer", serverWriteBuffer), ("server.header-timeout", serverHeaderTimeout), ("server.body-timeout", serverBodyTimeout),
            ("server.idle-timeout", serverIdleTimeout),
            ("server.write-timeout", serverWriteTimeout), ("server.max-connections", serverMaxConnections),
            ("server.cpu-affinity", serverCpuAffinity),
            ("upstream.connect-timeout", upstreamConnectTimeout), ("upstream.timeout", upstreamTimeout),
            ("upstream.low-speed-limit", upstreamLowSpeedLimit), ("upstream.low-speed-time", upstreamLowSpeedTime),
            ("upstream.max-redirects", upstreamMaxRedirects), ("upstream.max-transfers", upstreamMaxTransfers),
            ("upstream.max-host-connections", upstreamMaxHostConnections), ("upstream.queue-order", upstreamQueueOrder),
            ("upstream.queue-timeout", upstreamQueueTimeout), ("upstream.user-agent", upstreamUserAgent),
            ("upstream.ca-bundle", upstreamCaBundle),
        ]
        return values.compactMap { key, value in
            value.map { ConfigSetting(key: key, value: .scalar($0), source: "--" + key.replacingOccurrences(of: ".", with: "-")) }
        }
    }

    func run() throws {
        let environment = ProcessInfo.processInfo.environment
        let file = config ?? environment["IMAGECACHED_CONFIG"]
        let flags = flagSettings()
        // The same sources are read again on SIGHUP, with the cgroup limit as it is then; a reload refuses an empty file.
        let load: @Sendable (_ reloading: Bool) throws -> Configuration = { reloading in
            try Configuration.load(file: file, environment: environment, flags: flags, cgroupMemoryLimitBytes: CgroupMemory.limitBytes(),
                                   refusingEmptyFile: reloading)
        }
        let configuration: Configuration
        do {
            configuration = try load(false)
        } catch {
            FileHandle.standardError.write(Data("imagecached: \(error)\n".utf8))
            throw ExitCode(2)
        }
        let logger = DaemonLogging.makeLogger(level: configuration.logLevel)
        if !configuration.memoryLimitIsExplicit, let cgroup = CgroupMemory.limitBytes() {
            logger.info("memory-limit: \(configuration.memoryLimitBytes) bytes, \(Configuration.cgroupMemoryFraction) of the cgroup memory limit (\(cgroup) bytes); set memory-limit to override")
        }
        ProcessMemory.returnLargeBlocksToSystem()
        let daemon: Daemon
        do {
            daemon = try Daemon(configuration: configuration, logger: logger)
            daemon.reloadSource = { try load(true) }
            try daemon.start()
        } catch {
            logger.critical("cannot start: \(error)")
            throw ExitCode(1)
        }
        daemon.runUntilSignalled()
    }
}

/// `imagecached sign URL`: a signed fetch URL for the daemon, made with the first signing key of its configuration
/// (file or environment), as `http://ADDRESS/fetch?url=...&sig=...` or, with --camo, `http://ADDRESS/fetch/<hex>/<hex>`.
struct Sign: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print a signed fetch URL for URL, made with the first of the daemon's signing keys.")

    @Argument(help: "The image URL (http or https).")
    var url: String
    @Flag(help: "Print the camo path form /fetch/<HMAC hex>/<URL hex> instead of /fetch?url=...&sig=...")
    var camo = false
    @OptionGroup var daemon: DaemonAddress

    func run() throws {
        let configuration = try daemon.configuration()
        guard (try? UpstreamURL.parse(url)) != nil else {
            FileHandle.standardError.write(Data("imagecached: '\(url)' is not an absolute http or https URL\n".utf8))
            throw ExitCode(2)
        }
        let signing = URLSigning(keys: configuration.signingKeys)
        let base = "http://\(AdminClient.address(for: configuration.listen))"
        let unreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
        guard let signed = camo ? signing.camoPath(for: url).map({ base + "/fetch/" + $0 })
                : signing.signature(for: url).map({ base + "/fetch?url=" + (url.addingPercentEncoding(withAllowedCharacters: unreserved) ?? url) + "&sig=" + $0 }) else {
            FileHandle.standardError.write(Data("imagecached: no signing key: set signing-keys in the configuration file or IMAGECACHED_SIGNING_KEYS, or signing-keys-file\n".utf8))
            throw ExitCode(2)
        }
        print(signed)
    }
}

/// `imagecached config check FILE`: validates a configuration file as a reload would (every key and value, and an
/// empty file refused), so that operators test before they send SIGHUP.
struct Config: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Configuration tools.", subcommands: [Check.self])

    struct Check: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Check a configuration file as a reload would: exit 0 and 'FILE: ok', or exit 1 and the first error.")

        @Argument(help: "The configuration file (YAML).")
        var file: String

        func run() throws {
            do {
                let configuration = try Configuration.load(file: file, environment: [:], flags: [], refusingEmptyFile: true)
                print("\(file): ok (listen \(configuration.listen), \(configuration.origins.count) origin(s))")
            } catch {
                FileHandle.standardError.write(Data("imagecached: \(error)\n".utf8))
                throw ExitCode(1)
            }
        }
    }
}

/// `imagecached purge URL` / `imagecached purge --all`: removes from a running daemon's memory and disk tiers.
struct Purge: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Remove one URL, or everything, from a running daemon's cache (memory and disk).")

    @Argument(help: "The URL to remove (as a client asked for it: http://host/path).")
    var url: String?
    @Flag(help: "Remove everything.")
    var all = false
    // Not --listen: the top-level command owns that name and would take it.
    @Option(name: .customLong("address"), help: "The daemon's address, HOST:PORT. Default: listen from --config / IMAGECACHED_LISTEN, else 127.0.0.1:8080.")
    var address: String?
    @Option(name: .customLong("daemon-config"), help: "The daemon's configuration file, to find where it listens.")
    var daemonConfig: String?

    func validate() throws {
        guard all != (url != nil) else { throw ValidationError("give either a URL or --all") }
    }

    func run() throws {
        let environment = ProcessInfo.processInfo.environment
        let flags = address.map { [ConfigSetting(key: "listen", value: .scalar($0), source: "--address")] } ?? []
        let configuration: Configuration
        do {
            configuration = try Configuration.load(file: daemonConfig ?? environment["IMAGECACHED_CONFIG"], environment: environment, flags: flags)
        } catch {
            FileHandle.standardError.write(Data("imagecached: \(error)\n".utf8))
            throw ExitCode(2)
        }
        var target = "/_imagecached/cache"
        if let url {
            target += "?url=" + (url.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? url)
        }
        do {
            let response = try AdminClient.send("DELETE", target, to: AdminClient.address(for: configuration.listen),
                                                token: configuration.adminToken)
            print(response.body.trimmingCharacters(in: .whitespacesAndNewlines))
            if response.status != 200 { throw ExitCode(1) }
        } catch let error as AdminClientError {
            FileHandle.standardError.write(Data("imagecached: \(error)\n".utf8))
            throw ExitCode(1)
        }
    }
}

/// The daemon's address for a subcommand: --address, else listen from --daemon-config / the environment.
struct DaemonAddress: ParsableArguments {
    // Not --listen: the top-level command owns that name and would take it.
    @Option(name: .customLong("address"), help: "The daemon's address, HOST:PORT. Default: listen from --daemon-config / IMAGECACHED_LISTEN, else 127.0.0.1:8080.")
    var address: String?
    @Option(name: .customLong("daemon-config"), help: "The daemon's configuration file, to find where it listens.")
    var daemonConfig: String?

    /// The address, and the admin token of the daemon's configuration (file or environment), if any.
    func resolve() throws -> (address: ListenAddress, token: String?) {
        let configuration = try configuration()
        return (AdminClient.address(for: configuration.listen), configuration.adminToken)
    }

    /// The daemon's configuration as the subcommands see it: --daemon-config / IMAGECACHED_CONFIG, the environment,
    /// and --address as its listen.
    func configuration() throws -> Configuration {
        let environment = ProcessInfo.processInfo.environment
        let flags = address.map { [ConfigSetting(key: "listen", value: .scalar($0), source: "--address")] } ?? []
        do {
            return try Configuration.load(file: daemonConfig ?? environment["IMAGECACHED_CONFIG"], environment: environment, flags: flags)
        } catch {
            FileHandle.standardError.write(Data("imagecached: \(error)\n".utf8))
            throw ExitCode(2)
        }
    }
}

/// `imagecached stats`: a readable summary of a running daemon's counters.
struct Stats: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print a summary of a running daemon: hit ratio, bytes from cache and fetched, coalescing, tiers, top hosts.")

    @OptionGroup var daemon: DaemonAddress
    @Flag(help: "Print the raw JSON of /_imagecached/stats.")
    var json = false

    func run() throws {
        let (address, token) = try daemon.resolve()
        let response: AdminResponse
        do {
            response = try AdminClient.send("GET", "/_imagecached/stats", to: address, token: token)
        } catch {
            FileHandle.standardError.write(Data("imagecached: \(error)\n".utf8))
            throw ExitCode(1)
        }
        guard response.status == 200 else {
            FileHandle.standardError.write(Data("imagecached: the daemon answered \(response.status): \(response.body)".utf8))
            throw ExitCode(1)
        }
        if json {
            print(response.body, terminator: "")
            return
        }
        guard let stats = try? DaemonStats.decode(Data(response.body.utf8)) else {
            FileHandle.standardError.write(Data("imagecached: the daemon's stats are not readable JSON\n".utf8))
            throw ExitCode(1)
        }
        print(StatsReport.text(stats), terminator: "")
    }
}

/// `imagecached prefetch FILE|-`: warms a running daemon's cache with a list of URLs, showing progress.
struct Prefetch: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Warm a running daemon's cache: URLs one per line from FILE, or - for standard input.",
        discussion: "Exits 1 naming the URLs that failed, if any did.")

    @Argument(help: "File of URLs, one per line (# comments and blank lines skipped), or - for standard input.")
    var file: String
    @OptionGroup var daemon: DaemonAddress
    @Flag(help: "No progress bar, only the summary.")
    var quiet = false

    func run() throws {
        let data: Data
        if file == "-" {
            data = FileHandle.standardInput.readDataToEndOfFile()
        } else if let contents = FileManager.default.contents(atPath: file) {
            data = contents
        } else {
            FileHandle.standardError.write(Data("imagecached: cannot read \(file)\n".utf8))
            throw ExitCode(2)
        }
        let urls = String(decoding: data, as: UTF8.self).split(whereSeparator: \.isNewline)
            .map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty && !$0.hasPrefix("#") }
        let (address, token) = try daemon.resolve()
        var progress = PrefetchProgress(total: urls.count, live: !quiet && isatty(STDERR_FILENO) == 1)
        var pending: [UInt8] = []
        let status: Int
        do {
            status = try AdminClient.stream("POST", "/_imagecached/prefetch", to: address, body: Array((urls.joined(separator: "\n") + "\n").utf8),
                                            token: token, timeoutSeconds: 600) { bytes in
                pending.append(contentsOf: bytes)
                while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                    progress.record(line: String(decoding: pending[..<newline], as: UTF8.self))
                    pending.removeFirst(newline + 1)
                }
            }
        } catch {
            progress.finishLine()
            FileHandle.standardError.write(Data("imagecached: \(error)\n".utf8))
            throw ExitCode(1)
        }
        progress.finishLine()
        guard status == 200 else {
            FileHandle.standardError.write(Data("imagecached: the daemon answered \(status)\n".utf8))
            throw ExitCode(1)
        }
        print(progress.summary, terminator: "")
        if !progress.failures.isEmpty || progress.done < urls.count { throw ExitCode(1) }
    }
}

Imagecached.main()
