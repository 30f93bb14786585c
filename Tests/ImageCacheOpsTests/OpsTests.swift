import Foundation
import Testing
import Synchronization
@testable import ImageCacheConfig
import ImageCacheHTTP
@testable import ImageCacheStore
@testable import ImageCacheStatus
@testable import ImageCacheCore
@testable import ImageCacheOps
import ImageCacheSystem

@Suite("Operations, pure parts", .timeLimit(.minutes(1)))
struct OpsTests {
    @Test("address ranges match what they contain", arguments: [
        ("127.0.0.1/32", "127.0.0.1", true), ("127.0.0.1/32", "127.0.0.2", false), ("127.0.0.0/8", "127.9.9.9", true),
        ("10.0.0.0/8", "11.0.0.1", false), ("192.168.1.0/24", "192.168.1.77", true), ("::1/128", "::1", true),
        ("::1/128", "::2", false), ("fd00::/8", "fd12:3456::1", true), ("127.0.0.0/8", "::ffff:127.0.0.1", true),
        ("0.0.0.0/0", "203.0.113.9", true), ("127.0.0.1", "127.0.0.1", true), ("127.0.0.0/8", "::1", false),
    ])
    func addressRanges(range: String, address: String, contained: Bool) throws {
        let parsed = try #require(AddressRange(range))
        #expect(parsed.contains(address) == contained)
    }

    @Test("bad address ranges are refused, by the parser and by admin-allow", arguments: ["127.0.0.1/33", "nowhere", "::1/129", "1.2.3/8"])
    func badRanges(text: String) {
        #expect(AddressRange(text) == nil)
        var configuration = Configuration()
        #expect(throws: ConfigError.self) { try configuration.apply(ConfigSetting(key: "admin-allow", value: .scalar(text), source: "--admin-allow")) }
    }

    @Test("admin-allow takes a list, and its default is loopback")
    func adminAllowSetting() throws {
        var configuration = Configuration()
        #expect(configuration.adminAllow.map(\.description) == ["127.0.0.0/8", "::1/128"])
        try configuration.apply(ConfigSetting(key: "admin-allow", value: .scalar("127.0.0.1/32, 10.1.0.0/16"), source: "--admin-allow"))
        #expect(configuration.adminAllow.map(\.description) == ["127.0.0.1/32", "10.1.0.0/16"])
    }

