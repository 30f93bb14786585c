// Blind CONNECT tunnels end to end (issue 29): the real daemon (port 0), real clients (curl -p -x, raw sockets) and a
// real peer on 127.0.0.1. A blind tunnel carries bytes both ways untouched, is never cached, and is refused (403,
// 503, 508) by the rules of ConnectPolicy and the dial's guards.

import Foundation
import Testing
import ImageCacheStatus
@testable import ImageCacheConfig
@testable import ImageCacheCore
@testable import ImageCacheOps
import ImageCacheStore
import ImageCacheTestSupport

@Suite("Blind CONNECT tunnels", .timeLimit(.minutes(2)))
struct TunnelTests {
    static let png = Fixtures.png(size: 6_000)

    static func stats(_ harness: ProxyHarness) async throws -> DaemonStats.Tunnels {
        let response = try await harness.get("/_imagecached/stats")
        return try #require(try DaemonStats.decode(Data(response.body)).tunnels)
    }

    /// Runs curl through the daemon as an HTTP proxy with a tunnel for every request (-p): status, body, stderr.
    static func curlThroughTunnel(daemonPort: Int, url: String) async throws -> (body: [UInt8], headers: String, exit: Int32) {
        try await offPool {
            let result = try Subprocess.run("/usr/bin/curl", ["-s", "-p", "-x", "http://127.0.0.1:\(daemonPort)", "-D", "/dev/stderr",
                                                              "--max-time", "20", url])
            return (result.output, result.errorText, result.exitCode)
        }
    }

    @Test("curl -p -x reaches an http origin through a tunnel: the origin's own bytes and fields, nothing stored")
    func curlThroughTunnel() async throws {
        let harness = try ProxyHarness()
        let origin = harness.origin
        origin.route("/a.png") { _ in
            Reply(status: 200, headers: [("Content-Type", "image/png"), ("Cache-Control", "max-age=600")], body: TunnelTests.png)
        }
        try harness.restart { $0.connectPorts = [origin.port] }
        // When curl fetches it twice through tunnels
        let first = try await Self.curlThroughTunnel(daemonPort: harness.port, url: origin.baseURL + "/a.png")
        let second = try await Self.curlThroughTunnel(daemonPort: harness.port, url: origin.baseURL + "/a.png")
        // Then both are the origin's bytes, its head is untouched (no Cache-Status), and the origin answered both
        #expect(first.exit == 0)
        #expect(first.body == Self.png)
        #expect(second.body == Self.png)
        #expect(first.headers.contains("200 Connection established"))
        #expect(!first.headers.lowercased().contains("cache-status"))
        #expect(origin.requestCount("/a.png") == 2, "a tunnel is never cached")
        #expect(harness.daemon.proxy.memory.stats.entries == 0)
        let tunnels = try await Self.stats(harness)
        #expect(tunnels.connects["tunnel"] == 2)
        #expect(tunnels.ends["closed"] == 2)
        #expect(tunnels.bytesDown > 2 * Self.png.count)
    }

    @Test("bytes go both ways untouched, the bytes sent right behind the CONNECT head arrive first, and each FIN passes on its own")
    func bytesBothWaysAndHalfClose() async throws {
        let peer = try TunnelPeer()
        let harness = try ProxyHarness { $0.connectPorts = [peer.port] }
        let port = harness.port
        try await offPool {
            // Given a tunnel opened with bytes right behind the head (a client that does not wait for the 200)
            let (head, client) = try openTunnel(daemonPort: port, target: "127.0.0.1:\(peer.port)", early: Array("early".utf8))
            #expect(head.hasPrefix("HTTP/1.1 200 Connection established\r\n"))
            #expect(!head.lowercased().contains("content-length") && !head.lowercased().contains("transfer-encoding"))
            let upstream = try peer.accept()
            #expect(upstream.read(5) == Array("early".utf8))
            // Bytes both ways, every byte value
            let all = (0..<4096).map { UInt8($0 % 256) }
            client.send(all)
            #expect(upstream.read(all.count) == all)
            upstream.send(Array(all.reversed()))
            #expect(client.read(all.count) == Array(all.reversed()))
            // The client's FIN reaches the peer, which can still answer (half-close)
            client.shutdownWrite()
            let rest = upstream.readUntilClose()
            #expect(rest.closed && rest.bytes.isEmpty)
            upstream.send("after the client's FIN")
            #expect(client.read(22) == Array("after the client's FIN".utf8))
            upstream.shutdownWrite()
            let end = client.readUntilClose()
            #expect(end.closed && end.bytes.isEmpty)
        }
        let tunnels = try await Self.stats(harness)
        #expect(tunnels.ends["closed"] == 1)
        #expect(tunnels.bytesUp == 5 + 4096)
        #expect(tunnels.bytesDown == 4096 + 22)
        #expect(tunnels.open == 0)
    }

