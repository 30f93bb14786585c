// An intercepted CONNECT (docs/design/issue-29-plan.md, D5): the proxy's half. It takes a tunnel place
// (max-tunnels, shared with blind tunnels), asks the CA generation's LeafCache for the host's identity (a cached leaf
// answers at once, on this loop thread; a new host's leaf is minted on the certificates queue, one mint however many
// CONNECTs wait for it), and hands the generation's server context and that identity to the connection
// (`ConnectReply.intercept`), which answers 200, terminates the client's TLS, and sends each inner request back
// here as a forward request for https://host:port/... (Proxy.handle). Nothing is dialled here: every inner fetch is
// judged by the guards on the address it connects.
//   no leaf: 503 "too many certificates being made" (256 mints queued), 500 when the mint fails; both mint_failed
//
// Ownership: the CONNECT's `TunnelPlace` (an atomic flag), released by the first of: a failed mint (certificates
// queue), the client's hang-up, the connection's end (its loop).

internal import ImageCacheSystem
internal import ImageCacheHTTP
internal import ImageCacheServer
internal import ImageCacheConfig
internal import ImageCacheTLS
internal import Foundation
internal import Logging

extension Proxy {
    func intercept(_ target: ConnectTarget, host: InterceptHosts.Host, generation: Interception, client: ClientInfo,
                   reply: any ConnectReply, configuration: Configuration,
                   refuse: @escaping @Sendable (Int, String, ConnectResult) -> Void) {
        let metrics = metrics.tunnels
        guard metrics.reserve(limit: configuration.maxTunnels, kind: .intercepted) else {
            return refuse(503, "max-tunnels (\(configuration.maxTunnels)) tunnels are open; try again later", .atCap)
        }
        let place = TunnelPlace(metrics, kind: .intercepted)
        let options = TunnelOptions(idleTimeoutSeconds: configuration.tunnelIdleTimeoutSeconds)
        let logger = logger
        let accessLog = configuration.accessLog
        reply.onCancel {
            // The client left before its leaf was ready: the mint goes on (the leaf is cached for the next CONNECT),
            // and its answer finds the exchange over.
            place.release()
        }
        generation.leaves.identity(for: host) { result in
            switch result {
            case let .success(identity):
                metrics.connect(.intercept)
                logger.debug("intercepting \(target) for \(client.address) (leaf \(identity.fingerprintSHA256.prefix(16)))")
                reply.intercept(generation.context, identity: identity, target: target, options: options) { report in
                    place.release()
                    metrics.closed(report, kind: .intercepted)
                    if accessLog {
                        logger.info("\(client.address) CONNECT \(target) 200 INTERCEPT \(report.bytesUp)B up \(report.bytesDown)B down \(String(format: "%.1f", report.seconds * 1000))ms end=\(report.end.rawValue)",
                                    metadata: ["client": "\(client.address)", "method": "CONNECT", "target": "\(target)",
                                               "status": "200", "cache": "INTERCEPT", "bytes_up": "\(report.bytesUp)",
                                               "bytes_down": "\(report.bytesDown)", "end": "\(report.end.rawValue)"])
                    }
                }
            case let .failure(error):
                place.release()
                refuse(error.status, "CONNECT \(target): \(error)", .mintFailed)
            }
        }
    }
}
