// What the `stats` and `prefetch` subcommands print. Pure formatting over the daemon's answers (no I/O except
// PrefetchProgress drawing its bar on standard error), kept here so that tests can check it.

public import ImageCacheStatus
internal import Foundation

public enum StatsReport {
    /// The readable summary of /_imagecached/stats.
    public static func text(_ stats: DaemonStats) -> String {
        var out = ""
        func line(_ label: String, _ text: String) {
            out += label.padding(toLength: 14, withPad: " ", startingAt: 0) + text + "\n"
        }
        let total = stats.requests.values.reduce(0, +)
        line("imagecached", "\(stats.version), up \(duration(stats.uptimeSeconds))")
        line("requests", "\(total), hit ratio \(percent(stats.hitRatio))")
        let outcomes = ServedOutcome.allCases.compactMap { outcome -> String? in
            let count = stats.requests[outcome.rawValue] ?? 0
            return count > 0 ? "\(outcome.rawValue) \(count)" : nil
        }
        if !outcomes.isEmpty { line("", outcomes.joined(separator: ", ")) }
        let fromCache = stats.bytesServedFromCache
        let served = stats.servedBytes.values.reduce(0, +)
        line("bytes served", "\(bytes(served)): \(bytes(fromCache)) from the cache, \(bytes(served - fromCache)) through upstream fetches")
        line("fetched", "\(bytes(stats.upstream.bytes)) from origins in \(stats.upstream.count) transfers" +
             (stats.upstream.count > 0 ? ", mean \(Int((stats.upstream.totalSeconds / Double(stats.upstream.count) * 1000).rounded())) ms" : "") +
             (stats.upstream.inFlight > 0 ? ", \(stats.upstream.inFlight) in flight" : ""))
        let results = stats.upstream.transfers.sorted { $0.value > $1.value }.map { "\($0.key) \($0.value)" }
        if !results.isEmpty { line("", results.joined(separator: ", ")) }
        let coalesced = stats.requests[ServedOutcome.coalesced.rawValue] ?? 0
        line("coalescing", "\(coalesced) requests joined a fetch in flight: \(coalesced) upstream transfers and " +
             "\(bytes(stats.servedBytes[ServedOutcome.coalesced.rawValue] ?? 0)) saved")
        line("memory", "\(bytes(stats.memory.bytes)) of \(bytes(stats.memory.limitBytes)), \(stats.memory.entries) entries, \(stats.memory.evictions) evicted")
        if let disk = stats.disk {
            line("disk", "\(bytes(disk.bytes)) of \(bytes(disk.limitBytes)), \(disk.entries) entries, \(disk.evicted) evicted, \(disk.expired) expired" +
                 (disk.indexLoaded ? "" : " (index still loading)"))
        } else {
            line("disk", "off")
        }
        if let fleet = stats.fleet {
            line("fleet", "\(fleet.hits) hits, \(fleet.leaseWins) leases won (\(fleet.takeovers) takeovers), \(fleet.waits) waits, " +
                 "\(fleet.stored) stored, \(fleet.passMarkers) markers left and \(fleet.passMarkersSeen) found, " +
                 "\(fleet.unavailable) unavailable, \(fleet.damaged) damaged")
            for server in fleet.servers {
                line("", "\(printable(server.address, 80)): \(server.state), \(server.operations) operations, \(server.failures) failures, " +
                     "\(bytes(server.bytesRead)) read, \(bytes(server.bytesWritten)) written" +
                     (server.itemSizeMax.map { ", -I \(bytes($0))" } ?? ""))
            }
        }
        if stats.topHosts.isEmpty {
            line("top hosts", "none yet")
        } else {
            for (index, host) in stats.topHosts.enumerated() {
                line(index == 0 ? "top hosts" : "", "\(host.host): \(host.transfers) transfers, \(bytes(host.bytes))")
            }
        }
        if let transforms = stats.transforms {
            var text = "\(transforms.total) ended, \(transforms.running) running, \(transforms.queued) queued, \(transforms.workers) workers"
            if let mean = transforms.meanMilliseconds { text += ", mean \(mean) ms" }
            text += "; \(bytes(transforms.bytesIn)) in, \(bytes(transforms.bytesOut)) out"
            line("transforms", text)
            for (format, results) in transforms.results.sorted(by: { $0.key < $1.key }) {
                line("", "\(format): " + results.sorted { $0.value > $1.value }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))
            }
        }
        for (index, fetch) in (stats.inFlightFetches ?? []).prefix(5).enumerated() {
            line(index == 0 ? "in flight" : "", "\(printable(fetch.url, 120)): \(fetch.kind), \(fetch.waiters) waiting, " +
                 "\(bytes(fetch.receivedBytes)) received, \(duration(fetch.seconds))")
        }
        let errors = stats.errors.sorted { $0.value > $1.value }.map { "\($0.key) \($0.value)" }
        line("errors", errors.isEmpty ? "none" : errors.joined(separator: ", "))
        for (index, error) in (stats.recentErrors ?? []).prefix(5).enumerated() {
            let time = Date(timeIntervalSince1970: error.time).formatted(.iso8601.time(includingFractionalSeconds: false))
            line(index == 0 ? "last errors" : "", "\(time) \(error.status.map(String.init) ?? "-") \(error.kind): " +
                 "\(printable(error.reason, 160)) (\(printable(error.target, 120)))")
        }
        return out
    }

    /// `text` cut to `limit` characters, with every control character shown as "?": URLs and reasons come from
    /// clients and origins, and an escape sequence must not reach the operator's terminal.
    static func printable(_ text: String, _ limit: Int) -> String {
        String(String.UnicodeScalarView(text.unicodeScalars.prefix(limit).map { scalar in
            scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) ? "?" : scalar
        }))
    }

    // The status page's formats (StatusFormat), so that the terminal and the page say the same of the same numbers.
    public static func bytes(_ count: Int) -> String { StatusFormat.bytes(count) }

    static func percent(_ ratio: Double) -> String { StatusFormat.percent(ratio) }

    static func duration(_ seconds: Double) -> String { StatusFormat.duration(seconds) }
}

