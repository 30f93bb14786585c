// The TLS listener end to end (issue 29): the real daemon with tls-listen on port 0, certificates made for the test
// with the openssl tool (TestPKI), real clients (curl, and TLSTestClient on ImageCacheTLS where one connection must
// outlive a reload or a session be resumed).

import Foundation
import Testing
import ImageCacheStatus
import ImageCacheTLS
@testable import ImageCacheConfig
import ImageCacheServer
@testable import ImageCacheCore
@testable import ImageCacheOps
import ImageCacheStore
import Logging
import ImageCacheTestSupport

@Suite("The TLS listener", .timeLimit(.minutes(2)))
struct TLSListenerTests {
    static let png = Fixtures.png(size: 20_000)

    /// A CA and two leaves for localhost and 127.0.0.1 ("first" and "second", to tell a reload's certificate).
    struct Certificates {
        let ca: TestPKI.Credential
        let first: TestPKI.Credential
        let second: TestPKI.Credential

        init() throws {
            let directory = try TestPKI.makeDirectory()
            ca = try TestPKI.makeCA(named: "listener-ca", commonName: "listener test CA", permittedDNS: nil, in: directory)
            first = try TestPKI.issueLeaf(named: "first", dnsNames: ["localhost"], ipAddresses: ["127.0.0.1"], by: ca, in: directory)
            second = try TestPKI.issueLeaf(named: "second", dnsNames: ["localhost", "second.localhost"], ipAddresses: ["127.0.0.1"], by: ca, in: directory)
        }
    }

    static func harness(_ certificates: Certificates, _ configure: (inout Configuration) -> Void = { _ in }) throws -> ProxyHarness {
        let harness = try ProxyHarness { configuration in
            configuration.tlsListen = ListenAddress(host: "127.0.0.1", port: 0)
            configuration.tlsCertificateFile = certificates.first.certificateFile.path
            configuration.tlsKeyFile = certificates.first.keyFile.path
            configure(&configuration)
        }
        harness.origin.route("/a.png") { _ in
            Reply(status: 200, headers: [("Content-Type", "image/png"), ("Cache-Control", "max-age=600")], body: TLSListenerTests.png)
        }
        return harness
    }

    /// curl over https to the TLS listener, trusting the test CA: body, the head as written by -D, the exit status.
    static func curl(_ harness: ProxyHarness, _ certificates: Certificates, paths: [String]) async throws -> (body: [UInt8], stderr: String, exit: Int32) {
        let port = harness.daemon.tlsPort
        let ca = certificates.ca.certificateFile.path
        return try await offPool {
            let result = try Subprocess.run("/usr/bin/curl", ["-s", "--noproxy", "*", "--cacert", ca, "-D", "/dev/stderr", "--max-time", "20"]
                                                + paths.map { "https://localhost:\(port)\($0)" })
            return (result.output, result.errorText, result.exitCode)
        }
    }

    static func tlsStats(_ harness: ProxyHarness) async throws -> DaemonStats.TLS {
        let response = try await harness.get("/_imagecached/stats")
        return try #require(try DaemonStats.decode(Data(response.body)).tls)
    }

    @Test("fetch and reverse modes over https: a miss then a hit with the origin's bytes, and several requests on one connection")
    func missThenHit() async throws {
        let certificates = try Certificates()
        let harness = try Self.harness(certificates)
        let fetch = "/fetch?url=" + (harness.origin.baseURL + "/a.png").addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        // curl sends all of these on one kept connection
        let run = try await Self.curl(harness, certificates, paths: [fetch, fetch, "/a.png", "/a.png"])
        #expect(run.exit == 0)
        #expect(run.body == Self.png + Self.png + Self.png + Self.png)
        let xCache = run.stderr.split(separator: "\r\n").filter { $0.hasPrefix("X-Cache:") }.map { String($0.dropFirst(9)) }
        #expect(xCache == ["MISS", "HIT", "HIT", "HIT"], "the reverse path shares the fetch's entry: \(xCache)")
        #expect(harness.origin.requestCount("/a.png") == 1)
        let stats = try await Self.tlsStats(harness)
        #expect(stats.fullHandshakes == 1, "four requests, one connection, one handshake")
        #expect(stats.certificateSubject.contains("localhost"))
    }

