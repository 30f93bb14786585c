// What the tests against real memcached share: a tier on given servers with test settings, its operations awaited
// as values, and its events (breaker states, item_size_max, lease refreshes) as a stream to wait on. Waiting is on
// completions and events only, never on the clock; every wait for an event is bounded by a number of events.

import Foundation
import Logging
import Synchronization
import ImageCacheTestSupport
@testable import ImageCacheFleet

/// A tier under test and the events it reports.
final class TierUnderTest: Sendable {
    let tier: FleetTier
    let events: AsyncStream<FleetEvent>
    private let continuation: AsyncStream<FleetEvent>.Continuation

    convenience init(_ servers: [MemcachedProcess], configure: (inout FleetSettings) -> Void = { _ in }) {
        self.init(servers: servers.map { FleetServer(host: "127.0.0.1", port: $0.port) }, configure: configure)
    }

    /// A tier on `servers` (names or IP literals); `resolve` answers for the names (getaddrinfo when nil).
    init(servers: [FleetServer], resolve: SocketAddress.Resolver? = nil, configure: (inout FleetSettings) -> Void = { _ in }) {
        var settings = Self.settings(servers)
        configure(&settings)
        let (events, continuation) = AsyncStream.makeStream(of: FleetEvent.self)
        self.events = events
        self.continuation = continuation
        var logger = Logger(label: "fleet-test")
        logger.logLevel = .warning
        tier = FleetTier(settings: settings, logger: logger, observer: { continuation.yield($0) },
                         resolve: resolve ?? SocketAddress.resolve)
        tier.start()
    }

    /// The tests' settings on `servers`, before a test's own changes (for a reload).
    static func settings(_ servers: [FleetServer]) -> FleetSettings {
        var settings = FleetSettings()
        settings.servers = servers
        settings.itemMaxBytes = 32 << 20
        // Generous for a loaded 2-core machine and a debug build (a full run's first minute can pause a test for
        // seconds): a deadline and a lease that such pauses do not reach; the tests of deadlines and expiry set their own.
        settings.deadlineSeconds = 2
        settings.leaseSeconds = 60
        return settings
    }

    deinit {
        tier.shutdown()
        continuation.finish()
    }

    func lookup(_ key: String) async -> FleetLookup {
        await handOver { tier.lookup(key, completion: $0) }
    }

    func store(_ lease: FleetLease, _ value: [UInt8], flags: UInt32 = 0, ttl: Int = 60) async -> FleetStoreResult {
        await handOver { tier.store(lease, value: value, flags: flags, ttlSeconds: ttl, completion: $0) }
    }

    func delete(_ key: String, cas: UInt64? = nil) async -> Bool {
        await handOver { tier.delete(key, cas: cas, completion: $0) }
    }

    /// Waits for the first event matching `predicate` among the next `limit` events; nil if none does.
    func event(within limit: Int = 50, where predicate: (FleetEvent) -> Bool) async -> FleetEvent? {
        var iterator = events.makeAsyncIterator()
        for _ in 0..<limit {
            guard let event = await iterator.next() else { return nil }
            if predicate(event) { return event }
        }
        return nil
    }

    /// Waits until the server's `stats settings` answered (the control connection's first exchange is done).
    func itemSizeMaxRead() async -> Int? {
        guard case let .itemSizeMax(_, bytes)? = await event(where: { if case .itemSizeMax = $0 { true } else { false } })
        else { return nil }
        return bytes
    }

    func serverState(_ state: FleetStats.ServerState, within limit: Int = 50) async -> Bool {
        await event(within: limit) { $0 == .serverState(server: serverName, state: state) } != nil
    }

    var serverName: String { tier.stats().servers.first?.address ?? "" }
    var server: FleetStats.Server { tier.stats().servers[0] }
}

extension FleetLookup {
    var lease: FleetLease? { if case let .won(lease) = self { lease } else { nil } }
    var value: FleetValue? { if case let .hit(value) = self { value } else { nil } }
    var isWait: Bool { if case .wait = self { true } else { false } }
    var isUnavailable: Bool { if case .unavailable = self { true } else { false } }
    var name: String {
        switch self {
        case .hit: "hit"
        case .won: "won"
        case .wait: "wait"
        case let .unavailable(reason): "unavailable(\(reason))"
        }
    }
}

/// Bytes that are not all alike (a pattern a shifted or truncated copy would not match).
func patternBytes(_ count: Int, seed: UInt64 = 1) -> [UInt8] {
    var bytes = [UInt8](repeating: 0, count: count)
    var state = seed &* 0x9E37_79B9_7F4A_7C15
    bytes.withUnsafeMutableBytes { buffer in
        var offset = 0
        while offset < buffer.count {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            withUnsafeBytes(of: state) { word in
                let take = min(8, buffer.count - offset)
                UnsafeMutableRawBufferPointer(rebasing: buffer[offset..<(offset + take)]).copyMemory(
                    from: UnsafeRawBufferPointer(rebasing: word[0..<take]))
            }
            offset += 8
        }
    }
    return bytes
}

/// Records the order completions arrive in.
final class CompletionOrder: Sendable {
    private let names = Mutex<[String]>([])
    func record(_ name: String) { names.withLock { $0.append(name) } }
    var order: [String] { names.withLock { $0 } }
}
