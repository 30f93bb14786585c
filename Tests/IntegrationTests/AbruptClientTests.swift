// Clients that die in the middle (issue: a test's curl crashed mid-handshake through the proxy and the test process
// was once seen spinning afterwards). The daemon must let such a connection go as soon as its end arrives, whatever
// step the client was at, and never at a timeout: each test waits for the listener to have no connection open
// (an event: the last connection's close), so a connection kept open hangs the test into its time limit. The
// timeouts are set far beyond that limit, so none of them can be what closes a connection here.
//
// A diagnostic run of the same steps (and a curl killed with SIGSEGV or SIGKILL, and CONNECTs still dialling)
// measured the process's CPU for a second after each end: 1-3 ms, no thread busy.

import Foundation
import Glibc
import Testing
import ImageCacheServer
import ImageCacheStatus
@testable import ImageCacheConfig
@testable import ImageCacheCore
@testable import ImageCacheOps
import ImageCacheTestSupport

@Suite("Clients that die mid-handshake or mid-tunnel", .timeLimit(.minutes(2)))
struct AbruptClientTests {
    /// The steps a client of an intercepted tunnel can die at (each the last thing it did).
    enum Step: String, CaseIterable, Sendable {
        case connected, partialHello, hello, helloAnswered, handshaken, partialRequest, pendingRequest
    }

    @Test("an intercepted client that resets, closes or half-closes at any step of its handshake or request is let go at once")
    func interceptedClientEnds() async throws {
        let setup = try InterceptTests.Setup { configuration in
            configuration.server.headerTimeoutSeconds = 600
            configuration.server.idleTimeoutSeconds = 600
        }
        let gate = Gate()
        let arrived = DispatchSemaphore(value: 0)
        for end in AbruptEnd.allCases {
            setup.origin.origin.route("/pending-\(end).png") { _ in
                arrived.signal()
                return InterceptTests.image(gate: gate)
            }
        }
        let anchor = Array(try Data(contentsOf: URL(fileURLWithPath: setup.daemonCA)))
        let (port, authority, listener) = (setup.proxy.port, setup.originAuthority, setup.proxy.daemon.listener)
        for end in AbruptEnd.allCases {
            for step in Step.allCases {
                // Given an intercepted tunnel whose client got as far as `step`
                let fd = try await offPool { () -> Int32 in
                    let (head, fd) = try rawTunnel(daemonPort: port, target: authority)
                    #expect(head.hasPrefix("HTTP/1.1 200 "), "\(head)")
                    let client = try SteppedTLSClient(fd: fd, anchorPEM: anchor, serverName: "localhost")
                    switch step {
                    case .connected: break
                    case .partialHello: client.sendHello(prefix: 20)
                    case .hello: client.sendHello()
                    case .helloAnswered:
                        client.sendHello()
                        try client.receiveFirstFlight()
                    case .handshaken: try client.handshake()
                    case .partialRequest:
                        try client.handshake()
                        try client.send("GET /pending-\(end).png HTTP/1.1\r\nHost: \(authority)\r\n")
                    case .pendingRequest:
                        try client.handshake()
                        try client.send("GET /pending-\(end).png HTTP/1.1\r\nHost: \(authority)\r\n\r\n")
                        // The origin has the request: the proxy waits on it for this client
                        #expect(arrived.wait(timeout: .now() + 15) == .success, "the request never reached the origin")
                    }
                    return fd
                }
                // When the client's socket ends
                end.apply(to: fd)
                // Then the daemon closes the connection (at once: no timeout can fire within the test's limit)
                await noConnections(listener)
                if end == .halfClose { close(fd) }
            }
        }
        gate.open()
    }

    @Test("a blind tunnel whose client resets ends at once: the peer sees its end and nothing stays open")
    func tunnelClientResets() async throws {
        let peer = try TunnelPeer()
        let harness = try ProxyHarness { configuration in
            configuration.connectPorts = [peer.port]
            configuration.tunnelIdleTimeoutSeconds = 600
        }
        let port = harness.port
        let peerSawEnd = try await offPool { () -> Bool in
            // Given a tunnel carrying bytes both ways, the peer's last ones unread by the client
            let (head, fd) = try rawTunnel(daemonPort: port, target: "127.0.0.1:\(peer.port)")
            #expect(head.hasPrefix("HTTP/1.1 200 "))
            let upstream = try peer.accept()
            _ = Array("hello".utf8).withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            #expect(upstream.read(5) == Array("hello".utf8))
            upstream.send([UInt8](repeating: 0x17, count: 100_000))
            // When the client resets
            AbruptEnd.reset.apply(to: fd)
            // Then the peer sees the tunnel end
            return upstream.readUntilClose().closed
        }
        #expect(peerSawEnd)
        await noConnections(harness.daemon.listener)
        let tunnels = try await TunnelTests.stats(harness)
        #expect(tunnels.open == 0)
        #expect(tunnels.ends["error"] == 1, "\(tunnels.ends)")
    }
}