    @Test("a disk hit over TLS (the body read from the file, not sent with sendfile) arrives whole")
    func diskHit() async throws {
        let certificates = try Certificates()
        let harness = try Self.harness(certificates) { configuration in
            configuration.memoryObjectLimitBytes = 1_000   // the image lives on disk only
        }
        // Over 256 KiB: a disk hit sends it from the file (FileBody), which under TLS is read through a scratch buffer
        let big = Fixtures.png(size: 600_000)
        harness.origin.route("/big.png") { _ in
            Reply(status: 200, headers: [("Content-Type", "image/png"), ("Cache-Control", "max-age=600")], body: big)
        }
        _ = try await Self.curl(harness, certificates, paths: ["/big.png"])
        await harness.flushDisk()
        let run = try await Self.curl(harness, certificates, paths: ["/big.png", "/big.png"])
        #expect(run.body == big + big)
        #expect(run.stderr.components(separatedBy: "X-Cache: HIT").count == 3)
        #expect(harness.origin.requestCount("/big.png") == 1)
    }

    @Test("plain HTTP to the TLS port gets a plain-text 400 and a close; other bytes a close; both counted as not TLS")
    func notTLS() async throws {
        let certificates = try Certificates()
        let harness = try Self.harness(certificates)
        let port = harness.daemon.tlsPort
        let (plain, garbage) = try await offPool { () -> (String, (bytes: [UInt8], closed: Bool)) in
            let plain = PeerSocket(fd: try connectLoopback(port: port, timeoutSeconds: 10))
            plain.send("GET /a.png HTTP/1.1\r\nHost: localhost\r\n\r\n")
            let answer = String(decoding: plain.readUntilClose().bytes, as: UTF8.self)
            let other = PeerSocket(fd: try connectLoopback(port: port, timeoutSeconds: 10))
            other.send([0x00, 0x01, 0x02, 0x03, 0xff, 0xfe])
            return (answer, other.readUntilClose())
        }
        #expect(plain.hasPrefix("HTTP/1.1 400 "))
        #expect(plain.contains("plain HTTP sent to the TLS port"))
        #expect(garbage.closed && garbage.bytes.isEmpty)
        #expect(try await Self.tlsStats(harness).failures["not_tls"] == 2)
        #expect(harness.origin.requestCount("/a.png") == 0)
    }

    @Test("a ClientHello that stops after 5 bytes is closed at server.header-timeout, counted as a timeout")
    func stalledHandshake() async throws {
        let certificates = try Certificates()
        let harness = try Self.harness(certificates) { $0.server.headerTimeoutSeconds = 1 }
        let port = harness.daemon.tlsPort
        let end = try await offPool { () -> (bytes: [UInt8], closed: Bool) in
            let client = PeerSocket(fd: try connectLoopback(port: port, timeoutSeconds: 10))
            client.send([0x16, 0x03, 0x01, 0x02, 0x00])
            return client.readUntilClose()
        }
        #expect(end.closed)
        #expect(try await Self.tlsStats(harness).failures["timeout"] == 1)
    }

