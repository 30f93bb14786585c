// What the fleet thread keeps per configured server (a link), per held lease, and per request waiting for its answer.
//
// Ownership: all of it is the fleet thread's (FleetClient): created, changed and dropped there only, never Sendable.
// A link lives as long as its server is in the settings; a server removed by a reload is `retired`: its connections
// close once their pending requests are answered, and only the leases held on it still use it (a lease stays with
// the server that granted it). A held lease is referenced from the client's table until its store or release
// (`ended`), and from the requests refreshing it.

internal import Logging

/// One memcached server: its address, its breaker, its two connections (opened when first needed) and its counters.
final class FleetLink {
    let server: FleetServer
    var address: Result<SocketAddress, ResolveError>
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
        address = SocketAddress.resolve(host: server.host, port: server.port)
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
