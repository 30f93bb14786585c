// CONNECT: the proxy's half of a tunnel. The rules are ConnectPolicy's. For a blind tunnel this file takes a tunnel
// place (max-tunnels), dials through the origin (the private-network and loop guards judge the address it connects),
// and hands the socket to the connection, which pumps it (ImageCacheServer/Tunnel.swift); nothing is cached, the
// tunnel's bytes are never read by the daemon. An intercepted CONNECT (a host in intercept-hosts, with a local CA in
// force) goes to Proxy+Intercept.swift.
//
// Ownership: nothing mutable here but the `TunnelPlace` of each CONNECT (an atomic flag): the dial's answer (curl
// thread), the client's hang-up and the tunnel's end (the connection's loop) may each release it, and only the first
// counts.

internal import ImageCacheSystem
public import ImageCacheHTTP
public import ImageCacheServer
internal import ImageCacheUpstream
internal import ImageCacheConfig
internal import Foundation
internal import Logging

extension Proxy {
    /// Most dials under way at once: a quarter of upstream.max-transfers, at least 1.
    static func dialLimit(_ configuration: Configuration) -> Int {
        max(1, configuration.upstream.maxConcurrentTransfers / 4)
    }

    /// Called on the connection's loop thread.
    public func connect(_ request: HTTPRequestHead, client: ClientInfo, reply: any ConnectReply) {
        let settings = self.settings
        let configuration = settings.configuration
        let generation = interception.current
        let inputs = ConnectPolicy.Inputs(clientRefusal: settings.proxyAllow.refusal(client), signaturesRequired: settings.signing.required,
                                          connectPorts: configuration.connectPorts, allowedSources: settings.allowedSources,
                                          allowPrivateNetworks: configuration.allowPrivateNetworks,
                                          interceptHosts: generation == nil ? .none : configuration.interceptHosts)
        let metrics = metrics.tunnels
        let logger = logger
        let accessLog = configuration.accessLog
        let refuse: @Sendable (Int, String, ConnectResult) -> Void = { status, reason, result in
            metrics.connect(result)
            logger.notice("refused CONNECT \(request.target.prefix(300)) from \(client.address): \(status) \(reason)")
            if accessLog { logger.info("\(client.address) CONNECT \(request.target.prefix(300)) \(status) - 0B") }
            reply.refuse(status: status, reason: reason)
        }
        let target: ConnectTarget
        switch ConnectPolicy.decide(target: request.target, inputs) {
        case let .refuse(status, reason, result):
            return refuse(status, reason, result)
        case let .tunnel(decided):
            target = decided
        case let .intercept(decided, host):
            guard let generation else { preconditionFailure("ConnectPolicy intercepts only with a local CA in force") }
            return intercept(decided, host: host, generation: generation, client: client, reply: reply,
                             configuration: configuration, refuse: refuse)
        }
        guard metrics.reserve(limit: configuration.maxTunnels) else {
            return refuse(503, "max-tunnels (\(configuration.maxTunnels)) tunnels are open; try again later", .atCap)
        }
        // Dials hold upstream transfer slots while they connect (up to upstream.connect-timeout): at most a quarter of
        // upstream.max-transfers at once, so CONNECTs to addresses that never answer cannot starve image fetches.
        let dialLimit = Proxy.dialLimit(configuration)
        guard metrics.reserveDial(limit: dialLimit) else {
            metrics.release()
            return refuse(503, "\(dialLimit) tunnels are being connected already (a quarter of upstream.max-transfers); try again later", .atCap)
        }
        let dialing = DialPlace(metrics)
        let place = TunnelPlace(metrics)
        let options = TunnelOptions(idleTimeoutSeconds: configuration.tunnelIdleTimeoutSeconds)
        let dial = origin.dial(target) { event in
            dialing.release()
            switch event {
            case let .connected(socket):
                metrics.connect(.tunnel)
                logger.debug("tunnel to \(target) (\(socket.peer) port \(socket.port)) for \(client.address)")
                reply.tunnel(socket, options: options) { report in
                    place.release()
                    metrics.closed(report)
                    if accessLog {
                        logger.info("\(client.address) CONNECT \(target) 200 TUNNEL \(report.bytesUp)B up \(report.bytesDown)B down \(String(format: "%.1f", report.seconds * 1000))ms end=\(report.end.rawValue)",
                                    metadata: ["client": "\(client.address)", "method": "CONNECT", "target": "\(target)",
                                               "status": "200", "cache": "TUNNEL", "bytes_up": "\(report.bytesUp)",
                                               "bytes_down": "\(report.bytesDown)", "end": "\(report.end.rawValue)"])
                    }
                }
            case let .failed(error):
                place.release()
                let result: ConnectResult = if case .refusedDestination = error { .refusedAddress } else { .dialFailed }
                refuse(error.httpStatus, "CONNECT \(target): \(error)", result)
            }
        }
        reply.onCancel {
            // The client left before the dial answered: the dial stops, and its answer (if one is on its way) finds
            // the exchange over.
            dial.cancel()
            dialing.release()
            place.release()
        }
    }
}
