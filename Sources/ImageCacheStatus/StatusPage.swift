// StatusPage: the HTML status page (/_imagecached/ and /_imagecached/status). A pure renderer: a DaemonStats and a
// HistoryDocument in, the document's bytes out; no I/O, no clock, no state.
//
// Data model
//   figures   one list, `figures(for:)`: every number on the page, by name, with its label, unit and exact value.
//             Each is written as <span data-stat=NAME data-unit=UNIT data-value=RAW>formatted</span>; the page's
//             script recomputes the same names from the polled /stats JSON (StatusPage+Script.swift,
//             `figureValues`) and formats them with the same rules as `Format` below.
//   tables    in flight, top hosts, recent errors, transforms: rendered here with every text through `escape`
//             (URLs, hosts and reasons come from clients and origins), re-rendered by the script with textContent.
//   charts    drawn by the script only, from the embedded initial data (<script type="application/json"
//             id="initial-data">) and then from the polled history; `<noscript>` says so where they would be.
//   assets    the style and script are the raw string literals of StatusPage+Style.swift and StatusPage+Script.swift,
//             inlined, and allowed by `contentSecurityPolicy` by their SHA-256 alone: the page loads nothing from
//             anywhere (it works offline), and carries no style= attribute (the policy would block it).
// Ownership: none. Everything here is a value computed per request on the caller's queue.

internal import ImageCacheHTTP
internal import Foundation

