// The disk tier end to end: restarts, offline serving, corruption, bounds, faults and purge, with the real daemon.


import Foundation
import Synchronization
import Testing
import ImageCacheStatus
@testable import ImageCacheConfig
@testable import ImageCacheStore
@testable import ImageCacheCore
@testable import ImageCacheOps
import ImageCacheSystem

@Suite("Disk tier end to end", .timeLimit(.minutes(2)))
struct DiskTierTests {
    static let small = Fixtures.png(size: 30_000)
    static let large = Fixtures.jpeg(size: 1_500_000)  // over the 256 KiB whole-read limit: sent from its file

    /// An origin serving `small` at /s.png and `large` at /l.jpg, max-age 60 with an ETag.
    static func routes(_ origin: TestOrigin) {
        origin.route("/s.png") { _ in CachingTests.image(DiskTierTests.small) }
        origin.route("/l.jpg") { _ in
            Reply(status: 200, headers: [("Content-Type", "image/jpeg"), ("Cache-Control", "max-age=60"), ("ETag", "\"L1\"")],
                  body: DiskTierTests.large)
        }
    }

    /// A daemon restarted on a disk tier that holds the large image (memory empty, the origin stopped): every answer
    /// for /l.jpg comes from its file.
    static func largeOnDiskOnly() async throws -> ProxyHarness {
        let harness = try ProxyHarness(DiskTierTests.settings)
        DiskTierTests.routes(harness.origin)
        _ = try await harness.get("/l.jpg")
        await harness.flushDisk()
        harness.origin.stop()
        try harness.restart()
        return harness
    }

    /// The daemon's settings for these tests: a memory tier small enough that the large image streams from its file.
    static func settings(_ configuration: inout Configuration) {
        configuration.memoryLimitBytes = 4 << 20
        configuration.memoryObjectLimitBytes = 256 << 10
    }

    @Test("after a restart, with the origin stopped, stored images are served from disk with their exact bytes")
    func restartOffline() async throws {
        let harness = try ProxyHarness(DiskTierTests.settings)
        DiskTierTests.routes(harness.origin)
        _ = try await harness.get("/s.png")
        _ = try await harness.get("/l.jpg")
        await harness.flushDisk()
        // When: restart with the origin gone
        harness.origin.stop()
        try harness.restart()
        let small = try await harness.get("/s.png")
        let large = try await harness.get("/l.jpg")
        // Then
        #expect(small.status == 200 && small.body == DiskTierTests.small)
        #expect(small.header("Cache-Status")?.contains("hit") == true)
        #expect(small.header("Cache-Status")?.contains("detail=disk") == true)
        #expect(large.status == 200 && large.complete && large.body == DiskTierTests.large)
        #expect(large.header("X-Cache") == "HIT")
        // The small one was promoted into memory: the next hit does not say disk.
        #expect(try await harness.get("/s.png").header("Cache-Status")?.contains("detail=disk") == false)
    }

