// The seam between the proxy and the network: an `Origin` runs upstream transfers.
//
// `CurlOrigin` (Curl/) implements it with one libcurl multi handle; unit tests use `MockOrigin`.
// A transfer reports its events through one callback, called serially (never two at once for one transfer)
// from the origin's own thread or queue: interim 1xx responses as `.interim` when the request asks for them
// (`forwardsInterim`; never 100 or 101), at most one `.head` for the final response (redirects followed are not
// reported), then `.body` chunks, then exactly one of `.end` or `.failed`. After `cancel()` no further events are delivered, except possibly one already running.

public import ImageCacheHTTP
public import ImageCacheSystem
internal import Foundation

/// What to fetch.
public struct UpstreamRequest: Sendable, Equatable {
    /// Absolute http or https URL.
    public var url: String
    /// "GET" for the cache's fetches (HEAD requests are fetched with GET to fill the cache); any other method for a
    /// request passed through to a configured origin (ProxyPassthrough).
    public var method: String
    /// The request body to send (with Content-Length), or nil for none.
    public var body: [UInt8]?
    /// A request body sent as it arrives (with its Content-Length when known, else chunked); instead of `body`.
    public var streamedBody: StreamedBody?
    /// Follow redirects (up to upstream.max-redirects); false: a 3xx is the final response (reverse mode passes it
    /// to the client).
    public var followsRedirects: Bool
    /// Report interim 1xx responses (102, 103 Early Hints, ...) as `.interim` (reverse mode forwards them, RFC 9110
    /// 15.2); 100 Continue answers this daemon's own request and 101 needs an Upgrade it never sends: never reported.
    public var forwardsInterim = false
    /// End-to-end request fields to send (Accept, User-Agent, conditional fields). No hop-by-hop fields.
    public var headers: HTTPHeaders
    /// True for configured reverse-proxy origins: the private-network check is skipped.
    public var trusted: Bool
    /// The transfer fails with `.tooLarge` when Content-Length or the bytes received exceed this. Default
    /// `defaultMaxBodyBytes`.
    public var maxBodyBytes: Int
    /// 50 MiB: the default of `max-object-size`, the largest upstream body served or stored.
    public static let defaultMaxBodyBytes = 50 << 20
    /// Higher runs first when transfers wait for a free slot (unused by FIFO/LIFO order between equals).
    public var priority: Int
    /// Body bytes that may be delivered and not yet `consumed` before the transfer holds back (stops reading from
    /// the origin); nil: no window, deliver as fast as the origin sends. A consumer that sets it must call
    /// `UpstreamTransfer.consumed` for every `.body` event, or the transfer stalls.
    public var deliveryWindow: Int?

    /// A dial (`Origin.dial`): connect to the URL's host and port and hand the socket over, sending nothing (libcurl's
    /// CONNECT_ONLY). The transfer ends with `.end` once `slot` holds the socket.
    package var dialSlot: DialSlot?

    public init(url: String, method: String = "GET", body: [UInt8]? = nil, streamedBody: StreamedBody? = nil,
                followsRedirects: Bool = true,
                headers: HTTPHeaders = HTTPHeaders(), trusted: Bool = false,
                maxBodyBytes: Int = UpstreamRequest.defaultMaxBodyBytes, priority: Int = 0, deliveryWindow: Int? = nil) {
        self.url = url
        self.method = method
        self.body = body
        self.streamedBody = streamedBody
        self.followsRedirects = followsRedirects
        self.headers = headers
        self.trusted = trusted
        self.maxBodyBytes = maxBodyBytes
        self.priority = priority
        self.deliveryWindow = deliveryWindow
    }
}

/// What a transfer reports, in order.
public enum UpstreamEvent: Sendable {
    /// An interim 1xx response (hop-by-hop fields removed), when the request asked for them.
    case interim(HTTPResponseHead)
    /// The final response's status and fields, hop-by-hop fields removed. `url` is the effective URL after redirects;
    /// `redirects` lists the status of every redirect followed to get there (empty when none).
    case head(HTTPResponseHead, url: String, redirects: [Int])
    /// Body bytes as they arrive (content codings untouched).
    case body([UInt8])
    /// The body is complete.
    case end
    /// The transfer failed; no `.end` follows.
    case failed(UpstreamError)
}

