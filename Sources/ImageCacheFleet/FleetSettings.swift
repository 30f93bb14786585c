// FleetSettings: what the fleet tier is configured with (the `fleet.*` keys, docs/configuration.md). A value; the
// defaults live here once (ConfigKeys renders them). An empty server list is no fleet: today's single-host daemon.

/// One memcached server of the fleet tier, `host:port` (an IPv6 literal in brackets: `[::1]:11211`).
public struct FleetServer: Sendable, Hashable, CustomStringConvertible {
    public var host: String
    public var port: Int

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// Parses `host:port` (`[v6]:port`); nil when it is not one (no port, a port outside 1...65535, an empty host).
    public init?(parsing text: String) {
        var rest = Substring(text)
        let host: Substring
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { return nil }
            host = rest[rest.index(after: rest.startIndex)..<close]
            rest = rest[rest.index(after: close)...]
            guard rest.hasPrefix(":") else { return nil }
            rest = rest.dropFirst()
        } else {
            guard let colon = rest.lastIndex(of: ":") else { return nil }
            host = rest[..<colon]
            rest = rest[rest.index(after: colon)...]
            if host.contains(":") { return nil }
        }
        guard !host.isEmpty, !host.contains(where: { $0 == " " || $0 == "/" }), let port = Int(rest), (1...65535).contains(port)
        else { return nil }
        self.host = String(host)
        self.port = port
    }

    /// `host:port`, an IPv6 literal in brackets: the server's name in the ring, the logs and the metrics.
    public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}

public struct FleetSettings: Sendable, Equatable {
    /// `fleet.servers`: the memcached servers; keys are spread over this list by rendezvous hashing, and the list is
    /// never changed by failures (a server that is down makes its keys local-only). Empty: no fleet.
    public var servers: [FleetServer] = []
    /// `fleet.item-max`: the largest value stored in the tier, bytes; must not exceed the servers' `-I` (checked at
    /// start with `stats settings`). Default 1 MiB, memcached's own default `-I`.
    public var itemMaxBytes = 1 << 20
    /// `fleet.lease`: a fill lease's time to live in memcached, seconds (kept alive while the winner's bytes arrive).
    public var leaseSeconds = 5
    /// `fleet.wait`: longest a host waits for another host's fill before it fetches alone, seconds.
    public var waitSeconds: Double = 10
    /// `fleet.deadline`: each operation's deadline, seconds, plus a value's transfer time at `transferBytesPerSecond`.
    public var deadlineSeconds: Double = 0.05
    /// The rate a value's transfer time is counted at for its deadline, bytes per second.
    public var transferBytesPerSecond = 50_000_000
    /// Consecutive failures that open a server's circuit breaker.
    public var breakerFailures = 3
    /// How long an open breaker stays open before one `mn` probe, seconds.
    public var breakerOpenSeconds: Double = 2
    /// Values larger than this go over each server's bulk connection, so a lease poll never waits behind them.
    public var bulkThresholdBytes = 64 << 10

    public init() {}

    public var isEnabled: Bool { !servers.isEmpty }

    /// The deadline of an operation that moves `bytes` of value.
    public func deadline(forValueBytes bytes: Int) -> Double {
        deadlineSeconds + Double(bytes) / Double(transferBytesPerSecond)
    }
}
