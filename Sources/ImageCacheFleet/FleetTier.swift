// FleetTier: the fleet's shared cache tier on memcached (meta protocol), as the daemon sees it: a lookup that wins a
// fill lease on a miss (Nishtala et al., "Scaling Memcache at Facebook", 3.2.1; memcached's `mg ... N`), a store
// fenced by the lease's CAS, a release, a delete. Values are opaque bytes with 32-bit client flags (the core puts its
// checksummed entry format and markers in them); keys are at most 250 bytes of printable ASCII without spaces.
//
// API CONTRACT (ImageCacheCore codes against it; see docs/design/issue-30-plan.md). Completions run on the tier's own
// thread (once it is shut down: at once, on the caller's): callers hop to their queue. Every operation ends: with an
// answer, or `.unavailable` when its server's breaker is open, its deadline passes or its connection fails.
//
// Ownership: FleetTier is a thin, immutable front; FleetClient.swift owns the thread and everything it touches. A
// FleetLease is immutable but for its progress mark, an atomic any thread may set.

public import Logging
internal import Synchronization

/// A value read from the tier.
public struct FleetValue: Sendable {
    public var bytes: [UInt8]
    /// The client flags it was stored with.
    public var flags: UInt32
    public var cas: UInt64
    /// Seconds of its memcached TTL left (nil: none, or not reported).
    public var remainingTTL: Int?

    public init(bytes: [UInt8], flags: UInt32, cas: UInt64, remainingTTL: Int?) {
        self.bytes = bytes
        self.flags = flags
        self.cas = cas
        self.remainingTTL = remainingTTL
    }
}

/// What a lookup found.
public enum FleetLookup: Sendable {
    /// The value.
    case hit(FleetValue)
    /// No value: this host won the fill lease (`W`). Store with it, or release it.
    case won(FleetLease)
    /// No value: another host holds the fill lease (`Z`). Ask again later.
    case wait
    /// The key's server cannot be asked now (breaker open, deadline passed, connection failed): go on without it.
    case unavailable(reason: String)
}

/// What a fenced store did.
public enum FleetStoreResult: Sendable, Equatable {
    case stored
    /// The lease expired or was taken (the CAS no longer matches, or the key is gone): nothing stored.
    case lostLease
    /// Larger than the item size (fleet.item-max, or the server's own): nothing stored.
    case tooLarge
    case unavailable(reason: String)
}

/// A fill lease this host won: its key, its CAS (the fencing token of the store), and the progress mark that keeps it
/// alive. The tier refreshes (`mg <key> T<lease>`) every held lease whose holder reported progress within the last
/// lease time, about every third of it; a holder that stops reporting (a hung origin) lets it expire, and the next asker
/// wins it. A lease ends with `store` or `release` (or with the tier).
public final class FleetLease: Sendable, CustomStringConvertible {
    public let key: String
    public let cas: UInt64
    /// The server index in the ring the key belongs to (the tier's own bookkeeping).
    package let server: Int
    /// When the holder last reported progress (CLOCK_MONOTONIC, nanoseconds); a lease starts as progressed.
    private let lastProgress: Atomic<UInt64>

    package init(key: String, cas: UInt64, server: Int) {
        self.key = key
        self.cas = cas
        self.server = server
        lastProgress = Atomic(FleetClock.nanoseconds())
    }

    /// The holder's fill made progress (bytes arrived): the lease is kept alive for another lease time. Cheap (a
    /// clock read and an atomic store) and callable from any thread.
    public func progressed() {
        lastProgress.store(FleetClock.nanoseconds(), ordering: .relaxed)
    }

    package var lastProgressNanoseconds: UInt64 { lastProgress.load(ordering: .relaxed) }

    public var description: String { "\(key) c\(cas)" }
}

/// Counters and per-server state, for /metrics, /stats and the status page.
public struct FleetStats: Sendable, Equatable {
    public enum ServerState: String, Sendable, Equatable {
        /// Answering.
        case up
        /// The breaker is open: its keys are local-only until a probe answers.
        case down
        /// One `mn` probe is out.
        case probing
    }

    public struct Server: Sendable, Equatable {
        public var address: String
        public var state: ServerState
        /// The server's `item_size_max` from `stats settings`, once read.
        public var itemSizeMax: Int?
        public var operations: UInt64 = 0
        public var failures: UInt64 = 0
        public var timeouts: UInt64 = 0
        public var breakerOpens: UInt64 = 0
        public var bytesRead: UInt64 = 0
        public var bytesWritten: UInt64 = 0

        public init(address: String, state: ServerState, itemSizeMax: Int?) {
            self.address = address
            self.state = state
            self.itemSizeMax = itemSizeMax
        }
    }

