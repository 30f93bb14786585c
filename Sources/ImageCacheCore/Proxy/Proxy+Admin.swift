// The daemon's own endpoints under /_imagecached/ (reserved, as is /fetch). Who may use them (AdminGuard, pure;
// the first rule that fails answers, with its reason):
//   1. the client's address is in `admin-allow` (default loopback: 127.0.0.0/8, ::1)                        else 403
//   2. `Host` names the daemon: an IP literal, `localhost`, or a name in `admin-hosts` (absent on HTTP/1.0 is
//      fine). Any other name is how a web page reaches a loopback service by DNS rebinding             else 403
//   3. not cross-site: no `Sec-Fetch-Site: cross-site | same-site`, and an `Origin`, if sent, is this very
//      host and port (`Origin: null` is refused)                                                           else 403
//   4. with `admin-token` set, `Authorization: Bearer <token>`, or Basic with the token as the password (what a
//      browser sends for the status page: the 401 offers Basic), compared in constant time; health excepted  else 401
//   5. state-changing requests need what a page cannot send without a CORS preflight (which is never granted):
//      DELETE is such a method; POST /prefetch takes its list as `Content-Type: text/uri-list`            else 415
//   GET    /_imagecached/ (and /status)      the status page (Proxy+Status.swift)
//   GET    /_imagecached/stats/history       the time series it draws, as JSON (StatsHistory.swift)
//   GET    /_imagecached/health              200 "ok" while the daemon serves
//   GET    /_imagecached/metrics             Prometheus text (Metrics.swift)
//   GET    /_imagecached/stats               the same counters as JSON (DaemonStats), read by `imagecached stats`
//   POST   /_imagecached/prefetch            body: URLs one per line; warms the cache (Proxy+Prefetch.swift)
//   DELETE /_imagecached/cache?url=<URL>     removes one URL (normalised like every cache key) from memory and disk
//   DELETE /_imagecached/cache               removes everything from memory and disk

internal import ImageCacheSystem
internal import ImageCacheHTTP
internal import ImageCacheStatus
internal import ImageCacheConfig
internal import ImageCacheServer
internal import ImageCacheStore
internal import ImageCacheFleet
internal import Foundation
internal import ImageCacheTransform
internal import Logging

extension Proxy {
    func handleAdmin(_ request: HTTPRequestHead, path: String, query: String?, body: [UInt8], client: ClientInfo, sink: any ResponseSink,
                     settings: ProxySettings) {
        if let (status, reason, headers) = AdminGuard.refusal(request, path: path, client: client, configuration: settings.configuration) {
            refuse(sink, status: status, reason: reason, request: request, client: client, headers: headers)
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
                if asJSON { events?(.statsRead) }
                let stats = statsSnapshot()
                // (URLs and reasons from clients and origins are in it: never sniffed as HTML)
                let headers = Self.noStoreHeaders(contentType: asJSON ? "application/json" : "text/plain; version=0.0.4; charset=utf-8")
                let body = asJSON ? stats.json() : Array(stats.prometheusText.utf8)
                sink.respond(HTTPResponseHead(status: 200, headers: headers), body: body)
            }
        case "/_imagecached/", "/_imagecached/status", "/_imagecached", "/_imagecached/stats/history":
            guard request.method == "GET" || request.method == "HEAD" else {
                refuse(sink, status: 405, reason: "use GET", request: request, client: client, headers: ["Allow": "GET, HEAD"])
                return
            }
            if path == "/_imagecached" {
                var headers = Self.noStoreHeaders(contentType: "text/plain; charset=utf-8")
                // Relative: behind a proxy that mounts the daemon under a prefix, it stays under it.
                headers.add("Location", "_imagecached/")
                sink.respond(HTTPResponseHead(status: 301, headers: headers), body: Array("the status page is at /_imagecached/\n".utf8))
            } else if path == "/_imagecached/stats/history" {
                switch Self.historySince(query) {
                case let .success(since): serveHistory(since: since, sink: sink)
                case let .failure(error): refuse(sink, status: 400, reason: error.reason, request: request, client: client)
                }
            } else {
                serveStatusPage(sink: sink, settings: settings)
            }
        case "/_imagecached/prefetch":
            guard request.method == "POST" else {
                refuse(sink, status: 405, reason: "use POST with the URLs one per line as the body", request: request,
                       client: client, headers: ["Allow": "POST"])
                return
            }
            // A type a web page cannot POST without a CORS preflight (text/plain, form types can be sent by any page).
            guard request.headers["Content-Type"].map({ ImageFormat.essence($0) == "text/uri-list" }) ?? false else {
                refuse(sink, status: 415, reason: "send the list as Content-Type: text/uri-list (a web page cannot send that type without a preflight)",
                       request: request, client: client, headers: ["Accept-Post": "text/uri-list"])
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
                metrics.error("purge_failed", status: 500, reason: "purge failed: \(failure)", target: request.target)
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
            // Files first, then memory (TieredStore): a disk lookup queued behind the removal finds nothing, and one
            // that started before it cannot promote its copy afterwards (MemoryCache.promote, removal count).
            guard configuration.fleet.isEnabled else {
                queue.async { [fleetPurges, store] in
                    fleetPurges.recordLocal(nil)
                    store.removeAll { failure in answer(failure, "purged everything") }
                }
                return
            }
            purgeWithFleet(nil, answer: answer) { [store] done in store.removeAll { done($0, "purged everything") } }
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
        guard let decoded = PercentDecoding.decode(encoded), let url = try? UpstreamURL.parse(decoded) else {
            refuse(sink, status: 400, reason: "the url parameter is not an absolute http or https URL", request: request, client: client)
            return
        }
        let key = CacheKey(url)
        logger.notice("purge: \(key) by \(client.address)")
        // Every variant of the URL, in both tiers.
        let hasDisk = store.writesToDisk
        guard configuration.fleet.isEnabled else {
            queue.async { [fleetPurges, store] in
                fleetPurges.recordLocal(url)
                store.remove(key) { wasInMemory, failure in answer(failure, hasDisk || wasInMemory ? "purged \(key)" : "not cached: \(key)") }
            }
            return
        }
        purgeWithFleet(url, answer: answer) { [store] done in
            store.remove(key) { wasInMemory, failure in done(failure, hasDisk || wasInMemory ? "purged \(key)" : "not cached: \(key)") }
        }
    }

    /// A purge with a fleet: recorded first (from then on this host refuses the fleet's copy older than the purge, so
    /// nothing fills again what `removeLocally` removes next), logged for every host and the URL's fleet copy deleted
    /// (FleetPurges.swift); answered once the local removal and the log's append are both done.
    private func purgeWithFleet(_ url: UpstreamURL?, answer: @escaping @Sendable (String?, String) -> Void,
                                removeLocally: @escaping @Sendable (@escaping @Sendable (String?, String) -> Void) -> Void) {
        let parts = Locked<(local: (String?, String)?, fleet: (Int, Int)?)>((nil, nil))
        let finish: @Sendable () -> Void = {
            guard let (local, fleet) = parts.withLock({ state in
                state.local.flatMap { local in state.fleet.map { (local, $0) } }
            }) else { return }
            answer(local.0, local.1 + " (fleet: logged on \(fleet.0) of \(fleet.1) servers; every host drops its copies within about a second)")
        }
        queue.async { [fleetPurges] in
            fleetPurges.purged(url) { stored, asked in
                parts.withLock { $0.fleet = (stored, asked) }
                finish()
            }
            removeLocally { failure, message in
                parts.withLock { $0.local = (failure, message) }
                finish()
            }
        }
    }
}