package enum StatusPage {
    /// The whole HTML document: figures and tables rendered from `stats` (so it is complete with JavaScript off),
    /// the charts drawn by the page's own script from `history`, then refreshed every `refreshMilliseconds`
    /// (0: no live updates) by polling the JSON endpoints.
    package static func render(stats: DaemonStats, history: HistoryDocument, refreshMilliseconds: Int) -> [UInt8] {
        var page = Page(stats: stats, history: history)
        page.document(refreshMilliseconds: max(0, refreshMilliseconds))
        return Array(page.html.utf8)
    }

    /// The Content-Security-Policy header for the page: its inline script and style by hash, fetches to its own
    /// origin only, nothing else.
    package static let contentSecurityPolicy: String =
        "default-src 'none'; script-src 'sha256-\(ContentHash.sha256Base64(script))'; "
        + "style-src 'sha256-\(ContentHash.sha256Base64(style))'; img-src data:; connect-src 'self'; "
        + "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

    // MARK: - Figures

    /// One number on the page.
    struct Figure: Equatable {
        enum Unit: String { case count, bytes, ratio, duration, milliseconds }
        enum Value: Equatable {
            case int(Int), double(Double)
            /// What data-value holds: the exact number, as Swift prints it.
            var raw: String {
                switch self {
                case .int(let value): String(value)
                case .double(let value): String(describing: value)
                }
            }
        }
        /// Where on the page it goes.
        enum Group { case header, overview, outcomes, coalescing, memory, disk, transforms }

        var group: Group
        var name: String
        var label: String
        var value: Value
        var unit: Unit

        init(_ group: Group, _ name: String, _ label: String, _ value: Value, _ unit: Unit) {
            (self.group, self.name, self.label, self.value, self.unit) = (group, name, label, value, unit)
        }

        var formatted: String {
            switch (value, unit) {
            case (.int(let v), .count): Format.count(v)
            case (.int(let v), .bytes): Format.bytes(Double(v))
            case (.int(let v), .milliseconds): Format.count(v) + " ms"
            case (.double(let v), .ratio): Format.percent(v)
            case (.double(let v), .duration): Format.duration(v)
            case (.int(let v), _): Format.count(v)
            case (.double(let v), _): Format.tenths(v)
            }
        }
    }

    /// Every figure on the page, in page order: the one list of names (the script's `figureValues` mirrors it).
    static func figures(for stats: DaemonStats) -> [Figure] {
        let requests = stats.requests.values.reduce(0, +)
        let servedBytes = stats.servedBytes.values.reduce(0, +)
        let fromCache = stats.bytesServedFromCache
        var list: [Figure] = [
            Figure(.header, "uptimeSeconds", "Up", .double(stats.uptimeSeconds), .duration),
            Figure(.overview, "requests.total", "Requests", .int(requests), .count),
            Figure(.overview, "hitRatio", "Hit ratio (requests)", .double(stats.hitRatio), .ratio),
            Figure(.overview, "byteHitRatio", "Hit ratio (bytes)",
                   .double(servedBytes == 0 ? 0 : Double(fromCache) / Double(servedBytes)), .ratio),
            Figure(.overview, "servedBytes.total", "Bytes served", .int(servedBytes), .bytes),
            Figure(.overview, "servedBytes.fromCache", "Served from cache", .int(fromCache), .bytes),
            Figure(.overview, "upstream.bytes", "Fetched upstream", .int(stats.upstream.bytes), .bytes),
            Figure(.overview, "upstream.transfers", "Upstream transfers", .int(stats.upstream.transfers.values.reduce(0, +)), .count),
            Figure(.overview, "upstream.inFlight", "Fetches in flight", .int(stats.upstream.inFlight), .count),
            Figure(.overview, "errors.total", "Errors", .int(stats.errors.values.reduce(0, +)), .count),
        ]
        for outcome in ServedOutcome.allCases {
            list.append(Figure(.outcomes, "requests.\(outcome.rawValue)", outcome.rawValue, .int(stats.requests[outcome.rawValue] ?? 0), .count))
        }
        let coalescing = stats.coalescing
        list += [
            Figure(.coalescing, "coalescing.fetches", "Fetches ended", .int(coalescing.fetches), .count),
            Figure(.coalescing, "coalescing.waiters", "Clients they served", .int(coalescing.waiters), .count),
            Figure(.coalescing, "coalescing.saved", "Upstream requests saved", .int(coalescing.waiters - coalescing.fetches), .count),
        ]
        func tier(_ group: Figure.Group, _ name: String, bytes: Int, limitBytes: Int, entries: Int, evictions: Int) -> [Figure] {
            [Figure(group, "\(name).bytes", "Held", .int(bytes), .bytes),
             Figure(group, "\(name).limitBytes", "Limit", .int(limitBytes), .bytes),
             Figure(group, "\(name).entries", "Entries", .int(entries), .count),
             Figure(group, "\(name).evictions", "Evictions", .int(evictions), .count)]
        }
        let memory = stats.memory
        list += tier(.memory, "memory", bytes: memory.bytes, limitBytes: memory.limitBytes, entries: memory.entries, evictions: memory.evictions)
        if let disk = stats.disk {
            list += tier(.disk, "disk", bytes: disk.bytes, limitBytes: disk.limitBytes, entries: disk.entries, evictions: disk.evicted)
        }
        if let transforms = stats.transforms {
            list.append(Figure(.transforms, "transforms.total", "Transforms", .int(transforms.total), .count))
            if let mean = transforms.meanMilliseconds {
                list.append(Figure(.transforms, "transforms.meanMilliseconds", "Mean time on a worker", .int(mean), .milliseconds))
            }
        }
        return list
    }

    // MARK: - Text

    /// Escapes text for HTML content and quoted attribute values: & < > " '.
    static func escape(_ text: String) -> String {
        replacing(text) { character in
            switch character {
            case "&": "&amp;"
            case "<": "&lt;"
            case ">": "&gt;"
            case "\"": "&quot;"
            case "'": "&#39;"
            default: nil
            }
        }
    }

    /// `text` with each character that `replacement` names replaced by what it gives (nil: kept).
    private static func replacing(_ text: String, _ replacement: (Unicode.Scalar) -> String?) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for character in text.unicodeScalars {
            if let replaced = replacement(character) { out += replaced } else { out.unicodeScalars.append(character) }
        }
        return out
    }

    /// Number formats, the same rules as the script's (`groupDigits`, `tenths`, `formatBytes`, ...).
    enum Format {
        /// 1234567 -> "1,234,567".
        static func count(_ value: Int) -> String {
            var digits = String(value.magnitude)
            var out = ""
            while digits.count > 3 {
                out = "," + digits.suffix(3) + out
                digits.removeLast(3)
            }
            return (value < 0 ? "-" : "") + digits + out
        }

        /// One decimal, rounded half up: 2.25 -> "2.3" (non-negative values).
        static func tenths(_ value: Double) -> String {
            let tenths = Int((value * 10).rounded())
            return "\(tenths / 10).\(tenths % 10)"
        }

        /// Bytes in B, KiB, MiB, GiB, TiB, PiB.
        static func bytes(_ value: Double) -> String {
            if value < 1024 { return count(Int(value.rounded())) + " B" }
            let units = ["KiB", "MiB", "GiB", "TiB", "PiB"]
            var scaled = value / 1024
            var unit = 0
            while scaled >= 1024, unit < units.count - 1 {
                scaled /= 1024
                unit += 1
            }
            return tenths(scaled) + " " + units[unit]
        }

        /// 0.8765 -> "87.7%".
        static func percent(_ ratio: Double) -> String { tenths(ratio * 100) + "%" }

        /// Seconds as the two largest units: "3d 4h", "4h 5m", "5m 6s", "6s".
        static func duration(_ seconds: Double) -> String {
            let whole = Int(max(0, seconds).rounded(.down))
            let (days, hours, minutes, rest) = (whole / 86400, whole % 86400 / 3600, whole % 3600 / 60, whole % 60)
            if days > 0 { return "\(days)d \(hours)h" }
            if hours > 0 { return "\(hours)h \(minutes)m" }
            if minutes > 0 { return "\(minutes)m \(rest)s" }
            return "\(rest)s"
        }

        /// Seconds since 1970 as "HH:MM:SS UTC" (the script shows local time).
        static func clock(_ time: Double) -> String {
            let second = ((Int(time.rounded(.down)) % 86400) + 86400) % 86400
            func two(_ value: Int) -> String { value < 10 ? "0\(value)" : "\(value)" }
            return "\(two(second / 3600)):\(two(second % 3600 / 60)):\(two(second % 60)) UTC"
        }

        static func isoTime(_ time: Double) -> String { Date(timeIntervalSince1970: time).ISO8601Format() }
    }

    /// The page's data for its script, as JSON that cannot end the <script> element it sits in.
    static func initialData(stats: DaemonStats, history: HistoryDocument) -> String {
        struct InitialData: Encodable {
            var stats: DaemonStats
            var history: HistoryDocument
        }
        let data = StatsJSON.encode(InitialData(stats: stats, history: history), [.withoutEscapingSlashes])
        return replacing(String(decoding: data, as: UTF8.self)) { character in
            switch character {
            case "<": "\\u003c"
            case ">": "\\u003e"
            case "&": "\\u0026"
            default: nil
            }
        }
    }
}

