// Whether a CONNECT may open a tunnel: a pure function of the request, the client and the settings.
//
// The rules, in order (the first that applies answers):
//   client outside proxy-allow                      403  refused_client   (never an open proxy)
//   require-signature in force                      403  refused_client   (a CONNECT cannot carry a signature)
//   target not host:port                            400  bad_target
//   port not in connect-ports                       403  refused_port     (no :25 or :6379 through the proxy)
//   allowed-sources set, no entry for host:port     403  refused_source   (an entry with a path cannot allow a tunnel)
//   an IP literal on a refused network              403  refused_address  (unless allow-private-networks; a name is
//                                                                          judged on the address the dial connects)
//   otherwise                                            tunnel            (then max-tunnels: 503 at_cap, counted by
//                                                                          the proxy)
// A tunnel's dial may still fail: 403 refused_address for a name that resolves to a refused network, 508 for this
// daemon's own port, 502 for DNS or connect failures, 504 for a timeout (all dial_failed but the first).

package import ImageCacheHTTP
internal import ImageCacheUpstream

/// How a CONNECT ended, for `connects_total{result}`.
package enum ConnectResult: String, Sendable, CaseIterable {
    case tunnel
    case refusedClient = "refused_client"
    case badTarget = "bad_target"
    case refusedPort = "refused_port"
    case refusedSource = "refused_source"
    case refusedAddress = "refused_address"
    case atCap = "at_cap"
    case dialFailed = "dial_failed"
}

/// What a CONNECT gets.
package enum ConnectDecision: Equatable {
    case tunnel(ConnectTarget)
    case refuse(status: Int, reason: String, result: ConnectResult)
}

package enum ConnectPolicy {
    /// The inputs besides the request: the settings in force and who asks.
    package struct Inputs {
        /// Why `proxy-allow` refuses this client (ProxyAllow), nil when it may use the proxy.
        var clientRefusal: String?
        var signaturesRequired: Bool
        var connectPorts: [Int]
        var allowedSources: AllowedSources
        var allowPrivateNetworks: Bool
    }

    package static func decide(target text: String, _ inputs: Inputs) -> ConnectDecision {
        if let refusal = inputs.clientRefusal {
            return .refuse(status: 403, reason: refusal, result: .refusedClient)
        }
        guard !inputs.signaturesRequired else {
            return .refuse(status: 403, reason: "this daemon requires signed URLs, which a CONNECT tunnel cannot carry: use /fetch?url=<percent-encoded URL>&sig=<signature>",
                           result: .refusedClient)
        }
        let target: ConnectTarget
        switch ConnectTarget.parse(text) {
        case let .success(parsed): target = parsed
        case let .failure(error): return .refuse(status: 400, reason: error.reason, result: .badTarget)
        }
        guard inputs.connectPorts.contains(target.port) else {
            let ports = inputs.connectPorts.isEmpty ? "none" : inputs.connectPorts.map(String.init).joined(separator: ",")
            return .refuse(status: 403, reason: "port \(target.port) is not in connect-ports (\(ports))", result: .refusedPort)
        }
        if let refusal = inputs.allowedSources.refusal(host: target.host, port: target.port) {
            return .refuse(status: 403, reason: refusal, result: .refusedSource)
        }
        if !inputs.allowPrivateNetworks, let address = target.address, AddressPolicy.refusal(for: address) != nil {
            return .refuse(status: 403, reason: UpstreamError.refusedDestination(address: address.description).description,
                           result: .refusedAddress)
        }
        return .tunnel(target)
    }
}