    @Test("the cgroup memory limit is the smallest memory.max on the process's cgroup path")
    func cgroupLimit() throws {
        // Given a fake /sys/fs/cgroup: the slice limits 4 GiB, the service 1 GiB, the leaf has none
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("cgroup-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: root) }
        let service = root + "/system.slice/imagecached.service"
        try FileManager.default.createDirectory(atPath: service + "/leaf", withIntermediateDirectories: true)
        try "4294967296\n".write(toFile: root + "/system.slice/memory.max", atomically: true, encoding: .utf8)
        try "1073741824\n".write(toFile: service + "/memory.max", atomically: true, encoding: .utf8)
        try "max\n".write(toFile: service + "/leaf/memory.max", atomically: true, encoding: .utf8)
        // Then
        #expect(CgroupMemory.limitBytes(procSelfCgroup: "0::/system.slice/imagecached.service/leaf\n", root: root) == 1 << 30)
        #expect(CgroupMemory.limitBytes(procSelfCgroup: "0::/system.slice\n", root: root) == 4 << 30)
        #expect(CgroupMemory.limitBytes(procSelfCgroup: "0::/\n", root: root) == nil)
        #expect(CgroupMemory.limitBytes(procSelfCgroup: "1:memory:/x\n", root: root) == nil)  // v1, no such group
        // cgroup v1 (hybrid hosts): memory/<path>/memory.limit_in_bytes, "unlimited" as a value near 2^63
        try FileManager.default.createDirectory(atPath: root + "/memory/app", withIntermediateDirectories: true)
        try "9223372036854771712\n".write(toFile: root + "/memory/memory.limit_in_bytes", atomically: true, encoding: .utf8)
        try "536870912\n".write(toFile: root + "/memory/app/memory.limit_in_bytes", atomically: true, encoding: .utf8)
        #expect(CgroupMemory.limitBytes(procSelfCgroup: "4:memory:/app\n0::/\n", root: root) == 512 << 20)
        #expect(CgroupMemory.limitBytes(procSelfCgroup: "4:memory:/\n0::/\n", root: root) == nil)
        #expect(CgroupMemory.limitBytes(procSelfCgroup: nil, root: root) == nil)
    }

    @Test("under a cgroup limit the memory tier's default is half of it, and memory-limit still wins")
    func cgroupDerivedDefault() throws {
        let derived = try Configuration.load(file: nil, environment: [:], flags: [], cgroupMemoryLimitBytes: 1 << 30)
        #expect(derived.memoryLimitBytes == 512 << 20)
        #expect(derived.effectiveMemoryObjectLimitBytes == 64 << 20)
        let explicit = try Configuration.load(file: nil, environment: [:], flags: [ConfigSetting(key: "memory-limit", value: .scalar("100MiB"), source: "--memory-limit")],
                                              cgroupMemoryLimitBytes: 1 << 30)
        #expect(explicit.memoryLimitBytes == 100 << 20)
        let fromEnvironment = try Configuration.load(file: nil, environment: ["IMAGECACHED_MEMORY_LIMIT": "64MiB"], flags: [], cgroupMemoryLimitBytes: 1 << 30)
        #expect(fromEnvironment.memoryLimitBytes == 64 << 20)
        let none = try Configuration.load(file: nil, environment: [:], flags: [], cgroupMemoryLimitBytes: nil)
        #expect(none.memoryLimitBytes == 256 << 20)
    }

    @Test("socket activation takes the descriptors only when LISTEN_PID is this process")
    func listenDescriptors() {
        #expect(SystemdSocketActivation.descriptors(environment: ["LISTEN_PID": "42", "LISTEN_FDS": "2"], pid: 42) == [3, 4])
        #expect(SystemdSocketActivation.descriptors(environment: ["LISTEN_PID": "41", "LISTEN_FDS": "2"], pid: 42) == [])
        #expect(SystemdSocketActivation.descriptors(environment: ["LISTEN_FDS": "1"], pid: 42) == [])
        #expect(SystemdSocketActivation.descriptors(environment: [:], pid: 42) == [])
        // Names (FileDescriptorName=): the socket named tls is served with TLS
        #expect(SystemdSocketActivation.names(environment: ["LISTEN_FDNAMES": "imagecached.socket:tls"]) == ["imagecached.socket", "tls"])
        #expect(SystemdSocketActivation.names(environment: [:]) == [])
    }

    @Test("the watchdog interval comes from WATCHDOG_USEC, for this process only")
    func watchdog() {
        #expect(SystemdNotifier.watchdogInterval(environment: ["WATCHDOG_USEC": "30000000"]) == 30)
        #expect(SystemdNotifier.watchdogInterval(environment: ["WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"]) == nil)
        #expect(SystemdNotifier.watchdogInterval(environment: [:]) == nil)
    }

    @Test("imagecached stats lists the fetches in flight and the last errors, with control characters from clients shown as ?")
    func statsReportLists() {
        // Given a stats document with a fetch in flight and an error whose texts carry a terminal escape sequence
        var stats = DaemonStats()
        stats.inFlightFetches = [.init(url: "http://cdn.example/a.jpg", kind: "fetch", waiters: 3, receivedBytes: 2048, seconds: 1.5)]
        stats.recentErrors = [.init(time: 1_800_000_000, kind: "refused_400", status: 400,
                                    reason: "bad url parameter: \u{1B}]0;owned\u{07}", target: "/fetch?url=\u{1B}[2J")]
        // When
        let report = StatsReport.text(stats)
        // Then
        #expect(report.contains("in flight     http://cdn.example/a.jpg: fetch, 3 waiting, 2.0 KiB received"))
        #expect(report.contains("last errors   "))
        #expect(report.contains("400 refused_400: bad url parameter: ?]0;owned? (/fetch?url=?[2J)"))
        #expect(!report.unicodeScalars.contains { $0.value == 0x1B || $0.value == 0x07 })
    }

    @Test("imagecached stats has a fleet line and one per memcached server, when the daemon has a fleet")
    func statsReportFleet() {
        var stats = DaemonStats()
        var fleet = DaemonStats.Fleet()
        fleet.hits = 7
        fleet.leaseWins = 3
        fleet.waits = 12
        var server = DaemonStats.Fleet.Server()
        server.address = "10.0.0.5:11211"
        server.state = "down"
        server.itemSizeMax = 32 << 20
        fleet.servers = [server]
        stats.fleet = fleet
        let report = StatsReport.text(stats)
        #expect(report.contains("fleet         7 hits, 3 leases won (0 takeovers), 12 waits"))
        #expect(report.contains("              10.0.0.5:11211: down, 0 operations, 0 failures, 0 B read, 0 B written, -I 32.0 MiB"))
        #expect(!StatsReport.text(DaemonStats()).contains("fleet"))
    }

    @Test("the stats document lists at most 20 fetches in flight, the most waited-on first, then the oldest")
    func inFlightList() {
        // Given 25 fetches in flight, with 1 to 25 waiters, two with the most
        var fetches = (1...25).map { DaemonStats.InFlightFetch(url: "http://o/\($0)", kind: "fetch", waiters: $0, receivedBytes: 0, seconds: 1) }
        fetches.append(.init(url: "http://o/old", kind: "transform", waiters: 25, receivedBytes: 0, seconds: 9))
        // When
        let stats = ProxyMetrics().snapshot(memory: MemoryCache(limitBytes: 1000, objectLimitBytes: 100).stats, disk: nil,
                                            fetchesInFlight: fetches.count, inFlight: fetches.shuffled())
        // Then
        let listed = stats.inFlightFetches ?? []
        #expect(listed.count == ProxyMetrics.inFlightListLimit && listed.count == 20)
        #expect(listed.prefix(3).map(\.url) == ["http://o/old", "http://o/25", "http://o/24"])
        #expect(listed.last?.waiters == 7)
        #expect(stats.upstream.inFlight == 26)
    }

    @Test("the last 20 errors are kept with their reasons, newest first, texts cut at 300 characters; every one is counted")
    func recentErrors() {
        // Given a clock the test moves
        let clock = Locked(Date(timeIntervalSince1970: 1_800_000_000))
        let metrics = ProxyMetrics(now: { clock.withLock { $0 } })
        // When 21 errors happen, one second apart, the last with a long reason
        for index in 1...21 {
            clock.withLock { $0 = $0.addingTimeInterval(1) }
            let reason = index == 21 ? String(repeating: "r", count: 400) : "reason \(index)"
            metrics.error(index == 21 ? "upstream_timeout" : "refused_404", status: index == 21 ? nil : 404, reason: reason,
                          target: "/image/\(index).png")
        }
        let stats = metrics.snapshot(memory: MemoryCache(limitBytes: 1000, objectLimitBytes: 100).stats, disk: nil, fetchesInFlight: 0)
        // Then
        let records = stats.recentErrors ?? []
        #expect(records.count == ProxyMetrics.recentErrorLimit && records.count == 20)
        #expect(records.first?.kind == "upstream_timeout" && records.first?.status == nil && records.first?.reason.count == 300)
        #expect(records.first?.time == 1_800_000_021)
        #expect(records.last?.reason == "reason 2" && records.last?.target == "/image/2.png" && records.last?.status == 404)
        #expect(stats.errors == ["refused_404": 20, "upstream_timeout": 1])
    }

    @Test("histograms are cumulative and the Prometheus text carries every family")
    func prometheusText() {
        // Given
        let metrics = ProxyMetrics()
        metrics.served(.hit)
        metrics.served(.hit)
        metrics.servedBytes(.hit, 100)
        metrics.fetchWaiters.observe(1)
        metrics.fetchWaiters.observe(4)
        metrics.upstreamFinished(host: "cdn.example", result: "ok", seconds: 0.2, bytes: 10)
        metrics.error("refused_403", status: 403, reason: "no", target: "/x")
        // When
        let stats = metrics.snapshot(memory: MemoryCache(limitBytes: 1000, objectLimitBytes: 100).stats, disk: nil, fetchesInFlight: 0)
        let text = stats.prometheusText
        // Then
        for line in ["imagecached_requests_total{outcome=\"hit\"} 2", "imagecached_served_bytes_total{outcome=\"hit\"} 100",
                     "imagecached_fetch_waiters_bucket{le=\"1\"} 1", "imagecached_fetch_waiters_bucket{le=\"3\"} 1",
                     "imagecached_fetch_waiters_bucket{le=\"5\"} 2", "imagecached_fetch_waiters_bucket{le=\"+Inf\"} 2",
                     "imagecached_fetch_waiters_sum 5", "imagecached_fetch_waiters_count 2",
                     "imagecached_upstream_duration_seconds_bucket{le=\"0.1\"} 0", "imagecached_upstream_duration_seconds_bucket{le=\"0.25\"} 1",
                     "imagecached_upstream_transfers_total{result=\"ok\"} 1", "imagecached_errors_total{kind=\"refused_403\"} 1",
                     "imagecached_memory_limit_bytes 1000", "# TYPE imagecached_upstream_duration_seconds histogram"] {
            #expect(text.contains(line + "\n"), "missing: \(line)")
        }
        #expect(stats.topHosts == [HostStats(host: "cdn.example", transfers: 1, bytes: 10)])
        #expect(stats.hitRatio == 1)
    }

    @Test("prefetch progress counts the response lines and names failures")
    func prefetchProgress() {
        var progress = PrefetchProgress(total: 3, live: false)
        progress.record(line: "ok 200 MISS 1000 http://a/1.png")
        progress.record(line: "failed 404 http://a/2.png answered 404: upstream answered 404 Not Found")
        progress.record(line: "ok 200 HIT 500 http://a/3.png")
        progress.record(line: "done 3 ok 2 failed 1 bytes 1500")
        #expect(progress.done == 3)
        #expect(progress.bytes == 1500)
        #expect(progress.failures.map(\.url) == ["http://a/2.png"])
        #expect(progress.summary.contains("prefetched 2 of 3 URLs"))
        #expect(progress.summary.contains("failed: http://a/2.png (answered 404: upstream answered 404 Not Found)"))
        #expect(progress.bar.contains("3/3"))
    }
}
