// StatusView: what the status page shows as text for one stats document, formatted once, here, with StatusFormat:
// every figure, table cell, gauge label, and the time the counters were read. StatusPage writes it into the first
// render; every stats document carries it beside the raw values as `display` (DaemonStats.json()), and the page's
// script puts its text in place as it is. So the first render and every poll show the same strings for the same
// stats, and no rule is written twice.
//
// Data model (`display` in /_imagecached/stats; keys sorted as in every stats document)
//   figures   {"requests.total": {"text": "10,008", "value": "10008"}, ...}: by the name in the element's data-stat,
//             the text shown and the exact value (data-value: the number as Swift prints it)
//   time      {"text": "09:41:05 UTC", "datetime": "2025-11-26T09:41:05Z"}: when the counters were read (#last-refresh)
//   tables    {"in-flight": [[cell, ...], ...], "top-hosts": ..., "recent-errors": ..., "transforms": ...}: rows by
//             table id, cells in column order, each {"text", "class"?, "datetime"?, "bar"?}
//   gauges    {"gauge-memory": {"fraction": 0.78, "level": "", "text": "78.1%", "note": "of 256.0 MiB"}, ...}: the
//             tiers' gauges by element id (the script draws the arc from `fraction`)
// Text that clients and origins control (URLs, hosts, kinds, reasons) is carried as it is: the page escapes it, and
// the script sets it as textContent.

