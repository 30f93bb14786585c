// Daemon: builds the parts from a Configuration and runs them. Used by main.swift and, in-process, by the
// integration tests (port 0).
//
// Ownership: the parts own themselves (Listener: listener queue; Proxy: proxy queue + MemoryCache lock;
// CurlOrigin: the curl thread). Daemon only holds them; `start`, `shutdown` and `stop` are called from one thread
// at a time (main, then the signal queue). Signals are Dispatch sources on `imagecached.signals`:
//   SIGTERM, SIGINT  graceful shutdown: STOPPING=1, stop accepting, let requests in flight finish for up to
//                    shutdown-timeout (idle keep-alive connections are closed as soon as they are between
//                    requests), close the rest, stop upstream transfers, flush the disk tier, exit 0.
//                    A second signal while draining stops at once.
//   SIGHUP           reload: the configuration is read again (same file, environment and flags); a file that
//                    does not load leaves the running configuration in force and the log says why. So does an
//                    intercept-hosts list outside the local CA's name constraints (Daemon+LocalCA.swift).
// systemd (Systemd.swift): READY=1 once listening, STATUS= with a summary every 10 s, RELOADING=1 and READY=1
// around a reload, STOPPING=1, WATCHDOG=1 at half of WatchdogSec (sent once every event loop has run a posted task,
// from the proxy queue: a wedged loop or proxy queue stops the pings and systemd restarts the daemon).

internal import ImageCacheHTTP
internal import ImageCacheStatus
public import ImageCacheConfig
internal import ImageCacheServer
internal import ImageCacheStore
internal import ImageCacheTransform
internal import ImageCacheUpstream
internal import ImageCacheCertificates
internal import ImageCacheTLS
public import ImageCacheCore
internal import Dispatch
public import Foundation
public import Logging
internal import Synchronization

public final class Daemon: @unchecked Sendable {
    public let configuration: Configuration
    public let proxy: Proxy
    let logger: Logger
    let origin: CurlOrigin
    let listener: Listener
    /// The TLS listener's context and counts (tls-cert, tls-key), nil without one.
    let tlsListening: TLSListening?
    /// This daemon's Via token and listening sockets (request loops answer 508).
    let loopGuard: LoopGuard
    /// Listeners for the second and later sockets passed by systemd.
    private var extraListeners: [Listener] = []
    /// The port being served, once started.
    public private(set) var port = 0
    /// The TLS listener's port (tls-listen), once started; 0 without one.
    public private(set) var tlsPort = 0
    /// It serves sockets systemd passed (socket activation), whose addresses `listen` does not say.
    private var listensOnSystemdSockets = false
    /// Reads the configuration again for a reload (SIGHUP); set by main. Nil: reload is refused.
    public var reloadSource: (@Sendable () throws -> Configuration)?
    let notifier = SystemdNotifier()
    private let stopping = Atomic<Bool>(false)
    private var timers: [any DispatchSourceTimer] = []
    /// Records a sample of the status page's history every status-history-interval (off: the caller records them,
    /// as the in-process tests do with `proxy.recordHistorySample`).
    private let samplesHistory: Bool
    /// The local CA's fingerprint in force (nil without intercept-hosts): a reload that finds another logs it.
    var localCAFingerprint: String?

    public init(configuration: Configuration, logger: Logger, now: @escaping @Sendable () -> Date = { Date() },
                events: (@Sendable (ProxyEvent) -> Void)? = nil, samplesHistory: Bool = true) throws {
        self.configuration = configuration
        self.samplesHistory = samplesHistory
        self.logger = logger
        // First, before any thread starts: a CA that cannot be used stops the start (exit 1, the fix in the message).
        let localCA = try Daemon.prepareLocalCA(for: configuration.interceptHosts, directory: configuration.interceptCADirectory,
                                                logger: logger)
        localCAFingerprint = localCA?.fingerprint
        let loopGuard = LoopGuard()
        self.loopGuard = loopGuard
        origin = try CurlOrigin(settings: configuration.upstream, allowPrivateNetworks: configuration.allowPrivateNetworks,
                                loopGuard: loopGuard, logger: logger)
        var disk: DiskCache?
        if configuration.diskLimitBytes > 0 {
            var diskConfiguration = DiskCache.Configuration(
                directory: configuration.cacheDirectory, limitBytes: configuration.diskLimitBytes,
                lowWaterFraction: configuration.diskLowWaterFraction, maxAgeSeconds: configuration.diskMaxAgeSeconds,
                fsync: configuration.diskFsync,
                // Bodies that fit the memory tier, and any up to 256 KiB, may be read whole (one pread, verified
                // in memory, promoted) when the memory tier admits them. The rest are verified through a buffer
                // and sent from the file with sendfile, so a hit never holds a large body in memory.
                memoryReadLimitBytes: max(configuration.effectiveMemoryObjectLimitBytes, DiskFile.wholeReadLimit),
                freshnessPolicy: configuration.freshnessPolicy)
            diskConfiguration.variantLimit = configuration.maxVariants
            disk = try DiskCache(configuration: diskConfiguration, logger: logger, now: now)
        }
        proxy = Proxy(configuration: configuration, origin: origin, disk: disk, logger: logger, now: now, events: events,
                      loopGuard: loopGuard)
        listener = Listener(settings: configuration.server, handler: proxy, logger: logger)
        tlsListening = try Daemon.loadTLS(configuration, logger: logger)
        if let tlsListening { proxy.metrics.setTLSStatus(Daemon.tlsStatus(tlsListening)) }
        proxy.metrics.setInterceptCA(Daemon.statusOfLocalCA(localCA, directory: configuration.interceptCADirectory))
        _ = try proxy.interception.use(localCA)
    }

