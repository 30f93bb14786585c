import Testing
@testable import ImageCacheHTTP
@testable import ImageCacheCore
@testable import ImageCacheConfig
import ImageCacheUpstream

@Suite("ConnectPolicy", .timeLimit(.minutes(1)))
struct ConnectPolicyTests {
    static func inputs(client: Bool = true, signatures: Bool = false, ports: [Int] = [443], allowed: [String] = [],
                       privateNetworks: Bool = false, intercept: [String] = []) -> ConnectPolicy.Inputs {
        ConnectPolicy.Inputs(clientRefusal: client ? nil : "the forward proxy answers clients in proxy-allow only (10.1.1.1 is not)", signaturesRequired: signatures, connectPorts: ports,
                             allowedSources: AllowedSources(allowed), allowPrivateNetworks: privateNetworks,
                             interceptHosts: try! InterceptHosts.parse(intercept))
    }

    static func result(_ decision: ConnectDecision) -> ConnectResult {
        if case let .refuse(_, _, result) = decision { return result }
        return .tunnel
    }

    @Test("the rules in order, each answered with its status, reason and result", arguments: [
        // target, inputs, status, result, reason fragment
        ("images.example:443", inputs(client: false), 403, ConnectResult.refusedClient, "proxy-allow"),
        ("images.example:443", inputs(signatures: true), 403, .refusedClient, "signed URLs"),
        ("images.example", inputs(), 400, .badTarget, "no port"),
        ("images.example:25", inputs(), 403, .refusedPort, "port 25 is not in connect-ports (443)"),
        ("images.example:8443", inputs(ports: []), 403, .refusedPort, "connect-ports (none)"),
        ("other.example:443", inputs(allowed: ["https://images.example"]), 403, .refusedSource, "allowed-sources"),
        ("images.example:443", inputs(allowed: ["https://images.example/img"]), 403, .refusedSource, "without a path"),
        ("127.0.0.1:443", inputs(), 403, .refusedAddress, "127.0.0.1"),
        ("[::1]:443", inputs(), 403, .refusedAddress, "::1"),
        ("10.1.2.3:443", inputs(), 403, .refusedAddress, "10.1.2.3"),
        // intercept-hosts comes after every other rule: a listed host is still refused by them
        ("images.example:443", inputs(client: false, intercept: ["images.example"]), 403, .refusedClient, "proxy-allow"),
        ("images.example:25", inputs(intercept: ["images.example"]), 403, .refusedPort, "port 25"),
        ("other.example:443", inputs(allowed: ["https://images.example"], intercept: ["*"]), 403, .refusedSource, "allowed-sources"),
        ("127.0.0.1:443", inputs(intercept: ["127.0.0.1"]), 403, .refusedAddress, "127.0.0.1"),
        ("[::1]:443", inputs(intercept: ["*"]), 403, .refusedAddress, "::1"),
    ] as [(String, ConnectPolicy.Inputs, Int, ConnectResult, String)])
    func refusals(target: String, inputs: ConnectPolicy.Inputs, status: Int, result: ConnectResult, reason: String) {
        let decision = ConnectPolicy.decide(target: target, inputs)
        guard case let .refuse(gotStatus, gotReason, gotResult) = decision else {
            Issue.record("\(target) was allowed")
            return
        }
        #expect(gotStatus == status)
        #expect(gotResult == result)
        #expect(gotReason.contains(reason), "\(gotReason)")
    }

    @Test("what passes every rule opens a tunnel", arguments: [
        ("images.example:443", inputs()),
        ("images.example:8443", inputs(ports: [443, 8443])),
        ("cdn.images.example:443", inputs(allowed: ["https://*.images.example"])),
        ("images.example:443", inputs(allowed: ["https://images.example"])),
        ("127.0.0.1:443", inputs(privateNetworks: true)),
        ("93.184.216.34:443", inputs()),
        ("loopback-name.example:443", inputs()),   // a name is judged on the address the dial connects, not here
    ] as [(String, ConnectPolicy.Inputs)])
    func tunnels(target: String, inputs: ConnectPolicy.Inputs) throws {
        #expect(ConnectPolicy.decide(target: target, inputs) == .tunnel(try ConnectTarget.parse(target).get()))
    }

