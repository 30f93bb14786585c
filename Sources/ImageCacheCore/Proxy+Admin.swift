// The daemon's own endpoints under /_imagecached/ (reserved, as is /fetch). Answered for loopback clients only.
//   GET    /_imagecached/health              200 "ok" while the daemon serves
//   DELETE /_imagecached/cache?url=<URL>     removes one URL (normalised like every cache key) from memory and disk
//   DELETE /_imagecached/cache               removes everything from memory and disk
// Metrics, stats and prefetch come here too (see the README's road map).

internal import Logging

extension Proxy {
    func handleAdmin(_ request: HTTPRequestHead, path: String, query: String?, body: [UInt8], client: ClientInfo, sink: any ResponseSink) {
        guard client.isLoopback else {
            refuse(sink, status: 403, reason: "the /_imagecached/ endpoints answer loopback clients only", request: request, client: client)
            return
        }
        switch path {
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
    /// Removes one URL, or everything, from both tiers; answers once the disk has done it.
    func purge(query: String?, request: HTTPRequestHead, client: ClientInfo, sink: any ResponseSink) {
        let text: @Sendable (String) -> Void = { message in
            var headers = HTTPHeaders()
            headers.add("Content-Type", "text/plain; charset=utf-8")
            headers.add("Cache-Control", "no-store")
            sink.respond(HTTPResponseHead(status: 200, headers: headers), body: Array((message + "\n").utf8))
        }
        guard let query, let encoded = Route.queryParameter("url", in: query) else {
            let entries = memory.count
            memory.removeAll()
            logger.notice("purge: everything (\(entries) entries in memory) by \(client.address)")
            guard let disk else { return text("purged everything") }
            disk.removeAll { text("purged everything") }
            return
        }
        guard let decoded = Route.percentDecode(encoded), let url = try? UpstreamURL.parse(decoded) else {
            refuse(sink, status: 400, reason: "the url parameter is not an absolute http or https URL", request: request, client: client)
            return
        }
        let key = CacheKey(url)
        let inMemory = memory.remove(key) != nil
        logger.notice("purge: \(key) by \(client.address)")
        guard let disk else { return text(inMemory ? "purged \(key)" : "not cached: \(key)") }
        disk.remove(key) { text("purged \(key)") }
    }
}