    /// Binds the listening socket, or adopts the sockets systemd passed (socket activation), and starts serving.
    /// Returns the bound port (of the first socket).
    @discardableResult
    public func start() throws -> Int {
        signal(SIGPIPE, SIG_IGN)
        let (passed, names) = SystemdSocketActivation.takeListeningSockets()
        var listening = "http://\(ListenAddress(host: configuration.listen.host, port: 0))"
        listensOnSystemdSockets = !passed.isEmpty
        if !passed.isEmpty {
            for fd in passed { SystemdSocketActivation.adopt(fd) }
            // A socket named "tls" (FileDescriptorName=tls in its unit) serves HTTPS with tls-cert and tls-key; the
            // first other one is the main listener, whatever order systemd passes them in.
            let isTLS = passed.indices.map { $0 < names.count && names[$0] == "tls" }
            guard let main = passed.indices.first(where: { !isTLS[$0] }) else {
                throw ConfigError(key: "listen", reason: "systemd passed only sockets named tls: pass a plain one too (imagecached.socket)")
            }
            if configuration.tlsListen != nil && !isTLS.contains(true) {
                logger.warning("tls-listen \(configuration.tlsListen!) is ignored under socket activation: systemd passed no socket named tls (enable imagecached-tls.socket); no HTTPS is served")
            }
            if isTLS.contains(true) && tlsListening == nil {
                throw ConfigError(key: "tls-cert", reason: "systemd passed a socket named tls: set tls-cert and tls-key")
            }
            port = try listener.start(listeningFD: passed[main])
            loopGuard.recordListening(host: nil, port: port)
            do {
                for index in passed.indices where index != main {
                    let extra = Listener(settings: configuration.server, handler: proxy, logger: logger, tls: isTLS[index] ? tlsListening : nil)
                    let extraPort = try extra.start(listeningFD: passed[index])
                    if isTLS[index] { tlsPort = extraPort }
                    loopGuard.recordListening(host: nil, port: extraPort)
                    extraListeners.append(extra)
                }
            } catch {
                // The listeners already started would keep their loop threads (and sockets) forever.
                listener.stop()
                for extra in extraListeners { extra.stop() }
                extraListeners = []
                throw error
            }
            listening = "\(passed.count) socket(s) from systemd (fd \(passed.map(String.init).joined(separator: ", "))), first on port \(port)"
        } else {
            port = try listener.start(address: configuration.listen)
            loopGuard.recordListening(host: configuration.listen.host, port: port)
            listening = "http://\(ListenAddress(host: configuration.listen.host, port: port))"
            if let address = configuration.tlsListen, let tlsListening {
                let secure = Listener(settings: configuration.server, handler: proxy, logger: logger, tls: tlsListening)
                do {
                    tlsPort = try secure.start(address: address)
                } catch {
                    listener.stop()
                    throw error
                }
                loopGuard.recordListening(host: address.host, port: tlsPort)
                extraListeners.append(secure)
                listening += " and https://\(ListenAddress(host: address.host, port: tlsPort))"
            }
        }
        var modes = ["forward proxy", "fetch (/fetch?url=)"]
        if !configuration.origins.isEmpty {
            modes.append("reverse proxy (" + configuration.origins.map { "\($0.prefix) -> \($0.url)" }.joined(separator: ", ") + ")")
        }
        logger.info("imagecached \(imagecachedVersion) listening on \(listening); modes: \(modes.joined(separator: ", ")); memory limit \(configuration.memoryLimitBytes) bytes; disk \(configuration.diskLimitBytes > 0 ? "\(configuration.cacheDirectory) limit \(configuration.diskLimitBytes) bytes" : "off"); private networks \(configuration.allowPrivateNetworks ? "allowed" : "refused"); signed fetch URLs \(configuration.signaturesRequired ? "required" : "optional") (\(configuration.signingKeys.count) key(s))")
        if let warning = ProxyAllow(configuration.proxyAllow).openProxyWarning(listenHost: listensOnSystemdSockets ? nil : configuration.listen.host) {
            logger.warning("\(warning)")
        }
        if samplesHistory {
            // On the proxy queue, which owns the history.
            let history = DispatchSource.makeTimerSource(queue: proxy.queue)
            let interval = proxy.historyInterval
            history.schedule(deadline: .now() + interval, repeating: interval, leeway: .milliseconds(100))
            history.setEventHandler { [proxy] in proxy.sampleHistory() }
            history.resume()
            timers.append(history)
        }
        if tlsListening != nil || proxy.interception.current != nil || !configuration.interceptHosts.isEmpty {
            // Fresh session-ticket keys every 12 hours (Daemon+TLS.swift).
            let rotation = DispatchSource.makeTimerSource(queue: DispatchQueue.global(qos: .utility))
            rotation.schedule(deadline: .now() + Daemon.ticketKeyRotationSeconds, repeating: Daemon.ticketKeyRotationSeconds,
                              leeway: .seconds(60))
            rotation.setEventHandler { [self] in rotateTicketKeys() }
            rotation.resume()
            timers.append(rotation)
        }
        let transform = configuration.transform
        if transform.enabled {
            let prefix = transform.normalisedPrefix.isEmpty ? "/" : transform.normalisedPrefix + "/"
            logger.info("image transforms at \(prefix)<signature>/<options>/plain/<source URL>: \(proxy.transformWorkers) worker(s), queue \(transform.queueLimit), \(transform.signing.pairs.count) key/salt pair(s)\(transform.signingFromIMGPROXY ? " from IMGPROXY_KEY/IMGPROXY_SALT" : "")")
            if transform.signing.isInsecure {
                logger.warning("transform URLs are NOT signed: any client that reaches \(listening) may ask for any transform of any allowed source (set transform-keys and transform-salts, or IMGPROXY_KEY and IMGPROXY_SALT)")
            }
        }
        return port
    }

