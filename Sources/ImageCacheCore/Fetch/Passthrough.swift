// PASS-THROUGH: a request the cache does not answer, sent to its origin as it is (reverse mode, and forward mode
// under forward-non-images pass).
//
// Rules (pure, `PassthroughRules`):
//   1. Reverse and forward modes answer GET and HEAD from the cache; every other method (POST, PUT, DELETE, PATCH,
//      OPTIONS, unknown ones) is passed through uncached: its body (streamed as it arrives, RequestBodyStream ->
//      StreamedBody, within server.max-request-body and server.body-timeout) and its end-to-end fields
//      (RequestFields.swift, preconditions, Range and Cookie included) go to the origin, and the origin's response
//      (any status, its own body, redirects not followed) comes back as it is, with Cache-Status `fwd=method` and
//      X-Cache PASS. It is never retried (the transfer retries GET and HEAD only). CONNECT is 501 (Route); TRACE is
//      405 unless pass-trace is on. Fetch mode takes GET and HEAD only (501), and so does forward mode under
//      forward-non-images refuse.
//   1a. Trust comes from the route: a configured origin (reverse mode) is trusted; forward mode's origin is any URL a
//      client named, so its exchange is judged like a forward GET: the private-network guard on the address
//      connected (403 unless allow-private-networks) and allowed-sources (Route, 403).
//   2. Invalidation (RFC 9111 4.4): a non-error response (2xx, 3xx) to an unsafe method (any but GET, HEAD, OPTIONS,
//      TRACE) removes every stored variant of the target URI, and of the URIs in Location and Content-Location when
//      they are on the same origin (scheme, host and port), from both tiers, before the client has the response.
//      Absolute URLs and absolute paths are taken (dot segments normalised by the URL parser); other relative
//      references ("b.png", "?q") are not resolved, which RFC 9111 4.4 allows (this invalidation is a MAY).
//   3. Max-Forwards (RFC 9110 7.6.2) on OPTIONS and TRACE: 0 is answered by the daemon itself (OPTIONS: 200 with
//      the methods it passes; TRACE: 200 message/http echoing the request without its credentials); more is
//      decremented. Other methods carry it unchanged.
//   4. The response head as a cache's (OriginHead.swift): hop-by-hop fields removed (the origin seam), targeted
//      cache-control fields removed when strip-targeted-cache-control says so, an error page (4xx, 5xx) says nosniff.
//
// `Passthrough` runs one exchange. Ownership: its state is confined to the proxy queue (origin events and the
// client's progress arrive with `queue.async`). Backpressure: the transfer's delivery window is server.write-buffer;
// delivered bytes are given back to the window as the client takes them (`whenWritten`), so a slow client holds the
// origin back instead of growing the daemon's memory: the bytes handed to the client and not yet taken (at most the
// window and one read) count in the in-flight total, and a full window counts as a pause (`upstream.paused`, the
// `transferPaused` event).

internal import ImageCacheSystem
internal import ImageCacheHTTP
internal import ImageCacheConfig
internal import ImageCacheServer
internal import ImageCacheStore
internal import ImageCacheUpstream
internal import Dispatch
internal import Foundation
internal import Logging
internal import Synchronization

/// One request passed through to its origin and its response relayed (the rules above).
final class Passthrough: @unchecked Sendable {
    // MARK: immutable after init
    private let request: HTTPRequestHead
    private let url: UpstreamURL
    private let sink: any ResponseSink
    private let context: FetchContext
    private let policy: FreshnessPolicy
    /// Why the request is passed (Cache-Status fwd=): its method, or a bypass (a range of an object too large to cache).
    private let reason: CacheOutcome.Forward

    // MARK: owned by `context.queue`
    private var transfer: (any UpstreamTransfer)?
    private var headSent = false
    private var finished = false
    /// Body bytes handed to the sink, and those given back to the transfer's delivery window.
    private var sent = 0
    private var released = 0
    private var watching = false
    /// Events that came while the invalidation a head asked for runs (nil: none runs).
    private var held: [UpstreamEvent]?
    /// The invalidation of this exchange's head is done or under way (its head is not invalidated again), and the
    /// removals still running.
    private var invalidated = false
    private var invalidationsLeft = 0
    /// The delivery window, and whether it is full now (the transfer holds back until the client takes bytes).
    private let window: Int
    private var windowFull = false
    /// This exchange's share of the in-flight total.
    private var accounted = 0
    /// For the upstream metrics: when the transfer started, and the body bytes it brought.
    private let started = ContinuousClock.now

    private init(request: HTTPRequestHead, url: UpstreamURL, sink: any ResponseSink, context: FetchContext,
                 policy: FreshnessPolicy, window: Int, reason: CacheOutcome.Forward) {
        self.reason = reason
        self.window = window
        self.request = request
        self.url = url
        self.sink = sink
        self.context = context
        self.policy = policy
    }

