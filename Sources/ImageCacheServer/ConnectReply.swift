// The seam for CONNECT, beside `ResponseSink`: the server parses `CONNECT host:port`, the handler decides (refuse,
// or hand over a connected socket), and the connection then stops speaking HTTP and pumps bytes between its client
// and that socket (Tunnel.swift) on its own loop thread.

public import ImageCacheSystem
public import ImageCacheHTTP
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
/// `refuse` or `tunnel` counts and later ones are ignored (a socket handed to an ignored `tunnel` is closed).
public protocol ConnectReply: AnyObject, Sendable {
    /// The tunnel is refused: `status` and the one-line `reason` as a plain-text answer, and the connection closes
    /// (bytes the client sent after its CONNECT head are never read as HTTP).
    func refuse(status: Int, reason: String)
    /// The tunnel is open: "200 Connection established" goes out, then the connection pumps bytes between its client
    /// and `socket` (which it now owns). `ended` runs once, on the loop thread, when the tunnel closes; it also runs
    /// (with no bytes) if the client had gone before the tunnel could start.
    func tunnel(_ socket: OwnedSocket, options: TunnelOptions, ended: @escaping @Sendable (TunnelReport) -> Void)
    /// Runs `callback` once if the client goes away before `refuse` or `tunnel` (a dial in progress can stop); at
    /// once if it has already gone.
    func onCancel(_ callback: @escaping @Sendable () -> Void)
}
