// imagecached: parse the command line, load the configuration, run the daemon until a signal stops it.

import ImageCacheHTTP
import ImageCacheStatus
import ImageCacheServer
import ImageCacheConfig
import ImageCacheTransform
import ImageCacheCore
import ImageCacheOps
import ArgumentParser
import Foundation

import Logging

/// The root command, for ArgumentParser's subcommands and `imagecached help <subcommand>`. The daemon itself
/// (`imagecached [--config FILE] [--KEY VALUE ...]`) is `runDaemon`, whose flags and --help come from the table of
/// configuration keys (ConfigKeys.swift), so that each key is defined once.
struct Imagecached: ParsableCommand {
    static let abstract = "A local HTTP image caching proxy: forward proxy, /fetch?url=..., or reverse proxy with --origin."
    static let subcommandTypes: [any ParsableCommand.Type] = [Purge.self, Stats.self, Prefetch.self, Config.self, Sign.self, CA.self]
    static let configuration = CommandConfiguration(
        commandName: "imagecached", abstract: abstract, version: imagecachedVersion, subcommands: subcommandTypes)
}

/// Runs the daemon: parse its flags, load the configuration, serve until a signal stops it. Exits 2 on a
/// configuration error, 1 when it cannot start.
func runDaemon(_ arguments: [String]) -> Never {
    func fail(_ error: any Error, status: Int32) -> Never {
        FileHandle.standardError.write(Data("imagecached: \(error)\n".utf8))
        exit(status)
    }
    let file: String?, flags: [ConfigSetting]
    do {
        switch try DaemonCommandLine.parse(arguments) {
        case .help:
            let subcommands = Imagecached.subcommandTypes.map {
                (name: $0.configuration.commandName ?? String(describing: $0).lowercased(), abstract: $0.configuration.abstract)
            }
            print(DaemonCommandLine.help(abstract: Imagecached.abstract, subcommands: subcommands), terminator: "")
            exit(0)
        case .version:
            print(imagecachedVersion)
            exit(0)
        case let .run(config, given):
            (file, flags) = (config ?? ProcessInfo.processInfo.environment["IMAGECACHED_CONFIG"], given)
        }
    } catch {
        fail(error, status: 2)
    }
    let environment = ProcessInfo.processInfo.environment
    // The same sources are read again on SIGHUP, with the cgroup limit as it is then; a reload refuses an empty file.
    let load: @Sendable (_ reloading: Bool) throws -> Configuration = { reloading in
        try Configuration.load(file: file, environment: environment, flags: flags, cgroupMemoryLimitBytes: CgroupMemory.limitBytes(),
                               refusingEmptyFile: reloading)
    }
    let configuration: Configuration
    do {
        configuration = try load(false)
    } catch {
        fail(error, status: 2)
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
        exit(1)
    }
    daemon.runUntilSignalled()
}

/// `imagecached sign URL`: a signed fetch URL for the daemon, made with the first signing key of its configuration
/// (file or environment), as `http://ADDRESS/fetch?url=...&sig=...` or, with --camo, `http://ADDRESS/fetch/<hex>/<hex>`.
/// With --transform OPTIONS: a signed transform URL (imgproxy's form) with the first transform key/salt pair.
struct Sign: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print a signed fetch URL for URL (first signing key), or with --transform a signed transform URL (first key/salt pair).")

    @Argument(help: "The image URL (http or https); with --transform also a path under a configured origin (/img/a.jpg).")
    var url: String
    @Flag(help: "Print the camo path form /fetch/<HMAC hex>/<URL hex> instead of /fetch?url=...&sig=...")
    var camo = false
    @Option(help: "Processing options of a transform URL, e.g. rs:fill:300:200/q:80/f:webp (imgproxy's syntax).")
    var transform: String?
    @Flag(help: "With --transform: the source as URL-safe base64 instead of /plain/<percent-encoded URL>.")
    var base64 = false
    @OptionGroup var daemon: DaemonAddress

    func run() throws {
        let configuration = try daemon.configuration()
        if let transform {
            try signTransform(options: transform, configuration: configuration)
            return
        }
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

    private func signTransform(options: String, configuration: Configuration) throws {
        guard url.hasPrefix("/") || (try? UpstreamURL.parse(url)) != nil else {
            FileHandle.standardError.write(Data("imagecached: '\(url)' is neither an absolute http or https URL nor a path\n".utf8))
            throw ExitCode(2)
        }
        let segments = options.split(separator: "/").map { Substring($0) }
        do {
            _ = try TransformOptions.parse(segments, presets: configuration.transform.presets,
                                           onlyPresets: configuration.transform.onlyPresets,
                                           maxDimension: configuration.transform.limits.maxDimension)
        } catch {
            FileHandle.standardError.write(Data("imagecached: \(error.reason)\n".utf8))
            throw ExitCode(2)
        }
        let source: String
        if base64 {
            source = URLSigning.base64URLEncode(Array(url.utf8))
        } else {
            let kept = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~:/")
            source = "plain/" + (url.addingPercentEncoding(withAllowedCharacters: kept) ?? url)
        }
        let path = "/" + segments.joined(separator: "/") + "/" + source
        let signing = configuration.transform.signing
        if signing.isInsecure {
            FileHandle.standardError.write(Data("imagecached: no transform key: the URL is unsigned (set transform-keys and transform-salts, or IMGPROXY_KEY and IMGPROXY_SALT)\n".utf8))
        }
        let prefix = configuration.transform.normalisedPrefix
        print("http://\(AdminClient.address(for: configuration.listen))\(prefix)/\(signing.sign(path: path))\(path)")
    }
}

/// `imagecached config check FILE`: validates a configuration file as a reload would (every key and value, and an
/// empty file refused), so that operators test before they send SIGHUP.
struct Config: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Configuration tools.", subcommands: [Check.self, Keys.self])

    /// `imagecached config keys`: every key as a Markdown table (the one in docs/configuration.md).
    struct Keys: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print every configuration key (flag, default, meaning, restart only) as a Markdown table.")

        func run() throws {
            print(ConfigKey.markdownTable(), terminator: "")
        }
    }

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
    // Not --listen: that is the daemon's own flag (where it serves); this names where to reach one.
    @Option(name: .customLong("address"), help: "The daemon's address, HOST:PORT. Default: listen from --config / IMAGECACHED_LISTEN, else \(Configuration().listen).")
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
    // Not --listen: that is the daemon's own flag (where it serves); this names where to reach one.
    @Option(name: .customLong("address"), help: "The daemon's address, HOST:PORT. Default: listen from --daemon-config / IMAGECACHED_LISTEN, else \(Configuration().listen).")
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

// A subcommand (or `help <subcommand>`) goes to ArgumentParser; anything else runs the daemon.
let arguments = Array(CommandLine.arguments.dropFirst())
let subcommandNames = Imagecached.subcommandTypes.map { $0.configuration.commandName ?? String(describing: $0).lowercased() } + ["help"]
if arguments == ["help"] {
    runDaemon(["--help"])
} else if let first = arguments.first, subcommandNames.contains(first) {
    Imagecached.main()
} else {
    runDaemon(arguments)
}