    @Test("a session ticket resumes the next connection, counted as resumed")
    func resumption() async throws {
        let certificates = try Certificates()
        let harness = try Self.harness(certificates)
        let port = harness.daemon.tlsPort
        let anchor = certificates.ca.certificatePEM
        let resumed = try await offPool { () -> Bool in
            let first = try TLSTestClient(port: port, anchorPEM: anchor)
            try first.send("GET /a.png HTTP/1.1\r\nHost: localhost\r\n\r\n")
            _ = try first.readResponse()
            let session = try first.close()
            let second = try TLSTestClient(port: port, anchorPEM: anchor, session: session)
            try second.send("GET /a.png HTTP/1.1\r\nHost: localhost\r\n\r\n")
            let response = try second.readResponse()
            #expect(response.body == TLSListenerTests.png)
            return second.stream.isResumed
        }
        #expect(resumed)
        let stats = try await Self.tlsStats(harness)
        #expect(stats.resumedHandshakes == 1)
        #expect(stats.fullHandshakes == 1)
        // Fresh ticket keys (the 12-hourly rotation): a ticket from before no longer resumes
        let daemon = harness.daemon
        let afterRotation = try await offPool { () -> Bool in
            let first = try TLSTestClient(port: port, anchorPEM: anchor)
            try first.send("GET /a.png HTTP/1.1\r\nHost: localhost\r\n\r\n")
            _ = try first.readResponse()
            let session = try first.close()
            daemon.rotateTicketKeys()
            let second = try TLSTestClient(port: port, anchorPEM: anchor, session: session)
            try second.send("GET /a.png HTTP/1.1\r\nHost: localhost\r\n\r\n")
            _ = try second.readResponse()
            return second.stream.isResumed
        }
        #expect(!afterRotation)
    }

    @Test("SIGHUP's reload puts a new certificate in force for new connections; an open connection goes on with its own; a key that does not load refuses the reload")
    func reload() async throws {
        let certificates = try Certificates()
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("imagecached-tls-\(UUID().uuidString).yaml")
        defer { try? FileManager.default.removeItem(at: file) }
        let harness = try Self.harness(certificates)
        harness.daemon.reloadSource = { try Configuration.load(file: file.path, environment: [:], flags: []) }
        let port = harness.daemon.tlsPort
        let anchor = certificates.ca.certificatePEM
        let open = try await offPool { try TLSTestClient(port: port, anchorPEM: anchor) }
        let before = try await Self.tlsStats(harness).certificateFingerprint
        // When the configuration names the second leaf
        let base = "listen: 127.0.0.1:\(harness.port)\ntls-listen: 127.0.0.1:0\nallow-private-networks: true\norigin: \(harness.origin.baseURL)\n"
        try (base + "tls-cert: \(certificates.second.certificateFile.path)\ntls-key: \(certificates.second.keyFile.path)\n")
            .write(to: file, atomically: true, encoding: .utf8)
        #expect(harness.daemon.reload() == nil)
        // Then a new connection gets it (it names second.localhost, which the first did not)
        let fresh = try await offPool { try TLSTestClient(port: port, anchorPEM: anchor, serverName: "second.localhost") }
        _ = fresh
        let after = try await Self.tlsStats(harness).certificateFingerprint
        #expect(after != before)
        #expect(after == (try TestPKI.fingerprintSHA256(of: certificates.second.certificateFile)))
        // And the connection opened before goes on
        let response = try await offPool { () -> (head: String, body: [UInt8]) in
            try open.send("GET /a.png HTTP/1.1\r\nHost: localhost\r\n\r\n")
            return try open.readResponse()
        }
        #expect(response.head.hasPrefix("HTTP/1.1 200 "))
        #expect(response.body == Self.png)
        // When the key does not match the certificate, the reload is refused and the second certificate stays
        try (base + "tls-cert: \(certificates.first.certificateFile.path)\ntls-key: \(certificates.second.keyFile.path)\n")
            .write(to: file, atomically: true, encoding: .utf8)
        let refused = harness.daemon.reload()
        #expect(refused != nil)
        #expect("\(refused.map { "\($0)" } ?? "")".contains("tls-cert"))
        #expect(try await Self.tlsStats(harness).certificateFingerprint == after)
    }

    @Test("tls-listen without tls-cert and tls-key does not start")
    func needsFiles() throws {
        var configuration = Configuration()
        configuration.listen = ListenAddress(host: "127.0.0.1", port: 0)
        configuration.tlsListen = ListenAddress(host: "127.0.0.1", port: 0)
        #expect(throws: ConfigError.self) { try Daemon(configuration: configuration, logger: .init(label: "test")) }
    }
}
