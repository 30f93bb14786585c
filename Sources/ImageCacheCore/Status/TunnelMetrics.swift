// The counts of CONNECT tunnels: how many are open (also the `max-tunnels` cap, taken and given back here; blind and
// intercepted tunnels share it) and how many of them are intercepted, how CONNECTs ended, how tunnels closed (by
// kind), and the bytes they carried. Atomics and small locks; shared by the proxy (any thread), the certificates
// queue (a leaf that lands) and the connections' loops (when a tunnel closes).

internal import ImageCacheSystem
package import ImageCacheServer
package import ImageCacheStatus
internal import Synchronization

/// Which kind of tunnel a place or an end is counted for.
enum TunnelKind: Sendable {
    case blind
    case intercepted
}

package final class TunnelMetrics: Sendable {
    private let open = Atomic<Int>(0)
    /// Of `open`, the intercepted.
    private let openIntercepted = Atomic<Int>(0)
    /// Dials under way: they hold upstream transfer slots, which image fetches need too.
    private let dialing = Atomic<Int>(0)
    private let results = Locked<[String: Int]>([:])
    private let ends = Locked<[String: Int]>([:])
    private let interceptedEnds = Locked<[String: Int]>([:])
    private let bytesUp = Counter()
    private let bytesDown = Counter()

    package init() {}

    /// Takes one of `limit` tunnel places for a tunnel of `kind`; false at the cap.
    func reserve(limit: Int, kind: TunnelKind = .blind) -> Bool {
        var current = open.load(ordering: .relaxed)
        while current < limit {
            let (exchanged, found) = open.compareExchange(expected: current, desired: current + 1, ordering: .relaxed)
            if exchanged {
                if kind == .intercepted { openIntercepted.add(1, ordering: .relaxed) }
                return true
            }
            current = found
        }
        return false
    }

    /// Takes one of `limit` dial places; false at the cap.
    func reserveDial(limit: Int) -> Bool {
        var current = dialing.load(ordering: .relaxed)
        while current < limit {
            let (exchanged, found) = dialing.compareExchange(expected: current, desired: current + 1, ordering: .relaxed)
            if exchanged { return true }
            current = found
        }
        return false
    }

    func releaseDial() {
        dialing.subtract(1, ordering: .relaxed)
    }

    /// Gives a place back (a refused dial or mint, a client gone, a closed tunnel).
    func release(kind: TunnelKind = .blind) {
        open.subtract(1, ordering: .relaxed)
        if kind == .intercepted { openIntercepted.subtract(1, ordering: .relaxed) }
    }

    func connect(_ result: ConnectResult) {
        results.withLock { $0[result.rawValue, default: 0] += 1 }
    }

    func closed(_ report: TunnelReport, kind: TunnelKind = .blind) {
        switch kind {
        case .blind: ends.withLock { $0[report.end.rawValue, default: 0] += 1 }
        case .intercepted: interceptedEnds.withLock { $0[report.end.rawValue, default: 0] += 1 }
        }
        bytesUp.add(report.bytesUp)
        bytesDown.add(report.bytesDown)
    }

    var openCount: Int { open.load(ordering: .relaxed) }

    var interceptedCount: Int { openIntercepted.load(ordering: .relaxed) }

    /// The counts; the intercepted ones only when `interception` is on or some were counted.
    func snapshot(limit: Int, interception: Bool = false) -> DaemonStats.Tunnels {
        let interceptedEnds = interceptedEnds.withLock { $0 }
        let intercepted = interceptedCount
        let showsInterception = interception || intercepted > 0 || !interceptedEnds.isEmpty
        return DaemonStats.Tunnels(open: openCount, limit: limit, connects: results.withLock { $0 }, ends: ends.withLock { $0 },
                                   bytesUp: bytesUp.current, bytesDown: bytesDown.current,
                                   intercepted: showsInterception ? intercepted : nil,
                                   interceptedEnds: showsInterception ? interceptedEnds : nil)
    }
}

/// One CONNECT's hold on a tunnel place: given back exactly once, whichever of the refusal, the client's going or the
/// tunnel's end comes first (they can race: a dial's answer and a client's hang-up arrive on different threads).
final class TunnelPlace: Sendable {
    private let metrics: TunnelMetrics
    private let kind: TunnelKind
    private let held = Atomic<Bool>(true)

    /// A place `metrics.reserve(limit:kind:)` took.
    init(_ metrics: TunnelMetrics, kind: TunnelKind = .blind) {
        self.metrics = metrics
        self.kind = kind
    }

    func release() {
        if held.exchange(false, ordering: .relaxed) { metrics.release(kind: kind) }
    }
}

/// One CONNECT's hold on a dial place: given back once, when the dial answers or the client goes.
final class DialPlace: Sendable {
    private let metrics: TunnelMetrics
    private let held = Atomic<Bool>(true)

    init(_ metrics: TunnelMetrics) {
        self.metrics = metrics
    }

    func release() {
        if held.exchange(false, ordering: .relaxed) { metrics.releaseDial() }
    }
}