    @Test("after a restart, 40 clients at once get a fresh disk entry from the file, and a stale one is revalidated once for all")
    func concurrentDiskHits() async throws {
        let harness = try ProxyHarness(DiskTierTests.settings)
        let gate = Gate()
        harness.origin.route("/s.png") { request in
            if request.header("If-None-Match") == "\"v1\"" {
                gate.wait()  // a 304 has no body to hold back: hold the whole answer
                return Reply(status: 304, headers: [("ETag", "\"v1\""), ("Cache-Control", "max-age=60")], body: [])
            }
            return CachingTests.image(DiskTierTests.small)
        }
        harness.origin.route("/fresh.png") { _ in CachingTests.image(DiskTierTests.small, cacheControl: "max-age=86400") }
        _ = try await harness.get("/s.png")
        _ = try await harness.get("/fresh.png")
        await harness.flushDisk()
        harness.clock.advance(120)  // /s.png is stale now, /fresh.png is not
        try harness.restart()
        // When 40 clients ask for each at once (the stale one's revalidation held until all of them wait on it)
        harness.waiters.expect(40)
        var fresh: [TestConnection] = []
        var stale: [TestConnection] = []
        for _ in 0..<40 {
            let a = try harness.connect()
            try a.request("/fresh.png")
            fresh.append(a)
            let b = try harness.connect()
            try b.request("/s.png")
            stale.append(b)
        }
        let freshResponses = try await readAll(fresh)
        #expect(await harness.waiters.wait(), "the 40 clients of the stale entry never waited on one revalidation")
        gate.open()
        let staleResponses = try await readAll(stale)
        // Then: exact bytes for all; the fresh entry never reached the origin again; one revalidation for the stale one
        #expect(freshResponses.allSatisfy { $0.status == 200 && $0.body == DiskTierTests.small })
        #expect(freshResponses.allSatisfy { $0.header("X-Cache") == "HIT" })
        #expect(freshResponses.contains { $0.header("Cache-Status")?.contains("detail=disk") == true })
        #expect(harness.origin.requestCount("/fresh.png") == 1)
        #expect(staleResponses.allSatisfy { $0.status == 200 && $0.body == DiskTierTests.small })
        #expect(staleResponses.allSatisfy { ["REVALIDATED", "COALESCED"].contains($0.header("X-Cache") ?? "") }, "\(staleResponses.map { ($0.header("X-Cache") ?? "-") + " " + ($0.header("Cache-Status") ?? "-") })")
        #expect(harness.origin.requestCount("/s.png") == 2)
        // The one that revalidated says why it went to the origin (RFC 9211): stored, but too stale to use
        #expect(staleResponses.contains { $0.header("Cache-Status")?.contains("fwd=stale; fwd-status=304") == true })
    }

