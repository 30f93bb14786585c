// StatusPageTests: the status page's HTML, read as a browser and an attacker would: the figures' exact values, the
// escaping of what clients and origins control, the absence of anything loaded from elsewhere, and the
// Content-Security-Policy's hashes against the inline script and style actually rendered.

import Foundation
import Testing
import ImageCacheHTTP
@testable import ImageCacheStatus

@Suite("StatusPage", .timeLimit(.minutes(1)))
struct StatusPageTests {
    static let hostile = "</script><img src=x onerror=alert(1)>"

    /// A daemon's stats with every optional part present: a disk tier, transforms, in-flight fetches and errors.
    /// `scheme` prefixes the in-flight URL: a URL shown as text is data, not a reference, but the scan for references
    /// cannot tell them apart.
    static func stats(text: String = "plain", scheme: String = "https://") -> DaemonStats {
        var stats = DaemonStats()
        stats.version = "1.4.0"
        stats.uptimeSeconds = 93784.25
        stats.time = 1_764_150_034.5
        stats.requests = ["hit": 9000, "disk_hit": 500, "stale": 20, "miss": 400, "coalesced": 60, "revalidated": 15,
                          "expired": 3, "bypass": 2, "pass": 1, "error": 7, "not_image": 4]
        stats.servedBytes = ["hit": 900_000_000, "disk_hit": 50_000_000, "stale": 2_000_000, "miss": 40_000_000,
                             "coalesced": 6_000_000, "revalidated": 1_500_000, "error": 1_000]
        stats.upstream.transfers = ["ok": 410, "upstream_timeout": 5]
        stats.upstream.bytes = 48_000_000
        stats.upstream.inFlight = 3
        stats.coalescing.waitersPerFetch = .init(buckets: [.init(le: 1, count: 400), .init(le: .infinity, count: 420)], count: 420, sum: 480.4)
        stats.memory = .init(bytes: 200 << 20, entries: 1234, limitBytes: 256 << 20, evictions: 77)
        stats.disk = .init(bytes: 3 << 30, entries: 40_000, limitBytes: 10 << 30, evicted: 12, expired: 4)
        stats.errors = ["upstream_timeout": 5, "refused_404": 2]
        stats.topHosts = [HostStats(host: "images.\(text).example", transfers: 300, bytes: 30_000_000),
                          HostStats(host: "cdn.example.org", transfers: 115, bytes: 18_000_000)]
        var transforms = DaemonStats.Transforms()
        transforms.results = ["webp": ["ok": 30, "too_large": 1], "avif": ["ok": 9]]
        transforms.seconds = .init(buckets: [.init(le: 0.05, count: 39), .init(le: .infinity, count: 39)], count: 39, sum: 1.3)
        stats.transforms = transforms
        stats.inFlightFetches = [.init(url: "\(scheme)origin.example/\(text).jpg", kind: "fetch", waiters: 4, receivedBytes: 65_536, seconds: 1.25)]
        stats.recentErrors = [.init(time: 1_764_150_000.5, kind: "upstream_\(text)", status: 504, reason: "origin timed out: \(text)",
                                    target: "/fetch?url=\(text)")]
        var fleet = DaemonStats.Fleet()
        fleet.hits = 120
        fleet.leaseWins = 40
        fleet.takeovers = 1
        fleet.waits = 300
        fleet.passMarkers = 2
        fleet.unavailable = 5
        var server = DaemonStats.Fleet.Server()
        server.address = "10.0.0.5:11211 \(text)"
        server.state = "down"
        server.operations = 2000
        server.failures = 4
        server.bytesRead = 9_000_000
        fleet.servers = [server]
        stats.fleet = fleet
        stats.interceptCA = .init(certificatePath: "/var/lib/imagecached/ca/ca.pem", fingerprint: "AB:CD:EF",
                                  constrained: true, constraints: "constrained to 1 name (images.\(text).example)",
                                  notAfter: 1_764_150_034.5 + 400 * 86_400, expirySeconds: 400 * 86_400)
        return stats
    }

