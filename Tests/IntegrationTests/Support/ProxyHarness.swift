// Starts the real daemon in-process on 127.0.0.1 port 0 in front of a TestOrigin, with a manual wall clock
// and a record of the proxy's coalescing events, so tests can wait for "N clients are waiting" without sleeps.

import Foundation
import Logging
import Synchronization
import Testing
@testable import ImageCacheConfig
@testable import ImageCacheServer
import ImageCacheTransform
@testable import ImageCacheStore
@testable import ImageCacheCore
@testable import ImageCacheOps
import ImageCacheSystem
import ImageCacheFleet

/// A wall clock the test moves by hand.
final class TestClock: Sendable {
    private let time = Locked(Date(timeIntervalSince1970: 1_800_000_000))
    func now() -> Date { time.withLock { $0 } }
    func advance(_ seconds: Double) { time.withLock { $0 = $0.addingTimeInterval(seconds) } }
}

/// Counts the fetches that paused their upstream transfer (backpressure) and lets a test wait for a number of them.
/// Counts the events `matches` picks, and waits for a number of them.
final class EventCounter: Sendable {
    private let matches: @Sendable (ProxyEvent) -> Bool
    private let state = Locked<(count: Int, target: Int)>((0, Int.max))
    private let semaphore = DispatchSemaphore(value: 0)

    init(_ matches: @escaping @Sendable (ProxyEvent) -> Bool) { self.matches = matches }

    var count: Int { state.withLock { $0.count } }

    func observe(_ event: ProxyEvent) {
        guard matches(event) else { return }
        let fire = state.withLock { state -> Bool in
            state.count += 1
            return state.count == state.target
        }
        if fire { semaphore.signal() }
    }

    /// Waits until `target` such events were seen in all (off the Swift concurrency pool); false after `timeout`.
    func wait(for target: Int, timeout: Double = 15) async -> Bool {
        let already = state.withLock { state -> Bool in
            state.target = target
            return state.count >= target
        }
        if already { return true }
        let semaphore = semaphore
        return (try? await offPool { semaphore.wait(timeout: .now() + timeout) == .success }) ?? false
    }
}

/// Counts the fetches that paused their transfer (an EventCounter), and calls `onPaused` at each.
final class PauseBarrier: Sendable {
    private let counter = EventCounter { if case .transferPaused = $0 { true } else { false } }
    private let pausedCallback = Locked<(@Sendable () -> Void)?>(nil)

    var count: Int { counter.count }

    /// Called when a fetch pauses its transfer.
    var onPaused: (@Sendable () -> Void)? {
        get { pausedCallback.withLock { $0 } }
        set { pausedCallback.withLock { $0 = newValue } }
    }

    func observe(_ event: ProxyEvent) {
        if case .transferPaused = event { onPaused?() }
        counter.observe(event)
    }

    /// Waits until `target` pauses were seen in all (off the Swift concurrency pool); false after `timeout`.
    func wait(for target: Int, timeout: Double = 15) async -> Bool { await counter.wait(for: target, timeout: timeout) }
}

/// Counts the transforms workers took, and holds each one's worker at `gate` while one is set (the event is told on
/// the worker's thread, before the transform runs): a test lands something (a purge) mid-transform, then opens it.
final class TransformHold: Sendable {
    private let counter = EventCounter { if case .transformStarting = $0 { true } else { false } }
    private let held = Locked<Gate?>(nil)

    /// Holds every transform that starts from now on until `gate` opens.
    func hold(at gate: Gate) { held.withLock { $0 = gate } }

    func observe(_ event: ProxyEvent) {
        guard case .transformStarting = event else { return }
        let gate = held.withLock { $0 }
        counter.observe(event)
        gate?.wait(timeout: .seconds(60))
    }

    /// Waits until `target` transforms were taken by a worker in all; false after `timeout`.
    func wait(for target: Int, timeout: Double = 15) async -> Bool { await counter.wait(for: target, timeout: timeout) }
}

