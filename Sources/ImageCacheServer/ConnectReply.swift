// The seam for CONNECT, beside `ResponseSink`: the server parses `CONNECT host:port`, the handler decides (refuse,
// hand over a connected socket, or intercept), and the connection then either stops speaking HTTP and pumps bytes
// between its client and that socket (Tunnel.swift) on its own loop thread, or (interception) terminates the client's
// TLS with a leaf the handler minted and goes on speaking HTTP inside it.

public import ImageCacheSystem
public import ImageCacheHTTP
public import ImageCacheTLS
internal import Dispatch

/// How a tunnel behaves, chosen by the handler.
public struct TunnelOptions: Sendable, Equatable {
    /// A tunnel with no byte either way for this long is closed.
    public var idleTimeoutSeconds: Double
    /// Most bytes read from one side and not yet written to the other; past it that side is not read (resumed at
    /// half). 64 KiB by default.
    public var bufferBytes: Int

    public init(idleTimeoutSeconds: Double, bufferBytes: Int = TunnelOptions.defaultBufferBytes) {
        self.idleTimeoutSeconds = idleTimeoutSeconds
        self.bufferBytes = bufferBytes
    }

    public static let defaultBufferBytes = 64 << 10
}

/// How a tunnel ended, for metrics and the access log.
public struct TunnelReport: Sendable, Equatable {
    public enum End: String, Sendable, Equatable {
        /// Both sides closed (each FIN passed on).
        case closed
        /// No byte moved for the idle timeout.
        case idle
        /// A read or write failed, a side reset, or a side did not take bytes within `server.write-timeout`.
        case error
        /// The daemon stopped.
        case shutdown
    }
    public var end: End
    /// Bytes from the client to the upstream, and back.
    public var bytesUp: Int
    public var bytesDown: Int
    public var seconds: Double

    public init(end: End, bytesUp: Int, bytesDown: Int, seconds: Double) {
        self.end = end
        self.bytesUp = bytesUp
        self.bytesDown = bytesDown
        self.seconds = seconds
    }
}

/// The answer to one CONNECT. Calls may come from any thread (they hop to the connection's loop); the first of
/// `refuse`, `tunnel` or `intercept` counts and later ones are ignored (a socket handed to an ignored `tunnel` is
/// closed; an ignored `tunnel` or `intercept` still runs its `ended`, with no bytes).
///
/// Interception (`intercept`; docs/design/issue-29-plan.md, D5 and D6), what the connection must do:
/// - Answer "HTTP/1.1 200 Connection established" in plain text (as for a tunnel: no Content-Length, no
///   Transfer-Encoding), and once it has drained, switch the connection's transport to TLS: a server
///   `TLSStream(server: context, identity: identity, serverName: .mustMatch(target.host))`, fed first with any bytes
///   the client sent after its CONNECT head (an early ClientHello). A client that sends SNI must send `target.host`
///   (any other name ends the handshake with unrecognized_name); one that sends none (an IP literal) is served.
///   `context` is the CA generation's, with no certificate of its own: the stream presents `identity`, the leaf
///   for `target.host`, and tickets resume within the generation for that host only.
/// - Go on speaking HTTP/1.1 inside the TLS, with a fresh parser and the CONNECT authority held. Every inner request
///   is rewritten to the absolute form `https://<target.authority><path>` (origin-form `/a.jpg?x` becomes
///   `https://host:port/a.jpg?x`; the default port may stay, `UpstreamURL` drops it) and handed to the
///   `RequestHandler` as a forward-mode request, so it is cached, coalesced and checked exactly as
///   `/fetch?url=https://host/a.jpg` is. A `Host` naming another authority, or an absolute-form target for another
///   authority, gets 421 ("this connection is for host:port"); an inner CONNECT gets 405.
/// - `options` are the tunnel settings in force (`tunnel-idle-timeout`, the buffer bound), for the server to apply as
///   it sees fit (between inner requests its own keep-alive rules may be the right ones). `ended` runs once, on the
///   loop thread, when the connection closes (it gives back the CONNECT's `max-tunnels` place and is counted under
///   `tunnels_total{kind="intercepted"}`; the bytes are the server's to define), and also, with no bytes, if the client
///   had gone before the 200 or the handshake never started.
public protocol ConnectReply: AnyObject, Sendable {
    /// The tunnel is refused: `status` and the one-line `reason` as a plain-text answer, and the connection closes
    /// (bytes the client sent after its CONNECT head are never read as HTTP).
    func refuse(status: Int, reason: String)
    /// The tunnel is open: "200 Connection established" goes out, then the connection pumps bytes between its client
    /// and `socket` (which it now owns). `ended` runs once, on the loop thread, when the tunnel closes; it also runs
    /// (with no bytes) if the client had gone before the tunnel could start.
    func tunnel(_ socket: OwnedSocket, options: TunnelOptions, ended: @escaping @Sendable (TunnelReport) -> Void)
    /// The CONNECT is intercepted: "200 Connection established", then the connection terminates the client's TLS
    /// with `identity` on `context` (SNI, when sent, must equal `target.host`) and answers the requests inside it
    /// as forward requests for `https://<target.authority>` (see the protocol's comment). `ended` runs once, on the
    /// loop thread, when the connection closes, or at once (no bytes) if it cannot start.
    func intercept(_ context: TLSContext, identity: TLSIdentity, target: ConnectTarget, options: TunnelOptions,
                   ended: @escaping @Sendable (TunnelReport) -> Void)
    /// Runs `callback` once if the client goes away before `refuse`, `tunnel` or `intercept` (a dial or a mint in
    /// progress can stop); at once if it has already gone.
    func onCancel(_ callback: @escaping @Sendable () -> Void)
}

extension ConnectReply {
    /// Until the server terminates TLS inside a CONNECT: refused with 501 and its reason, and `ended` at once, so
    /// every reply builds and blind tunnels work as before.
    public func intercept(_ context: TLSContext, identity: TLSIdentity, target: ConnectTarget, options: TunnelOptions,
                          ended: @escaping @Sendable (TunnelReport) -> Void) {
        ended(TunnelReport(end: .error, bytesUp: 0, bytesDown: 0, seconds: 0))
        refuse(status: 501, reason: "TLS interception is not wired into this server yet")
    }
}