// MARK: - The document

extension StatusPage {
    /// Series classes of the line charts (colours in the style: c0 ... c9); the outcomes take c<index>.
    enum Series {
        static let requests = "c0", bytes = "c5", fromCache = "c0", upstream = "c3", mean = "c5", p95 = "c9"
    }

    /// The document being written.
    struct Page {
        let stats: DaemonStats
        let history: HistoryDocument
        let figures: [Figure]
        var html = ""

        init(stats: DaemonStats, history: HistoryDocument) {
            self.stats = stats
            self.history = history
            figures = StatusPage.figures(for: stats)
            html.reserveCapacity(64 * 1024)
        }

        mutating func document(refreshMilliseconds: Int) {
            html += """
                <!DOCTYPE html>
                <html lang="en" data-refresh-ms="\(refreshMilliseconds)" data-live="\(refreshMilliseconds > 0 ? "live" : "off")">
                <head>
                <meta charset="utf-8">
                <meta name="viewport" content="width=device-width, initial-scale=1">
                <meta name="color-scheme" content="light dark">
                <title>imagecached status</title>
                <link rel="icon" href="data:,">
                <style>\(StatusPage.style)</style>
                </head>
                <body>

                """
            header(refreshMilliseconds: refreshMilliseconds)
            html += "<pre id=\"script-errors\" hidden></pre>\n<main class=\"grid\">\n"
            overview()
            hitRatioChart()
            requestsChart()
            bytesChart()
            tiers()
            inFlight()
            topHosts()
            recentErrors()
            if stats.transforms != nil { transforms() }
            html += "</main>\n<script type=\"application/json\" id=\"initial-data\">"
            html += StatusPage.initialData(stats: stats, history: history)
            html += "</script>\n<script>\(StatusPage.script)</script>\n</body>\n</html>\n"
        }

        // MARK: Pieces

        func stat(_ name: String) -> String {
            guard let figure = figures.first(where: { $0.name == name }) else { return "" }
            return stat(figure)
        }

        func stat(_ figure: Figure) -> String {
            "<span data-stat=\"\(escape(figure.name))\" data-unit=\"\(figure.unit.rawValue)\" data-value=\"\(figure.value.raw)\">"
                + escape(figure.formatted) + "</span>"
        }

        /// A <dl> of every figure in `group`.
        mutating func figureList(_ group: Figure.Group, small: Bool = false) {
            html += small ? "<dl class=\"figures small\">\n" : "<dl class=\"figures\">\n"
            for figure in figures where figure.group == group {
                html += "<div><dt>\(escape(figure.label))</dt><dd>\(stat(figure))</dd></div>\n"
            }
            html += "</dl>\n"
        }