    /// Stops accepting, closes connections and stops upstream transfers; the disk tier is flushed.
    public func stop() {
        for timer in timers { timer.cancel() }  // the watchdog's probe would wait for stopped loops
        listener.stop()
        for extra in extraListeners { extra.stop() }
        origin.shutdown()
        proxy.stopFleet()
        proxy.disk?.flush()
    }

    /// Graceful stop: stop accepting, wait up to `timeout` seconds for requests in flight to finish (closing each
    /// connection as it falls idle), then `stop`. Returns the number of connections cut off at the deadline.
    @discardableResult
    public func shutdown(timeout: Double) -> Int {
        listener.stopAccepting()
        for extra in extraListeners { extra.stopAccepting() }
        let deadline = Date().addingTimeInterval(timeout)
        var busy = 0
        while true {
            busy = ([listener] + extraListeners).reduce(0) { $0 + $1.closeIdleConnections() }
            if busy == 0 || Date() >= deadline { break }
            notifier.notify("STATUS=stopping: \(busy) request(s) in flight")
            usleep(50_000)
        }
        if busy > 0 { logger.warning("shutdown: \(busy) connection(s) still busy after \(timeout) s; closing them") }
        stop()
        return busy
    }

    // MARK: - Reload

    /// Reads the configuration again (`reloadSource`) and applies it; a configuration that does not load changes
    /// nothing. Returns the error, if any.
    @discardableResult
    public func reload() -> (any Error)? {
        guard let reloadSource else { return ConfigError(key: "reload", reason: "this daemon has no configuration source to reload") }
        do {
            let next = try reloadSource()
            // Everything that can fail is prepared before anything is put in force: a refused reload changes nothing.
            let tlsContext = try nextTLSContext(for: next)
            try reloadLocalCA(for: next)
            apply(next)
            if let tlsContext, let tlsListening {
                tlsListening.replace(with: tlsContext)
                logger.notice("reloaded the TLS certificate: \(tlsContext.identity?.subject ?? "?") (SHA-256 \(tlsContext.identity?.fingerprintSHA256 ?? "?"))")
            }
            return nil
        } catch {
            proxy.metrics.reloadFailures.add()
            logger.error("reload refused, the configuration in force is unchanged: \(error)")
            return error
        }
    }

