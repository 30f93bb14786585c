// Starts the real daemon in-process on 127.0.0.1 port 0 in front of a TestOrigin, with a manual wall clock
// and a record of the proxy's coalescing events, so tests can wait for "N clients are waiting" without sleeps.

import Foundation
import Logging
import Synchronization
@testable import ImageCacheCore

/// A wall clock the test moves by hand.
final class TestClock: Sendable {
    private let time = Mutex(Date(timeIntervalSince1970: 1_800_000_000))
    func now() -> Date { time.withLock { $0 } }
    func advance(_ seconds: Double) { time.withLock { $0 = $0.addingTimeInterval(seconds) } }
}

/// Lets a test block until the proxy reports `count` waiters on one fetch.
final class WaiterBarrier: Sendable {
    private let state = Mutex<(target: Int, reached: Bool)>((0, false))
    private let semaphore = DispatchSemaphore(value: 0)
    private let finishedCallback = Mutex<(@Sendable () -> Void)?>(nil)

    /// Called when a fetch finishes (stored, failed or cancelled).
    var onFinished: (@Sendable () -> Void)? {
        get { finishedCallback.withLock { $0 } }
        set { finishedCallback.withLock { $0 = newValue } }
    }

    func expect(_ count: Int) { state.withLock { $0 = (count, false) } }

    func observe(_ event: ProxyEvent) {
        if case .fetchFinished = event { onFinished?() }
        guard case let .waiterAttached(_, waiters) = event else { return }
        let fire = state.withLock { state -> Bool in
            guard !state.reached, state.target > 0, waiters >= state.target else { return false }
            state.reached = true
            return true
        }
        if fire { semaphore.signal() }
    }

    /// Blocks until the expected count was reached; false after `timeout`.
    func wait(timeout: Double = 15) -> Bool { semaphore.wait(timeout: .now() + timeout) == .success }
}

final class ProxyHarness {
    let origin: TestOrigin
    let daemon: Daemon
    let clock = TestClock()
    let waiters = WaiterBarrier()
    var port: Int { daemon.port }

    /// A daemon in reverse-proxy mode for `origin` (paths map 1:1), private networks allowed so that forward and
    /// fetch modes can reach the loopback origin; `configure` changes anything else.
    init(_ configure: (inout Configuration) -> Void = { _ in }) throws {
        origin = try TestOrigin()
        var configuration = Configuration()
        configuration.listen = ListenAddress(host: "127.0.0.1", port: 0)
        configuration.origins = [OriginMapping(prefix: "/", url: origin.baseURL)]
        configuration.allowPrivateNetworks = true
        configuration.cacheDirectory = NSTemporaryDirectory() + "imagecached-tests"
        configure(&configuration)
        var logger = Logger(label: "imagecached-test") { StreamLogHandler.standardError(label: $0) }
        logger.logLevel = .error
        let clock = clock
        let waiters = waiters
        daemon = try Daemon(configuration: configuration, logger: logger, now: { clock.now() }, events: { waiters.observe($0) })
        try daemon.start()
    }

    deinit {
        daemon.stop()
        origin.stop()
    }

    func get(_ target: String, method: String = "GET", headers: [(String, String)] = []) throws -> TestResponse {
        try TestClient.get(port: port, target, method: method, headers: headers)
    }

    func connect() throws -> TestConnection { try TestConnection(port: port) }
}
