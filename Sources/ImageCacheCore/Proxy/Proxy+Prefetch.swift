// Prefetch: POST /_imagecached/prefetch with URLs one per line warms the cache through the normal request path
// (`serve`: memory, disk, coalescing with client requests, the upstream transfer cap), as if a client had asked
// for each with GET /fetch?url=. URLs under a configured origin are fetched as that origin (trusted).
//
// At most `upstream.max-transfers / 2` (at least 1) URLs are in flight at once, leaving the other slots to
// clients. The response streams one line per URL as it completes (chunked), then a summary:
//   ok <status> <X-Cache> <bytes> <url>
//   failed <status> <url> <reason>
//   done <total> ok <n> failed <n> bytes <n>
// Blank lines and lines starting with # are skipped. A client that goes away does not stop the prefetch.
//
// Ownership: each run is confined to its own serial queue (imagecached.prefetch); the per-URL sinks hop there.

internal import ImageCacheSystem
internal import ImageCacheHTTP
internal import ImageCacheConfig
internal import ImageCacheServer
internal import ImageCacheUpstream
internal import Dispatch
internal import Foundation
internal import Logging

extension Proxy {
    func prefetch(body: [UInt8], client: ClientInfo, sink: any ResponseSink, settings: ProxySettings) {
        let lines = String(decoding: body, as: UTF8.self).split(whereSeparator: \.isNewline)
            .map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty && !$0.hasPrefix("#") }
        var headers = HTTPHeaders()
        headers.add("Content-Type", "text/plain; charset=utf-8")
        headers.add("Cache-Control", "no-store")
        sink.head(HTTPResponseHead(status: 200, headers: headers), bodyLength: nil)
        logger.notice("prefetch: \(lines.count) URLs from \(client.address)")
        let window = max(1, settings.configuration.upstream.maxConcurrentTransfers / 2)
        PrefetchRun(proxy: self, urls: lines, window: window, client: client, routes: settings.originRoutes, output: sink).start()
    }
}
