// StoredResponse: how a stored variant is written to a client, wherever it was found (the hit path on a connection's
// loop, the disk's read queue, a fetch that revalidated or read it). It holds no state: what it needs is passed in.

internal import ImageCacheSystem
internal import ImageCacheHTTP
internal import ImageCacheConfig
internal import ImageCacheServer
internal import ImageCacheStore
internal import ImageCacheUpstream
internal import Foundation

enum StoredResponse {
    /// Writes a stored entry: the full response, or 304 when the client's own validators match.
    /// The full response sends the entry's head as rendered at store time plus Age, Cache-Status and X-Cache
    /// (`CacheEntry.serializedHead`): no per-field work per hit. The body is the entry's, or `file` (a verified
    /// disk body too large for memory, sent with sendfile; the entry's own body is then empty).
    static func send(_ entry: CacheEntry, to sink: any ResponseSink, request: ClientRequest, outcome: CacheOutcome,
                     now: Date, file: FileBody? = nil) {
        sink.note(outcome)
        if request.clientValidatorsMatch(entry) {
            let (head, _) = Self.head(for: entry, request: request, outcome: outcome, now: now)
            sink.head(head, bodyLength: nil)
            sink.end()
            return
        }
        let age = String(Int(Freshness.currentAge(entry, now: now)))
        let cacheStatus = outcome.cacheStatus
        var extra = HTTPHeaders([
            ("Age", age),
            ("Cache-Status", entry.upstreamCacheStatus.map { $0 + ", " + cacheStatus } ?? cacheStatus),
            ("X-Cache", outcome.xCache),
        ])
        // An entry a configured origin's fetch stored, asked for through forward or fetch mode.
        if !request.trusted && !entry.guardsUntrusted {
            for (name, value) in UntrustedResponse.fields { extra.add(name, value) }
        }
        if let file {
            sink.respond(entry.serializedHead, extra: extra, file: file)
        } else {
            sink.respond(entry.serializedHead, extra: extra, body: entry.body)
        }
    }

    /// The head a client gets for a stored entry (Age, Cache-Status, X-Cache set; no Content-Length, the sink frames
    /// the body), or a 304 head when the client's own validators match (`notModified`). Used where the body is not in
    /// the entry (a large body streamed from its file) and for 304s; hits of whole entries use `send`.
    static func head(for entry: CacheEntry, request: ClientRequest, outcome: CacheOutcome,
                     now: Date) -> (HTTPResponseHead, notModified: Bool) {
        var headers = entry.head.headers
        headers.remove("Content-Length")
        headers.set("Age", String(Int(Freshness.currentAge(entry, now: now))))
        outcome.apply(to: &headers)
        if !request.trusted { UntrustedResponse.apply(to: &headers) }
        if request.clientValidatorsMatch(entry) {
            let kept = ["ETag", "Cache-Control", "Expires", "Last-Modified", "Date", "Vary", "Content-Location", "Age",
                        "Cache-Status", "X-Cache"]
            headers.removeAll { field in !kept.contains { $0.equalsIgnoringASCIICase(field.name) } }
            return (HTTPResponseHead(status: 304, headers: headers), true)
        }
        return (HTTPResponseHead(status: entry.head.status, reason: entry.head.reason, headers: headers), false)
    }
}