    @Test("bytes and the FIN right behind them (one segment) close the tunnel at once, each way, not at the idle timeout")
    func finBehindBytes() async throws {
        let peer = try TunnelPeer()
        let harness = try ProxyHarness { configuration in
            configuration.connectPorts = [peer.port]
            configuration.tunnelIdleTimeoutSeconds = 60   // longer than the sockets' 10 s receive timeout
        }
        let port = harness.port
        try await offPool {
            // The peer's last bytes and its FIN back to back, then the client's
            let (_, client) = try openTunnel(daemonPort: port, target: "127.0.0.1:\(peer.port)")
            let upstream = try peer.accept()
            upstream.send("last words")
            upstream.shutdownWrite()
            let down = client.readUntilClose()
            #expect(down.closed, "the client must see the peer's FIN, not wait for a timeout")
            #expect(down.bytes == Array("last words".utf8))
            client.send("bye")
            client.shutdownWrite()
            let up = upstream.readUntilClose()
            #expect(up.closed)
            #expect(up.bytes == Array("bye".utf8))
        }
        let tunnels = try await Self.stats(harness)
        #expect(tunnels.ends["closed"] == 1)
    }

    @Test("refused: a port outside connect-ports, a host outside allowed-sources, a private address literal, a name that resolves to one, and the daemon itself")
    func refusals() async throws {
        let peer = try TunnelPeer()
        // Private networks refused, the peer's port allowed
        let strict = try ProxyHarness { configuration in
            configuration.connectPorts = [443, peer.port]
            configuration.allowPrivateNetworks = false
        }
        let port = strict.port
        for (target, status, reason) in [("127.0.0.1:25", 403, "port 25 is not in connect-ports"),
                                         ("127.0.0.1:\(peer.port)", 403, "127.0.0.1 is on a private or reserved network"),
                                         ("localhost:\(peer.port)", 403, "private or reserved network"),
                                         ("not-a-target", 400, "no port")] {
            let (head, body) = try await offPool { () -> (String, String) in
                let (head, socket) = try openTunnel(daemonPort: port, target: target)
                return (head, String(decoding: socket.readUntilClose().bytes, as: UTF8.self))
            }
            #expect(head.hasPrefix("HTTP/1.1 \(status) "), "\(target): \(head)")
            #expect(head.contains("Connection: close"))
            #expect(body.contains(reason), "\(target): \(body)")
        }
        // allowed-sources: an entry without a path for host and port opens a tunnel; another host does not
        let sources = try ProxyHarness { configuration in
            configuration.connectPorts = [peer.port]
            configuration.allowedSources = ["http://localhost:\(peer.port)"]
        }
        let sourcesPort = sources.port
        let (refused, opened) = try await offPool { () -> (String, String) in
            let refused = try openTunnel(daemonPort: sourcesPort, target: "127.0.0.1:\(peer.port)")
            let body = String(decoding: refused.socket.readUntilClose().bytes, as: UTF8.self)
            let opened = try openTunnel(daemonPort: sourcesPort, target: "localhost:\(peer.port)")
            _ = try peer.accept()
            return (refused.head + body, opened.head)
        }
        #expect(refused.hasPrefix("HTTP/1.1 403 "))
        #expect(refused.contains("not under allowed-sources"))
        #expect(opened.hasPrefix("HTTP/1.1 200 "))
        // The daemon's own port: a loop (its port is known once it listens: a reload allows it)
        let loop = try ProxyHarness()
        let loopPort = loop.port
        var reloaded = loop.configuration
        reloaded.connectPorts = [loopPort]
        loop.daemon.proxy.apply(reloaded)
        let looped = try await offPool { () -> String in
            let (head, socket) = try openTunnel(daemonPort: loopPort, target: "127.0.0.1:\(loopPort)")
            return head + String(decoding: socket.readUntilClose().bytes, as: UTF8.self)
        }
        #expect(looped.hasPrefix("HTTP/1.1 508 "), "\(looped)")
        let counts = try await Self.stats(strict)
        #expect(counts.connects["refused_port"] == 1)
        #expect(counts.connects["refused_address"] == 2)
        #expect(counts.connects["bad_target"] == 1)
        #expect(counts.open == 0)
    }