    public var servers: [Server] = []
    public var lookups: UInt64 = 0
    public var hits: UInt64 = 0
    /// Leases won (`W`).
    public var leaseWins: UInt64 = 0
    /// Lookups told to wait (`Z`).
    public var leaseWaits: UInt64 = 0
    public var unavailable: UInt64 = 0
    public var stores: UInt64 = 0
    public var lostLeases: UInt64 = 0
    public var releases: UInt64 = 0
    public var leasesHeld: Int = 0
    /// Stores refused as larger than the item size (unsent when over fleet.item-max or the server's item_size_max).
    public var tooLarge: UInt64 = 0
    /// Held leases kept alive (`mg <key> T<lease>` answered with the lease's CAS).
    public var leaseRefreshes: UInt64 = 0
    /// Held leases found expired or replaced by a refresh.
    public var leasesLost: UInt64 = 0

    public init() {}
}

/// The tier's client: one thread (`icd.fleet`) owns the sockets, the pending operations and their deadlines
/// (FleetClient.swift; the flows are FleetClient+Operations.swift).
public final class FleetTier: Sendable {
    private let client: FleetClient

    public convenience init(settings: FleetSettings, logger: Logger) {
        self.init(settings: settings, logger: logger, observer: nil)
    }

    /// `observer` hears the thread's events (breaker states, item_size_max read, lease refreshes) on the fleet
    /// thread, after the completions of the same turn's operations were queued: tests wait on it instead of a clock.
    package convenience init(settings: FleetSettings, logger: Logger, observer: (@Sendable (FleetEvent) -> Void)?) {
        self.init(settings: settings, logger: logger, observer: observer, resolve: SocketAddress.resolve)
    }

    /// `resolve` turns a server's name into an address (getaddrinfo in the daemon); it runs on a resolver thread,
    /// never the fleet thread. Tests put their own here.
    init(settings: FleetSettings, logger: Logger, observer: (@Sendable (FleetEvent) -> Void)?,
         resolve: @escaping SocketAddress.Resolver) {
        client = FleetClient(settings: settings, logger: logger, observer: observer, resolve: resolve)
    }

    deinit { client.shutdown() }

    /// Starts the tier's thread; asks each server's `stats settings` (logged: a server whose item_size_max is below
    /// fleet.item-max is reported, and the smaller one is used). Operations posted before it wait for it.
    public func start() { client.start() }

    /// Ends the thread: operations still pending end `.unavailable`. Safe to call more than once, from any thread
    /// (from a completion too); later operations are answered `.unavailable` at once on the caller's thread.
    public func shutdown() { client.shutdown() }

    /// Puts new settings in force (a reload): a changed server list is a new ring; leases held stay with their server.
    public func reload(_ settings: FleetSettings) { client.post(.reload(settings)) }

    /// Looks `key` up; on a miss asks for the fill lease (`mg <key> s c f N<lease> t`, then `mg <key> v c f t` for a
    /// value found: on the bulk connection when it is larger than fleet's bulk threshold).
    public func lookup(_ key: String, completion: @escaping @Sendable (FleetLookup) -> Void) {
        client.post(.lookup(key, completion))
    }

    /// Stores `value` under the lease's key while the lease holds (`ms <key> <n> T<ttl> F<flags> C<cas>`), and ends it
    /// (no more refreshes; while the stub lives, its CAS still fences a second store with the same lease, e.g. a pass
    /// marker after `.tooLarge`).
    public func store(_ lease: FleetLease, value: [UInt8], flags: UInt32, ttlSeconds: Int,
                      completion: @escaping @Sendable (FleetStoreResult) -> Void) {
        client.post(.store(lease, value, flags, ttlSeconds, completion))
    }

    /// Hands the lease back (`md <key> C<cas>`), so the next asker wins it at once; ends it.
    public func release(_ lease: FleetLease) { client.post(.release(lease)) }

    /// Deletes `key` (`md <key>`; with `cas`, only that value: a damaged one just read). Completion: true when the
    /// server answered that it is gone (deleted, not found, or already replaced by another value: EX with a `cas`);
    /// false when the server could not be asked.
    public func delete(_ key: String, cas: UInt64? = nil, completion: (@Sendable (Bool) -> Void)? = nil) {
        client.post(.delete(key, cas, completion))
    }

    /// Appends `line` (one or more whole lines, `\n`-ended) to log `name` on every server whose breaker is closed: a
    /// log every host reads (FleetLog.swift: segments `<name>.<n>`, each made with `createTTLSeconds`). Completion:
    /// the servers that took it, of those asked.
    public func appendToLog(_ name: String, line: [UInt8], createTTLSeconds: Int,
                            completion: @escaping @Sendable (_ stored: Int, _ asked: Int) -> Void) {
        client.post(.append(name, line, createTTLSeconds, completion))
    }

    /// Reads log `name` on every server: what was appended since this host's last read of it there. One answer per
    /// configured server, in the list's order.
    public func readLog(_ name: String, completion: @escaping @Sendable ([FleetLogRead]) -> Void) {
        client.post(.readLog(name, completion))
    }

    /// A snapshot (thread-safe), as of the end of the fleet thread's last turn (a completion sees its own operation
    /// counted).
    public func stats() -> FleetStats { client.stats() }
}
