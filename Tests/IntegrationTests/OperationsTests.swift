// Operations, in process: metrics and stats against a scripted sequence, the admin allowlist, prefetch through
// the normal path, reload, and the graceful drain. (The binary's own contract: DaemonProcessTests.)

import Foundation
import Synchronization
import Testing
@testable import ImageCacheConfig
import ImageCacheHTTP
import ImageCacheServer
@testable import ImageCacheStore
@testable import ImageCacheStatus
@testable import ImageCacheCore
@testable import ImageCacheOps
import ImageCacheTestSupport
import ImageCacheSystem

@Suite("Operations: metrics, admin endpoints, prefetch, reload, drain", .timeLimit(.minutes(2)))
struct OperationsTests {
    static let png = Fixtures.png(size: 20_000)

    static func image(gate: Gate? = nil) -> Reply {
        Reply(status: 200, headers: [("Content-Type", "image/png"), ("Cache-Control", "max-age=600")], body: png, gate: gate)
    }

    static func stats(_ harness: ProxyHarness) async throws -> DaemonStats {
        let response = try await harness.get("/_imagecached/stats")
        #expect(response.status == 200)
        return try DaemonStats.decode(Data(response.body))
    }

    @Test("only-if-cached is answered 504 and counted once as an error, wherever the lookup ends: nothing stored, stale in memory, stale on disk, a fetch in flight, credentials")
    func onlyIfCachedCounted() async throws {
        // Given the disk tier on, one image stored and then stale, one held by the origin while a client waits on it
        let harness = try ProxyHarness()
        harness.origin.route("/s.png") { _ in
            Reply(status: 200, headers: [("Content-Type", "image/png"), ("Cache-Control", "max-age=5"), ("ETag", "\"s1\"")],
                  body: OperationsTests.png)
        }
        let gate = Gate()
        harness.origin.route("/held.png") { _ in OperationsTests.image(gate: gate) }
        _ = try await harness.get("/s.png")
        await harness.flushDisk()
        harness.clock.advance(60)
        harness.waiters.expect(1)
        let leader = try harness.connect()
        try leader.request("/held.png")
        #expect(await harness.waiters.wait(), "the leader never waited on its fetch")
        let offline = [("Cache-Control", "only-if-cached")]
        // When only-if-cached requests meet each case
        let absent = try await harness.get("/n.png", headers: offline)
        let staleInMemory = try await harness.get("/s.png", headers: offline)
        harness.daemon.proxy.memory.removeAll()
        let staleOnDisk = try await harness.get("/s.png", headers: offline)
        let inFlight = try await harness.get("/held.png", headers: offline)
        let credentials = try await harness.get("/s.png", headers: offline + [("Authorization", "Bearer x")])
        gate.open()
        let led = try await leader.response()
        let stats = try await OperationsTests.stats(harness)
        // Then each is a 504 with its reason, the origin saw none of them, and each counts once
        let refused = [absent, staleInMemory, staleOnDisk, inFlight, credentials]
        #expect(refused.map(\.status) == [504, 504, 504, 504, 504])
        #expect(refused.map { $0.text.contains("only-if-cached") } == [true, true, true, true, true])
        #expect(staleInMemory.text.contains("stale") && staleOnDisk.text.contains("stale"))
        #expect(led.status == 200 && led.body == OperationsTests.png)
        #expect(harness.origin.requestCount("/s.png") == 1 && harness.origin.requestCount("/held.png") == 1)
        #expect(harness.origin.requestCount("/n.png") == 0)
        #expect(stats.requests["error"] == 5)
        #expect(stats.errors["refused_504"] == 5)
    }

