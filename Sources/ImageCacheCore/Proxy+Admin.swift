// The daemon's own endpoints under /_imagecached/ (reserved, as is /fetch). Answered for clients in `admin-allow`
// only (default loopback: 127.0.0.0/8, ::1); others get 403.
//   GET    /_imagecached/health              200 "ok" while the daemon serves
//   GET    /_imagecached/metrics             Prometheus text (Ops/Metrics.swift)
//   GET    /_imagecached/stats               the same counters as JSON (DaemonStats), read by `imagecached stats`
//   POST   /_imagecached/prefetch            body: URLs one per line; warms the cache (Proxy+Prefetch.swift)
//   DELETE /_imagecached/cache?url=<URL>     removes one URL (normalised like every cache key) from memory and disk
//   DELETE /_imagecached/cache               removes everything from memory and disk

internal import Foundation
internal import Logging

extension Proxy {
    func handleAdmin(_ request: HTTPRequestHead, path: String, query: String?, body: [UInt8], client: ClientInfo, sink: any ResponseSink,
                     settings: ProxySettings) {
        guard settings.configuration.adminAllow.contains(where: { $0.contains(client.address) }) else {
            refuse(sink, status: 403, reason: "the /_imagecached/ endpoints answer clients in admin-allow only (\(client.address) is not)",
                   request: request, client: client)
            return
        }
        switch path {
        case "/_imagecached/metrics", "/_imagecached/stats":
            guard request.method == "GET" || request.method == "HEAD" else {
                refuse(sink, status: 405, reason: "use GET", request: request, client: client, headers: ["Allow": "GET, HEAD"])
                return
            }
            let asJSON = path.hasSuffix("/stats")
            // The in-flight count belongs to the proxy queue: render there (no sync from this queue).
            queue.async { [self] in
                let stats = metrics.snapshot(memory: memory, memoryLimitBytes: memory.limitBytes, disk: disk,
                                             fetchesInFlight: coalescer.count)
                var headers = HTTPHeaders()
                headers.add("Cache-Control", "no-store")
                let body: [UInt8]
                if asJSON {
                    headers.add("Content-Type", "application/json")
                    body = stats.json()
                } else {
                    headers.add("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                    body = Array(stats.prometheusText.utf8)
                }
                sink.respond(HTTPResponseHead(status: 200, headers: headers), body: body)
            }
        case "/_imagecached/prefetch":
            guard request.method == "POST" else {
                refuse(sink, status: 405, reason: "use POST with the URLs one per line as the body", request: request,
                       client: client, headers: ["Allow": "POST"])
                return
            }
            prefetch(body: body, client: client, sink: sink, settings: settings)
        case "/_imagecached/health":
            guard request.method == "GET" || request.method == "HEAD" else {
                refuse(sink, status: 405, reason: "use GET", request: request, client: client, headers: ["Allow": "GET, HEAD"])
                return
            }
            var headers = HTTPHeaders()
            headers.add("Content-Type", "text/plain; charset=utf-8")
            headers.add("Cache-Control", "no-store")
            sink.respond(HTTPResponseHead(status: 200, headers: headers), body: Array("ok\n".utf8))
        case "/_imagecached/cache":
            guard request.method == "DELETE" else {
                refuse(sink, status: 405, reason: "use DELETE /_imagecached/cache[?url=<percent-encoded URL>]", request: request,
                       client: client, headers: ["Allow": "DELETE"])
                return
            }
            purge(query: query, request: request, client: client, sink: sink)
        default:
            refuse(sink, status: 404, reason: "no such endpoint: \(path.prefix(200))", request: request, client: client)
        }
    }
}

extension Proxy {
    /// Removes one URL (`?url=<percent-encoded URL>`), or everything (no query at all), from both tiers; answers once
    /// the disk has done it. Any other query is refused (400 naming the parameter): a typo such as `?URL=` or `?u`
    /// must never empty the cache. A disk that could not delete (a read-only file system) is an error (500 with the
    /// reason), never "purged": the files would be served again, and after a restart.
    func purge(query: String?, request: HTTPRequestHead, client: ClientInfo, sink: any ResponseSink) {
        let answer: @Sendable (_ failure: String?, _ message: String) -> Void = { [logger, metrics] failure, message in
            if let failure {
                logger.error("purge failed: \(failure)")
                metrics.served(.error)
                metrics.error("purge_failed")
                sink.fail(status: 500, reason: "purge failed: \(failure)")
                return
            }
            var headers = HTTPHeaders()
            headers.add("Content-Type", "text/plain; charset=utf-8")
            headers.add("Cache-Control", "no-store")
            sink.respond(HTTPResponseHead(status: 200, headers: headers), body: Array((message + "\n").utf8))
        }
        guard let query, !query.isEmpty else {
            logger.notice("purge: everything (\(memory.count) entries in memory) by \(client.address)")
            guard let disk else {
                memory.removeAll()
                return answer(nil, "purged everything")
            }
            // Memory is emptied once the files are gone: a disk lookup queued behind the removal finds nothing, and
            // one that started before it cannot promote its copy afterwards (MemoryCache.promote, removal count).
            disk.removeAll { [memory] failure in
                memory.removeAll()
                answer(failure, "purged everything")
            }
            return
        }
        let names = query.split(separator: "&").map { $0.split(separator: "=", maxSplits: 1).first.map(String.init) ?? "" }
        guard names == ["url"], let encoded = Route.queryParameter("url", in: query), !encoded.isEmpty else {
            let others = names.filter { $0 != "url" }
            let reason = others.isEmpty
                ? "the url parameter is empty or repeated: use ?url=<percent-encoded URL>, or no query to purge everything"
                : "unknown parameter \(others.map { "'\($0.prefix(40))'" }.joined(separator: ", ")): use ?url=<percent-encoded URL>, or no query to purge everything"
            refuse(sink, status: 400, reason: reason, request: request, client: client)
            return
        }
        guard let decoded = Route.percentDecode(encoded), let url = try? UpstreamURL.parse(decoded) else {
            refuse(sink, status: 400, reason: "the url parameter is not an absolute http or https URL", request: request, client: client)
            return
        }
        let key = CacheKey(url)
        logger.notice("purge: \(key) by \(client.address)")
        guard let disk else { return answer(nil, memory.remove(key) != nil ? "purged \(key)" : "not cached: \(key)") }
        disk.remove(key) { [memory] failure in   // memory after the file, as above
            memory.remove(key)
            answer(failure, "purged \(key)")
        }
    }
}