    /// Applies the reloadable settings of `next` (limits, origins, allowlists, content policy, stale-if-error,
    /// access log, admin-allow) and logs the changed keys that need a restart.
    public func apply(_ next: Configuration) {
        let current = proxy.configuration
        for change in current.restartOnlyChanges(to: next) {
            logger.warning("reload: \(change) needs a restart; not applied")
        }
        proxy.apply(next)
        proxy.metrics.reloads.add()
        let applied = proxy.configuration
        if let warning = ProxyAllow(applied.proxyAllow).openProxyWarning(listenHost: listensOnSystemdSockets ? nil : applied.listen.host) {
            logger.warning("\(warning)")
        }
        logger.notice("reloaded: memory limit \(applied.memoryLimitBytes) bytes (\(applied.memoryCountLimit) entries max), max object \(applied.maxObjectSizeBytes) bytes, \(applied.origins.count) origin(s), content types \(applied.effectiveContentTypes.isEmpty ? "any" : applied.effectiveContentTypes.joined(separator: ",")), admin-allow \(applied.adminAllow.map(\.description).joined(separator: ","))")
    }

    // MARK: - systemd and signals

    /// A one-line summary for STATUS=.
    public func statusLine() -> String {
        let stats = proxy.metrics.snapshot(memory: proxy.memory.stats, disk: proxy.disk?.stats, fetchesInFlight: 0)
        let requests = stats.requests.values.reduce(0, +)
        var line = "serving on port \(port): \(requests) requests, hit ratio \(Int((stats.hitRatio * 100).rounded()))%, memory \(stats.memory.bytes >> 20)/\(stats.memory.limitBytes >> 20) MiB"
        if let disk = stats.disk { line += ", disk \(disk.bytes >> 20)/\(disk.limitBytes >> 20) MiB" }
        return line
    }

    /// Tells systemd the daemon is ready, and starts the status and watchdog timers. No-op without $NOTIFY_SOCKET.
    public func notifyReady() {
        guard notifier.isEnabled else { return }
        notifier.notify("READY=1\nSTATUS=\(statusLine())\nMAINPID=\(getpid())")
        let timerQueue = DispatchQueue(label: "imagecached.systemd")
        let status = DispatchSource.makeTimerSource(queue: timerQueue)
        status.schedule(deadline: .now() + 10, repeating: 10)
        status.setEventHandler { [self] in
            if !stopping.load(ordering: .relaxed) { notifier.notify("STATUS=\(statusLine())") }
        }
        status.resume()
        timers.append(status)
        if let interval = SystemdNotifier.watchdogInterval() {
            let watchdog = DispatchSource.makeTimerSource(queue: timerQueue)
            watchdog.schedule(deadline: .now() + interval / 2, repeating: interval / 2)
            let proxyQueue = proxy.queue
            let listeners = [listener] + extraListeners   // all started by now
            watchdog.setEventHandler { [notifier] in
                // Every event loop of every listener, then the proxy queue, must come round to it.
                let group = DispatchGroup()
                for listener in listeners { listener.probeLoops(group) }
                group.notify(queue: proxyQueue) { notifier.notify("WATCHDOG=1") }
            }
            watchdog.resume()
            timers.append(watchdog)
            logger.info("systemd watchdog: pinging every \(interval / 2) s")
        }
    }

    /// Serves until SIGTERM or SIGINT, then shuts down gracefully and exits 0. SIGHUP reloads the configuration.
    public func runUntilSignalled() -> Never {
        let signalQueue = DispatchQueue(label: "imagecached.signals")
        var sources: [any DispatchSourceSignal] = []
        for number in [SIGTERM, SIGINT, SIGHUP] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: signalQueue)
            source.setEventHandler { [self] in
                if number == SIGHUP {
                    logger.notice("SIGHUP: reloading the configuration")
                    notifier.notify("RELOADING=1")
                    reload()
                    notifier.notify("READY=1\nSTATUS=\(statusLine())")
                    return
                }
                guard !stopping.exchange(true, ordering: .relaxed) else {
                    logger.warning("signal \(number) while stopping: exiting now")
                    proxy.disk?.flush()
                    exit(0)
                }
                let timeout = proxy.configuration.shutdownTimeoutSeconds
                logger.notice("signal \(number): stopping (requests in flight get up to \(timeout) s)")
                notifier.notify("STOPPING=1\nSTATUS=stopping")
                // Drain off the signal queue, so that a second signal is still heard.
                Thread {
                    self.shutdown(timeout: timeout)
                    self.logger.notice("stopped")
                    exit(0)
                }.start()
            }
            source.resume()
            sources.append(source)
        }
        notifyReady()
        withExtendedLifetime(sources) { dispatchMain() }
    }
}