    @Test("the metrics endpoint's counters match a scripted sequence of misses, hits and coalesced requests")
    func metricsMatchScript() async throws {
        // Given an origin with one plain image and one held until 4 clients wait on it
        let harness = try ProxyHarness {
            $0.diskLimitBytes = 0
            $0.negativeTTLSeconds = 0   // the 404 is passed on, not stored
        }
        harness.origin.route("/a.png") { _ in OperationsTests.image() }
        let gate = Gate()
        harness.origin.route("/c.png") { _ in OperationsTests.image(gate: gate) }
        // When: a miss and two hits on /a.png ...
        let first = try await harness.get("/a.png")
        let hits = [try await harness.get("/a.png"), try await harness.get("/a.png")]
        // ... four concurrent clients on /c.png (one leader, three coalesced) ...
        let connections = try await harness.waitingClients(4, on: "/c.png")
        gate.open()
        let coalesced = try await readAll(connections)
        // ... and a 404 from the origin
        let missing = try await harness.get("/missing.png")
        let stats = try await OperationsTests.stats(harness)
        let metrics = try await harness.get("/_imagecached/metrics")
        // Then
        #expect(first.header("X-Cache") == "MISS")
        #expect(hits.allSatisfy { $0.header("X-Cache") == "HIT" })
        #expect(coalesced.filter { $0.header("X-Cache") == "COALESCED" }.count == 3)
        #expect(missing.status == 404)
        // The origin's 404 passes through (reverse mode) as a miss: the daemon's own error answers are "error"
        #expect(stats.requests["miss"] == 3)
        #expect(stats.requests["hit"] == 2)
        #expect(stats.requests["coalesced"] == 3)
        #expect(stats.requests["error"] == 0)
        #expect(stats.servedBytes["hit"] == 2 * OperationsTests.png.count)
        #expect(stats.servedBytes["miss"] == 2 * OperationsTests.png.count + missing.body.count)
        #expect(stats.servedBytes["coalesced"] == 3 * OperationsTests.png.count)
        #expect(stats.upstream.transfers["ok"] == 3)  // /a.png, /c.png and the 404's transfer, which ended normally
        #expect(stats.upstream.bytes >= 2 * OperationsTests.png.count)
        #expect(stats.upstream.count == 3)
        #expect(stats.coalescing.fetches == 3)
        #expect(stats.coalescing.waiters == 1 + 4 + 1)
        #expect(stats.errors["upstream_status_4xx"] == 1)
        #expect(stats.memory.entries == 2)
        #expect(stats.memory.bytes >= 2 * OperationsTests.png.count)
        #expect(stats.topHosts.first?.host == "127.0.0.1")
        #expect(stats.topHosts.first?.transfers == 3)
        #expect(abs(stats.hitRatio - 2.0 / 8.0) < 0.0001)
        let text = metrics.text
        #expect(metrics.header("Content-Type")?.hasPrefix("text/plain; version=0.0.4") == true)
        for line in ["imagecached_requests_total{outcome=\"hit\"} 2", "imagecached_requests_total{outcome=\"miss\"} 3",
                     "imagecached_requests_total{outcome=\"coalesced\"} 3", "imagecached_requests_total{outcome=\"error\"} 0",
                     "imagecached_served_bytes_total{outcome=\"hit\"} \(2 * OperationsTests.png.count)",
                     "imagecached_upstream_transfers_total{result=\"ok\"} 3", "imagecached_upstream_duration_seconds_count 3",
                     "imagecached_fetch_waiters_bucket{le=\"1\"} 2", "imagecached_fetch_waiters_bucket{le=\"5\"} 3",
                     "imagecached_fetch_waiters_bucket{le=\"+Inf\"} 3", "imagecached_fetch_waiters_sum 6",
                     "imagecached_memory_entries 2", "imagecached_errors_total{kind=\"upstream_status_4xx\"} 1"] {
            #expect(text.contains(line + "\n"), "missing: \(line)")
        }
    }