/// Why an upstream transfer failed.
public enum UpstreamError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The destination address is on a refused network (loopback, private, link-local, ...).
    case refusedDestination(address: String)
    /// The URL is not a usable absolute http(s) URL, or its scheme is not allowed.
    case badURL(String)
    case dns(String)
    case connect(String)
    case tls(String)
    case timeout(String)
    /// More than the redirect limit.
    case tooManyRedirects(Int)
    /// The body is larger than the per-object limit.
    case tooLarge(limit: Int)
    /// The origin sent a broken response or the connection broke mid-body.
    case broken(String)
    /// Waited too long for a free transfer slot.
    case queueTimeout
    /// Cancelled by the caller.
    case cancelled
    /// The request would reach this daemon itself (LoopGuard).
    case loop(String)
    case other(String)

    public var description: String {
        switch self {
        case let .refusedDestination(address): "destination \(address) is on a private or reserved network (use --allow-private-networks to allow it)"
        case let .badURL(why): "bad upstream URL: \(why)"
        case let .dns(why): "could not resolve upstream host: \(why)"
        case let .connect(why): "could not connect to upstream: \(why)"
        case let .tls(why): "TLS failure talking to upstream: \(why)"
        case let .timeout(why): "upstream timed out: \(why)"
        case let .tooManyRedirects(limit): "upstream redirected more than \(limit) times"
        case let .tooLarge(limit): "upstream object is larger than the \(limit)-byte limit (--max-object-size)"
        case let .broken(why): "upstream response broken: \(why)"
        case .queueTimeout: "no upstream transfer slot became free in time"
        case .cancelled: "upstream transfer cancelled"
        case let .loop(why): "request loop: \(why)"
        case let .other(why): "upstream failure: \(why)"
        }
    }

    /// The status a client gets for this failure.
    public var httpStatus: Int {
        switch self {
        case .refusedDestination: 403
        case .badURL: 400
        case .timeout, .queueTimeout: 504
        case .loop: 508
        default: 502
        }
    }
}

/// A running transfer.
public protocol UpstreamTransfer: Sendable {
    /// Stops the transfer. Idempotent; may be called from any queue.
    func cancel()
    /// Stops reading the response body from the origin (`true`) or goes on (`false`): backpressure while every
    /// client of the transfer is behind. Idempotent; any queue. Bytes already read are still delivered.
    func setPaused(_ paused: Bool)
    /// The consumer has dealt with `bytes` of delivered body (a `.body` event's count, every one): with a
    /// `deliveryWindow` the transfer holds back while that much is delivered and not consumed. Any queue.
    func consumed(_ bytes: Int)
}

extension UpstreamTransfer {
    /// Transfers that cannot pause read on.
    public func setPaused(_ paused: Bool) {}
    /// Transfers without a delivery window need no word back.
    public func consumed(_ bytes: Int) {}
}

/// Runs upstream transfers.
public protocol Origin: Sendable {
    /// Starts (or queues, when every transfer slot is busy) a transfer. `events` is called serially.
    func fetch(_ request: UpstreamRequest, events: @escaping @Sendable (UpstreamEvent) -> Void) -> any UpstreamTransfer
    /// Opens a TCP connection to `target` for a blind tunnel (CONNECT) and hands it over: exactly one event, from any
    /// thread. The destination is judged like a fetch's (the private-network guard on the very address connected, the
    /// loop guard), the connect is bounded by `upstream.connect-timeout`, and dials wait for a transfer slot as fetches do.
    func dial(_ target: ConnectTarget, events: @escaping @Sendable (DialEvent) -> Void) -> any UpstreamTransfer
}

/// How a dial ended.
public enum DialEvent: Sendable {
    /// Connected: the socket (non-blocking, close-on-exec) is the receiver's.
    case connected(OwnedSocket)
    case failed(UpstreamError)
}

extension Origin {
    /// Origins that cannot dial (test doubles of fetches only) refuse every tunnel.
    public func dial(_ target: ConnectTarget, events: @escaping @Sendable (DialEvent) -> Void) -> any UpstreamTransfer {
        DispatchQueue.global().async { events(.failed(.other("this origin opens no tunnels"))) }
        return RefusedDial()
    }
}

/// The handle of a dial that was never started.
private struct RefusedDial: UpstreamTransfer {
    func cancel() {}
}

/// Where a dial's socket waits between the curl thread, which connected it, and the dial's `.end`. A socket nobody
/// takes (the dial was cancelled meanwhile) is closed with the slot.
package final class DialSlot: Sendable, Equatable {
    private let socket = Locked<OwnedSocket?>(nil)

    package init() {}

    package func fill(_ owned: OwnedSocket) { socket.withLock { $0 = owned } }

    package func take() -> OwnedSocket? {
        socket.withLock { slot in
            defer { slot = nil }
            return slot
        }
    }

    package static func == (lhs: DialSlot, rhs: DialSlot) -> Bool { lhs === rhs }
}
