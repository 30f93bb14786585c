// The status page in a real browser: Debian's chromium, headless, against the in-process daemon on 127.0.0.1.
// Chromium runs with virtual time (--virtual-time-budget): the page's timers fire as fast as the page allows, and
// the budget stops while a fetch is pending, so "after the first refresh" is an event the DOM records
// (data-refreshes), not a wait. Chromium is installed by scripts/install-deps --test; without it this suite fails
// and says so.

import Foundation
import Synchronization
import Testing
import ImageCacheTestSupport
@testable import ImageCacheConfig
@testable import ImageCacheStatus
@testable import ImageCacheCore
@testable import ImageCacheOps
import ImageCacheSystem

@Suite("Status page in headless Chromium", .timeLimit(.minutes(2)))
struct BrowserTests {
    static let root = RepositoryPath.root

    /// Where the screenshot goes: $IMAGECACHED_TEST_OUTPUT, else .build/test-output.
    static var outputDirectory: URL {
        if let directory = ProcessInfo.processInfo.environment["IMAGECACHED_TEST_OUTPUT"] { return URL(fileURLWithPath: directory) }
        return root.appendingPathComponent(".build/test-output")
    }

    struct ChromiumMissing: Error, CustomStringConvertible {
        var description: String { "chromium is not installed: run scripts/install-deps --test (apt-get install chromium)" }
    }