    @Test("admin endpoints refuse a client outside admin-allow with 403 and answer one inside")
    func adminAllow() async throws {
        // Given admin-allow limited to 127.0.0.1/32
        let harness = try ProxyHarness { $0.adminAllow = [AddressRange("127.0.0.1/32")!] }
        let port = harness.port
        // When: the same request from 127.0.0.2 and from 127.0.0.1
        let outside = try await offPool { try RawRequest.send("GET /_imagecached/stats HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", port: port, from: "127.0.0.2") }
        let inside = try await offPool { try RawRequest.send("GET /_imagecached/stats HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", port: port, from: "127.0.0.1") }
        let health = try await offPool { try RawRequest.send("GET /_imagecached/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", port: port, from: "127.0.0.2") }
        // Then
        #expect(outside.hasPrefix("HTTP/1.1 403"), "\(outside)")
        #expect(outside.contains("127.0.0.2 is not"))
        #expect(health.hasPrefix("HTTP/1.1 403"))
        #expect(inside.hasPrefix("HTTP/1.1 200"), "\(inside)")
    }

    @Test("prefetch of N URLs makes N origin requests, then none on a second run")
    func prefetchWarms() async throws {
        // Given 5 images and one missing URL
        let harness = try ProxyHarness { $0.diskLimitBytes = 0 }
        let paths = (0..<5).map { "/p\($0).png" }
        for path in paths { harness.origin.route(path) { _ in OperationsTests.image() } }
        let urls = paths.map { harness.origin.baseURL + $0 }
        let address = ListenAddress(host: "127.0.0.1", port: harness.port)
        // When
        let body = Array((urls.joined(separator: "\n") + "\n# a comment\n\n" + harness.origin.baseURL + "/nope.png\n").utf8)
        let first = try await offPool { try AdminClient.send("POST", "/_imagecached/prefetch", to: address, body: body) }
        let counts = paths.map { harness.origin.requestCount($0) }
        let second = try await offPool { try AdminClient.send("POST", "/_imagecached/prefetch", to: address, body: Array(urls.joined(separator: "\n").utf8)) }
        // Then
        #expect(first.status == 200)
        #expect(counts == [1, 1, 1, 1, 1])
        #expect(first.body.contains("failed 404 \(harness.origin.baseURL)/nope.png"))
        #expect(first.body.hasSuffix("done 6 ok 5 failed 1 bytes \(5 * OperationsTests.png.count)\n"), "\(first.body)")
        #expect(second.body.hasSuffix("done 5 ok 5 failed 0 bytes \(5 * OperationsTests.png.count)\n"))
        #expect(second.body.components(separatedBy: " HIT ").count - 1 == 5)
        #expect(paths.map { harness.origin.requestCount($0) } == [1, 1, 1, 1, 1])
        let served = try await harness.get(paths[0])
        #expect(served.header("X-Cache") == "HIT")
    }

    @Test("a reload applies a new memory limit at once and a broken file changes nothing")
    func reload() async throws {
        // Given a daemon whose reload source is a file
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("imagecached-reload-\(UUID().uuidString).yaml")
        defer { try? FileManager.default.removeItem(at: file) }
        let capture = LogCapture()
        let harness = try ProxyHarness(logCapture: capture) { $0.memoryLimitBytes = 1 << 20; $0.diskLimitBytes = 0 }
        let listen = "127.0.0.1:\(harness.port)"
        harness.daemon.reloadSource = { try Configuration.load(file: file.path, environment: [:], flags: []) }
        for index in 0..<4 { harness.origin.route("/r\(index).png") { _ in OperationsTests.image() } }
        for index in 0..<4 { _ = try await harness.get("/r\(index).png") }
        #expect(harness.daemon.proxy.memory.count == 4)
        // When: the file lowers the memory limit to 50 KB (room for two images)
        try "listen: \(listen)\nmemory-limit: 50000\nmemory-object-limit: 25000\ndisk-limit: 0\nallow-private-networks: true\norigin: \(harness.origin.baseURL)\n"
            .write(to: file, atomically: true, encoding: .utf8)
        let applied = harness.daemon.reload()
        // Then
        #expect(applied == nil)
        #expect(harness.daemon.proxy.memory.limitBytes == 50_000)
        #expect(harness.daemon.proxy.memory.count == 2)
        #expect(harness.daemon.proxy.configuration.memoryLimitBytes == 50_000)
        // When: the file is broken
        try "memory-limit: lots\n".write(to: file, atomically: true, encoding: .utf8)
        let refused = harness.daemon.reload()
        // Then the old configuration stays in force and the log says why
        #expect(refused != nil)
        #expect(harness.daemon.proxy.memory.limitBytes == 50_000)
        #expect(capture.messages.contains { $0.contains("reload refused") && $0.contains("'lots' is not a size") })
        // And a key that needs a restart is reported, not applied
        try "listen: 127.0.0.1:1\nmemory-limit: 60000\nmemory-object-limit: 25000\n".write(to: file, atomically: true, encoding: .utf8)
        #expect(harness.daemon.reload() == nil)
        #expect(harness.daemon.proxy.configuration.listen.port == 0)
        #expect(harness.daemon.proxy.memory.limitBytes == 60_000)
        #expect(capture.messages.contains { $0.contains("listen: 127.0.0.1:0 -> 127.0.0.1:1 needs a restart") })
        let stats = try await OperationsTests.stats(harness)
        #expect(stats.reloads == 2)
        #expect(stats.reloadFailures == 1)
    }