package struct StatusView: Sendable, Equatable {
    /// One number on the page.
    package struct Figure: Sendable, Equatable {
        package enum Unit: String, Sendable { case count, bytes, ratio, duration, milliseconds }
        /// Where on the page it goes.
        package enum Group: Sendable { case header, overview, outcomes, coalescing, memory, disk, transforms, tunnels, fleet }

        package var group: Group
        package var name: String
        package var label: String
        package var unit: Unit
        /// The exact number, as Swift prints it (data-value).
        package var value: String
        /// What people read.
        package var text: String

        init(_ group: Group, _ name: String, _ label: String, _ value: Int, _ unit: Unit) {
            (self.group, self.name, self.label, self.unit) = (group, name, label, unit)
            self.value = String(value)
            text = switch unit {
            case .bytes: StatusFormat.bytes(value)
            case .milliseconds: StatusFormat.milliseconds(value)
            case .count, .ratio, .duration: StatusFormat.count(value)
            }
        }

        init(_ group: Group, _ name: String, _ label: String, _ value: Double, _ unit: Unit) {
            (self.group, self.name, self.label, self.unit) = (group, name, label, unit)
            self.value = String(describing: value)
            text = switch unit {
            case .ratio: StatusFormat.percent(value)
            case .duration: StatusFormat.duration(value)
            case .count, .bytes, .milliseconds: StatusFormat.tenths(value)
            }
        }
    }

    /// One table cell: text, or a time (`datetime` set), or a bar (`bar`: the filled width in percent of the cell).
    package struct Cell: Sendable, Codable, Equatable {
        package var text: String
        package var className: String?
        package var datetime: String?
        package var bar: String?

        enum CodingKeys: String, CodingKey {
            case text, className = "class", datetime, bar
        }

        package static func text(_ text: String, _ className: String? = nil) -> Cell {
            Cell(text: text, className: className)
        }

        package static func time(_ time: Double) -> Cell {
            Cell(text: StatusFormat.clock(time), datetime: StatusFormat.isoTime(time))
        }

        /// `fraction` of the cell filled (clamped to 0...1).
        package static func bar(_ fraction: Double) -> Cell {
            Cell(text: "", className: "bar-cell", bar: StatusFormat.tenths(min(1, max(0, fraction)) * 100))
        }
    }

    /// A tier's gauge: bytes held against its limit.
    package struct Gauge: Sendable, Codable, Equatable {
        /// Bytes over limit, 0...1 (0 without a limit): the arc drawn.
        package var fraction: Double
        /// "" below 85%, "high" below 98%, "full" from there.
        package var level: String
        /// In the arc: the percentage, or "no limit".
        package var text: String
        /// Under it: "of <limit>".
        package var note: String
    }

    /// Every figure, in page order.
    package var figures: [Figure]
    package var time: Cell
    package var tables: [String: [[Cell]]]
    package var gauges: [String: Gauge]

    package init(_ stats: DaemonStats) {
        figures = Self.figures(for: stats)
        time = stats.time.map(Cell.time) ?? .text("–")
        tables = Self.tables(for: stats)
        gauges = ["gauge-memory": Self.gauge(bytes: stats.memory.bytes, limitBytes: stats.memory.limitBytes)]
        if let disk = stats.disk { gauges["gauge-disk"] = Self.gauge(bytes: disk.bytes, limitBytes: disk.limitBytes) }
    }

    /// The figure named `name`, if the page has it.
    package func figure(_ name: String) -> Figure? { figures.first { $0.name == name } }

    // MARK: - Figures

    static func figures(for stats: DaemonStats) -> [Figure] {
        let requests = stats.requests.values.reduce(0, +)
        let servedBytes = stats.servedBytes.values.reduce(0, +)
        let fromCache = stats.bytesServedFromCache
        var list: [Figure] = [
            Figure(.header, "uptimeSeconds", "Up", stats.uptimeSeconds, .duration),
            Figure(.overview, "requests.total", "Requests", requests, .count),
            Figure(.overview, "hitRatio", "Hit ratio (requests)", stats.hitRatio, .ratio),
            Figure(.overview, "byteHitRatio", "Hit ratio (bytes)", servedBytes == 0 ? 0 : Double(fromCache) / Double(servedBytes), .ratio),
            Figure(.overview, "servedBytes.total", "Bytes served", servedBytes, .bytes),
            Figure(.overview, "servedBytes.fromCache", "Served from cache", fromCache, .bytes),
            Figure(.overview, "upstream.bytes", "Fetched upstream", stats.upstream.bytes, .bytes),
            Figure(.overview, "upstream.transfers", "Upstream transfers", stats.upstream.transfers.values.reduce(0, +), .count),
            Figure(.overview, "upstream.inFlight", "Fetches in flight", stats.upstream.inFlight, .count),
            Figure(.overview, "errors.total", "Errors", stats.errors.values.reduce(0, +), .count),
        ]
        for outcome in ServedOutcome.allCases {
            list.append(Figure(.outcomes, "requests.\(outcome.rawValue)", outcome.rawValue, stats.requests[outcome.rawValue] ?? 0, .count))
        }
        let coalescing = stats.coalescing
        list += [
            Figure(.coalescing, "coalescing.fetches", "Fetches ended", coalescing.fetches, .count),
            Figure(.coalescing, "coalescing.waiters", "Clients they served", coalescing.waiters, .count),
            Figure(.coalescing, "coalescing.saved", "Upstream requests saved", coalescing.waiters - coalescing.fetches, .count),
        ]
        func tier(_ group: Figure.Group, _ name: String, bytes: Int, limitBytes: Int, entries: Int, evictions: Int) -> [Figure] {
            [Figure(group, "\(name).bytes", "Held", bytes, .bytes),
             Figure(group, "\(name).limitBytes", "Limit", limitBytes, .bytes),
             Figure(group, "\(name).entries", "Entries", entries, .count),
             Figure(group, "\(name).evictions", "Evictions", evictions, .count)]
        }
        let memory = stats.memory
        list += tier(.memory, "memory", bytes: memory.bytes, limitBytes: memory.limitBytes, entries: memory.entries, evictions: memory.evictions)
        if let disk = stats.disk {
            list += tier(.disk, "disk", bytes: disk.bytes, limitBytes: disk.limitBytes, entries: disk.entries, evictions: disk.evicted)
        }
        if let transforms = stats.transforms {
            list.append(Figure(.transforms, "transforms.total", "Transforms", transforms.total, .count))
            if let mean = transforms.meanMilliseconds {
                list.append(Figure(.transforms, "transforms.meanMilliseconds", "Mean time on a worker", mean, .milliseconds))
            }
        }
        if let tunnels = stats.tunnels {
            list += [
                Figure(.tunnels, "tunnels.open", "Open", tunnels.open, .count),
                Figure(.tunnels, "tunnels.limit", "Limit (max-tunnels)", tunnels.limit, .count),
                Figure(.tunnels, "tunnels.opened", "Opened", (tunnels.connects["tunnel"] ?? 0) + (tunnels.connects["intercept"] ?? 0), .count),
                Figure(.tunnels, "tunnels.refused", "Refused", tunnels.connects.filter { $0.key != "tunnel" && $0.key != "intercept" }.values.reduce(0, +), .count),
                Figure(.tunnels, "tunnels.bytesUp", "Bytes up (to origins)", tunnels.bytesUp, .bytes),
                Figure(.tunnels, "tunnels.bytesDown", "Bytes down (to clients)", tunnels.bytesDown, .bytes),
            ]
            if let intercepted = tunnels.intercepted {
                list.append(Figure(.tunnels, "tunnels.intercepted", "Intercepted, open", intercepted, .count))
            }
        }
        if let fleet = stats.fleet {
            list += [
                Figure(.fleet, "fleet.hits", "Fleet hits (other hosts' fills)", fleet.hits, .count),
                Figure(.fleet, "fleet.leaseWins", "Leases won (fetched for the fleet)", fleet.leaseWins, .count),
                Figure(.fleet, "fleet.takeovers", "Takeovers", fleet.takeovers, .count),
                Figure(.fleet, "fleet.waits", "Waits on another host", fleet.waits, .count),
                Figure(.fleet, "fleet.passMarkers", "Pass markers left", fleet.passMarkers, .count),
                Figure(.fleet, "fleet.unavailable", "Unavailable (served alone)", fleet.unavailable, .count),
                Figure(.fleet, "fleet.damaged", "Damaged values refused", fleet.damaged, .count),
                Figure(.fleet, "fleet.serversUp", "Servers up", fleet.servers.filter { $0.state == "up" }.count, .count),
            ]
        }
        if let leaves = stats.leafCertificates {
            list += [
                Figure(.tunnels, "leaves.cached", "Leaf certificates cached", leaves.cached, .count),
                Figure(.tunnels, "leaves.minted", "Leaf certificates minted", leaves.minted, .count),
            ]
        }
        return list
    }

    // MARK: - Tables

    static func tables(for stats: DaemonStats) -> [String: [[Cell]]] {
        var tables: [String: [[Cell]]] = [:]
        tables["in-flight"] = (stats.inFlightFetches ?? []).map { fetch in
            [.text(fetch.url, "url"), .text(fetch.kind), .text(StatusFormat.count(fetch.waiters), "num"),
             .text(StatusFormat.bytes(fetch.receivedBytes), "num"), .text(StatusFormat.seconds(fetch.seconds), "num")]
        }
        if let fleet = stats.fleet { tables["fleet-servers"] = fleet.servers.map { server in
            [.text(server.address, "url"), .text(server.state), .text(StatusFormat.count(server.operations), "num"),
             .text(StatusFormat.count(server.failures), "num"), .text(StatusFormat.bytes(server.bytesRead), "num"),
             .text(StatusFormat.bytes(server.bytesWritten), "num")]
        } }
        let most = max(1, stats.topHosts.map(\.transfers).max() ?? 1)
        tables["top-hosts"] = stats.topHosts.map { host in
            [.text(host.host, "url"), .text(StatusFormat.count(host.transfers), "num"), .text(StatusFormat.bytes(host.bytes), "num"),
             .bar(Double(host.transfers) / Double(most))]
        }
        tables["recent-errors"] = (stats.recentErrors ?? []).map { error in
            [.time(error.time), .text(error.kind), .text(error.status.map(String.init) ?? "–", "num"),
             .text(error.reason, "reason"), .text(error.target, "url")]
        }
        if let ca = stats.interceptCA {
            // Label and value; the constraints in `warn` when the CA is unconstrained, the expiry when under 14 days.
            tables["intercept-ca"] = [
                [.text("Certificate"), .text(ca.certificatePath, "url")],
                [.text("SHA-256"), .text(ca.fingerprint, "url")],
                [.text("Name constraints"), .text(ca.constraints, ca.constrained ? nil : "warn")],
                [.text("Expires in"), .text(StatusFormat.duration(ca.expirySeconds) + " (" + StatusFormat.isoTime(ca.notAfter) + ")",
                                             ca.expirySeconds < 14 * 86_400 ? "warn" : nil)],
            ]
        }
        if let transforms = stats.transforms {
            var rows: [[Cell]] = []
            for (format, results) in transforms.results.sorted(by: { $0.key < $1.key }) {
                for (result, count) in results.sorted(by: { $0.key < $1.key }) {
                    rows.append([.text(format), .text(result), .text(StatusFormat.count(count), "num")])
                }
            }
            tables["transforms"] = rows
        }
        return tables
    }

    // MARK: - Gauges

    static func gauge(bytes: Int, limitBytes: Int) -> Gauge {
        let fraction = limitBytes > 0 ? min(1, max(0, Double(bytes) / Double(limitBytes))) : 0
        return Gauge(fraction: fraction, level: fraction >= 0.98 ? "full" : fraction >= 0.85 ? "high" : "",
                     text: limitBytes > 0 ? StatusFormat.percent(Double(bytes) / Double(limitBytes)) : "no limit",
                     note: "of " + StatusFormat.bytes(limitBytes))
    }
}

// MARK: - As JSON

extension StatusView: Encodable {
    private enum CodingKeys: String, CodingKey { case figures, time, tables, gauges }

    /// A figure as the script reads it: its text and exact value.
    private struct Shown: Encodable {
        var text: String
        var value: String
    }

    package func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(Dictionary(uniqueKeysWithValues: figures.map { ($0.name, Shown(text: $0.text, value: $0.value)) }),
                             forKey: .figures)
        try container.encode(time, forKey: .time)
        try container.encode(tables, forKey: .tables)
        try container.encode(gauges, forKey: .gauges)
    }
}