        mutating func header(refreshMilliseconds: Int) {
            let state = refreshMilliseconds > 0 ? "live" : "static: live updates are off"
            html += """
                <header class="top">
                <h1>imagecached</h1>
                <span class="version">\(escape(stats.version.isEmpty ? "version unknown" : stats.version))</span>
                <span class="meta">up \(stat("uptimeSeconds"))</span>
                <span id="live-state" class="live-state">\(state)</span>
                <span class="meta">last refresh <time id="last-refresh" datetime="\(Format.isoTime(history.now))">\(Format.clock(history.now))</time></span>
                <button type="button" id="live-toggle" hidden>Pause</button>
                <span id="connection" class="connection" role="status" hidden></span>
                </header>

                """
        }

        mutating func openCard(_ id: String, _ title: String, caption: String, wide: Bool = false) {
            html += "<section class=\"card\(wide ? " wide" : "")\" id=\"\(id)\">\n<h2>\(escape(title))</h2>\n"
            html += "<p class=\"caption\">\(escape(caption))</p>\n"
        }

        mutating func chart(_ id: String, label: String, legend: [(className: String, label: String)]) {
            html += "<noscript><p class=\"noscript\">Charts need JavaScript; the figures are as of this page's load.</p></noscript>\n"
            html += "<svg id=\"\(id)\" class=\"chart\" viewBox=\"0 0 640 230\" role=\"img\" aria-label=\"\(escape(label))\" "
                + "data-empty=\"No samples yet. The first is recorded after one interval (\(escape(Format.duration(history.interval)))).\"></svg>\n"
            html += "<ul class=\"legend\">"
            for item in legend {
                html += "<li><span class=\"swatch \(item.className)\"></span>\(escape(item.label))</li>"
            }
            html += "</ul>\n"
        }

        mutating func overview() {
            openCard("overview", "Overview", caption: "Since the daemon started.", wide: true)
            figureList(.overview)
            html += "</section>\n"
        }

        mutating func hitRatioChart() {
            openCard("section-hit-ratio", "Hit ratio over time",
                     caption: "Share of requests, and of body bytes, answered from stored bytes ("
                        + history.fromCache.joined(separator: ", ") + ") in each interval.")
            chart("chart-hit-ratio", label: "Hit ratio over time",
                  legend: [(Series.requests, "requests"), (Series.bytes, "bytes")])
            html += "</section>\n"
        }

        mutating func requestsChart() {
            openCard("section-requests", "Requests by outcome", caption: "Requests per second in each interval, stacked by how they were answered.")
            chart("chart-requests", label: "Requests per second by outcome",
                  legend: history.outcomes.enumerated().map { ("c\($0.offset % 10)", $0.element) })
            html += "<details open><summary>Requests by outcome since start</summary>\n"
            figureList(.outcomes, small: true)
            html += "</details>\n</section>\n"
        }

        mutating func bytesChart() {
            openCard("section-bytes", "Bytes: cache against upstream",
                     caption: "Body bytes per second served from stored bytes, against bytes fetched from origins.")
            chart("chart-bytes", label: "Bytes per second from the cache and from upstream",
                  legend: [(Series.fromCache, "served from cache"), (Series.upstream, "fetched upstream")])
            html += "</section>\n"
        }

        mutating func tiers() {
            openCard("section-tiers", "Cache tiers", caption: "Bytes held against each tier's limit, entries, and entries evicted to respect it.")
            html += "<div class=\"gauges\">\n"
            html += "<div class=\"tier\"><h3>Memory</h3><svg id=\"gauge-memory\" class=\"gauge\" viewBox=\"0 0 120 72\" role=\"img\" aria-label=\"Memory tier: bytes of limit\"></svg>\n"
            figureList(.memory, small: true)
            html += "</div>\n"
            if stats.disk != nil {
                html += "<div class=\"tier\"><h3>Disk</h3><svg id=\"gauge-disk\" class=\"gauge\" viewBox=\"0 0 120 72\" role=\"img\" aria-label=\"Disk tier: bytes of limit\"></svg>\n"
                figureList(.disk, small: true)
                html += "</div>\n"
            } else {
                html += "<div class=\"tier\"><h3>Disk</h3><p class=\"muted\">No disk tier configured.</p></div>\n"
            }
            html += "</div>\n</section>\n"
        }