/// `body` run on its first call only: a continuation resumed by an event that can come again (another fetch that
/// finishes late on a loaded machine) must not be resumed twice.
func firstCallOnly(_ body: @escaping @Sendable () -> Void) -> @Sendable () -> Void {
    let called = Locked(false)
    return {
        let first = called.withLock { called -> Bool in
            defer { called = true }
            return !called
        }
        if first { body() }
    }
}

/// Lets a test block until the proxy reports `count` waiters on one fetch.
final class WaiterBarrier: Sendable {
    private let state = Locked<(target: Int, reached: Bool)>((0, false))
    private let semaphore = DispatchSemaphore(value: 0)
    private let finishedCallback = Locked<(@Sendable () -> Void)?>(nil)

    private let passedCallback = Locked<(@Sendable () -> Void)?>(nil)

    /// Called when a fetch finishes (stored, failed or cancelled).
    var onFinished: (@Sendable () -> Void)? {
        get { finishedCallback.withLock { $0 } }
        set { finishedCallback.withLock { $0 = newValue } }
    }

    /// Called when a request passed through to the origin ends (its transfer counted).
    var onPassFinished: (@Sendable () -> Void)? {
        get { passedCallback.withLock { $0 } }
        set { passedCallback.withLock { $0 = newValue } }
    }

    func expect(_ count: Int) { state.withLock { $0 = (count, false) } }

    func observe(_ event: ProxyEvent) {
        if case .fetchFinished = event { onFinished?() }
        if case .passFinished = event { onPassFinished?() }
        guard case let .waiterAttached(_, waiters) = event else { return }
        let fire = state.withLock { state -> Bool in
            guard !state.reached, state.target > 0, waiters >= state.target else { return false }
            state.reached = true
            return true
        }
        if fire { semaphore.signal() }
    }

    /// Waits (off the Swift concurrency pool) until the expected count was reached; false after `timeout`.
    func wait(timeout: Double = 15) async -> Bool {
        let semaphore = semaphore
        return (try? await offPool { semaphore.wait(timeout: .now() + timeout) == .success }) ?? false
    }
}

/// Runs a test's callback when /_imagecached/stats is about to be read (on the proxy queue, before its snapshot).
final class StatsReadHook: Sendable {
    private let callback = Locked<(@Sendable () -> Void)?>(nil)
    var onRead: (@Sendable () -> Void)? {
        get { callback.withLock { $0 } }
        set { callback.withLock { $0 = newValue } }
    }
    func observe(_ event: ProxyEvent) {
        if case .statsRead = event { onRead?() }
    }
}

final class ProxyHarness {
    let origin: TestOrigin
    /// The running daemon; `restart` replaces it with a new one on the same configuration and cache directory.
    private(set) var daemon: Daemon
    let clock = TestClock()
    let configuration: Configuration
    private let logger: Logger
    let waiters = WaiterBarrier()
    let pauses = PauseBarrier()
    let statsReads = StatsReadHook()
    /// Transforms a worker took (and a gate to hold them at).
    let transformHold = TransformHold()
    /// Fetches told by the fleet tier that another host fills their key.
    let fleetWaits = EventCounter { if case .fleetWaiting = $0 { true } else { false } }
    /// Entries this host stored in the fleet tier.
    let fleetStores = EventCounter { if case .fleetStored = $0 { true } else { false } }
    /// Purges from the fleet's log applied here.
    let fleetPurges = EventCounter { if case .fleetPurgeApplied = $0 { true } else { false } }
    /// Fleet servers whose breaker opened here (a server down: its keys local-only), and closed again (a probe answered).
    let fleetServersDown = EventCounter { if case .fleetServerState(_, .down) = $0 { true } else { false } }
    let fleetServersUp = EventCounter { if case .fleetServerState(_, .up) = $0 { true } else { false } }
    /// The purge logs read whole for the first time: the host serves fleet values from then on.
    let fleetCaughtUp = EventCounter { if case .fleetCaughtUp = $0 { true } else { false } }
    /// Every event counter above, fed by the daemon's events.
    private let counters: [EventCounter]
    /// This harness's own disk tier directory, removed at the end.
    let cacheDirectory: String
    var port: Int { daemon.port }

