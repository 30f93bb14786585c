// What a TLS listener (`tls-listen`) gives its connections: the server context in force and the counts of its
// handshakes. The context is swapped whole on SIGHUP (the certificate and key read again): connections accepted
// after the swap get the new one, those already open keep theirs (an SSL holds a reference to its context), so a
// reload drops no connection.

public import ImageCacheTLS
internal import ImageCacheSystem
internal import Synchronization

/// The TLS side of one listener. Shared by the daemon (reload, stats) and the listener's connections (any loop).
public final class TLSListening: Sendable {
    private let context: Mutex<TLSContext>
    public let counters = TLSCounters()

    public init(context: TLSContext) {
        self.context = Mutex(context)
    }

    /// The context new connections use.
    public var current: TLSContext { context.withLock { $0 } }

    /// Puts a new context (a new certificate) in force for new connections.
    public func replace(with next: TLSContext) {
        context.withLock { $0 = next }
    }

    /// The same certificate on a fresh context, so fresh ticket keys (OpenSSL makes them with a context and keeps them
    /// as long as it lives): tickets issued before fall back to full handshakes, and a key that leaks exposes at most
    /// one period's TLS 1.2 sessions.
    public func rotateTicketKeys() throws(TLSError) {
        guard let identity = current.identity else { return }
        replace(with: try TLSContext.server(identity: identity))
    }
}

/// Handshakes and failures on one TLS listener, for the metrics. Atomics; any thread.
public final class TLSCounters: Sendable {
    /// Why a TLS connection failed before or during its handshake.
    public enum Failure: String, Sendable, CaseIterable {
        /// The handshake did not finish within `server.header-timeout` of its first byte.
        case timeout
        /// The first bytes were not a TLS record (plain HTTP gets a 400 first).
        case notTLS = "not_tls"
        /// The peer broke the protocol or sent a fatal alert (a version or certificate it would not take).
        case `protocol`
        /// The client's SNI named a host this stream may not serve.
        case sniMismatch = "sni_mismatch"
        /// The peer hung up mid-handshake.
        case closed
    }

    private let full = Atomic<Int>(0)
    private let resumed = Atomic<Int>(0)
    private let open = Atomic<Int>(0)
    private let failures = Locked<[Failure: Int]>([:])

    public init() {}

    /// The TLS servers inside intercepted CONNECT tunnels (one set of counts for the process).
    public static let intercepted = TLSCounters()

    func handshake(resumed wasResumed: Bool) {
        if wasResumed {
            resumed.wrappingAdd(1, ordering: .relaxed)
        } else {
            full.wrappingAdd(1, ordering: .relaxed)
        }
    }

    func failed(_ failure: Failure) {
        failures.withLock { $0[failure, default: 0] += 1 }
    }

    func opened() { open.wrappingAdd(1, ordering: .relaxed) }
    func closed() { open.wrappingSubtract(1, ordering: .relaxed) }

    public var fullHandshakes: Int { full.load(ordering: .relaxed) }
    public var resumedHandshakes: Int { resumed.load(ordering: .relaxed) }
    public var openConnections: Int { open.load(ordering: .relaxed) }
    public var failureCounts: [String: Int] {
        let counts = failures.withLock { $0 }
        return Dictionary(uniqueKeysWithValues: Failure.allCases.map { ($0.rawValue, counts[$0] ?? 0) })
    }
}
