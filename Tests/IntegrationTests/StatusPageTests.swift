// The status page (/_imagecached/) and its history (/_imagecached/stats/history), in process against a local origin:
// its figures against /stats after a scripted sequence, the history's samples, the admin rules, the in-flight list and
// the last errors. BrowserTests.swift loads it in headless Chromium.

import Foundation
import Testing
@testable import ImageCacheConfig
@testable import ImageCacheStatus
@testable import ImageCacheCore
@testable import ImageCacheOps

@Suite("Status page: figures equal /stats, the history ring, admin rules", .timeLimit(.minutes(2)))
struct StatusPageTests {
    /// The page's figures, as its elements carry them: `data-stat` name -> `data-value`.
    static func figures(_ html: String) -> [String: Double] {
        var figures: [String: Double] = [:]
        let tag = try! Regex(#"<[^>]*\bdata-stat="([^"]+)"[^>]*>"#)
        let value = try! Regex(#"\bdata-value="([^"]*)""#)
        for match in html.matches(of: tag) {
            let text = String(html[match.range])
            guard let name = match.output[1].substring, let raw = text.firstMatch(of: value)?.output[1].substring,
                  let number = Double(raw) else { continue }
            figures[String(name)] = number
        }
        return figures
    }

    /// The page's figures as its elements show them: `data-stat` name -> text.
    static func figureTexts(_ html: String) -> [String: String] {
        var texts: [String: String] = [:]
        for match in html.matches(of: try! Regex(#"<span data-stat="([^"]+)"[^>]*>([^<]*)</span>"#)) {
            guard let name = match.output[1].substring, let text = match.output[2].substring else { continue }
            texts[String(name)] = String(text)
        }
        return texts
    }

    /// The `display` of /stats as the page's script reads it: each figure's text by name, and the gauges' texts.
    struct Display: Decodable {
        struct Shown: Decodable { var text: String }
        struct Gauge: Decodable { var text: String; var note: String }
        var figures: [String: Shown]
        var gauges: [String: Gauge]
        var figureTexts: [String: String] { figures.mapValues(\.text) }
    }

    static func display(_ harness: ProxyHarness) async throws -> Display {
        struct Document: Decodable { var display: Display }
        return try JSONDecoder().decode(Document.self, from: Data(try await harness.get("/_imagecached/stats").body)).display
    }

    /// What each figure must say, computed from a /stats document (the page's contract; uptime aside).
    static func expectedFigures(_ stats: DaemonStats) -> [String: Double] {
        var figures: [String: Double] = [:]
        figures["requests.total"] = Double(stats.requests.values.reduce(0, +))
        for outcome in ServedOutcome.allCases { figures["requests." + outcome.rawValue] = Double(stats.requests[outcome.rawValue] ?? 0) }
        figures["hitRatio"] = stats.hitRatio
        let served = stats.servedBytes.values.reduce(0, +)
        figures["byteHitRatio"] = served == 0 ? 0 : Double(stats.bytesServedFromCache) / Double(served)
        figures["servedBytes.total"] = Double(served)
        figures["servedBytes.fromCache"] = Double(stats.bytesServedFromCache)
        figures["upstream.bytes"] = Double(stats.upstream.bytes)
        figures["upstream.transfers"] = Double(stats.upstream.transfers.values.reduce(0, +))
        figures["upstream.inFlight"] = Double(stats.upstream.inFlight)
        figures["coalescing.fetches"] = Double(stats.coalescing.fetches)
        figures["coalescing.waiters"] = Double(stats.coalescing.waiters)
        figures["coalescing.saved"] = Double(stats.coalescing.waiters - stats.coalescing.fetches)
        figures["memory.bytes"] = Double(stats.memory.bytes)
        figures["memory.entries"] = Double(stats.memory.entries)
        figures["memory.limitBytes"] = Double(stats.memory.limitBytes)
        figures["memory.evictions"] = Double(stats.memory.evictions)
        if let disk = stats.disk {
            figures["disk.bytes"] = Double(disk.bytes)
            figures["disk.entries"] = Double(disk.entries)
            figures["disk.limitBytes"] = Double(disk.limitBytes)
            figures["disk.evictions"] = Double(disk.evicted)
        }
        figures["errors.total"] = Double(stats.errors.values.reduce(0, +))
        if let transforms = stats.transforms {
            figures["transforms.total"] = Double(transforms.total)
            if let mean = transforms.meanMilliseconds { figures["transforms.meanMilliseconds"] = Double(mean) }
        }
        return figures
    }

    /// Differences between the page's figures and those /stats implies (empty: they agree).
    static func mismatches(page: [String: Double], stats: DaemonStats) -> [String] {
        expectedFigures(stats).sorted { $0.key < $1.key }.compactMap { name, expected in
            guard let shown = page[name] else { return "\(name): missing (expected \(expected))" }
            return abs(shown - expected) <= 1e-9 * max(1, abs(expected)) ? nil : "\(name): page \(shown), /stats \(expected)"
        }
    }

    /// What in `html` would make a browser load something: an element that loads, an attribute that names a resource,
    /// or a url()/@import/absolute URL in the inline style or script. Text (the URLs the tables show) is not looked at:
    /// only tags, and the contents of <style> and <script> elements that run.
    static func externalReferences(_ html: String) -> [String] {
        var found: [String] = []
        let tag = try! Regex(#"<([a-zA-Z][a-zA-Z0-9-]*)([^>]*)>"#)
        let loading = ["link", "img", "iframe", "object", "embed", "base", "frame", "audio", "video", "source", "track", "image", "use", "form"]
        // (a data: URL loads nothing: the page's icon is one, so that a browser does not ask for /favicon.ico)
        let attribute = try! Regex(#"(?i)\s(src|href|xlink:href|srcset|action|formaction|poster|background|data|ping)\s*=\s*(?!"data:)"#)
        for match in html.matches(of: tag) {
            let name = String(match.output[1].substring ?? "").lowercased()
            let attributes = match.output[2].substring ?? ""
            if loading.contains(name) && !(name == "link" && attributes.contains("href=\"data:")) { found.append("<\(name)>") }
            if let bad = attributes.firstMatch(of: attribute) {
                found.append("<\(name)> \(attributes[bad.range])")
            }
            if name == "meta", match.output[2].substring?.lowercased().contains("http-equiv") == true { found.append("<meta http-equiv>") }
        }
        let code = try! Regex(#"<(style|script)>([\s\S]*?)</\1>"#)
        for match in html.matches(of: code) {
            let element = String(match.output[1].substring ?? "")
            let text = String(match.output[2].substring ?? "").lowercased().replacingOccurrences(of: "http://www.w3.org/2000/svg", with: "")
            let needles = element == "style" ? ["url(", "@import", "http://", "https://"] : ["http://", "https://", "import(", "importscripts"]
            for needle in needles where text.contains(needle) { found.append("\(needle) in <\(element)>") }
        }
        return found
    }

    /// Misses, hits, four coalesced clients, an origin 404 and a refused request.
    static func scriptedTraffic(_ harness: ProxyHarness) async throws {
        harness.origin.route("/a.png") { _ in OperationsTests.image() }
        let gate = Gate()
        harness.origin.route("/c.png") { _ in OperationsTests.image(gate: gate) }
        _ = try await harness.get("/a.png")
        _ = try await harness.get("/a.png")
        _ = try await harness.get("/a.png")
        let connections = try await harness.waitingClients(4, on: "/c.png")
        gate.open()
        let coalesced = try await readAll(connections)
        #expect(coalesced.filter { $0.header("X-Cache") == "COALESCED" }.count == 3)
        #expect(try await harness.get("/missing.png").status == 404)
        #expect(try await harness.get("/fetch?url=not-a-url").status == 400)
    }

    /// Records a history sample and returns once it is recorded.
    static func sample(_ harness: ProxyHarness) async {
        let proxy = harness.daemon.proxy
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            proxy.recordHistorySample { done.resume() }
        }
    }

    @Test("the page's figures equal /stats after a scripted sequence of hits, misses and coalesced requests, at both its paths")
    func figuresEqualStats() async throws {
        // Given a daemon that served misses, hits, coalesced clients, a 404 and a refusal
        let harness = try ProxyHarness { $0.negativeTTLSeconds = 0 }
        try await Self.scriptedTraffic(harness)
        await harness.flushDisk()
        // When /stats and the page are read (admin requests count in no figure)
        let stats = try await OperationsTests.stats(harness)
        let display = try await Self.display(harness)
        let page = try await harness.get("/_imagecached/")
        let status = try await harness.get("/_imagecached/status")
        // Then every figure is the one /stats implies
        #expect(page.status == 200 && status.status == 200)
        #expect(stats.requests["hit"] == 2 && stats.requests["coalesced"] == 3 && stats.requests["miss"] == 3 && stats.requests["error"] == 1)
        #expect(Self.mismatches(page: Self.figures(page.text), stats: stats) == [])
        #expect(Self.mismatches(page: Self.figures(status.text), stats: stats) == [])
        #expect(Self.figures(page.text)["coalescing.saved"] == 3)
        // ... and shows each as the text /stats sends for the script (formatted once, by the daemon)
        #expect(Self.figureTexts(page.text) == display.figureTexts)
        #expect(Self.figureTexts(page.text)["requests.total"] == "9")
        // ... and the page is served as a document no other site can frame, load scripts into, or keep
        #expect(page.header("Content-Type") == "text/html; charset=utf-8")
        #expect(page.header("Cache-Control") == "no-store")
        #expect(page.header("X-Frame-Options") == "DENY")
        let policy = page.header("Content-Security-Policy") ?? ""
        for directive in ["default-src 'none'", "connect-src 'self'", "frame-ancestors 'none'", "script-src 'sha256-"] {
            #expect(policy.contains(directive), "CSP lacks \(directive): \(policy)")
        }
        // ... naming the errors with their reasons
        #expect(page.text.contains("bad url parameter: "))
        // ... and loading nothing from anywhere (the URLs its tables show are text)
        #expect(page.text.contains("/missing.png"))
        #expect(Self.externalReferences(page.text) == [])
        #expect(Self.externalReferences("<p>x</p><img src=x><a href='//e'>") == ["<img>", "<img>  src=", "<a>  href="])   // the scan can fail
    }

    @Test("the history holds what happened between samples at the clock's times; ?since keeps the later ones; the interval in progress is current")
    func historySamples() async throws {
        // Given a daemon whose first sample saw nothing
        let harness = try ProxyHarness { $0.diskLimitBytes = 0 }
        harness.origin.route("/a.png") { _ in OperationsTests.image() }
        let start = harness.clock.now().timeIntervalSince1970
        harness.clock.advance(10)
        await Self.sample(harness)
        // When a miss and two hits happen in the next interval, then one hit in the interval in progress
        _ = try await harness.get("/a.png")
        _ = try await harness.get("/a.png")
        _ = try await harness.get("/a.png")
        harness.clock.advance(10)
        await Self.sample(harness)
        _ = try await harness.get("/a.png")
        harness.clock.advance(4)
        let response = try await harness.get("/_imagecached/stats/history")
        let document = try JSONDecoder().decode(HistoryDocument.self, from: Data(response.body))
        // Then
        #expect(response.status == 200 && response.header("Content-Type") == "application/json")
        #expect(document.interval == 10 && document.capacity == 360)
        #expect(document.samples.map(\.t) == [start + 10, start + 20])
        #expect(document.samples[0].requests.isEmpty)
        #expect(document.samples[1].requests == ["miss": 1, "hit": 2])
        #expect(document.samples[1].servedBytes == ["miss": OperationsTests.png.count, "hit": 2 * OperationsTests.png.count])
        #expect(document.samples[1].fetches == 1 && document.samples[1].memoryEntries == 1)
        #expect(document.current.requests == ["hit": 1] && document.current.seconds == 4 && document.now == start + 24)
        let later = try await harness.get("/_imagecached/stats/history?since=\(Int(start + 10))")
        #expect(try JSONDecoder().decode(HistoryDocument.self, from: Data(later.body)).samples.map(\.t) == [start + 20])
        // A query it does not understand is refused with the reason, never answered with everything
        for query in ["?since=soon", "?from=1", "?since=1&since=2"] {
            let refused = try await harness.get("/_imagecached/stats/history" + query)
            #expect(refused.status == 400 && refused.text.contains("since"), "\(query)")
        }
    }

    @Test("the page and its history follow the admin rules: cross-site 403, the token (Bearer, or Basic as a browser sends it), GET only; /_imagecached redirects")
    func adminRules() async throws {
        // Given a daemon with an admin token
        let token = "0123456789abcdef-status"
        let harness = try ProxyHarness { $0.adminToken = token }
        let basic = "Basic " + Data("admin:\(token)".utf8).base64EncodedString()
        for path in ["/_imagecached/", "/_imagecached/status", "/_imagecached/stats/history"] {
            // When asked without the token, with it, and from another site
            let without = try await harness.get(path)
            let bearer = try await harness.get(path, headers: [("Authorization", "Bearer \(token)")])
            let browser = try await harness.get(path, headers: [("Authorization", basic)])
            let crossSite = try await harness.get(path, headers: [("Authorization", basic), ("Sec-Fetch-Site", "cross-site")])
            let post = try await harness.get(path, method: "DELETE", headers: [("Authorization", basic)])
            // Then
            #expect(without.status == 401, "\(path)")
            #expect(without.headers.contains { $0.0 == "WWW-Authenticate" && $0.1.hasPrefix("Basic realm=\"imagecached\"") }, "\(path)")
            #expect(bearer.status == 200 && browser.status == 200, "\(path)")
            #expect(crossSite.status == 403, "\(path)")
            #expect(post.status == 405, "\(path)")
        }
        let redirect = try await harness.get("/_imagecached", headers: [("Authorization", basic)])
        #expect(redirect.status == 301 && redirect.header("Location") == "_imagecached/")   // relative: kept under a prefix
    }

    @Test("/stats lists the fetch in flight with its waiters, and the last errors with their status, reason and target, newest first")
    func inFlightAndErrors() async throws {
        // Given three clients waiting on one held fetch
        let harness = try ProxyHarness { $0.diskLimitBytes = 0 }
        let gate = Gate()
        harness.origin.route("/held.png") { _ in OperationsTests.image(gate: gate) }
        harness.origin.route("/broken.png") { _ in Reply(status: 503, headers: [("Content-Type", "text/plain")], body: Array("down".utf8)) }
        let connections = try await harness.waitingClients(3, on: "/held.png")
        // When /stats is read while they wait, then after two errors
        let during = try await OperationsTests.stats(harness)
        gate.open()
        _ = try await readAll(connections)
        _ = try await harness.get("/broken.png")
        let refused = try await harness.get("/fetch?url=ftp%3A%2F%2Fexample.com%2Fx.png")
        let after = try await OperationsTests.stats(harness)
        // Then
        let fetch = during.inFlightFetches?.first
        #expect(fetch?.url.hasSuffix("/held.png") == true && fetch?.waiters == 3 && fetch?.kind == "fetch")
        #expect(after.inFlightFetches == [])
        let errors = after.recentErrors ?? []
        #expect(errors.count == 2)
        #expect(errors.first?.kind == "refused_400" && errors.first?.status == 400)
        #expect(errors.first.map { $0.reason + "\n" } == refused.text)
        #expect(errors.first?.target == "/fetch?url=ftp%3A%2F%2Fexample.com%2Fx.png")
        #expect(errors.last?.kind == "upstream_status_5xx" && errors.last?.status == 503 && errors.last?.target.hasSuffix("/broken.png") == true)
        #expect(errors.last?.time == harness.clock.now().timeIntervalSince1970)
    }
}
