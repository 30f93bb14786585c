// TLS interception end to end (issue 29): a proxy daemon with intercept-hosts, and as the https origin a second
// daemon serving reverse mode on its TLS listener (its certificate from a test CA that the proxy's
// upstream.ca-bundle trusts) in front of a TestOrigin. Real clients: curl -x and Python's urllib with HTTPS_PROXY.

import Foundation
import Testing
import ImageCacheStatus
@testable import ImageCacheHTTP
@testable import ImageCacheConfig
import ImageCacheServer
@testable import ImageCacheCore
@testable import ImageCacheOps
import ImageCacheStore
import ImageCacheUpstream
import ImageCacheTestSupport

@Suite("TLS interception", .timeLimit(.minutes(2)))
struct InterceptTests {
    static let png = Fixtures.png(size: 12_000)

    /// The https origin (a daemon with a TLS listener for localhost) and the intercepting proxy.
    struct Setup {
        let origin: ProxyHarness
        let proxy: ProxyHarness
        let originCA: TestPKI.Credential
        let caDirectory: URL
        var originAuthority: String { "localhost:\(origin.daemon.tlsPort)" }
        var daemonCA: String { caDirectory.appendingPathComponent("ca.pem").path }

        init(trustOrigin: Bool = true, _ configure: (inout Configuration) -> Void = { _ in }) throws {
            let directory = try TestPKI.makeDirectory()
            originCA = try TestPKI.makeCA(named: "origin-ca", commonName: "origin test CA", permittedDNS: nil, in: directory)
            let leaf = try TestPKI.issueLeaf(named: "origin", dnsNames: ["localhost"], by: originCA, in: directory)
            origin = try ProxyHarness { configuration in
                configuration.tlsListen = ListenAddress(host: "127.0.0.1", port: 0)
                configuration.tlsCertificateFile = leaf.certificateFile.path
                configuration.tlsKeyFile = leaf.keyFile.path
                configuration.contentTypes = ["*/*"]
            }
            caDirectory = directory.appendingPathComponent("daemon-ca")
            let originPort = origin.daemon.tlsPort
            let trusted = originCA.certificateFile.path
            let caPath = caDirectory.path
            proxy = try ProxyHarness { configuration in
                configuration.interceptHosts = try! InterceptHosts.parse(["localhost"])
                configuration.interceptCADirectory = caPath
                configuration.connectPorts = [originPort]
                if trustOrigin { configuration.upstream.caBundle = trusted }
                configure(&configuration)
            }
            // The origin daemon dates its responses by the wall clock: the proxy's test clock reads the same time, so
            // max-age counts from the Date it sends.
            proxy.clock.advance(Date().timeIntervalSince1970 - proxy.clock.now().timeIntervalSince1970)
        }

        /// curl through the proxy (CONNECT, then TLS with the daemon's leaf): body, head, exit status.
        func curl(_ path: String, method: String = "GET", data: String? = nil) async throws -> (body: [UInt8], head: String, exit: Int32) {
            try await InterceptTests.curl(proxyPort: proxy.port, daemonCA: daemonCA, url: "https://\(originAuthority)\(path)",
                                          method: method, data: data)
        }
    }

    static func curl(proxyPort: Int, daemonCA: String, url: String, method: String = "GET", data: String? = nil) async throws -> (body: [UInt8], head: String, exit: Int32) {
        var arguments = ["-s", "-x", "http://127.0.0.1:\(proxyPort)", "--cacert", daemonCA, "-D", "/dev/stderr",
                         "--max-time", "20", "-X", method]
        if let data { arguments += ["--data-binary", data] }
        arguments.append(url)
        return try await run("/usr/bin/curl", arguments, environment: [:])
    }

    static func run(_ executable: String, _ arguments: [String], environment: [String: String]) async throws -> (body: [UInt8], head: String, exit: Int32) {
        try await offPool {
            var env = ProcessInfo.processInfo.environment
            for name in ["http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"] { env[name] = nil }
            for (name, value) in environment { env[name] = value }
            let result = try Subprocess.run(executable, arguments, environment: env)
            return (result.output, result.errorText, result.exitCode)
        }
    }

    /// A sample's value in the metrics text (0 when absent). The intercepted TLS counts are the process's (one daemon
    /// per process in production; these tests run several), so tests compare them before and after.
    static func sample(_ metrics: String, _ line: String) -> Int {
        metrics.split(separator: "\n").first { $0.hasPrefix(line + " ") }.flatMap { Int($0.split(separator: " ").last ?? "") } ?? 0
    }

    static func xCache(_ head: String) -> [String] {
        head.split(separator: "\r\n").filter { $0.hasPrefix("X-Cache:") }.map { String($0.dropFirst(9)) }
    }

    static func image(gate: Gate? = nil) -> Reply {
        Reply(status: 200, headers: [("Content-Type", "image/png"), ("Cache-Control", "max-age=600")], body: png, gate: gate)
    }

