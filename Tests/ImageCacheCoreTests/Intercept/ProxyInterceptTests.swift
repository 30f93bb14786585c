// Proxy.connect for an intercept-hosts host, without sockets: the CONNECT reaches ConnectReply.intercept with the
// generation's context and a leaf for the host that chains to the local CA; the tunnel place and the counts; what a
// server that does not intercept yet answers; and when a listed host is still tunnelled blind.

import Dispatch
import Foundation
import Logging
import Testing
@testable import ImageCacheHTTP
import ImageCacheStatus
@testable import ImageCacheConfig
@testable import ImageCacheServer
@testable import ImageCacheTLS
@testable import ImageCacheCertificates
@testable import ImageCacheCore

@Suite("Proxy: intercepted CONNECTs", .timeLimit(.minutes(1)))
struct ProxyInterceptTests {
    static let loopback = ClientInfo(address: "127.0.0.1", isLoopback: true)

    /// A proxy intercepting images.test, with a local CA in force unless `withCA` is false.
    static func proxy(withCA: Bool = true, _ configure: (inout Configuration) -> Void = { _ in }) throws -> (Proxy, LocalCA) {
        var configuration = Configuration()
        configuration.interceptHosts = try InterceptHosts.parse(["images.test"])
        configure(&configuration)
        let proxy = Proxy(configuration: configuration, origin: MockOrigin(),
                          logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() })
        let ca = LocalCA.make(hosts: configuration.interceptHosts, hostname: "test", now: Date())
        if withCA { _ = try proxy.interception.use(ca) }
        return (proxy, ca)
    }

    static func connect(_ target: String) -> HTTPRequestHead {
        HTTPRequestHead(method: "CONNECT", target: target, headers: HTTPHeaders([("Host", target)]))
    }

    static func tunnels(_ proxy: Proxy) -> DaemonStats.Tunnels {
        proxy.metrics.tunnels.snapshot(limit: proxy.configuration.maxTunnels, interception: true)
    }

    @Test("an intercepted CONNECT reaches ConnectReply.intercept with the generation's context and a leaf for the host that chains to the local CA")
    func interceptReachesReply() throws {
        // Given a proxy intercepting images.test with a local CA in force
        let (proxy, ca) = try Self.proxy()
        let generation = try #require(proxy.interception.current)
        let reply = RecordingConnectReply()

        // When a loopback client sends CONNECT images.test:443
        proxy.connect(Self.connect("images.test:443"), client: Self.loopback, reply: reply)

        // Then, once the leaf is minted, the reply is told to intercept
        guard case let .intercepted(context, identity, target, ended)? = reply.waitForOutcome() else {
            Issue.record("not intercepted: \(String(describing: reply.outcome))")
            return
        }
        #expect(context === generation.context)
        #expect(context.needsStreamIdentity)
        #expect(target.authority == "images.test:443")
        // And the leaf is for images.test, signed by the CA: OpenSSL's own verification says so
        #expect(identity.subject == "/CN=images.test")
        #expect(try TLSVerifier.verify(chainDER: identity.certificateChainDER, anchorPEM: Array(ca.certificatePEM.utf8),
                                       hostName: "images.test") == .trusted)
        #expect(try TLSVerifier.verify(chainDER: identity.certificateChainDER, anchorPEM: Array(ca.certificatePEM.utf8),
                                       hostName: "evil.test") != .trusted)
        // And it holds an intercepted tunnel place until the connection ends
        #expect(Self.tunnels(proxy).connects["intercept"] == 1)
        #expect(Self.tunnels(proxy).open == 1 && Self.tunnels(proxy).intercepted == 1)
        ended(TunnelReport(end: .closed, bytesUp: 10, bytesDown: 20, seconds: 1))
        #expect(Self.tunnels(proxy).open == 0 && Self.tunnels(proxy).intercepted == 0)
        #expect(Self.tunnels(proxy).interceptedEnds == ["closed": 1])
        #expect(Self.tunnels(proxy).ends.isEmpty, "not counted as a blind tunnel's end")
        // And the stats count the leaf
        #expect(proxy.interception.stats == .init(minted: 1, cached: 1, mintsQueued: 0))
    }

    @Test("a second CONNECT for the host is answered at once, before connect returns, with the cached leaf")
    func secondConnectHitsCache() throws {
        // Given a host whose leaf was minted for a first CONNECT
        let (proxy, _) = try Self.proxy()
        let first = RecordingConnectReply()
        proxy.connect(Self.connect("images.test:443"), client: Self.loopback, reply: first)
        guard case let .intercepted(_, leaf, _, _)? = first.waitForOutcome() else {
            Issue.record("the first CONNECT was not intercepted")
            return
        }

        // When another CONNECT comes for it
        let second = RecordingConnectReply()
        proxy.connect(Self.connect("images.test:443"), client: Self.loopback, reply: second)

        // Then it was intercepted on this thread, with the same leaf, and no second mint
        guard case let .intercepted(_, identity, _, _)? = second.outcome else {
            Issue.record("the second CONNECT was not answered at once: \(String(describing: second.outcome))")
            return
        }
        #expect(identity === leaf)
        #expect(proxy.interception.stats?.minted == 1)
    }

    @Test("a server that does not intercept yet answers 501 with its reason, and the tunnel place is given back")
    func defaultReplyRefuses() throws {
        // Given a reply that has no intercept of its own (the protocol's default)
        let (proxy, _) = try Self.proxy()
        let reply = NonInterceptingReply()

        // When an intercepted CONNECT reaches it
        proxy.connect(Self.connect("images.test:443"), client: Self.loopback, reply: reply)

        // Then the client gets 501 and the reason, and no tunnel stays open
        let refusal = try #require(reply.waitForRefusal())
        #expect(refusal.0 == 501)
        #expect(refusal.1 == "TLS interception is not wired into this server yet")
        #expect(Self.tunnels(proxy).open == 0)
    }

    @Test("at max-tunnels an intercepted CONNECT gets 503 before any mint")
    func atCap() throws {
        // Given max-tunnels 1 and one intercepted tunnel open
        let (proxy, _) = try Self.proxy { $0.maxTunnels = 1 }
        let open = RecordingConnectReply()
        proxy.connect(Self.connect("images.test:443"), client: Self.loopback, reply: open)
        guard case .intercepted? = open.waitForOutcome() else { Issue.record("the first CONNECT was not intercepted"); return }

        // When another comes
        let refused = RecordingConnectReply()
        proxy.connect(Self.connect("images.test:443"), client: Self.loopback, reply: refused)

        // Then it is refused with 503 naming the key
        guard case let .refused(status, reason)? = refused.waitForOutcome() else { Issue.record("not refused"); return }
        #expect(status == 503)
        #expect(reason.contains("max-tunnels (1)"), "\(reason)")
        #expect(Self.tunnels(proxy).connects["at_cap"] == 1)
    }

    /// Holds the proxy's certificates queue with `count` mints of the test's until `gate` is signalled.
    static func holdMinting(_ proxy: Proxy, count: Int, gate: DispatchSemaphore) {
        for index in 0..<count {
            proxy.interception.minting.submit({
                if index == 0 { gate.wait() }
                return .failure(.mintFailed(host: "held", reason: "a test's"))
            }, done: { _ in })
        }
    }

    @Test("a client that leaves while its leaf is being minted gives its tunnel place back at once")
    func clientLeavesDuringMint() throws {
        // Given a CONNECT waiting for its leaf behind a mint the test holds
        let (proxy, _) = try Self.proxy()
        let gate = DispatchSemaphore(value: 0)
        Self.holdMinting(proxy, count: 1, gate: gate)
        let reply = RecordingConnectReply()
        proxy.connect(Self.connect("images.test:443"), client: Self.loopback, reply: reply)
        #expect(reply.outcome == nil)
        #expect(Self.tunnels(proxy).intercepted == 1)

        // When the client leaves
        reply.leave()

        // Then its place is free before the leaf lands
        #expect(Self.tunnels(proxy).open == 0 && Self.tunnels(proxy).intercepted == 0)

        // And the leaf, when it lands, is cached for the next CONNECT (the answer to this one is the server's to drop)
        gate.signal()
        _ = reply.waitForOutcome()
        #expect(proxy.interception.current?.leaves.count == 1)
        #expect(Self.tunnels(proxy).open == 0)
    }

    @Test("with 256 mints queued, a CONNECT to a host with no leaf gets 503 \"too many certificates being made\"")
    func tooManyMints() throws {
        // Given the certificates queue full
        let (proxy, _) = try Self.proxy()
        let gate = DispatchSemaphore(value: 0)
        Self.holdMinting(proxy, count: Minting.queueLimit, gate: gate)
        defer { gate.signal() }

        // When a CONNECT needs a new leaf
        let reply = RecordingConnectReply()
        proxy.connect(Self.connect("images.test:443"), client: Self.loopback, reply: reply)

        // Then it is refused at once with 503 and the reason, counted, its place given back
        guard case let .refused(status, reason)? = reply.outcome else {
            Issue.record("not refused at once: \(String(describing: reply.outcome))")
            return
        }
        #expect(status == 503)
        #expect(reason == "CONNECT images.test:443: too many certificates being made (256 queued); try again later")
        #expect(Self.tunnels(proxy).connects["mint_failed"] == 1)
        #expect(Self.tunnels(proxy).open == 0)
    }

    @Test("a listed host is tunnelled blind when no local CA is in force, and an unlisted host always is")
    func blindWhenNotIntercepted() throws {
        for (withCA, target) in [(false, "images.test:443"), (true, "other.test:443")] {
            // Given a proxy whose mock origin refuses every dial
            let (proxy, _) = try Self.proxy(withCA: withCA)
            let reply = RecordingConnectReply()

            // When the CONNECT comes
            proxy.connect(Self.connect(target), client: Self.loopback, reply: reply)

            // Then it was dialled (and the dial's refusal answered), never intercepted
            guard case let .refused(status, reason)? = reply.waitForOutcome() else {
                Issue.record("\(target) with CA \(withCA): \(String(describing: reply.outcome))")
                continue
            }
            #expect(status == 502 && reason.contains("opens no tunnels"), "\(reason)")
            #expect(Self.tunnels(proxy).connects["intercept"] == nil)
            #expect(proxy.interception.stats?.minted ?? 0 == 0)
        }
    }
}