    /// A daemon in reverse-proxy mode for `origin` (paths map 1:1), private networks allowed so that forward and
    /// fetch modes can reach the loopback origin; `configure` changes anything else. `clockAhead`: seconds this
    /// daemon's clock starts ahead of the others' (a host that starts later, or comes back after hours away).
    init(logCapture: LogCapture? = nil, clockAhead: Double = 0, _ configure: (inout Configuration) -> Void = { _ in }) throws {
        clock.advance(clockAhead)
        origin = try TestOrigin()
        var configuration = Configuration()
        configuration.listen = ListenAddress(host: "127.0.0.1", port: 0)
        configuration.origins = [OriginMapping(prefix: "/", url: origin.baseURL)]
        configuration.allowPrivateNetworks = true
        cacheDirectory = NSTemporaryDirectory() + "imagecached-test-" + UUID().uuidString
        configuration.cacheDirectory = cacheDirectory
        // A gated origin holds a transform's source until the test opens it, which on a loaded machine (every suite
        // at once on 2 cores) can take longer than transform-source-timeout's 10 s: a test of that limit sets it.
        configuration.transform.sourceTimeoutSeconds = 300
        configure(&configuration)
        var logger: Logger
        if let logCapture {
            logger = Logger(label: "imagecached-test") { _ in logCapture }
            logger.logLevel = .info
        } else {
            logger = Logger(label: "imagecached-test") { StreamLogHandler.standardError(label: $0) }
            // IMAGECACHED_TEST_LOG=debug shows the daemon's log while debugging a test.
            logger.logLevel = ProcessInfo.processInfo.environment["IMAGECACHED_TEST_LOG"].flatMap { Logger.Level(rawValue: $0) } ?? .critical
        }
        self.configuration = configuration
        self.logger = logger
        counters = [fleetWaits, fleetStores, fleetPurges, fleetServersDown, fleetServersUp, fleetCaughtUp]
        daemon = try ProxyHarness.makeDaemon(configuration, logger: logger, clock: clock, waiters: waiters, pauses: pauses,
                                             statsReads: statsReads, counters: counters, transformHold: transformHold)
        try daemon.start()
    }

    private static func makeDaemon(_ configuration: Configuration, logger: Logger, clock: TestClock, waiters: WaiterBarrier,
                                   pauses: PauseBarrier, statsReads: StatsReadHook, counters: [EventCounter],
                                   transformHold: TransformHold) throws -> Daemon {
        // The history is sampled by the tests themselves (proxy.recordHistorySample), not by a timer.
        try Daemon(configuration: configuration, logger: logger, now: { clock.now() }, events: { event in
            waiters.observe(event)
            pauses.observe(event)
            statsReads.observe(event)
            for counter in counters { counter.observe(event) }
            transformHold.observe(event)
        }, samplesHistory: false)
    }

    /// Stops the daemon (its disk writes flushed) and starts a new one on the same cache directory: memory is empty,
    /// the disk tier is what survived. `configure` may change settings for the new one.
    func restart(_ configure: (inout Configuration) -> Void = { _ in }) throws {
        daemon.stop()
        var configuration = configuration
        configure(&configuration)
        daemon = try ProxyHarness.makeDaemon(configuration, logger: logger, clock: clock, waiters: waiters, pauses: pauses,
                                             statsReads: statsReads, counters: counters, transformHold: transformHold)
        try daemon.start()
    }

    /// Waits until the disk tier has written what it was given.
    func flushDisk() async {
        let disk = daemon.proxy.disk
        _ = try? await offPool { disk?.flush() }
    }

    deinit {
        daemon.stop()
        origin.stop()
        try? FileManager.default.removeItem(atPath: cacheDirectory)
    }

    /// One request on a new connection; the blocking socket work runs off the Swift concurrency pool.
    func get(_ target: String, method: String = "GET", headers: [(String, String)] = []) async throws -> TestResponse {
        let port = port
        return try await offPool { try TestClient.get(port: port, target, method: method, headers: headers) }
    }

    /// `DELETE /_imagecached/cache?url=` for `path` on this harness's origin (the URL percent-encoded).
    func purge(_ path: String) async throws -> TestResponse {
        let url = (origin.baseURL + path).addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        return try await get("/_imagecached/cache?url=" + url, method: "DELETE")
    }