    @Test("an intercepted GET: a miss then a hit with the origin's bytes, under a leaf from the daemon's CA; the cache key is /fetch's")
    func missThenHitSharedWithFetch() async throws {
        let setup = try Setup()
        setup.origin.origin.route("/a.png") { _ in InterceptTests.image() }
        setup.origin.origin.route("/b.png") { _ in InterceptTests.image() }
        // curl verifies the leaf against the daemon's CA only (--cacert): it succeeds only if the daemon minted it
        let handshakes = "imagecached_tls_handshakes_total{listener=\"intercept\",resumed=\"false\"}"
        let before = Self.sample(try await setup.proxy.get("/_imagecached/metrics").text, handshakes)
        let first = try await setup.curl("/a.png")
        let second = try await setup.curl("/a.png")
        #expect(first.exit == 0, "\(first.head)")
        #expect(first.body == Self.png && second.body == Self.png)
        #expect(Self.xCache(first.head) == ["MISS"] && Self.xCache(second.head) == ["HIT"])
        // /fetch for the same https URL is a hit in the proxy; and the other order
        let encoded = { (path: String) in "/fetch?url=" + "https://\(setup.originAuthority)\(path)".addingPercentEncoding(withAllowedCharacters: .alphanumerics)! }
        let viaFetch = try await setup.proxy.get(encoded("/a.png"))
        #expect(viaFetch.header("X-Cache") == "HIT")
        let fetchedFirst = try await setup.proxy.get(encoded("/b.png"))
        #expect(fetchedFirst.header("X-Cache") == "MISS")
        let interceptedAfter = try await setup.curl("/b.png")
        #expect(Self.xCache(interceptedAfter.head) == ["HIT"])
        #expect(setup.origin.origin.requestCount("/a.png") == 1 && setup.origin.origin.requestCount("/b.png") == 1)
        // The intercepted handshakes and the tunnels' bytes are counted
        let metrics = try await setup.proxy.get("/_imagecached/metrics").text
        // (at least: the count is process-wide, and other interception tests may run meanwhile)
        #expect(Self.sample(metrics, handshakes) - before >= 3, "\(metrics)")
        let stats = try DaemonStats.decode(Data(try await setup.proxy.get("/_imagecached/stats").body))
        let tunnels = try #require(stats.tunnels)
        #expect(tunnels.bytesDown > 3 * Self.png.count, "the TLS records sent inside the three tunnels")
        // The CA is made at start, with the key private
        let key = try FileManager.default.attributesOfItem(atPath: setup.caDirectory.appendingPathComponent("ca.key").path)
        #expect((key[.posixPermissions] as? NSNumber)?.intValue == 0o600)
    }

    @Test("20 intercepted clients asking for one new image at once cost one upstream fetch")
    func twentyClientsOneFetch() async throws {
        let setup = try Setup()
        let gate = Gate()
        setup.origin.origin.route("/new.png") { _ in InterceptTests.image(gate: gate) }
        setup.proxy.waiters.expect(20)
        let (port, ca, url) = (setup.proxy.port, setup.daemonCA, "https://\(setup.originAuthority)/new.png")
        let runs = (0..<20).map { _ in Task { try await InterceptTests.curl(proxyPort: port, daemonCA: ca, url: url) } }
        #expect(await setup.proxy.waiters.wait(), "20 clients never waited on one fetch")
        gate.open()
        for run in runs {
            let result = try await run.value
            #expect(result.body == Self.png)
        }
        let stats = try DaemonStats.decode(Data(try await setup.proxy.get("/_imagecached/stats").body))
        #expect(stats.upstream.transfers.values.reduce(0, +) == 1, "\(stats.upstream.transfers)")
        #expect(setup.origin.origin.requestCount("/new.png") == 1)
    }

    @Test("an origin whose certificate the proxy does not trust gets 502 inside the tunnel, with curl's reason, never its content")
    func untrustedOrigin() async throws {
        let setup = try Setup(trustOrigin: false)
        setup.origin.origin.route("/a.png") { _ in InterceptTests.image() }
        let run = try await setup.curl("/a.png")
        #expect(run.head.contains("HTTP/1.1 502 "))
        #expect(String(decoding: run.body, as: UTF8.self).contains("TLS failure talking to upstream"))
        #expect(setup.origin.origin.requestCount("/a.png") == 0)
    }

    @Test("inside the tunnel, what is not an image and other methods pass through as the origin sent them")
    func passThrough() async throws {
        let setup = try Setup()
        setup.origin.origin.route("/page.html") { _ in
            Reply(status: 200, headers: [("Content-Type", "text/html")], body: Array("<p>hello</p>".utf8))
        }
        setup.origin.origin.route("/form") { request in
            Reply(status: 201, headers: [("Content-Type", "text/plain")], body: Array("got \(request.body.count) bytes".utf8))
        }
        let page = try await setup.curl("/page.html")
        #expect(page.body == Array("<p>hello</p>".utf8))
        #expect(page.head.contains("detail=not-image"))
        let post = try await setup.curl("/form", method: "POST", data: "field=value")
        #expect(post.head.contains("HTTP/1.1 201 "))
        #expect(String(decoding: post.body, as: UTF8.self) == "got 11 bytes")
    }