/// Follows the lines of a /_imagecached/prefetch response, draws a progress bar, and sums up.
public struct PrefetchProgress {
    public let total: Int
    public private(set) var done = 0
    public private(set) var bytes = 0
    /// (URL, reason) of each failure, in order.
    public private(set) var failures: [(url: String, reason: String)] = []
    private let live: Bool
    private let started = Date()
    private var drawn = Date.distantPast

    public init(total: Int, live: Bool) {
        self.total = total
        self.live = live
    }

    /// One response line: "ok STATUS XCACHE BYTES URL", "failed STATUS URL REASON" or "done ...".
    public mutating func record(line: String) {
        let fields = line.split(separator: " ", maxSplits: 4, omittingEmptySubsequences: true).map(String.init)
        switch fields.first {
        case "ok" where fields.count >= 5:
            done += 1
            bytes += Int(fields[3]) ?? 0
        case "failed" where fields.count >= 3:
            done += 1
            let rest = line.split(separator: " ", maxSplits: 3).map(String.init)
            failures.append((rest[2], rest.count > 3 ? rest[3] : "status \(rest[1])"))
        default:
            return
        }
        draw()
    }

    public var bar: String {
        let width = 30
        let filled = total == 0 ? width : done * width / total
        let elapsed = max(Date().timeIntervalSince(started), 0.001)
        return "[" + String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled) + "] " +
            "\(done)/\(total)  \(StatsReport.bytes(bytes))  \(failures.count) failed  \(String(format: "%.1f", Double(done) / elapsed)) URLs/s"
    }

    private mutating func draw() {
        guard live else { return }
        let now = Date()
        guard now.timeIntervalSince(drawn) > 0.1 || done == total else { return }
        drawn = now
        FileHandle.standardError.write(Data(("\r" + bar + "\u{1B}[K").utf8))
    }

    /// Ends the bar's line on standard error.
    public func finishLine() {
        if live { FileHandle.standardError.write(Data("\r\(bar)\u{1B}[K\n".utf8)) }
    }

    public var summary: String {
        let elapsed = Date().timeIntervalSince(started)
        var text = "prefetched \(done - failures.count) of \(total) URLs (\(StatsReport.bytes(bytes))) in \(String(format: "%.1f", elapsed)) s; \(failures.count) failed\n"
        if done < total { text += "\(total - done) URLs got no answer (the daemon stopped or the connection broke)\n" }
        for failure in failures { text += "failed: \(failure.url) (\(failure.reason))\n" }
        return text
    }
}