    /// Starts the exchange (on any thread). `body`: the request body as read; `mode` and `trusted`: the route's (which
    /// fields go upstream, and whether the private-network guard judges the address connected: rule 1a); `fields`:
    /// the field policy in force.
    static func start(_ request: HTTPRequestHead, body: RequestBody, url: UpstreamURL, mode: Route.Mode, trusted: Bool,
                      sink: any ResponseSink, context: FetchContext, fields: RequestFieldPolicy, policy: FreshnessPolicy,
                      writeBuffer: Int, maxForwards: String?, reason: CacheOutcome.Forward = .method) {
        let exchange = Passthrough(request: request, url: url, sink: sink, context: context, policy: policy, window: writeBuffer,
                                   reason: reason)
        var headers = fields.forwarded(request.headers, mode: mode, cached: false)
        if let maxForwards { headers.add("Max-Forwards", maxForwards) }
        headers.add("Via", RequestFieldPolicy.via(request.headers, mode: mode, cached: false, own: context.via))
        var bytes: [UInt8]?, streamed: StreamedBody?
        switch body {
        case let .bytes(read):
            // A body goes with Content-Length; methods defined with content get one even when it is empty.
            bytes = !read.isEmpty || ["POST", "PUT", "PATCH"].contains(request.method) ? read : nil
        case let .stream(stream):
            // Sent as it arrives: every byte libcurl takes is room given back to the client's connection.
            // (Weakly: the stream's reader holds the upload; the upload must not hold the stream back.)
            let upload = StreamedBody(length: stream.length) { [weak stream] in stream?.consumed($0) }
            stream.read { event in
                switch event {
                case let .chunk(chunk): upload.append(chunk)
                case .end: upload.finish()
                case .failed: upload.fail()
                }
            }
            streamed = upload
        }
        var upstream = UpstreamRequest(url: url.string, method: request.method, body: bytes, streamedBody: streamed,
                                       followsRedirects: false, headers: headers, trusted: trusted,
                                       maxBodyBytes: Int(Int64.max), deliveryWindow: writeBuffer)
        upstream.forwardsInterim = true
        let outgoing = upstream
        context.queue.async {
            exchange.transfer = context.origin.fetch(outgoing) { event in
                context.queue.async { exchange.receive(event) }
            }
            sink.onCancel { context.queue.async { exchange.clientLeft() } }
        }
    }

    private func receive(_ event: UpstreamEvent) {
        dispatchPrecondition(condition: .onQueue(context.queue))
        guard !finished else { return }
        if held != nil {
            held!.append(event)
            return
        }
        switch event {
        case let .interim(head):
            if !headSent { sink.interim(head) }
        case let .head(head, _, _):
            let stale = PassthroughRules.invalidated(method: request.method, status: head.status, target: url,
                                                     response: head.headers)
            if !stale.isEmpty, !invalidated {
                invalidated = true
                return invalidate(stale, then: head)
            }
            if head.status >= 400 {
                context.metrics.error("upstream_status_\(head.status / 100)xx", status: head.status,
                                      reason: "upstream answered \(head.status) \(head.reason) (passed on)", target: url.string)
            }
            let outcome = CacheOutcome(forward: reason, forwardStatus: head.status)
            sink.note(outcome)
            let length = head.headers["Content-Length"].flatMap { Int($0.trimmingOWS()) }
            var marked = head
            marked.markErrorPage()
            sink.head(marked.forClient(outcome, policy: policy), bodyLength: length)
            headSent = true
        case let .body(chunk):
            sent += chunk.count
            sink.body(chunk)
            account()
            watchClient()
        case .end:
            finish(result: "ok")
            sink.end()
        case let .failed(error):
            finish(result: error.kind)
            // (A transfer the daemon cancelled, at shut-down: the client still gets its answer.)
            if error != .cancelled {
                context.metrics.error("upstream_" + error.kind, status: headSent ? nil : error.httpStatus, reason: error.description,
                                      target: url.string)
            }
            context.logger.warning("\(error.httpStatus) \(request.method) \(url.string): \(error)")
            if headSent { sink.abort() } else { sink.fail(status: error.httpStatus, reason: error.description) }
        }
    }

    /// Removes the invalidated URIs from both tiers, then sends `head`: a client that has the answer and asks for the
    /// target again does not find the outdated copy, not even on disk. Events meanwhile wait in `held`.
    private func invalidate(_ urls: [UpstreamURL], then head: HTTPResponseHead) {
        held = []
        invalidationsLeft = urls.count
        for url in urls {
            context.logger.debug("\(request.method) \(self.url.string) answered \(head.status): invalidating \(url.string)")
            context.store.remove(CacheKey(url)) { [context] _, _ in
                context.queue.async {
                    self.invalidationsLeft -= 1
                    guard self.invalidationsLeft == 0, let events = self.held else { return }
                    self.held = nil
                    self.receive(.head(head, url: self.url.string, redirects: []))
                    for event in events { self.receive(event) }
                }
            }
        }
    }

    /// Gives the bytes the client has taken back to the transfer's delivery window, a batch at a time.
    private func watchClient() {
        guard !watching, sent > released else { return }
        watching = true
        let target = sent
        sink.whenWritten(target) { [context] in
            context.queue.async {
                self.watching = false
                guard !self.finished else { return }
                self.transfer?.consumed(target - self.released)
                self.released = target
                self.account()
                self.watchClient()
            }
        }
    }

    /// Counts the bytes the client has been handed and not taken in the in-flight total; a full window (the transfer
    /// admits nothing more until bytes are given back, FlowControl) is reported once per fill.
    private func account() {
        let unreleased = finished ? 0 : sent - released
        context.metrics.inFlightBytes.wrappingAdd(unreleased - accounted, ordering: .relaxed)
        accounted = unreleased
        if unreleased >= window, !windowFull {
            windowFull = true
            context.metrics.upstreamPauses.add()
            context.events?(.transferPaused(key: CacheKey(url)))
        } else if unreleased < window {
            windowFull = false
        }
    }

    private func clientLeft() {
        guard !finished else { return }
        transfer?.cancel()
        finish(result: "cancelled")
    }

    /// No event counts after this; the transfer (whose callback holds this exchange) is let go.
    private func finish(result: String) {
        finished = true
        transfer = nil
        account()
        let elapsed = ContinuousClock.now - started
        let seconds = elapsed.inSeconds
        context.metrics.upstreamFinished(host: url.host, result: result, seconds: seconds, bytes: sent)
        context.events?(.passFinished(key: CacheKey(url)))
    }
}
