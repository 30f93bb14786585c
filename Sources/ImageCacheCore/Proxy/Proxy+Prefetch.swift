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

/// One prefetch request. Confined to `queue`.
final class PrefetchRun: @unchecked Sendable {
    private let proxy: Proxy
    private let urls: [String]
    private let window: Int
    private let client: ClientInfo
    private let routes: [OriginRoute]
    private let output: any ResponseSink
    private let queue = DispatchQueue(label: "imagecached.prefetch")

    // MARK: owned by queue
    private var next = 0
    private var inFlight = 0
    private var succeeded = 0
    private var failed = 0
    private var bytes = 0

    init(proxy: Proxy, urls: [String], window: Int, client: ClientInfo, routes: [OriginRoute], output: any ResponseSink) {
        self.proxy = proxy
        self.urls = urls
        self.window = window
        self.client = client
        self.routes = routes
        self.output = output
    }

    func start() {
        queue.async { self.fill() }
    }

    /// Starts URLs until `window` are in flight; ends the response when all are done.
    private func fill() {
        dispatchPrecondition(condition: .onQueue(queue))
        while inFlight < window, next < urls.count {
            let text = urls[next]
            next += 1
            guard let url = try? UpstreamURL.parse(text) else {
                finished(text, status: 400, xCache: "-", bytes: 0, failure: "not an absolute http or https URL")
                continue
            }
            inFlight += 1
            let trusted = routes.contains { Self.isUnder($0, url) }
            var headers = HTTPHeaders()
            headers.add("Host", url.authority)
            let head = HTTPRequestHead(method: "GET", target: url.string, headers: headers)
            let settings = proxy.settings
            let request = ClientRequest(head: head, url: url, mode: trusted ? .reverse : .fetch, trusted: trusted, client: client,
                                        fields: settings.requestFields,
                                        staleWhileRevalidate: settings.configuration.staleWhileRevalidateSeconds)
            let sink = PrefetchSink { [self] status, xCache, count, failure in
                queue.async {
                    self.inFlight -= 1
                    self.finished(text, status: status, xCache: xCache, bytes: count, failure: failure)
                    self.fill()
                }
            }
            proxy.serve(request, sink: sink)
        }
        if inFlight == 0, next == urls.count, succeeded + failed == urls.count {
            output.body(Array("done \(urls.count) ok \(succeeded) failed \(failed) bytes \(bytes)\n".utf8))
            output.end()
            proxy.logger.notice("prefetch: done \(urls.count) ok \(succeeded) failed \(failed) bytes \(bytes)")
        }
    }

    private func finished(_ url: String, status: Int, xCache: String, bytes count: Int, failure: String?) {
        dispatchPrecondition(condition: .onQueue(queue))
        let line: String
        if let failure {
            failed += 1
            line = "failed \(status) \(url) \(failure.replacingOccurrences(of: "\n", with: " "))\n"
        } else {
            succeeded += 1
            bytes += count
            proxy.metrics.prefetched.add()
            line = "ok \(status) \(xCache) \(count) \(url)\n"
        }
        output.body(Array(line.utf8))
    }

    /// `url` is on the origin of `route` (scheme, host, port) and under its base path.
    static func isUnder(_ route: OriginRoute, _ url: UpstreamURL) -> Bool {
        guard url.scheme == route.base.scheme, url.host == route.base.host, url.effectivePort == route.base.effectivePort else { return false }
        return route.basePath.isEmpty || url.pathAndQuery == route.basePath || url.pathAndQuery.hasPrefix(route.basePath + "/")
            || url.pathAndQuery.hasPrefix(route.basePath + "?")
    }
}

/// Receives one prefetched response, counts its body and reports once: (status, X-Cache, bytes, failure or nil).
final class PrefetchSink: ResponseSink, @unchecked Sendable {
    private let lock = NSLock()
    private var status = 0
    private var xCache = "-"
    private var bytes = 0
    private var reported = false
    private let report: @Sendable (Int, String, Int, String?) -> Void

    init(report: @escaping @Sendable (Int, String, Int, String?) -> Void) {
        self.report = report
    }

    private func finish(failure: String?) {
        let result: (Int, String, Int)? = lock.withLock {
            guard !reported else { return nil }
            reported = true
            return (status, xCache, bytes)
        }
        guard let (status, xCache, bytes) = result else { return }
        let why = failure ?? (status >= 400 ? "answered \(status)" : nil)
        report(status, xCache, bytes, why)
    }

    func note(_ outcome: CacheOutcome) { lock.withLock { xCache = outcome.xCache } }

    private func started(_ head: HTTPResponseHead) { lock.withLock { status = head.status } }

    func head(_ head: HTTPResponseHead, bodyLength: Int?) { started(head) }
    func body(_ chunk: [UInt8]) { lock.withLock { bytes += chunk.count } }
    func end() { finish(failure: nil) }
    func respond(_ head: HTTPResponseHead, body: [UInt8]) {
        started(head)
        lock.withLock { bytes += body.count }
        let reason = head.status >= 400 ? String(decoding: body, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines) : nil
        finish(failure: reason.map { "answered \(head.status): \($0)" })
    }
    /// A large stored body sent from its file: counted, never read (a prefetch only warms the cache).
    func respond(_ head: SerializedResponseHead, extra: HTTPHeaders, file: FileBody) {
        lock.withLock {
            status = head.status
            bytes += file.length
        }
        finish(failure: nil)
    }
    func abort() { finish(failure: "the transfer broke off") }
    func onCancel(_ callback: @escaping @Sendable () -> Void) {}
}