        /// A table: header cells (a leading "#" marks a numeric column), rows of escaped cells, a text when empty.
        mutating func table(_ id: String, columns: [String], rows: [[Cell]], empty: String) {
            html += "<div class=\"table-wrap\"><table id=\"\(id)\" data-empty=\"\(escape(empty))\">\n<thead><tr>"
            for column in columns {
                html += column.hasPrefix("#") ? "<th class=\"num\">\(escape(String(column.dropFirst())))</th>" : "<th>\(escape(column))</th>"
            }
            html += "</tr></thead>\n<tbody>\n"
            if rows.isEmpty {
                html += "<tr class=\"empty\"><td colspan=\"\(columns.count)\">\(escape(empty))</td></tr>\n"
            }
            for row in rows {
                html += "<tr>" + row.map(\.html).joined() + "</tr>\n"
            }
            html += "</tbody>\n</table></div>\n"
        }

        mutating func inFlight() {
            openCard("section-in-flight", "In flight", caption: "Fetches and transforms under way, the most waited-on first; coalescing since start.")
            figureList(.coalescing, small: true)
            let rows = (stats.inFlightFetches ?? []).map { fetch in
                [Cell.text(fetch.url, "url"), .text(fetch.kind), .text(Format.count(fetch.waiters), "num"),
                 .text(Format.bytes(Double(fetch.receivedBytes)), "num"), .text(Format.tenths(fetch.seconds) + " s", "num")]
            }
            table("in-flight", columns: ["URL", "Kind", "#Waiters", "#Received", "#Age"], rows: rows, empty: "Nothing in flight.")
            html += "</section>\n"
        }

        mutating func topHosts() {
            openCard("section-top-hosts", "Top hosts", caption: "Origins with the most upstream transfers since start.")
            let most = max(1, stats.topHosts.map(\.transfers).max() ?? 1)
            let rows = stats.topHosts.map { host in
                [Cell.text(host.host, "url"), .text(Format.count(host.transfers), "num"), .text(Format.bytes(Double(host.bytes)), "num"),
                 .bar(Double(host.transfers) / Double(most))]
            }
            table("top-hosts", columns: ["Host", "#Transfers", "#Bytes", ""], rows: rows, empty: "No upstream transfers yet.")
            html += "</section>\n"
        }

        mutating func recentErrors() {
            openCard("section-recent-errors", "Recent errors", caption: "The last errors, newest first.", wide: true)
            let rows = (stats.recentErrors ?? []).map { error in
                [Cell.time(error.time), .text(error.kind), .text(error.status.map(String.init) ?? "–", "num"),
                 .text(error.reason, "reason"), .text(error.target, "url")]
            }
            table("recent-errors", columns: ["Time", "Kind", "#Status", "Reason", "Target"], rows: rows, empty: "No errors since start.")
            html += "</section>\n"
        }

        mutating func transforms() {
            guard let transforms = stats.transforms else { return }
            openCard("section-transforms", "Transforms",
                     caption: "Transforms ended since start, by output format and result; time on a worker per interval.", wide: true)
            figureList(.transforms, small: true)
            html += "<div class=\"split\"><div>\n"
            var rows: [[Cell]] = []
            for (format, results) in transforms.results.sorted(by: { $0.key < $1.key }) {
                for (result, count) in results.sorted(by: { $0.key < $1.key }) {
                    rows.append([.text(format), .text(result), .text(Format.count(count), "num")])
                }
            }
            table("transforms", columns: ["Format", "Result", "#Count"], rows: rows, empty: "No transforms yet.")
            html += "</div><div>\n"
            chart("chart-transform-latency", label: "Transform latency over time, milliseconds",
                  legend: [(Series.mean, "mean"), (Series.p95, "p95")])
            html += "</div></div>\n</section>\n"
        }
    }

    /// One table cell.
    enum Cell {
        case text(String, String? = nil)
        case time(Double)
        case bar(Double)

        var html: String {
            switch self {
            case .text(let text, let className):
                return (className.map { "<td class=\"\($0)\">" } ?? "<td>") + escape(text) + "</td>"
            case .time(let time):
                return "<td><time datetime=\"\(Format.isoTime(time))\">\(Format.clock(time))</time></td>"
            case .bar(let fraction):
                let width = Format.tenths(min(1, max(0, fraction)) * 100)
                return "<td class=\"bar-cell\"><svg class=\"bar\" viewBox=\"0 0 100 8\" preserveAspectRatio=\"none\" aria-hidden=\"true\">"
                    + "<rect class=\"bar-track\" width=\"100\" height=\"8\"/><rect class=\"bar-fill\" width=\"\(width)\" height=\"8\"/></svg></td>"
            }
        }
    }
}
