// The daemon's own endpoints under /_imagecached/ (reserved, as is /fetch). Answered for loopback clients only.
//   GET /_imagecached/health    200 "ok" while the daemon serves
// Metrics, stats, purge and prefetch come here too (see the README's road map).

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
        default:
            refuse(sink, status: 404, reason: "no such endpoint: \(path.prefix(200))", request: request, client: client)
        }
    }
}
