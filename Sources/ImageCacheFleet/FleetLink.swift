// What the fleet thread keeps per configured server (a link), per held lease, and per request waiting for its answer.
//
// Ownership: all of it is the fleet thread's (FleetClient): created, changed and dropped there only, never Sendable.
// A link lives as long as its server is in the settings; a server removed by a reload is `retired`: its connections
// close once their pending requests are answered, and only the leases held on it still use it (a lease stays with
// the server that granted it). A retired link is forgotten once it has no connection left; a server listed again
// gets its retired link back only while that link's breaker is closed, otherwise a new link (a new breaker, a first
// connect at once), so a server re-added while it was down is tried again at once. A held lease is referenced from
// the client's table until its store or release (`ended`), and from the requests refreshing it.
//
// A link's address (FleetAddress): an IP literal is read once, at once; a name is resolved off the fleet thread
// (FleetResolver) when the link is made, again when a connect to it fails (the address may have changed), and at
// each probe of its open breaker while it does not resolve. While a resolution is out, the previous address (if any)
// is still used; with none, the server's operations are unavailable without socket work.

internal import Logging

/// Where a link connects to.
enum FleetAddress {
    /// An IP literal's, or a name's last resolution's.
    case resolved(SocketAddress)
    /// A name's resolution is out (`token` names it: an answer with another token is stale); `previous` is used meanwhile.
    case resolving(token: UInt64, previous: SocketAddress?)
    /// A name not resolved yet, or whose last resolution failed: nothing to connect to.
    case unresolved

    /// The address a connection is opened to now.
    var current: SocketAddress? {
        switch self {
        case let .resolved(address): address
        case let .resolving(_, previous): previous
        case .unresolved: nil
        }
    }

    var isResolving: Bool { if case .resolving = self { true } else { false } }
}

/// One memcached server: its address, its breaker, its two connections (opened when first needed) and its counters.
final class FleetLink {
    let server: FleetServer
    /// False for an IP literal (read once, never resolved again).
    let isName: Bool
    var address: FleetAddress
    /// The name's last resolution failed and that was logged (the next success is logged too, nothing in between).
    var unresolvable = false
    var breaker: FleetBreaker
    var control: FleetConnection?
    var bulk: FleetConnection?
    /// `item_size_max` from `stats settings`, once read.
    var itemSizeMax: Int?
    var counters: FleetStats.Server
    var retired = false
    /// This host's place in each log it reads or appends to on this server (FleetClient+Log.swift), least recently
    /// used first.
    var logCursors: [(name: String, cursor: FleetLogCursor)] = []

    init(server: FleetServer, settings: FleetSettings) {
        self.server = server
        if let literal = SocketAddress.numeric(host: server.host, port: server.port) {
            isName = false
            address = .resolved(literal)
        } else {
            isName = true
            address = .unresolved
        }
        breaker = FleetBreaker(failuresToOpen: settings.breakerFailures, openSeconds: settings.breakerOpenSeconds)
        counters = FleetStats.Server(address: server.description, state: .up, itemSizeMax: nil)
    }

    func connection(_ role: FleetConnection.Role) -> FleetConnection? {
        role == .control ? control : bulk
    }

    func setConnection(_ connection: FleetConnection?, _ role: FleetConnection.Role) {
        if role == .control { control = connection } else { bulk = connection }
    }

    var stats: FleetStats.Server {
        var stats = counters
        stats.state = breaker.serverState
        stats.itemSizeMax = itemSizeMax
        return stats
    }
}

/// A lease this host won and has not stored or released yet.
final class HeldLease {
    let lease: FleetLease
    let link: FleetLink
    /// A check or touch is out: the next refresh waits for it.
    var refreshing = false
    /// The item is gone or another stub replaced it: no more refreshes (the store will answer lostLease).
    var lost = false
    /// Stored or released: answers of refreshes still out are dropped.
    var ended = false

    init(lease: FleetLease, link: FleetLink) {
        self.lease = lease
        self.link = link
    }
}

/// A lookup in progress (it may take a second request to read the value, and one more lookup if the value vanished
/// between the two).
struct LookupJob {
    let key: String
    let completion: @Sendable (FleetLookup) -> Void
    /// It was looked up once more already.
    var retried = false
}

/// What a pending request's answer completes.
enum FleetWork {
    /// `mg <key> s c f N t`.
    case lookup(LookupJob)
    /// `mg <key> v c f t` after a lookup found a value.
    case read(LookupJob)
    case store(@Sendable (FleetStoreResult) -> Void)
    case release
    case delete((@Sendable (Bool) -> Void)?)
    /// A held lease's refresh, first step: is the item still the stub with its CAS?
    case check(HeldLease)
    /// Second step: extend its TTL.
    case touch(HeldLease)
    /// The half-open breaker's `mn`.
    case probe
    case statsSettings
    /// A step of one server's walk to append a log line (FleetClient+Log.swift).
    case append(AppendPart)
    /// A step of one server's walk to read a log.
    case logRead(LogReadPart)
}
