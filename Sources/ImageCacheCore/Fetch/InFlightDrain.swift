internal import ImageCacheSystem
internal import ImageCacheHTTP
internal import ImageCacheStatus
internal import ImageCacheConfig
internal import ImageCacheServer
internal import ImageCacheStore
internal import ImageCacheUpstream
internal import Dispatch
internal import Foundation
internal import Logging
internal import Synchronization

/// Keeps the body bytes a finished fetch handed to clients that have not taken them yet counted in
/// `inFlightBytes` (as the fetch did: the largest backlog, since the clients share the same chunks) until each client
/// has taken its response or gone. Owned by the callbacks it registers; guarded by its Mutex.
final class InFlightDrain: Sendable {
    private struct State {
        var sinks: [(sink: any ResponseSink, sentBytes: Int)]
        var accounted = 0
    }

    private let state: Locked<State>
    private let metrics: ProxyMetrics

    private init(_ sinks: [(sink: any ResponseSink, sentBytes: Int)], metrics: ProxyMetrics) {
        state = Locked(State(sinks: sinks))
        self.metrics = metrics
    }

    static func start(_ sinks: [(sink: any ResponseSink, sentBytes: Int)], metrics: ProxyMetrics) {
        let drain = InFlightDrain(sinks, metrics: metrics)
        drain.recount()
        for (sink, sentBytes) in sinks {
            sink.whenWritten(sentBytes) { drain.recount() }
        }
    }

    /// Sets the count to the largest backlog left (0 once every client took its bytes or went).
    private func recount() {
        let delta = state.withLock { state -> Int in
            state.sinks.removeAll { $0.sink.bytesWritten >= $0.sentBytes }
            let backlog = state.sinks.map { $0.sentBytes - $0.sink.bytesWritten }.max() ?? 0
            defer { state.accounted = backlog }
            return backlog - state.accounted
        }
        if delta != 0 { metrics.inFlightBytes.wrappingAdd(delta, ordering: .relaxed) }
    }
}
