// Daemon: builds the parts from a Configuration and runs them. Used by main.swift and, in-process, by the
// integration tests (port 0).
//
// Ownership: the parts own themselves (Listener: listener queue; Proxy: proxy queue + MemoryCache lock;
// CurlOrigin: the curl thread). Daemon only holds them; `start` and `stop` are called from one thread.

internal import Dispatch
public import Foundation
public import Logging

public final class Daemon: @unchecked Sendable {
    public let configuration: Configuration
    public let proxy: Proxy
    let logger: Logger
    let origin: CurlOrigin
    let listener: Listener
    /// The port being served, once started.
    public private(set) var port = 0

    public init(configuration: Configuration, logger: Logger, now: @escaping @Sendable () -> Date = { Date() },
                events: (@Sendable (ProxyEvent) -> Void)? = nil) throws {
        self.configuration = configuration
        self.logger = logger
        origin = try CurlOrigin(configuration: configuration.upstream, allowPrivateNetworks: configuration.allowPrivateNetworks,
                                logger: logger)
        var disk: DiskCache?
        if configuration.diskLimitBytes > 0 {
            disk = try DiskCache(
                configuration: DiskCache.Configuration(
                    directory: configuration.cacheDirectory, limitBytes: configuration.diskLimitBytes,
                    lowWaterFraction: configuration.diskLowWaterFraction, maxAgeSeconds: configuration.diskMaxAgeSeconds,
                    fsync: configuration.diskFsync,
                    // Bodies that fit the memory tier are read whole and promoted; larger ones stream from the file.
                    memoryReadLimitBytes: configuration.effectiveMemoryObjectLimitBytes,
                    freshnessPolicy: FreshnessPolicy(heuristicFraction: configuration.heuristicFraction,
                                                     heuristicMaxSeconds: configuration.heuristicMaxSeconds)),
                logger: logger, now: now)
        }
        proxy = Proxy(configuration: configuration, origin: origin, disk: disk, logger: logger, now: now, events: events)
        listener = Listener(configuration: configuration.server, handler: proxy, logger: logger)
    }

    /// Binds the listening socket and starts serving. Returns the bound port.
    @discardableResult
    public func start() throws -> Int {
        signal(SIGPIPE, SIG_IGN)
        port = try listener.start(address: configuration.listen)
        var modes = ["forward proxy", "fetch (/fetch?url=)"]
        if !configuration.origins.isEmpty {
            modes.append("reverse proxy (" + configuration.origins.map { "\($0.prefix) -> \($0.url)" }.joined(separator: ", ") + ")")
        }
        let address = ListenAddress(host: configuration.listen.host, port: port)
        logger.info("imagecached \(imagecachedVersion) listening on http://\(address); modes: \(modes.joined(separator: ", ")); memory limit \(configuration.memoryLimitBytes) bytes; disk \(configuration.diskLimitBytes > 0 ? "\(configuration.cacheDirectory) limit \(configuration.diskLimitBytes) bytes" : "off"); private networks \(configuration.allowPrivateNetworks ? "allowed" : "refused")")
        return port
    }

    /// Stops accepting, closes connections and stops upstream transfers.
    public func stop() {
        listener.stop()
        origin.shutdown()
        proxy.disk?.flush()
    }

    /// Serves until SIGTERM or SIGINT, then stops and exits 0.
    public func runUntilSignalled() -> Never {
        let signalQueue = DispatchQueue(label: "imagecached.signals")
        var sources: [any DispatchSourceSignal] = []
        for number in [SIGTERM, SIGINT] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: signalQueue)
            source.setEventHandler { [self] in
                logger.info("signal \(number): stopping")
                stop()
                exit(0)
            }
            source.resume()
            sources.append(source)
        }
        withExtendedLifetime(sources) { dispatchMain() }
    }
}