    @Test("at max-tunnels a CONNECT gets 503; the open ones go on")
    func atCap() async throws {
        let peer = try TunnelPeer()
        let harness = try ProxyHarness { configuration in
            configuration.connectPorts = [peer.port]
            configuration.maxTunnels = 2
        }
        let port = harness.port
        let third = try await offPool { () -> String in
            let first = try openTunnel(daemonPort: port, target: "127.0.0.1:\(peer.port)")
            let second = try openTunnel(daemonPort: port, target: "127.0.0.1:\(peer.port)")
            let a = try peer.accept()
            _ = try peer.accept()
            #expect(first.head.hasPrefix("HTTP/1.1 200 ") && second.head.hasPrefix("HTTP/1.1 200 "))
            let third = try openTunnel(daemonPort: port, target: "127.0.0.1:\(peer.port)")
            let answer = third.head + String(decoding: third.socket.readUntilClose().bytes, as: UTF8.self)
            // The first tunnel still carries bytes
            first.socket.send("still open")
            #expect(a.read(10) == Array("still open".utf8))
            return answer
        }
        #expect(third.hasPrefix("HTTP/1.1 503 "))
        #expect(third.contains("max-tunnels (2)"))
        let tunnels = try await Self.stats(harness)
        #expect(tunnels.connects["at_cap"] == 1)
        #expect(tunnels.limit == 2)
    }

    @Test("a tunnel with no byte either way for tunnel-idle-timeout is closed, and counted as idle")
    func idleTimeout() async throws {
        let peer = try TunnelPeer()
        let harness = try ProxyHarness { configuration in
            configuration.connectPorts = [peer.port]
            configuration.tunnelIdleTimeoutSeconds = 1
        }
        let port = harness.port
        let (clientEnd, peerEnd) = try await offPool { () -> (Bool, Bool) in
            let (head, client) = try openTunnel(daemonPort: port, target: "127.0.0.1:\(peer.port)")
            #expect(head.hasPrefix("HTTP/1.1 200 "))
            let upstream = try peer.accept()
            return (client.readUntilClose().closed, upstream.readUntilClose().closed)
        }
        #expect(clientEnd && peerEnd)
        let tunnels = try await Self.stats(harness)
        #expect(tunnels.ends["idle"] == 1)
    }

    @Test("a client that does not read holds the peer back (backpressure through the tunnel); every byte then arrives in order")
    func backpressure() async throws {
        let peer = try TunnelPeer()
        let harness = try ProxyHarness { $0.connectPorts = [peer.port] }
        let port = harness.port
        let total = 64 << 20   // more than every kernel buffer on the way can hold (tcp_rmem max is 32 MiB here)
        let (sent, received) = try await offPool { () -> (Int, Int) in
            let (head, client) = try openTunnel(daemonPort: port, target: "127.0.0.1:\(peer.port)", receiveBuffer: 16 << 10)
            #expect(head.hasPrefix("HTTP/1.1 200 "))
            let upstream = try peer.accept(sendTimeoutSeconds: 1)
            let block = (0..<251).map { UInt8($0) }
            var pattern: [UInt8] = []
            pattern.reserveCapacity(total + 251)
            while pattern.count < total { pattern.append(contentsOf: block) }
            pattern.removeLast(pattern.count - total)
            // The client reads nothing: the peer's sending stalls once the kernel buffers and the tunnel's 64 KiB fill
            let sent = upstream.sendUntilStalled(pattern)
            upstream.shutdownWrite()
            let end = client.readUntilClose()
            #expect(end.closed, "the peer's FIN must reach the client once the bytes before it have")
            let received = end.bytes
            return (sent, received == Array(pattern.prefix(sent)) ? received.count : -1)
        }
        #expect(sent < total, "the peer sent all \(total) bytes to a client that read none: nothing held it back")
        #expect(received == sent, "the client must receive exactly the bytes sent, in order")
    }

    @Test("the stats document and the metrics count open tunnels while one is open")
    func openTunnelIsCounted() async throws {
        let peer = try TunnelPeer()
        let harness = try ProxyHarness { $0.connectPorts = [peer.port] }
        let port = harness.port
        let (client, upstream) = try await offPool { () -> (PeerSocket, PeerSocket) in
            let (_, client) = try openTunnel(daemonPort: port, target: "127.0.0.1:\(peer.port)")
            return (client, try peer.accept())
        }
        let tunnels = try await Self.stats(harness)
        #expect(tunnels.open == 1)
        let metrics = try await harness.get("/_imagecached/metrics").text
        #expect(metrics.contains("imagecached_tunnels_open{kind=\"blind\"} 1"))
        #expect(metrics.contains("imagecached_connects_total{result=\"tunnel\"} 1"))
        // The status page has a Tunnels card with the open count
        let page = try await harness.get("/_imagecached/status").text
        #expect(page.contains("id=\"section-tunnels\""))
        #expect(page.contains("<span data-stat=\"tunnels.open\" data-unit=\"count\" data-value=\"1\">1</span>"))
        withExtendedLifetime((client, upstream)) {}
    }
}
