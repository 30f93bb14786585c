// The status page and the history behind it (Proxy+Admin.swift's rules decide who may ask); the documents and the page
// are ImageCacheStatus's pure values and renderers, this file is the proxy's side (the snapshot, the queues):
//   GET /_imagecached/ and /_imagecached/status   the page (StatusPage.swift): figures rendered there, charts drawn by its
//                                                 own script, which polls the two JSON documents every status-refresh
//   GET /_imagecached                             301 to /_imagecached/
//   GET /_imagecached/stats/history[?since=T]     the history (StatsHistory.swift): samples ending after T (seconds
//                                                 since 1970), every one without it, and the interval in progress
// The history is the proxy queue's: a sample is recorded there (`sampleHistory`, from the Daemon's timer on that
// queue every status-history-interval), and the documents are read there; encoding and rendering happen off it (they are pure
// functions of the values read).

internal import ImageCacheHTTP
internal import ImageCacheStatus
internal import ImageCacheServer
internal import ImageCacheStore
internal import ImageCacheConfig
internal import ImageCacheTransform
internal import ImageCacheFleet
internal import Dispatch
internal import Foundation

extension Proxy {
    /// The stats document. On the proxy queue: the fetches in flight are its.
    func statsSnapshot() -> DaemonStats {
        dispatchPrecondition(condition: .onQueue(queue))
        let pool = renditions.pool
        var stats = metrics.snapshot(memory: memory.stats, disk: disk?.stats, fetchesInFlight: inFlight.count,
                                     transformQueue: (pool.workers, pool.running, pool.queued), pixelCache: renditions.pixelCache.stats,
                                     inFlight: inFlight.summaries)
        stats.tunnels = metrics.tunnels.snapshot(limit: configuration.maxTunnels, interception: interception.current != nil)
        if interception.current != nil {
            let counters = TLSCounters.intercepted
            stats.interceptedTLS = DaemonStats.TLS(fullHandshakes: counters.fullHandshakes, resumedHandshakes: counters.resumedHandshakes,
                                                   failures: counters.failureCounts, openConnections: counters.openConnections)
        }
        stats.leafCertificates = interception.stats
        if configuration.fleet.isEnabled {
            stats.fleet = metrics.fleet.snapshot(tier: fleet.stats())
        }
        return stats
    }

    /// Records one sample of the history: what happened since the last one. On the proxy queue, where the Daemon's
    /// timer runs it every `status-history-interval`.
    package func sampleHistory() {
        dispatchPrecondition(condition: .onQueue(queue))
        history.record(statsSnapshot(), at: now())
    }

    /// `sampleHistory` from any thread (the tests stand in for the timer with it); `done` runs once it is recorded.
    public func recordHistorySample(done: (@Sendable () -> Void)? = nil) {
        queue.async { [self] in
            sampleHistory()
            done?()
        }
    }

    func serveStatusPage(sink: any ResponseSink, settings: ProxySettings) {
        let refresh = Int((settings.configuration.statusRefreshSeconds * 1000).rounded())
        queue.async { [self] in
            let stats = statsSnapshot()
            let document = history.document(since: nil, stats: stats, at: now())
            DispatchQueue.global(qos: .utility).async {
                var headers = Self.noStoreHeaders(contentType: "text/html; charset=utf-8")
                headers.add("Content-Security-Policy", StatusPage.contentSecurityPolicy)
                headers.add("X-Frame-Options", "DENY")
                headers.add("Referrer-Policy", "no-referrer")
                headers.add("Cross-Origin-Opener-Policy", "same-origin")
                sink.respond(HTTPResponseHead(status: 200, headers: headers),
                             body: StatusPage.render(stats: stats, history: document, refreshMilliseconds: refresh))
            }
        }
    }

    func serveHistory(since: Double?, sink: any ResponseSink) {
        queue.async { [self] in
            let document = history.document(since: since, stats: statsSnapshot(), at: now())
            DispatchQueue.global(qos: .utility).async {
                sink.respond(HTTPResponseHead(status: 200, headers: Self.noStoreHeaders(contentType: "application/json")),
                             body: document.json())
            }
        }
    }

    /// `?since=<seconds since 1970>`: nil for no query; the reason for anything else.
    static func historySince(_ query: String?) -> Result<Double?, HistoryQueryError> {
        guard let query, !query.isEmpty else { return .success(nil) }
        let names = query.split(separator: "&").map { $0.split(separator: "=", maxSplits: 1).first.map(String.init) ?? "" }
        guard names == ["since"], let text = Route.queryParameter("since", in: query), let since = Double(text), since.isFinite else {
            return .failure(HistoryQueryError(reason: "use /_imagecached/stats/history, or ?since=<seconds since 1970> for the samples after then"))
        }
        return .success(since)
    }

    struct HistoryQueryError: Error, CustomStringConvertible {
        let reason: String
        var description: String { reason }
    }

    static func noStoreHeaders(contentType: String) -> HTTPHeaders {
        var headers = HTTPHeaders()
        headers.add("Content-Type", contentType)
        headers.add("Cache-Control", "no-store")
        headers.add("X-Content-Type-Options", "nosniff")
        return headers
    }
}
