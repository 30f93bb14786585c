internal import ImageCacheSystem
internal import ImageCacheHTTP
internal import ImageCacheConfig
internal import ImageCacheServer
internal import Dispatch
internal import Foundation
internal import Logging

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