    @Test("a disk entry too large for memory is sent from its file: 10 clients at once, HEAD, and a conditional request")
    func largeFromFile() async throws {
        let harness = try await DiskTierTests.largeOnDiskOnly()
        // When 10 clients ask at once, and then a HEAD and a conditional GET
        var connections: [TestConnection] = []
        for _ in 0..<10 {
            let connection = try harness.connect()
            try connection.request("/l.jpg")
            connections.append(connection)
        }
        let responses = try await readAll(connections)
        let head = try await harness.get("/l.jpg", method: "HEAD")
        let conditional = try await harness.get("/l.jpg", headers: [("If-None-Match", "\"L1\"")])
        // Then every client has the exact bytes from the disk tier
        #expect(responses.allSatisfy { $0.status == 200 && $0.complete && $0.body == DiskTierTests.large })
        #expect(responses.allSatisfy { $0.header("Cache-Status")?.contains("detail=disk") == true },
                "\(responses.map { $0.header("Cache-Status") ?? "-" })")
        #expect(head.status == 200 && head.body.isEmpty && head.header("Content-Length") == String(DiskTierTests.large.count))
        #expect(conditional.status == 304 && conditional.body.isEmpty && conditional.header("ETag") == "\"L1\"")
        // And the metrics counted the bytes sent from the file (the daemon was restarted: only these requests)
        let proxy = harness.daemon.proxy
        let served = proxy.metrics.snapshot(memory: proxy.memory.stats, disk: nil, fetchesInFlight: 0).servedBytes["disk_hit"] ?? 0
        #expect(served >= 10 * DiskTierTests.large.count)
    }

    @Test("Range requests on a stored image: a part of a body sent from its file (sendfile at the offset), a suffix, several ranges whole, 416 past the end")
    func rangesFromFile() async throws {
        let harness = try await DiskTierTests.largeOnDiskOnly()
        let count = DiskTierTests.large.count
        // When: the middle of the large image, its last 1000 bytes, two ranges, and a range past the end
        let middle = try await harness.get("/l.jpg", headers: [("Range", "bytes=700000-700999")])
        let suffix = try await harness.get("/l.jpg", headers: [("Range", "bytes=-1000")])
        let several = try await harness.get("/l.jpg", headers: [("Range", "bytes=0-9,20-29")])
        let past = try await harness.get("/l.jpg", headers: [("Range", "bytes=\(count)-")])
        // Then
        #expect(middle.status == 206 && middle.complete && middle.body == Array(DiskTierTests.large[700000...700999]))
        #expect(middle.header("Content-Range") == "bytes 700000-700999/\(count)" && middle.header("Content-Length") == "1000")
        #expect(middle.header("Cache-Status")?.contains("detail=disk") == true)
        #expect(suffix.status == 206 && suffix.body == Array(DiskTierTests.large.suffix(1000)))
        #expect(several.status == 200 && several.body == DiskTierTests.large)
        #expect(past.status == 416 && past.header("Content-Range") == "bytes */\(count)")
    }

    @Test("a client cycling over more images than memory holds still gets memory hits: disk hits do not rotate the memory tier")
    func scanResistantPromotion() async throws {
        // Memory holds 3 of the 8 images (each costs 30,000 bytes plus its head).
        let harness = try ProxyHarness { configuration in
            configuration.memoryLimitBytes = 100_000
            configuration.memoryObjectLimitBytes = 256 << 10
        }
        let images = (0..<8).map { index in Fixtures.png(size: 30_000 + index) }
        for (index, image) in images.enumerated() {
            harness.origin.route("/c\(index).png") { _ in CachingTests.image(image) }
        }
        var memoryHits: [Int] = []
        for round in 0..<5 {
            var hits = 0
            for (index, image) in images.enumerated() {
                let response = try await harness.get("/c\(index).png")
                #expect(response.status == 200 && response.body == image, "round \(round) image \(index)")
                let status = response.header("Cache-Status") ?? ""
                if status.contains("hit") && !status.contains("detail=disk") { hits += 1 }
            }
            memoryHits.append(hits)
            if round == 0 { await harness.flushDisk() }
        }
        // Round 0 fetched everything. Afterwards every miss in memory is a disk hit; with plain LRU promotion each
        // would evict an image needed a moment later, and no request would ever be a memory hit. With admission by
        // frequency, 3 images settle in memory and stay there round after round.
        #expect(memoryHits[0] == 0)
        #expect(memoryHits[3] == 3 && memoryHits[4] == 3, "memory hits per round: \(memoryHits)")
        #expect(harness.origin.allRequests.count == 8)
    }

    /// More than the daemon's socket can hold queued (tcp_wmem's maximum), with 4 MiB to spare for the client's
    /// receive buffer: a client that reads only the head goes while the file is still queued.
    static let huge: [UInt8] = {
        let tcpWmem = try? String(contentsOfFile: "/proc/sys/net/ipv4/tcp_wmem", encoding: .utf8)
        let sendBufferMax = tcpWmem?.split(whereSeparator: \.isWhitespace).last.flatMap { Int($0) } ?? 4 << 20
        return Fixtures.png(size: min(sendBufferMax, 32 << 20) + (4 << 20))
    }()

    @Test("disk hits close every descriptor they open: GET, HEAD, 304, and a client gone after the head of a file body; the one kept open for the file-sent entry goes with a purge")
    func descriptorsClosed() async throws {
        // Given a small entry and one sent from its file, on disk only, and the daemon's descriptors counted once its
        // startup loader (which opens every file) is done
        let harness = try ProxyHarness(DiskTierTests.settings)
        harness.origin.route("/s.png") { _ in CachingTests.image(DiskTierTests.small) }
        harness.origin.route("/h.png") { _ in CachingTests.image(DiskTierTests.huge) }
        _ = try await harness.get("/s.png")
        let first = try await harness.get("/h.png")
        #expect(first.complete && first.body.count == DiskTierTests.huge.count,
                "the first fetch of the large entry: \(first.body.count) of \(DiskTierTests.huge.count) bytes")
        await harness.flushDisk()
        #expect(harness.daemon.proxy.disk?.stats.entries == 2)
        try harness.restart()
        let disk = try #require(harness.daemon.proxy.disk)
        try await offPool { while !disk.stats.indexLoaded { disk.flush() } }
        let baseline = DiskTierTests.descriptors(of: harness)
        // When each is hit from disk (memory emptied first: a small hit may be promoted) in every way
        var responses: [TestResponse] = []
        var gone: [TestResponse] = []
        for path in ["/s.png", "/h.png"] {
            for (method, headers) in [("GET", []), ("HEAD", []), ("GET", [("If-None-Match", "\"v1\"")])] as [(String, [(String, String)])] {
                harness.daemon.proxy.memory.removeAll()
                responses.append(try await harness.get(path, method: method, headers: headers))
            }
            harness.daemon.proxy.memory.removeAll()
            let client = try harness.connect()
            try client.request(path)
            let (status, head) = try await client.head()
            client.close()
            gone.append(TestResponse(status: status, headers: head, body: [], complete: false))
        }
        // Then every answer came from disk
        #expect(responses.map(\.status) == [200, 200, 304, 200, 200, 304])
        #expect(responses[0].body == DiskTierTests.small && responses[3].complete && responses[3].body == DiskTierTests.huge)
        #expect(responses.allSatisfy { $0.header("Cache-Status")?.contains("detail=disk") == true },
                "\(responses.map { $0.header("Cache-Status") ?? "-" })")
        #expect(gone.allSatisfy { $0.status == 200 && $0.header("Cache-Status")?.contains("detail=disk") == true })
        // And once the daemon has seen every client go and the disk's lookups are done, its descriptors are back, but
        // for the one kept open for the entry sent from its file (the next hits use it: HEAD, 304 and the last client;
        // kept only once the file's ctime is a second older than the daemon's clock, which tests inject)
        let listener = harness.daemon.listener
        await noConnections(listener)
        await harness.flushDisk()
        #expect(DiskTierTests.descriptors(of: harness) <= baseline + 1)
        // And a purge closes that one too
        #expect(try await harness.get("/_imagecached/cache", method: "DELETE").status == 200)
        await noConnections(listener)
        #expect(DiskTierTests.descriptors(of: harness) == baseline)
    }

    @Test("a restart with a fetch in flight: the old daemon's transfer ends after its proxy is let go, and nothing crashes")
    func restartWithFetchInFlight() async throws {
        let harness = try ProxyHarness(DiskTierTests.settings)
        let gate = Gate()
        harness.origin.route("/held.png") { _ in
            gate.wait()
            return CachingTests.image(DiskTierTests.small)
        }
        harness.origin.route("/s.png") { _ in CachingTests.image(DiskTierTests.small) }
        var clients: [TestConnection] = []
        for _ in 0..<8 {
            let client = try harness.connect()
            try client.request("/held.png")
            clients.append(client)
        }
        try await harness.origin.waitForRequests("/held.png", count: 1)
        // When the daemon is replaced while the origin holds the response (its transfers are cancelled, then the
        // old proxy is released while the cancellation is still on its way to the fetch). With the fetch's old
        // unowned reference to its proxy this crashed the test process in about 1 run of 5.
        try harness.restart()
        gate.open()
        // Then the new daemon serves (the process is still alive), and the old clients got an answer or a close
        let fresh = try await harness.get("/s.png")
        #expect(fresh.status == 200 && fresh.body == DiskTierTests.small)
        for client in clients { client.close() }
    }

    @Test("stale entries with the origin down: 502 by default, served with max-stale or the stale-if-error policy")
    func staleOffline() async throws {
        let harness = try ProxyHarness(DiskTierTests.settings)
        DiskTierTests.routes(harness.origin)
        _ = try await harness.get("/s.png")
        _ = try await harness.get("/l.jpg")
        await harness.flushDisk()
        harness.origin.stop()
        harness.clock.advance(3600)
        try harness.restart()
        #expect(try await harness.get("/s.png").status == 502)
        let maxStale = try await harness.get("/l.jpg", headers: [("Cache-Control", "max-stale")])
        #expect(maxStale.status == 200 && maxStale.body == DiskTierTests.large)
        #expect(maxStale.header("X-Cache") == "STALE")
        // With the offline policy, stale entries are served when the origin fails.
        try harness.restart { $0.staleIfErrorSeconds = 86_400 }
        let small = try await harness.get("/s.png")
        let large = try await harness.get("/l.jpg")
        #expect(small.status == 200 && small.body == DiskTierTests.small)
        #expect(small.header("Cache-Status")?.contains("detail=stale-if-error") == true)
        #expect(large.status == 200 && large.complete && large.body == DiskTierTests.large)
    }

    @Test("a 304 for a large disk entry refreshes it and the body still streams from the file")
    func revalidateLargeFromDisk() async throws {
        let harness = try ProxyHarness(DiskTierTests.settings)
        harness.origin.route("/l.jpg") { request in
            if request.header("If-None-Match") == "\"L1\"" { return Reply(status: 304, headers: [("ETag", "\"L1\""), ("Cache-Control", "max-age=60")]) }
            return Reply(status: 200, headers: [("Content-Type", "image/jpeg"), ("Cache-Control", "max-age=60"), ("ETag", "\"L1\"")],
                         body: DiskTierTests.large)
        }
        _ = try await harness.get("/l.jpg")
        harness.clock.advance(120)
        let revalidated = try await harness.get("/l.jpg")
        let after = try await harness.get("/l.jpg")
        #expect(revalidated.body == DiskTierTests.large && revalidated.complete)
        #expect(revalidated.header("X-Cache") == "REVALIDATED")
        #expect(after.header("X-Cache") == "HIT")
        #expect(harness.origin.requestCount("/l.jpg") == 2)
    }

    @Test("flipped bytes in a cache file are never served: the entry is fetched again")
    func flippedBytes() async throws {
        let harness = try ProxyHarness(DiskTierTests.settings)
        DiskTierTests.routes(harness.origin)
        _ = try await harness.get("/s.png")
        _ = try await harness.get("/l.jpg")
        await harness.flushDisk()
        for file in try DiskTierTests.entryFiles(in: harness.cacheDirectory) {
            var bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: file)))
            bytes[bytes.count - 100] ^= 0xFF  // a body byte
            try Data(bytes).write(to: URL(fileURLWithPath: file))
        }
        try harness.restart()
        let small = try await harness.get("/s.png")
        let large = try await harness.get("/l.jpg")
        #expect(small.body == DiskTierTests.small && large.body == DiskTierTests.large)
        #expect(small.header("X-Cache") == "MISS" && large.header("X-Cache") == "MISS")
        #expect(harness.origin.requestCount("/s.png") == 2)
        #expect(harness.origin.requestCount("/l.jpg") == 2)
    }

    @Test("writing well past --disk-limit keeps usage bounded and the recently used entry survives")
    func diskLimit() async throws {
        let harness = try ProxyHarness { configuration in
            DiskTierTests.settings(&configuration)
            configuration.diskLimitBytes = 300_000
        }
        for i in 0..<20 {
            harness.origin.route("/i\(i).png") { _ in CachingTests.image(Fixtures.png(size: 30_000 + i)) }
        }
        for i in 0..<20 {
            _ = try await harness.get("/i\(i).png")
            // keep /i0.png recently used, on disk too (a memory miss after restart would tell; here: purge memory)
            await harness.flushDisk()
            harness.daemon.proxy.memory.removeAll()
            _ = try await harness.get("/i0.png")
        }
        await harness.flushDisk()
        let bytes = try DiskTierTests.entryFiles(in: harness.cacheDirectory).reduce(0) { total, file in
            total + ((try? FileManager.default.attributesOfItem(atPath: file)[.size] as? Int) ?? 0)
        }
        #expect(bytes <= 300_000 + 31_000, "disk usage \(bytes) bytes")
        harness.origin.stop()
        try harness.restart()
        let survivor = try await harness.get("/i0.png")
        #expect(survivor.status == 200 && survivor.body == Fixtures.png(size: 30_000))
    }

    @Test("a full disk (a small tmpfs) drops writes and the daemon keeps serving")
    func fullDisk() async throws {
        let directory = NSTemporaryDirectory() + "imagecached-tmpfs-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer {
            _ = DiskTierTests.run("/bin/umount", [directory])
            try? FileManager.default.removeItem(atPath: directory)
        }
        guard DiskTierTests.run("/bin/mount", ["-t", "tmpfs", "-o", "size=128k", "tmpfs", directory]) == 0 else {
            // Not root or no mount permission here: this environment cannot make a full disk.
            withKnownIssue("mounting a tmpfs is not permitted here") { throw CancellationError() }
            return
        }
        let harness = try ProxyHarness { $0.cacheDirectory = directory }
        for i in 0..<10 {
            harness.origin.route("/f\(i).png") { _ in CachingTests.image(Fixtures.png(size: 40_000 + i)) }
        }
        for i in 0..<10 {
            let response = try await harness.get("/f\(i).png")
            #expect(response.status == 200 && response.body == Fixtures.png(size: 40_000 + i))
        }
        await harness.flushDisk()
        #expect(harness.daemon.proxy.disk?.stats.writeErrors ?? 0 > 0)
        let leftovers = try FileManager.default.subpathsOfDirectory(atPath: directory).filter { $0.hasSuffix(".tmp") }
        #expect(leftovers.isEmpty)
        // Still serving: from memory now.
        #expect(try await harness.get("/f9.png").header("X-Cache") == "HIT")
    }

    @Test("purge removes one URL, or everything, from memory and disk")
    func purge() async throws {
        let harness = try ProxyHarness(DiskTierTests.settings)
        DiskTierTests.routes(harness.origin)
        _ = try await harness.get("/s.png")
        _ = try await harness.get("/l.jpg")
        let one = try await harness.purge("/s.png")
        #expect(one.status == 200)
        #expect(one.text.hasPrefix("purged"))
        try harness.restart()
        #expect(try await harness.get("/s.png").header("X-Cache") == "MISS")
        #expect(try await harness.get("/l.jpg").header("X-Cache") == "HIT")
        // The command line purges everything
        let port = harness.port
        let (status, stdout, stderr) = try await CLITests.run(["purge", "--all", "--address", "127.0.0.1:\(port)"])
        #expect(stderr.isEmpty, "\(stderr)")
        #expect(status == 0)
        #expect(stdout.contains("purged everything"))
        try harness.restart()
        #expect(try await harness.get("/l.jpg").header("X-Cache") == "MISS")
        #expect(try await harness.get("/_imagecached/cache", method: "GET").status == 405)
    }

    @Test("kill -9 during a burst of writes, then restart: every image served has the origin's exact bytes")
    func killDuringWrites() async throws {
        let origin = try TestOrigin()
        defer { origin.stop() }
        let count = 120
        for i in 0..<count {
            origin.route("/k\(i).png") { _ in CachingTests.image(Fixtures.png(size: 20_000 + 97 * i)) }
        }
        let directory = NSTemporaryDirectory() + "imagecached-kill-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let config = directory + ".yaml"
        try "listen: 127.0.0.1:0\norigin: \(origin.baseURL)\ncache-dir: \(directory)\n".write(toFile: config, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: config) }

        // Given a daemon taking a burst of misses (each one a disk write)
        let first = try DaemonProcess(["--config", config])
        defer { first.kill9() }
        let firstPort = try #require(await first.port())
        let done = Locked(0)
        let halfway = DispatchSemaphore(value: 0)
        let burst = Thread {
            for i in 0..<count {
                _ = try? TestClient.get(port: firstPort, "/k\(i).png")
                if done.withLock({ $0 += 1; return $0 }) == count / 2 { halfway.signal() }
            }
        }
        burst.start()
        // When it is killed half way through
        #expect(await wait(halfway))
        first.send(SIGKILL)
        #expect(await first.waitForExit() == 128 + SIGKILL)

        // Then a new daemon on the same directory serves every image exactly, some of them from disk
        let second = try DaemonProcess(["--config", config])
        defer { second.kill9() }
        let secondPort = try #require(await second.port())
        var hits = 0
        for i in 0..<count {
            let response = try await offPool { try TestClient.get(port: secondPort, "/k\(i).png") }
            #expect(response.status == 200 && response.complete && response.body == Fixtures.png(size: 20_000 + 97 * i), "image \(i)")
            if response.header("X-Cache") == "HIT" { hits += 1 }
        }
        #expect(hits > 0, "nothing survived on disk")
    }

    /// The daemon's open descriptors in this process (other tests run alongside with their own): files under its cache
    /// directory, and sockets on its port (the listener and the accepted clients).
    static func descriptors(of harness: ProxyHarness) -> Int {
        let directory = URL(fileURLWithPath: harness.cacheDirectory).resolvingSymlinksInPath().path + "/"
        return ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []).count { name in
            if let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + name) {
                if target.hasPrefix(directory) { return true }
            }
            var address = sockaddr_in()
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let named = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(Int32(name) ?? -1, $0, &length) }
            }
            return named == 0 && address.sin_family == sa_family_t(AF_INET) && Int(UInt16(bigEndian: address.sin_port)) == harness.port
        }
    }

    /// Every entry file under a cache directory (not tmp files).
    static func entryFiles(in directory: String) throws -> [String] {
        try FileManager.default.subpathsOfDirectory(atPath: directory)
            .filter { $0.split(separator: "/").count == 3 && !$0.hasSuffix(".tmp") }
            .map { directory + "/" + $0 }
    }

    @discardableResult
    static func run(_ executable: String, _ arguments: [String]) -> Int32 {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.standardError = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return -1 }
        process.waitUntilExit()
        return process.terminationStatus
    }
}
