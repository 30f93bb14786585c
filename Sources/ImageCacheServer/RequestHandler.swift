// The seam between the HTTP server (this target) and what answers requests (the proxy, ImageCacheCore).
//
// The server parses a request and calls `RequestHandler.handle` on the connection's own serial queue.
// The handler answers through the `ResponseSink` it was given, either at once on that queue (a fresh
// memory hit: no queue hop) or later from any queue (a miss streamed from upstream).
// A connection handles one request at a time: pipelined requests wait in the parse buffer until the
// current response has ended, so responses go out in request order.

public import ImageCacheSystem
public import ImageCacheHTTP
internal import Foundation

/// Who sent a request.
public struct ClientInfo: Sendable, Equatable {
    /// The peer address as text ("127.0.0.1", "::1"), for logs.
    public var address: String
    /// True when the peer is on a loopback address (127.0.0.0/8, ::1, or IPv4-mapped 127/8).
    public var isLoopback: Bool
    public init(address: String, isLoopback: Bool) {
        self.address = address
        self.isLoopback = isLoopback
    }
}

/// Answers requests. Called on the connection's loop thread; must not block it.
/// Every method reaches the handler (it answers 501 for those it does not support); `body` is the request
/// body the server read whole (Content-Length or chunked, within `server.max-request-body`), empty when none, unless
/// `bodyHandling` asked for it streamed (`handle(_:streamedBody:client:sink:)`).
public protocol RequestHandler: Sendable {
    func handle(_ request: HTTPRequestHead, body: [UInt8], client: ClientInfo, sink: any ResponseSink)
    /// A request whose body `bodyHandling` said to stream: called once its head is in; `body` brings the bytes as
    /// they arrive (within `server.max-request-body` and `server.body-timeout`).
    func handle(_ request: HTTPRequestHead, streamedBody body: RequestBodyStream, client: ClientInfo, sink: any ResponseSink)
    /// Asked on the loop thread when a head announces a body, before any of it is read: read it whole (within
    /// `server.max-request-body` and `server.body-timeout`), stream it, or refuse the request at once with a status
    /// and reason (the connection then closes without reading the body).
    func bodyHandling(for request: HTTPRequestHead) -> HTTPParser.BodyHandling
    /// As `bodyHandling(for:)`, knowing who sent the request (a refusal that depends on the client comes first, as it
    /// does when the request is handled). The server asks this one.
    func bodyHandling(for request: HTTPRequestHead, client: ClientInfo) -> HTTPParser.BodyHandling
    /// A CONNECT request (its body-less head; the target is the client's authority form, unchecked): answer through
    /// `reply` by refusing or by handing over a connected socket (ConnectReply.swift).
    func connect(_ request: HTTPRequestHead, client: ClientInfo, reply: any ConnectReply)
}

extension RequestHandler {
    /// By default every body is read whole.
    public func bodyHandling(for request: HTTPRequestHead) -> HTTPParser.BodyHandling { .read }

    /// By default the client does not change the decision.
    public func bodyHandling(for request: HTTPRequestHead, client: ClientInfo) -> HTTPParser.BodyHandling {
        bodyHandling(for: request)
    }

    /// Handlers that open no tunnels refuse CONNECT.
    public func connect(_ request: HTTPRequestHead, client: ClientInfo, reply: any ConnectReply) {
        reply.refuse(status: 501, reason: "CONNECT is not supported here")
    }

    /// A handler that never asks for a stream is never given one.
    public func handle(_ request: HTTPRequestHead, streamedBody body: RequestBodyStream, client: ClientInfo, sink: any ResponseSink) {
        sink.fail(status: 500, reason: "this handler takes no streamed request body")
    }
}