    @Test("a host intercept-hosts lists is intercepted, on any allowed port; any other stays a blind tunnel", arguments: [
        // target, intercept-hosts, intercepted
        ("images.example:443", ["images.example"], true),
        ("IMAGES.example:443", ["images.example"], true),                // the CONNECT host is lower-cased
        ("images.example:8443", ["images.example"], true),               // the port is not part of the match
        ("other.example:443", ["images.example"], false),
        ("a.images.example:443", ["images.example"], false),             // a name is that name only
        ("a.example.com:443", ["*.example.com"], true),
        ("a.b.example.com:443", ["*.example.com"], true),
        ("example.com:443", ["*.example.com"], false),                   // *.example.com does not take example.com
        ("badexample.com:443", ["*.example.com"], false),
        ("anything.test:443", ["*"], true),
        ("93.184.216.34:443", ["*"], true),                              // `*` takes IP literals too
        ("93.184.216.34:443", ["93.184.216.34"], true),
        ("93.184.216.35:443", ["93.184.216.34"], false),
        ("[2606:2800:220:1:248:1893:25c8:1946]:443", ["2606:2800:220:1:248:1893:25c8:1946"], true),
        ("[2606:2800:220:1:248:1893:25c8:1946]:443", ["*.example.com"], false),
        ("127.0.0.1:443", ["127.0.0.1"], true),                          // allow-private-networks on in these rows
        ("under_score.example.com:443", ["*"], false),                   // not a name InterceptHosts reads: blind
        ("images.example:443", [], false),                               // no list (or no CA in force): all blind
    ] as [(String, [String], Bool)])
    func intercepts(target: String, hosts: [String], intercepted: Bool) throws {
        // Given the rules with this intercept-hosts list, ports 443 and 8443, private networks allowed
        let parsed = try ConnectTarget.parse(target).get()
        let inputs = Self.inputs(ports: [443, 8443], privateNetworks: true, intercept: hosts)

        // When the CONNECT is decided
        let decision = ConnectPolicy.decide(target: target, inputs)

        // Then it is intercepted, with the target's host, or tunnelled blind
        if intercepted {
            #expect(decision == .intercept(parsed, try #require(InterceptHosts.Host(parsed.host))), "\(target)")
        } else {
            #expect(decision == .tunnel(parsed), "\(target)")
        }
    }
}

@Suite("Tunnel and dial places", .timeLimit(.minutes(1)))
struct TunnelPlaceTests {
    @Test("tunnel and dial places stop at their limits and come back once each, however often released")
    func places() {
        let metrics = TunnelMetrics()
        #expect(metrics.reserve(limit: 2) && metrics.reserve(limit: 2))
        #expect(!metrics.reserve(limit: 2))
        let place = TunnelPlace(metrics)
        place.release()
        place.release()   // a dial's answer and the client's hang-up can both release: the second is a no-op
        #expect(metrics.openCount == 1)
        #expect(metrics.reserveDial(limit: 1))
        #expect(!metrics.reserveDial(limit: 1))
        let dial = DialPlace(metrics)
        dial.release()
        dial.release()
        #expect(metrics.reserveDial(limit: 1))
        #expect(!metrics.reserveDial(limit: 1))
    }

    @Test("dials may hold a quarter of upstream.max-transfers, at least one")
    func dialLimit() {
        var configuration = Configuration()
        configuration.upstream.maxConcurrentTransfers = 64
        #expect(Proxy.dialLimit(configuration) == 16)
        configuration.upstream.maxConcurrentTransfers = 2
        #expect(Proxy.dialLimit(configuration) == 1)
    }
}