    static func history(samples count: Int = 3) -> HistoryDocument {
        let samples = (0..<count).map { index in
            var sample = HistorySample(t: 1_764_150_000 + Double(index) * 10, seconds: 10)
            sample.requests = ["hit": 90 + index, "miss": 10]
            sample.servedBytes = ["hit": 900_000, "miss": 100_000]
            sample.upstreamBytes = 100_000
            return sample
        }
        return HistoryDocument(interval: 10, capacity: 360, now: 1_764_150_034, outcomes: ServedOutcome.allCases.map(\.rawValue),
                               fromCache: ServedOutcome.allCases.filter(\.fromCache).map(\.rawValue), samples: samples,
                               current: HistorySample(t: 1_764_150_034, seconds: 4))
    }

    static func render(_ stats: DaemonStats, refresh: Int = 2000) -> String {
        String(decoding: StatusPage.render(stats: stats, history: history(), refreshMilliseconds: refresh), as: UTF8.self)
    }

    /// The text between `open` and the next `close`, for each occurrence.
    static func contents(of html: String, between open: String, and close: String) -> [String] {
        html.components(separatedBy: open).dropFirst().compactMap { $0.components(separatedBy: close).first }
    }

    @Test("every figure's data-value is the DaemonStats value it is named after")
    func figureValues() throws {
        // Given stats with a disk tier and transforms
        let stats = Self.stats()
        // When the page is rendered
        let html = Self.render(stats)
        // Then each data-stat carries exactly the number computed from the document, and no other name appears
        let pattern = try Regex(#"data-stat="([^"]+)" data-unit="[a-z]+" data-value="([^"]+)""#)
        var found: [String: String] = [:]
        for match in html.matches(of: pattern) {
            let name = String(try #require(match.output[1].substring))
            #expect(found[name] == nil, "\(name) appears twice")
            found[name] = String(try #require(match.output[2].substring))
        }
        let served = stats.servedBytes.values.reduce(0, +)
        var expected: [String: String] = [
            "requests.total": "10012", "hitRatio": String(describing: stats.hitRatio),
            "byteHitRatio": String(describing: Double(stats.bytesServedFromCache) / Double(served)),
            "servedBytes.total": String(served), "servedBytes.fromCache": String(stats.bytesServedFromCache),
            "upstream.bytes": "48000000", "upstream.transfers": "415", "upstream.inFlight": "3",
            "coalescing.fetches": "420", "coalescing.waiters": "480", "coalescing.saved": "60",
            "memory.bytes": String(200 << 20), "memory.entries": "1234", "memory.limitBytes": String(256 << 20), "memory.evictions": "77",
            "disk.bytes": String(3 << 30), "disk.entries": "40000", "disk.limitBytes": String(10 << 30), "disk.evictions": "12",
            "errors.total": "7", "transforms.total": "40", "transforms.meanMilliseconds": "33", "uptimeSeconds": "93784.25",
        ]
        for outcome in ServedOutcome.allCases { expected["requests.\(outcome.rawValue)"] = String(stats.requests[outcome.rawValue] ?? 0) }
        for (name, value) in ["hits": 120, "leaseWins": 40, "takeovers": 1, "waits": 300, "passMarkers": 2, "unavailable": 5,
                              "damaged": 0, "serversUp": 0] {
            expected["fleet.\(name)"] = String(value)
        }
        #expect(found == expected)
        #expect(stats.hitRatio == 9535.0 / 10012.0)
    }

    @Test("figures are formatted for people: bytes in binary units, counts grouped, ratios as percent")
    func figureText() {
        // Given / When
        let html = Self.render(Self.stats())
        // Then
        #expect(html.contains(#"data-value="268435456">256.0 MiB</span>"#))
        #expect(html.contains(#"data-value="3221225472">3.0 GiB</span>"#))
        #expect(html.contains(#"data-stat="requests.total" data-unit="count" data-value="10012">10,012</span>"#))
        #expect(html.contains(#">95.2%</span>"#))
        #expect(html.contains(#"data-value="93784.25">1d 2h</span>"#))
        #expect(StatusFormat.bytes(1023) == "1,023 B" && StatusFormat.bytes(1536) == "1.5 KiB")
    }

    /// The `display` of a stats document, as the page's script reads it.
    struct Display: Decodable, Equatable {
        struct Shown: Decodable, Equatable {
            var text: String
            var value: String
        }
        var figures: [String: Shown]
        var time: StatusView.Cell
        var tables: [String: [[StatusView.Cell]]]
        var gauges: [String: StatusView.Gauge]
    }

    /// The `display` of a stats document's JSON.
    static func display(ofStats json: [UInt8]) throws -> Display {
        struct Document: Decodable { var display: Display }
        return try JSONDecoder().decode(Document.self, from: Data(json)).display
    }

    /// HTML text back to what it says (the five characters `escape` writes as references).
    static func unescape(_ html: String) -> String {
        html.replacingOccurrences(of: "&lt;", with: "<").replacingOccurrences(of: "&gt;", with: ">")
            .replacingOccurrences(of: "&quot;", with: "\"").replacingOccurrences(of: "&#39;", with: "'")
            .replacingOccurrences(of: "&amp;", with: "&")
    }

    /// What the rendered HTML shows, read back as the script's `display` would carry it: figures by data-stat, the
    /// tables' rows of cells, the last refresh.
    static func shown(in html: String) throws -> (figures: [String: Display.Shown], tables: [String: [[StatusView.Cell]]], time: StatusView.Cell) {
        var figures: [String: Display.Shown] = [:]
        for match in html.matches(of: try Regex(#"<span data-stat="([^"]+)" data-unit="[a-z]+" data-value="([^"]+)">([^<]*)</span>"#)) {
            let name = String(try #require(match.output[1].substring))
            figures[name] = Display.Shown(text: unescape(String(try #require(match.output[3].substring))),
                                          value: unescape(String(try #require(match.output[2].substring))))
        }
        var tables: [String: [[StatusView.Cell]]] = [:]
        let cellPattern = try Regex(#"<td(?: class="([^"]*)")?>([\s\S]*?)</td>"#)
        let timePattern = try Regex(#"^<time datetime="([^"]*)">([^<]*)</time>$"#)
        let barPattern = try Regex(#"<rect class="bar-fill" width="([^"]*)""#)
        for table in html.matches(of: try Regex(#"<table id="([^"]+)"[^>]*>[\s\S]*?<tbody>\n([\s\S]*?)</tbody>"#)) {
            let id = String(try #require(table.output[1].substring))
            var rows: [[StatusView.Cell]] = []
            for row in String(try #require(table.output[2].substring)).split(separator: "\n") where row.hasPrefix("<tr>") {
                rows.append(try String(row).matches(of: cellPattern).map { cell in
                    let className = cell.output[1].substring.map { unescape(String($0)) }
                    let content = String(try #require(cell.output[2].substring))
                    if let bar = content.firstMatch(of: barPattern) {
                        return StatusView.Cell(text: "", className: className, bar: unescape(String(try #require(bar.output[1].substring))))
                    }
                    if let time = content.firstMatch(of: timePattern) {
                        return StatusView.Cell(text: unescape(String(try #require(time.output[2].substring))), className: className,
                                               datetime: unescape(String(try #require(time.output[1].substring))))
                    }
                    return StatusView.Cell(text: unescape(content), className: className)
                })
            }
            tables[id] = rows
        }
        let refresh = try #require(html.firstMatch(of: try Regex(#"<time id="last-refresh"(?: datetime="([^"]*)")?>([^<]*)</time>"#)))
        let time = StatusView.Cell(text: unescape(String(try #require(refresh.output[2].substring))),
                                   datetime: refresh.output[1].substring.map { unescape(String($0)) })
        return (figures, tables, time)
    }

    @Test("the first render shows, element for element, the text the script puts there from /stats for the same stats", arguments: [
        StatusPageTests.stats(), StatusPageTests.stats(text: StatusPageTests.hostile), DaemonStats(),
    ])
    func formattedOnce(stats: DaemonStats) throws {
        // Given the page rendered for some stats, and the stats document /stats sends for the same stats
        let html = Self.render(stats)
        let display = try Self.display(ofStats: stats.json())
        // When the figures, table cells and time the HTML shows are read back
        let shown = try Self.shown(in: html)
        // Then they are the display's: every figure's text and exact value, every row and cell, the time
        #expect(shown.figures == display.figures)
        #expect(shown.tables == display.tables)
        #expect(shown.time == display.time)
        // ... and the page's embedded stats carry the same display, from which the script draws the gauges at once
        let embedded = try #require(Self.contents(of: html, between: #"<script type="application/json" id="initial-data">"#, and: "</script>").first)
        struct Initial: Decodable { var stats: Stats; struct Stats: Decodable { var display: Display } }
        #expect(try JSONDecoder().decode(Initial.self, from: Data(embedded.utf8)).stats.display == display)
        #expect(Set(display.gauges.keys) == (stats.disk == nil ? ["gauge-memory"] : ["gauge-memory", "gauge-disk"]))
    }

    @Test("the script formats no number: the rules live in StatusFormat alone")
    func scriptFormatsNoFigure() {
        // Given / When the script's text
        let script = StatusPage.script
        // Then none of the formatting it once copied from Swift is left (the charts' axis labels are its own)
        for gone in ["groupDigits", "formatBytes", "formatPercent", "formatDuration", "formatUnit", "swiftNumber", "figureValues", "tenths"] {
            #expect(!script.contains(gone), "\(gone) is back in the script")
        }
        #expect(script.contains("state.display.figures") && script.contains("figure.text"))
    }

    @Test("the display's text: figures, table cells, gauges, the time in UTC")
    func displayText() throws {
        // Given / When
        let display = try Self.display(ofStats: Self.stats().json())
        // Then
        #expect(display.figures["requests.total"] == .init(text: "10,012", value: "10012"))
        #expect(display.figures["uptimeSeconds"] == .init(text: "1d 2h", value: "93784.25"))
        #expect(display.figures["transforms.meanMilliseconds"] == .init(text: "33 ms", value: "33"))
        #expect(display.time == StatusView.Cell(text: "09:40:34 UTC", datetime: "2025-11-26T09:40:34Z"))
        #expect(display.tables["in-flight"]?.first?.map(\.text) == ["https://origin.example/plain.jpg", "fetch", "4", "64.0 KiB", "1.3 s"])
        #expect(display.tables["top-hosts"]?.map { $0.last?.bar } == ["100.0", "38.3"])
        #expect(display.tables["recent-errors"]?.first?.first == StatusView.Cell(text: "09:40:00 UTC", datetime: "2025-11-26T09:40:00Z"))
        #expect(display.gauges["gauge-memory"] == .init(fraction: 200.0 / 256, level: "", text: "78.1%", note: "of 256.0 MiB"))
        #expect(display.gauges["gauge-disk"] == .init(fraction: 0.3, level: "", text: "30.0%", note: "of 10.0 GiB"))
    }

    @Test("a URL, host, kind or reason carrying markup appears only escaped, in the tables and in the embedded JSON")
    func hostileText() throws {
        // Given stats whose client- and origin-controlled strings close the script element and add an image
        let stats = Self.stats(text: Self.hostile)
        // When
        let html = Self.render(stats)
        // Then the raw text is nowhere; the tables hold it HTML-escaped and the JSON \u-escaped
        #expect(!html.contains(Self.hostile))
        #expect(!html.contains("<img"))
        #expect(html.contains("&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;"))
        #expect(html.contains(#"\u003c/script\u003e\u003cimg src=x onerror=alert(1)\u003e"#))
        #expect(html.components(separatedBy: "</script>").count == 3, "only the data and code elements close")
        // and the embedded JSON still decodes to the very stats and history rendered
        let json = try #require(Self.contents(of: html, between: #"<script type="application/json" id="initial-data">"#, and: "</script>").first)
        struct Embedded: Decodable { var stats: DaemonStats; var history: HistoryDocument }
        let decoder = JSONDecoder()
        decoder.nonConformingFloatDecodingStrategy = .convertFromString(positiveInfinity: "+Inf", negativeInfinity: "-Inf", nan: "NaN")
        let embedded = try decoder.decode(Embedded.self, from: Data(json.utf8))
        #expect(embedded.stats == stats)
        #expect(embedded.history == Self.history())
    }

    @Test("the page references nothing outside itself")
    func noExternalReferences() {
        // Given stats whose texts hold no URL (a URL in a table is text, but a scan cannot tell)
        // When
        let rendered = Self.render(Self.stats(scheme: ""))
        // (its icon is an empty data: URL, so that a browser does not ask the daemon for /favicon.ico)
        #expect(rendered.contains("<link rel=\"icon\" href=\"data:,\">"))
        let html = rendered.replacingOccurrences(of: "<link rel=\"icon\" href=\"data:,\">", with: "").lowercased()
            .replacingOccurrences(of: "http://www.w3.org/2000/svg", with: "")
        // Then (the script's `new URL(...)` is a constructor, not CSS: url( is looked for in the style)
        for needle in ["src=", "href=", "@import", "<link", "http://", "https://", "import("] {
            #expect(!html.contains(needle), "found \(needle)")
        }
        #expect(!StatusPage.style.lowercased().contains("url("))
    }

    @Test("the Content-Security-Policy allows exactly the inline script and style rendered, by SHA-256")
    func contentSecurityPolicy() throws {
        // Given
        let html = Self.render(Self.stats())
        // When the inline code is read back out of the document
        let scripts = Self.contents(of: html, between: "<script>", and: "</script>")
        let styles = Self.contents(of: html, between: "<style>", and: "</style>")
        #expect(scripts.count == 1 && styles.count == 1)
        let script = try #require(scripts.first), style = try #require(styles.first)
        // Then the policy names their hashes, and nothing else may run or load
        let policy = StatusPage.contentSecurityPolicy
        #expect(policy.contains("script-src 'sha256-\(ContentHash.sha256Base64(script))';"))
        #expect(policy.contains("style-src 'sha256-\(ContentHash.sha256Base64(style))';"))
        for directive in ["default-src 'none'", "img-src data:", "connect-src 'self'", "base-uri 'none'", "form-action 'none'",
                          "frame-ancestors 'none'"] {
            #expect(policy.contains(directive))
        }
        #expect(!policy.contains("unsafe"))
        // and the hash is standard base64 of SHA-256 (a known answer: FIPS 180-2's "abc")
        #expect(ContentHash.sha256Base64("abc") == "ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0=")
    }

    @Test("no element carries a style attribute, which the policy would block")
    func noStyleAttributes() throws {
        // Given / When
        let html = Self.render(Self.stats())
        // Then
        #expect(html.firstMatch(of: try Regex(#"<[^>]*\sstyle\s*="#)) == nil)
    }

    @Test("the page carries its ids, refresh period, error box and noscript text for the script and the browser tests")
    func structure() {
        // Given / When
        let html = Self.render(Self.stats(), refresh: 1500)
        // Then
        for id in ["chart-hit-ratio", "chart-requests", "chart-bytes", "gauge-memory", "gauge-disk", "in-flight", "top-hosts",
                   "recent-errors", "transforms", "chart-transform-latency", "initial-data", "live-toggle", "live-state",
                   "last-refresh", "connection"] {
            #expect(html.contains("id=\"\(id)\""), "missing #\(id)")
        }
        #expect(html.contains(#"<html lang="en" data-refresh-ms="1500""#))
        #expect(html.contains(#"<pre id="script-errors" hidden></pre>"#))
        #expect(html.contains("Charts need JavaScript; the figures are as of this page's load."))
    }

    @Test("the local CA's card: its path, fingerprint and constraints, and the time to its expiry; the unconstrained warning and an expiry under 14 days marked")
    func interceptCA() throws {
        // Given a constrained CA with 400 days left, then an unconstrained one with 13
        var stats = Self.stats()
        let constrained = try Self.display(ofStats: stats.json()).tables["intercept-ca"]
        stats.interceptCA?.constrained = false
        stats.interceptCA?.constraints = "unconstrained: this key can sign for any site"
        stats.interceptCA?.expirySeconds = 13 * 86_400
        let html = Self.render(stats)
        let unconstrained = try Self.display(ofStats: stats.json()).tables["intercept-ca"]
        // Then
        #expect(constrained?.map { $0.map(\.text) } == [
            ["Certificate", "/var/lib/imagecached/ca/ca.pem"], ["SHA-256", "AB:CD:EF"],
            ["Name constraints", "constrained to 1 name (images.plain.example)"], ["Expires in", "400d 0h (2026-12-31T09:40:34Z)"],
        ])
        #expect(constrained?.compactMap { $0.last?.className } == ["url", "url"])
        #expect(unconstrained?[2].last == StatusView.Cell(text: "unconstrained: this key can sign for any site", className: "warn"))
        #expect(unconstrained?[3].last?.className == "warn")
        #expect(html.contains("Interception CA") && html.contains(#"<td class="warn">unconstrained: this key can sign for any site</td>"#))
        // and /metrics carries the expiry
        #expect(stats.prometheusText.contains("imagecached_intercept_ca_expiry_seconds 1123200"))
    }

    @Test("interception's counts: /metrics has tunnels by kind and the leaf certificates; the page counts intercepted CONNECTs as opened, not refused")
    func interception() {
        // Given 5 tunnels open, 2 of them intercepted, and leaves minted
        var stats = DaemonStats()
        stats.memory = .init(bytes: 0, entries: 0, limitBytes: 1 << 20, evictions: 0)
        stats.tunnels = .init(open: 5, limit: 1000, connects: ["tunnel": 3, "intercept": 4, "at_cap": 1, "mint_failed": 2],
                              ends: ["closed": 2], bytesUp: 1, bytesDown: 2, intercepted: 2, interceptedEnds: ["idle": 1])
        stats.leafCertificates = .init(minted: 7, cached: 6, mintsQueued: 1)

        // When /metrics and the page are made
        let text = stats.prometheusText
        let html = Self.render(stats)

        // Then /metrics splits the tunnels by kind and counts the leaves
        #expect(text.contains("imagecached_tunnels_open{kind=\"blind\"} 3\n"))
        #expect(text.contains("imagecached_tunnels_open{kind=\"intercepted\"} 2\n"))
        #expect(text.contains("imagecached_connects_total{result=\"intercept\"} 4\n"))
        #expect(text.contains("imagecached_connects_total{result=\"mint_failed\"} 2\n"))
        #expect(text.contains("imagecached_tunnels_total{kind=\"blind\",end=\"closed\"} 2\n"))
        #expect(text.contains("imagecached_tunnels_total{kind=\"intercepted\",end=\"idle\"} 1\n"))
        #expect(text.contains("# TYPE imagecached_leaf_certificates_minted_total counter\nimagecached_leaf_certificates_minted_total 7\n"))
        #expect(text.contains("# TYPE imagecached_leaf_certificate_cache_entries gauge\nimagecached_leaf_certificate_cache_entries 6\n"))
        #expect(text.contains("# TYPE imagecached_leaf_mints_queued gauge\nimagecached_leaf_mints_queued 1\n"))
        // And the page's tunnel card counts 7 opened (blind and intercepted) and 3 refused, 2 intercepted open, 6 leaves
        #expect(html.contains(#"data-stat="tunnels.opened" data-unit="count" data-value="7""#))
        #expect(html.contains(#"data-stat="tunnels.refused" data-unit="count" data-value="3""#))
        #expect(html.contains(#"data-stat="tunnels.intercepted" data-unit="count" data-value="2""#))
        #expect(html.contains(#"data-stat="leaves.cached" data-unit="count" data-value="6""#))
    }

    @Test("the fleet tier: /metrics has its counts and each server's state; the page has a Fleet card with the servers")
    func fleet() {
        let stats = Self.stats()
        let text = stats.prometheusText
        #expect(text.contains("imagecached_fleet_hits_total 120\n"))
        #expect(text.contains("imagecached_fleet_lease_wins_total 40\n"))
        #expect(text.contains("imagecached_fleet_takeovers_total 1\n"))
        #expect(text.contains("imagecached_fleet_markers_total{direction=\"left\"} 2\n"))
        #expect(text.contains("imagecached_fleet_server_up{server=\"10.0.0.5:11211 plain\"} 0\n"))
        #expect(text.contains("imagecached_fleet_bytes_total{server=\"10.0.0.5:11211 plain\",direction=\"read\"} 9000000\n"))
        let html = Self.render(stats)
        #expect(html.contains("id=\"section-fleet\""))
        #expect(html.contains(#"data-stat="fleet.leaseWins" data-unit="count" data-value="40""#))
        #expect(html.contains(#"data-stat="fleet.serversUp" data-unit="count" data-value="0""#))
        // A daemon without a fleet has neither.
        var alone = Self.stats()
        alone.fleet = nil
        #expect(!alone.prometheusText.contains("imagecached_fleet_") && !Self.render(alone).contains("section-fleet"))
    }

    @Test("a daemon without interception shows no intercepted kind and no leaf certificates")
    func noInterception() {
        var stats = DaemonStats()
        stats.tunnels = .init(open: 1, limit: 1000, connects: ["tunnel": 1])
        let text = stats.prometheusText
        #expect(text.contains("imagecached_tunnels_open{kind=\"blind\"} 1\n"))
        #expect(!text.contains("intercepted") && !text.contains("leaf_"))
    }

    @Test("without a disk tier, transforms, fetches or errors, their parts are left out or say they are empty")
    func optionalParts() {
        // Given a daemon with a memory tier only and nothing going on
        var stats = DaemonStats()
        stats.memory = .init(bytes: 0, entries: 0, limitBytes: 1 << 20, evictions: 0)
        // When
        let html = Self.render(stats, refresh: 0)
        // Then
        #expect(!html.contains("id=\"gauge-disk\"") && !html.contains("data-stat=\"disk."))
        #expect(!html.contains("id=\"transforms\"") && !html.contains("id=\"chart-transform-latency\"") && !html.contains("data-stat=\"transforms."))
        #expect(!html.contains("Interception CA") && !stats.prometheusText.contains("intercept_ca"))
        #expect(html.contains("Nothing in flight.") && html.contains("No errors since start.") && html.contains("No upstream transfers yet."))
        #expect(html.contains(#"data-stat="hitRatio" data-unit="ratio" data-value="0.0">0.0%</span>"#))
        #expect(html.contains(#"data-stat="byteHitRatio" data-unit="ratio" data-value="0.0">"#))
        #expect(html.contains(#"data-refresh-ms="0""#))
    }
}