/// One response being written to a client.
///
/// Calls may come from any queue. A call made on the connection's own queue acts at once; a call from
/// another queue hops onto it, keeping the order of calls made from one serial queue.
/// The sequence is `head`, then `body`* and `end`, or `respond` alone; `abort` may come at any time and
/// is final. Calls after `end` or `abort` are ignored. For a HEAD request the server sends the head only.
public protocol ResponseSink: AnyObject, Sendable {
    /// An interim 1xx response (103 Early Hints) before the head; sent to an HTTP/1.1 client only, and only before the
    /// head (RFC 9110 15.2). Sinks that are not client connections ignore it.
    func interim(_ head: HTTPResponseHead)
    /// Starts the response. With `bodyLength` the body is framed by Content-Length (the sink sets the
    /// header); without it, HTTP/1.1 clients get chunked encoding and HTTP/1.0 clients a close-delimited body.
    func head(_ head: HTTPResponseHead, bodyLength: Int?)
    /// Sends body bytes. The array is shared, not copied: callers pass stored or received buffers as they are.
    func body(_ chunk: [UInt8])
    /// Ends the response: terminates chunked encoding, then reads the next request or closes as agreed.
    func end()
    /// A whole response with a known body in one call (head, body, end); the body is written without copying.
    func respond(_ head: HTTPResponseHead, body: [UInt8])
    /// A whole response whose fixed head part was serialised once (a stored entry), the per-response fields in
    /// `extra` (no hop-by-hop field, no Content-Length). Same meaning as `respond(_:body:)` with the fields of
    /// `head.headers` followed by `extra`; the server sends the prepared bytes as they are.
    func respond(_ head: SerializedResponseHead, extra: HTTPHeaders, body: [UInt8])
    /// As `respond(_:extra:body:)` with the body in a file region (`file.length` bytes, sent with sendfile where
    /// the sink can; see FileBody).
    func respond(_ head: SerializedResponseHead, extra: HTTPHeaders, file: FileBody)
    /// As `respond(_:extra:body:)` with the body a part of a larger array (a Range request's bytes of a stored
    /// body), sent without copying where the sink can.
    func respond(_ head: SerializedResponseHead, extra: HTTPHeaders, part: ArraySlice<UInt8>)
    /// The response cannot be completed: the connection is closed at once so that the client sees a
    /// truncated response (short Content-Length or no last chunk), never a complete short one.
    func abort()
    /// How the response about to be sent was produced (hit, miss, coalesced, ...). Told before its head (or its
    /// `respond`) by whoever produces a cache response, so that sinks which count or log (metrics, the access log,
    /// prefetch) never read it back from the fields; a response with none is the daemon's own error answer.
    /// Sinks that write to a client ignore it.
    func note(_ outcome: CacheOutcome)
    /// Where the sink's calls act: the event loop of its connection (a call made on that loop's thread acts at once,
    /// any other hops there). A producer with calls for many sinks posts the calls for one loop as one task to it
    /// (one hop per loop, not per sink). nil: the sink acts on any thread.
    var executor: (any SinkExecutor)? { get }
    /// Registers a callback run once, on the connection's loop thread, when the client goes away before the
    /// response has ended (peer closed, reset, write error or timeout). Run at once if it is already gone.
    func onCancel(_ callback: @escaping @Sendable () -> Void)
    /// Bytes of this response the client has taken so far (read from any thread), counted from its head for a
    /// streamed response (`head`, then `body`): how far behind the bytes handed to the sink it is (backpressure).
    /// Sinks that do not write to a client, and a client that went away (its connection holds nothing any more), say
    /// `Int.max`.
    var bytesWritten: Int { get }
    /// Runs `callback` once, on any thread, when `bytesWritten` reaches `bytes` or the client goes away; at once if
    /// either already happened. A later call replaces an earlier one that has not run.
    func whenWritten(_ bytes: Int, _ callback: @escaping @Sendable () -> Void)
}

/// Runs tasks on the thread a sink's calls belong to (an event loop), in the order posted.
public protocol SinkExecutor: AnyObject, Sendable {
    func execute(_ task: @escaping @Sendable () -> Void)
}

extension ResponseSink {
    public func note(_ outcome: CacheOutcome) {}
    public func interim(_ head: HTTPResponseHead) {}
    public var executor: (any SinkExecutor)? { nil }

    /// A sink that is not a client connection is never behind.
    public var bytesWritten: Int { Int.max }
    public func whenWritten(_ bytes: Int, _ callback: @escaping @Sendable () -> Void) { callback() }

    /// Sinks that cannot use the prepared bytes answer with the fields they stand for.
    public func respond(_ head: SerializedResponseHead, extra: HTTPHeaders, body: [UInt8]) {
        var headers = head.headers
        for field in extra { headers.add(field.name, field.value) }
        respond(HTTPResponseHead(status: head.status, reason: head.reason, headers: headers), body: body)
    }

    /// A plain-text error response: `status`, and the one-line `reason` as the body.
    public func fail(status: Int, reason: String, headers extra: HTTPHeaders = HTTPHeaders()) {
        var headers = extra
        headers.set("Content-Type", "text/plain; charset=utf-8")
        // The reason may quote what a client sent (a URL): never sniffed as HTML.
        headers.set("X-Content-Type-Options", "nosniff")
        headers.set("Cache-Control", "no-store")
        respond(HTTPResponseHead(status: status, headers: headers), body: Array((reason + "\n").utf8))
    }
}

extension ResponseSink {
    /// Sinks that cannot send a file read it whole and answer with the bytes (or abort if it cannot be read).
    public func respond(_ head: SerializedResponseHead, extra: HTTPHeaders, file: FileBody) {
        guard let body = file.readAll() else { return abort() }
        respond(head, extra: extra, body: body)
    }
}

extension ResponseSink {
    /// Sinks that cannot send a part of an array answer with a copy of it.
    public func respond(_ head: SerializedResponseHead, extra: HTTPHeaders, part: ArraySlice<UInt8>) {
        respond(head, extra: extra, body: Array(part))
    }
}