    @Test("a graceful shutdown lets a slow response finish, closes idle connections and stops accepting")
    func drain() async throws {
        // Given a response held by the origin after its first bytes, and an idle keep-alive connection
        let harness = try ProxyHarness { $0.diskLimitBytes = 0 }
        let gate = Gate()
        harness.origin.route("/slow.png") { _ in
            var reply = OperationsTests.image(gate: gate)
            reply.gateAfterBytes = 4096
            return reply
        }
        harness.origin.route("/fast.png") { _ in OperationsTests.image() }
        let idle = try harness.connect()
        try idle.request("/fast.png")
        _ = try await idle.response()
        let slow = try harness.connect()
        try slow.request("/slow.png")
        try await harness.origin.waitForRequests("/slow.png", count: 1)
        // When: shutdown starts (on its own thread) while the body is held
        let daemon = harness.daemon
        let done = DispatchSemaphore(value: 0)
        let cutOff = Locked(-1)
        Thread {
            cutOff.withLock { $0 = daemon.shutdown(timeout: 20) }
            done.signal()
        }.start()
        // Then the idle connection is closed and new clients are refused while the slow one is still served
        let idleClosed = try await offPool { idle.peerClosed() }
        let port = harness.port
        let refused = await (try? offPool { try TestClient.get(port: port, "/fast.png") }) == nil
        gate.open()
        let response = try await slow.response()
        #expect(await wait(done))
        #expect(idleClosed)
        #expect(refused)
        #expect(response.status == 200)
        #expect(response.complete)
        expectSameBytes(response.body, OperationsTests.png)
        #expect(cutOff.withLock { $0 } == 0)
    }
}

/// A raw HTTP exchange from a chosen local address, read until the server closes.
enum RawRequest {
    static func send(_ text: String, port: Int, from source: String) throws -> String {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.EIO) }
        defer { close(fd) }
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var local = sockaddr_in()
        local.sin_family = sa_family_t(AF_INET)
        inet_pton(AF_INET, source, &local.sin_addr)
        var remote = sockaddr_in()
        remote.sin_family = sa_family_t(AF_INET)
        remote.sin_port = in_port_t(UInt16(port).bigEndian)
        inet_pton(AF_INET, "127.0.0.1", &remote.sin_addr)
        let bound = withUnsafePointer(to: &local) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard bound == 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        let connected = withUnsafePointer(to: &remote) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard connected == 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        let bytes = Array(text.utf8)
        _ = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16_384)
        while true {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { break }
            received.append(contentsOf: buffer[0..<n])
        }
        return String(decoding: received, as: UTF8.self)
    }
}