    @Test("Python's urllib with HTTPS_PROXY and SSL_CERT_FILE gets an image (cached) and a page through the proxy")
    func pythonUrllib() async throws {
        let setup = try Setup()
        setup.origin.origin.route("/a.png") { _ in InterceptTests.image() }
        setup.origin.origin.route("/page.html") { _ in
            Reply(status: 200, headers: [("Content-Type", "text/html")], body: Array("<p>hi</p>".utf8))
        }
        let script = """
        import urllib.request
        for path in ['/a.png', '/a.png', '/page.html']:
            r = urllib.request.urlopen('https://\(setup.originAuthority)' + path, timeout=20)
            body = r.read()
            print(r.status, r.headers['X-Cache'], len(body))
        """
        let run = try await Self.run("/usr/bin/python3", ["-c", script],
                                     environment: ["HTTPS_PROXY": "http://127.0.0.1:\(setup.proxy.port)", "SSL_CERT_FILE": setup.daemonCA])
        let lines = String(decoding: run.body, as: UTF8.self).split(separator: "\n").map(String.init)
        #expect(run.exit == 0, "\(run.head)")
        #expect(lines == ["200 MISS \(Self.png.count)", "200 HIT \(Self.png.count)", "200 BYPASS 9"], "\(lines)")
    }

    @Test("a host not in intercept-hosts gets a blind tunnel: the origin's own certificate reaches the client, nothing is cached")
    func blindHTTPS() async throws {
        let setup = try Setup { $0.interceptHosts = .none }
        setup.origin.origin.route("/a.png") { _ in InterceptTests.image() }
        let url = "https://\(setup.originAuthority)/a.png"
        // curl trusts the origin's CA only: it succeeds only if the origin's own certificate came through the tunnel
        let first = try await Self.run("/usr/bin/curl", ["-s", "-x", "http://127.0.0.1:\(setup.proxy.port)", "--cacert",
                                                         setup.originCA.certificateFile.path, "-D", "/dev/stderr", url], environment: [:])
        let second = try await Self.run("/usr/bin/curl", ["-s", "-x", "http://127.0.0.1:\(setup.proxy.port)", "--cacert",
                                                          setup.originCA.certificateFile.path, "-D", "/dev/stderr", url], environment: [:])
        #expect(first.exit == 0 && first.body == Self.png && second.body == Self.png)
        // The proxy stored nothing and fetched nothing (the origin daemon answered both; it caches them itself)
        #expect(setup.proxy.daemon.proxy.memory.stats.entries == 0)
        let stats = try DaemonStats.decode(Data(try await setup.proxy.get("/_imagecached/stats").body))
        #expect(stats.upstream.transfers.values.reduce(0, +) == 0)
        #expect(stats.tunnels?.connects["tunnel"] == 2)
    }

    @Test("a ClientHello that stops after 5 bytes inside an intercepted tunnel is closed at server.header-timeout")
    func stalledHandshakeInTunnel() async throws {
        let setup = try Setup { $0.server.headerTimeoutSeconds = 1 }
        let port = setup.proxy.port
        let authority = setup.originAuthority
        let timeouts = "imagecached_tls_handshake_failures_total{listener=\"intercept\",reason=\"timeout\"}"
        let before = Self.sample(try await setup.proxy.get("/_imagecached/metrics").text, timeouts)
        let end = try await offPool { () -> (head: String, closed: Bool) in
            let (head, socket) = try openTunnel(daemonPort: port, target: authority, early: [0x16, 0x03, 0x01, 0x02, 0x00])
            return (head, socket.readUntilClose().closed)
        }
        #expect(end.head.hasPrefix("HTTP/1.1 200 "))
        #expect(end.closed)
        let metrics = try await setup.proxy.get("/_imagecached/metrics").text
        #expect(Self.sample(metrics, timeouts) - before == 1, "\(metrics)")
    }

    @Test("a client that sends garbage instead of a ClientHello inside the tunnel is closed")
    func garbageHello() async throws {
        let setup = try Setup()
        let port = setup.proxy.port
        let authority = setup.originAuthority
        let end = try await offPool { () -> (head: String, closed: Bool) in
            let (head, socket) = try openTunnel(daemonPort: port, target: authority, early: [0x00, 0x01, 0x02, 0x03, 0x04, 0x05])
            return (head, socket.readUntilClose().closed)
        }
        #expect(end.head.hasPrefix("HTTP/1.1 200 "))
        #expect(end.closed)
    }
}
