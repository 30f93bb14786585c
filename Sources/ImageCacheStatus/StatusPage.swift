// StatusPage: the HTML status page (/_imagecached/ and /_imagecached/status). A pure renderer: a DaemonStats and a
// HistoryDocument in, the document's bytes out; no I/O, no clock, no state.
//
// Data model
//   text      every figure, table cell, gauge label and time comes from the StatusView of the stats, formatted once
//             (StatusFormat). A figure is written as <span data-stat=NAME data-unit=UNIT data-value=RAW>text</span>,
//             a table as rows of its cells, with every text through `escape` (URLs, hosts and reasons come from
//             clients and origins). The stats documents carry the same view as `display` (the embedded one here,
//             then each polled /stats), and the script puts its text in place as it is: the first render and every
//             poll show the same strings for the same stats.
//   charts    drawn by the script only, from the raw numbers of the embedded initial data (<script
//             type="application/json" id="initial-data">) and then of the polled history; `<noscript>` says so
//             where they would be. The gauges too, from the view's gauges (their arc from `fraction`).
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

    /// The page's data for its script, as JSON that cannot end the <script> element it sits in.
    static func initialData(stats: DaemonStats, history: HistoryDocument) -> String {
        struct InitialData: Encodable {
            /// As /_imagecached/stats sends it: with its `display`.
            var stats: StatsDocument
            var history: HistoryDocument
        }
        let data = StatsJSON.encode(InitialData(stats: StatsDocument(stats), history: history), [.withoutEscapingSlashes])
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
    /// Series classes of the line charts (colours in the style: c0 ... c10); the outcomes take c<index>.
    enum Series {
        static let requests = "c0", bytes = "c5", fromCache = "c0", upstream = "c3", mean = "c5", p95 = "c9"
    }

    /// The document being written.
    struct Page {
        let stats: DaemonStats
        let history: HistoryDocument
        let view: StatusView
        var html = ""

        init(stats: DaemonStats, history: HistoryDocument) {
            self.stats = stats
            self.history = history
            view = StatusView(stats)
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
            if stats.tunnels != nil { tunnels() }
            if stats.fleet != nil { fleet() }
            if stats.interceptCA != nil { interceptCA() }
            html += "</main>\n<script type=\"application/json\" id=\"initial-data\">"
            html += StatusPage.initialData(stats: stats, history: history)
            html += "</script>\n<script>\(StatusPage.script)</script>\n</body>\n</html>\n"
        }

        // MARK: Pieces

        func stat(_ name: String) -> String {
            view.figure(name).map(stat) ?? ""
        }

        func stat(_ figure: StatusView.Figure) -> String {
            "<span data-stat=\"\(escape(figure.name))\" data-unit=\"\(figure.unit.rawValue)\" data-value=\"\(escape(figure.value))\">"
                + escape(figure.text) + "</span>"
        }

        /// A <dl> of every figure in `group`.
        mutating func figureList(_ group: StatusView.Figure.Group, small: Bool = false) {
            html += small ? "<dl class=\"figures small\">\n" : "<dl class=\"figures\">\n"
            for figure in view.figures where figure.group == group {
                html += "<div><dt>\(escape(figure.label))</dt><dd>\(stat(figure))</dd></div>\n"
            }
            html += "</dl>\n"
        }

        mutating func header(refreshMilliseconds: Int) {
            let state = refreshMilliseconds > 0
                ? "live, every " + StatusFormat.period(milliseconds: refreshMilliseconds) : "static: live updates are off"
            html += """
                <header class="top">
                <h1>imagecached</h1>
                <span class="version">\(escape(stats.version.isEmpty ? "version unknown" : stats.version))</span>
                <span class="meta">up \(stat("uptimeSeconds"))</span>
                <span id="live-state" class="live-state" data-live-text="\(escape(state))">\(escape(state))</span>
                <span class="meta">last refresh <time id="last-refresh"\(view.time.datetime.map { " datetime=\"\(escape($0))\"" } ?? "")>\(escape(view.time.text))</time></span>
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
                + "data-empty=\"No samples yet. The first is recorded after one interval (\(escape(StatusFormat.duration(history.interval)))).\"></svg>\n"
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
                  legend: history.outcomes.enumerated().map { ("c\($0.offset % 11)", $0.element) })
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
        mutating func table(_ id: String, columns: [String], empty: String) {
            let rows = view.tables[id] ?? []
            html += "<div class=\"table-wrap\"><table id=\"\(id)\" data-empty=\"\(escape(empty))\">\n<thead><tr>"
            for column in columns {
                html += column.hasPrefix("#") ? "<th class=\"num\">\(escape(String(column.dropFirst())))</th>" : "<th>\(escape(column))</th>"
            }
            html += "</tr></thead>\n<tbody>\n"
            if rows.isEmpty {
                html += "<tr class=\"empty\"><td colspan=\"\(columns.count)\">\(escape(empty))</td></tr>\n"
            }
            for row in rows {
                html += "<tr>" + row.map(StatusPage.cell).joined() + "</tr>\n"
            }
            html += "</tbody>\n</table></div>\n"
        }

        mutating func inFlight() {
            openCard("section-in-flight", "In flight", caption: "Fetches and transforms under way, the most waited-on first; coalescing since start.")
            figureList(.coalescing, small: true)
            table("in-flight", columns: ["URL", "Kind", "#Waiters", "#Received", "#Age"], empty: "Nothing in flight.")
            html += "</section>\n"
        }

        mutating func topHosts() {
            openCard("section-top-hosts", "Top hosts", caption: "Origins with the most upstream transfers since start.")
            table("top-hosts", columns: ["Host", "#Transfers", "#Bytes", ""], empty: "No upstream transfers yet.")
            html += "</section>\n"
        }

        mutating func recentErrors() {
            openCard("section-recent-errors", "Recent errors", caption: "The last errors, newest first.", wide: true)
            table("recent-errors", columns: ["Time", "Kind", "#Status", "Reason", "Target"], empty: "No errors since start.")
            html += "</section>\n"
        }

        mutating func tunnels() {
            openCard("section-tunnels", "Tunnels", caption: "CONNECT tunnels (HTTPS_PROXY): open now, and since start; bytes of closed tunnels.")
            figureList(.tunnels, small: true)
            html += "</section>\n"
        }

        mutating func fleet() {
            openCard("section-fleet", "Fleet",
                     caption: "The fleet's shared tier on memcached (fleet.servers): what this host found there and did with its leases.")
            figureList(.fleet, small: true)
            table("fleet-servers", columns: ["Server", "State", "#Operations", "#Failures", "#Read", "#Written"],
                  empty: "No servers.")
            html += "</section>\n"
        }

        mutating func interceptCA() {
            openCard("section-intercept-ca", "Interception CA",
                     caption: "The local CA that intercepted hosts' certificates are signed with (imagecached ca path, ca install).")
            table("intercept-ca", columns: ["", "Value"], empty: "No local CA.")
            html += "</section>\n"
        }

        mutating func transforms() {
            openCard("section-transforms", "Transforms",
                     caption: "Transforms ended since start, by output format and result; time on a worker per interval.", wide: true)
            figureList(.transforms, small: true)
            html += "<div class=\"split\"><div>\n"
            table("transforms", columns: ["Format", "Result", "#Count"], empty: "No transforms yet.")
            html += "</div><div>\n"
            chart("chart-transform-latency", label: "Transform latency over time, milliseconds",
                  legend: [(Series.mean, "mean"), (Series.p95, "p95")])
            html += "</div></div>\n</section>\n"
        }
    }

    /// One table cell as HTML: its text, a <time>, or a bar (an SVG of the filled width).
    static func cell(_ cell: StatusView.Cell) -> String {
        let open = cell.className.map { "<td class=\"\(escape($0))\">" } ?? "<td>"
        if let width = cell.bar {
            return open + "<svg class=\"bar\" viewBox=\"0 0 100 8\" preserveAspectRatio=\"none\" aria-hidden=\"true\">"
                + "<rect class=\"bar-track\" width=\"100\" height=\"8\"/><rect class=\"bar-fill\" width=\"\(escape(width))\" height=\"8\"/></svg></td>"
        }
        if let datetime = cell.datetime {
            return open + "<time datetime=\"\(escape(datetime))\">\(escape(cell.text))</time></td>"
        }
        return open + escape(cell.text) + "</td>"
    }
}
