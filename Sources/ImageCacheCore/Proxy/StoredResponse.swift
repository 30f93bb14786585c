// StoredResponse: how a stored variant is written to a client, wherever it was found (the hit path on a connection's
// loop, the disk's read queue, a fetch that revalidated or read it). It holds no state: what it needs is passed in.

internal import ImageCacheSystem
internal import ImageCacheHTTP
internal import ImageCacheServer
internal import ImageCacheStore
internal import Foundation

enum StoredResponse {
    /// Writes a stored entry: the full response, 304 as the client's conditional fields say (`Precondition.evaluate`,
    /// RFC 9111 4.3.2), or 206 / 416 for a Range request (`RangeAnswer.evaluate`, 14);
    /// returns the body bytes sent. The full response sends the entry's head as rendered at store time plus Age,
    /// Cache-Status and X-Cache (`CacheEntry.serializedHead`): no per-field work per hit. The body is the entry's, or
    /// `file` (a verified disk body too large for memory, sent with sendfile; the entry's own body is then empty); a
    /// part is a copy of those bytes from memory, or a slice of the file.
    @discardableResult
    static func send(_ entry: CacheEntry, to sink: any ResponseSink, request: ClientRequest, outcome: CacheOutcome,
                     now: Date, file: FileBody? = nil) -> Int {
        var outcome = outcome
        outcome.received = CacheOutcome.Received(responseTime: entry.responseTime, initialAge: entry.correctedInitialAge)
        sink.note(outcome)
        // Preconditions and Range are for a successful response (RFC 9110 13.2.1, 14.2); a stored 404 or 301 is sent
        // as it is.
        let precondition = (200..<300).contains(entry.head.status) ? request.precondition(for: entry) : .serve
        let age = String(Int(Freshness.currentAge(entry, now: now)))
        let cacheStatus = outcome.cacheStatus
        var extra = HTTPHeaders([
            ("Age", age),
            ("Cache-Status", entry.upstreamCacheStatus.map { $0 + ", " + cacheStatus } ?? cacheStatus),
            ("X-Cache", outcome.xCache),
        ])
        if precondition == .notModified {
            sink.head(notModifiedHead(entry, request: request, outcome: outcome, age: age), bodyLength: nil)
            sink.end()
            return 0
        }
        // An entry a configured origin's fetch stored, asked for through forward or fetch mode.
        if !request.trusted && !entry.guardsUntrusted {
            for (name, value) in UntrustedResponse.fields { extra.add(name, value) }
        }
        let length = file?.length ?? entry.body.count
        let range = entry.head.status == 200
            ? RangeAnswer.evaluate(method: request.head.method, headers: request.head.headers, length: length,
                                   etag: entry.etag, lastModified: entry.lastModified, date: entry.head.headers["Date"])
            : .whole
        switch range {
        case .whole:
            if let file {
                sink.respond(entry.serializedHead, extra: extra, file: file)
            } else {
                sink.respond(entry.serializedHead, extra: extra, body: entry.body)
            }
            return length
        case let .part(bytes):
            // The stored fields as every hit sends them (per-response and stripped ones already left out).
            var head = HTTPResponseHead(status: 206, reason: "Partial Content", headers: entry.serializedHead.headers)
            head.headers.set("Content-Range", "bytes \(bytes.lowerBound)-\(bytes.upperBound)/\(length)")
            head.headers.set("Accept-Ranges", "bytes")
            // The part shares the stored bytes (a slice of the array, or of the file): never copied, so clients
            // asking for parts and not reading cannot multiply the memory a body takes.
            let prepared = SerializedResponseHead(head, excluding: CacheEntry.perResponseFields)
            if let file {
                sink.respond(prepared, extra: extra, file: file.slice(offset: bytes.lowerBound, length: bytes.count))
            } else {
                sink.respond(prepared, extra: extra, part: entry.body[bytes])
            }
            return bytes.count
        case .unsatisfiable:
            extra.add("Content-Range", "bytes */\(length)")
            sink.fail(status: 416, reason: "Range: no part of the \(length)-byte response is in \(request.head.headers["Range"]?.prefix(100) ?? "")",
                      headers: extra)
            return 0
        }
    }

    /// The 304 a client gets when its own validators match the stored entry: the fields RFC 9110 15.4.5 names
    /// (no Content-Length, no body), with Age, Cache-Status and X-Cache.
    private static func notModifiedHead(_ entry: CacheEntry, request: ClientRequest, outcome: CacheOutcome,
                                        age: String) -> HTTPResponseHead {
        var headers = entry.head.headers
        headers.set("Age", age)
        outcome.apply(to: &headers)
        if !request.trusted { UntrustedResponse.apply(to: &headers) }
        let kept = ["ETag", "Cache-Control", "Expires", "Last-Modified", "Date", "Vary", "Content-Location", "Age",
                    "Cache-Status", "X-Cache"]
        headers.removeAll { field in !kept.contains { $0.equalsIgnoringASCIICase(field.name) } }
        return HTTPResponseHead(status: 304, headers: headers)
    }
}