    /// Runs headless Chromium with `arguments` on `url`; its standard output and error once it exits.
    static func chromium(_ arguments: [String], url: String) async throws -> (output: String, errors: String) {
        guard let binary = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].first(where: { FileManager.default.isExecutableFile(atPath: $0) })
        else { throw ChromiumMissing() }
        let profile = NSTemporaryDirectory() + "imagecached-chromium-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: profile) }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        // Nothing but the daemon on 127.0.0.1: no proxy, no background or component traffic.
        process.arguments = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--user-data-dir=" + profile,
                             "--no-first-run", "--no-default-browser-check", "--no-proxy-server", "--disable-background-networking",
                             "--disable-component-update", "--disable-sync", "--disable-extensions", "--disable-domain-reliability",
                             "--no-pings", "--disable-crash-reporter", "--disable-breakpad", "--hide-scrollbars", "--enable-logging=stderr", "--v=0", "--timeout=60000"] + arguments + [url]
        // Its output goes to files, not pipes: a helper process Chromium leaves behind (crash handler, zygote) may
        // hold a pipe open after the browser exits, and a reader waiting for its end would never return.
        let outputPath = profile + ".out", errorPath = profile + ".err"
        defer {
            try? FileManager.default.removeItem(atPath: outputPath)
            try? FileManager.default.removeItem(atPath: errorPath)
        }
        guard FileManager.default.createFile(atPath: outputPath, contents: nil), FileManager.default.createFile(atPath: errorPath, contents: nil),
              let output = FileHandle(forWritingAtPath: outputPath), let errors = FileHandle(forWritingAtPath: errorPath)
        else { throw ChromiumFailed(reason: "cannot create its output files in \(NSTemporaryDirectory())") }
        process.standardOutput = output
        process.standardError = errors
        let exited = DispatchSemaphore(value: 0)
        process.terminationHandler = { _ in exited.signal() }
        try process.run()
        try? output.close()
        try? errors.close()
        return try await offPool {
            // The browser ends itself (--timeout, the virtual time budget); past 90 s it is stopped and the test fails
            // with that reason rather than waiting for ever.
            if exited.wait(timeout: .now() + 90) == .timedOut {
                process.terminate()
                _ = exited.wait(timeout: .now() + 10)
                throw ChromiumFailed(reason: "chromium did not exit within 90 s")
            }
            let read = { (path: String) in String(decoding: FileManager.default.contents(atPath: path) ?? Data(), as: UTF8.self) }
            return (read(outputPath), read(errorPath))
        }
    }

    struct ChromiumFailed: Error, CustomStringConvertible {
        var reason: String
        var description: String { reason }
    }

    @Test("headless Chromium loads the page: after its first refresh the charts are drawn, the figures equal /stats, no script error or console message; a screenshot is saved")
    func pageInChromium() async throws {
        // Given a daemon with traffic spread over six history samples
        let harness = try ProxyHarness { $0.negativeTTLSeconds = 0 }
        try await StatusPageTests.scriptedTraffic(harness)
        harness.origin.route("/b.png") { _ in OperationsTests.image() }
        for round in 1...6 {
            for _ in 0..<round { _ = try await harness.get("/b.png") }
            harness.clock.advance(10)
            await StatusPageTests.sample(harness)
        }
        await harness.flushDisk()
        // ... whose counters change when the page's script first reads /stats: from then on, the figures the page was
        // rendered with are wrong by one error, and only the script's own figures can equal /stats
        let metrics = harness.daemon.proxy.metrics
        let changed = Locked(false)
        harness.statsReads.onRead = {
            guard changed.withLock({ let first = !$0; $0 = true; return first }) else { return }
            metrics.error("refused_418", status: 418, reason: "counted between the page's load and its first refresh", target: "/test")
        }
        let url = "http://127.0.0.1:\(harness.port)/_imagecached/"
        // When Chromium loads the page and lets its timers run (refresh every 2 s, five times over in virtual time)
        let (dom, log) = try await Self.chromium(["--virtual-time-budget=10000", "--dump-dom"], url: url)
        let stats = try await OperationsTests.stats(harness)
        let display = try await StatusPageTests.display(harness)
        // Then it refreshed from the JSON endpoints at least once, without a script error
        let refreshes = dom.firstMatch(of: try Regex(#"data-refreshes="(\d+)""#))?.output[1].substring.flatMap { Int($0) } ?? 0
        #expect(refreshes >= 1, "the page never refreshed: \(dom.prefix(2000))")
        let scriptErrors = dom.firstMatch(of: try Regex(#"<pre id="script-errors"[^>]*>([^<]*)</pre>"#))?.output[1].substring
        #expect(scriptErrors == "", "script errors: \(scriptErrors ?? "no #script-errors element")")
        let console = log.split(separator: "\n").filter { $0.contains(":CONSOLE") }
        #expect(console.isEmpty, "console messages: \(console)")
        // ... its charts are drawn from the six samples
        for chart in ["chart-hit-ratio", "chart-requests", "chart-bytes"] {
            let drawn = dom.firstMatch(of: try Regex(#"<svg[^>]*id="\#(chart)"[\s\S]*?</svg>"#)).map { String(dom[$0.range]) } ?? ""
            #expect(drawn.contains("<path") || drawn.contains("<polyline"), "\(chart) has no line or area: \(drawn.prefix(500))")
        }
        // ... and its figures, as its script set them, are those of /stats (and not those it was rendered with)
        #expect(changed.withLock { $0 })
        #expect(StatusPageTests.mismatches(page: StatusPageTests.figures(dom), stats: stats) == [])
        #expect(StatusPageTests.figures(dom)["errors.total"] == Double(stats.errors.values.reduce(0, +)))
        #expect(dom.contains("counted between the page"))   // the errors table, as the script rebuilt it
        // ... each figure and gauge showing the text /stats sent for it, as it is
        #expect(StatusPageTests.figureTexts(dom) == display.figureTexts)
        for gauge in display.gauges.values {
            #expect(dom.contains(">\(gauge.text)</text>") && dom.contains(">\(gauge.note)</text>"), "gauge text missing: \(gauge)")
        }
        // When a screenshot is taken (light and dark)
        try FileManager.default.createDirectory(at: Self.outputDirectory, withIntermediateDirectories: true)
        for (name, scheme) in [("status-page.png", []), ("status-page-dark.png", ["--force-dark-mode", "--blink-settings=preferredColorScheme=0"])] {
            let file = Self.outputDirectory.appendingPathComponent(name)
            try? FileManager.default.removeItem(at: file)
            _ = try await Self.chromium(["--virtual-time-budget=5000", "--window-size=1280,2200", "--screenshot=" + file.path] + scheme, url: url)
            // Then it is a PNG of the page
            let png = try Data(contentsOf: file)
            #expect(png.starts(with: [0x89, 0x50, 0x4E, 0x47]) && png.count > 20_000, "\(file.path): \(png.count) bytes")
        }
    }
}