    func connect() throws -> TestConnection { try TestConnection(port: port) }

    /// Sends `clients` requests for `target`, each on its own connection, and returns once the proxy reports them all
    /// waiting on one fetch (the origin holds it, at a gate); read the answers with `readAll` after opening the gate.
    func waitingClients(_ clients: Int, on target: String) async throws -> [TestConnection] {
        try await waitingClients(on: Array(repeating: target, count: clients))
    }

    /// As `waitingClients(_:on:)`, one client for each of `targets` (renditions of one source wait on its fetch).
    func waitingClients(on targets: [String]) async throws -> [TestConnection] {
        waiters.expect(targets.count)
        var connections: [TestConnection] = []
        for target in targets {
            let connection = try connect()
            try connection.request(target)
            connections.append(connection)
        }
        #expect(await waiters.wait(), "\(targets.count) clients never waited on one fetch of \(targets.first ?? "")")
        return connections
    }

    /// The fetch-mode target (/fetch?url=) for `path` on the origin.
    func fetchTarget(_ path: String) -> String {
        "/fetch?url=" + (origin.baseURL + path).addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
    }
}

/// Waits for a semaphore off the Swift concurrency pool; false after `timeout` seconds.
func wait(_ semaphore: DispatchSemaphore, timeout: Double = 15) async -> Bool {
    (try? await offPool { semaphore.wait(timeout: .now() + timeout) == .success }) ?? false
}

/// Returns once `listener` has no connection open: the daemon has seen every client go (and the closing connections
/// have run their cancellations). A regression that keeps one open hangs here until the suite's time limit.
func noConnections(_ listener: Listener) async {
    await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
        listener.whenNoConnections { done.resume() }
    }
}

/// Reads one response from each connection, in order.
func readAll(_ connections: [TestConnection]) async throws -> [TestResponse] {
    var responses: [TestResponse] = []
    for connection in connections { responses.append(try await connection.response()) }
    return responses
}

extension TestConnection {
    /// `readResponse` off the Swift concurrency pool (see offPool).
    func response(forHEAD: Bool = false) async throws -> TestResponse {
        try await offPool { try self.readResponse(forHEAD: forHEAD) }
    }
    func head() async throws -> (status: Int, headers: [(String, String)]) {
        let (status, headers) = try await offPool { try self.readHead() }
        return (status, headers)
    }
    /// `readBody` off the Swift concurrency pool: the body after a head read with `head()`.
    func body(status: Int, headers: [(String, String)]) async throws -> TestResponse {
        try await offPool { self.readBody(status: status, headers: headers) }
    }
    func raw(atLeast count: Int) async -> [UInt8] {
        (try? await offPool { self.readRaw(atLeast: count) }) ?? []
    }
}

/// A log handler that keeps every message, for tests that assert on the log.
final class LogCapture: LogHandler, @unchecked Sendable {
    private let lines = Locked<[String]>([])
    /// Under a lock: the handler is a class, so every copy of a Logger shares it, and a connection that sets its
    /// `client` metadata key on its own copy writes here while other threads log (a data race that crashed a run).
    private let sharedMetadata = Locked<Logger.Metadata>([:])
    var metadata: Logger.Metadata {
        get { sharedMetadata.withLock { $0 } }
        set { sharedMetadata.withLock { $0 = newValue } }
    }
    var logLevel: Logger.Level = .info

    var messages: [String] { lines.withLock { $0 } }
    private let metadataRecords = Locked<[Logger.Metadata]>([])
    /// Each message's metadata (the handler's own merged with the call's), in order.
    var metadataOfMessages: [Logger.Metadata] { metadataRecords.withLock { $0 } }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { sharedMetadata.withLock { $0[key] } }
        set { sharedMetadata.withLock { $0[key] = newValue } }
    }

    func log(event: LogEvent) {
        lines.withLock { $0.append("\(event.level) \(event.message)") }
        let own = metadata
        metadataRecords.withLock { $0.append(own.merging(event.metadata ?? [:]) { $1 }) }
    }
}
