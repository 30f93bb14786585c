// DaemonStats+Prometheus: the /_imagecached/metrics text, a pure function of the stats document.

internal import Foundation

extension DaemonStats {
    /// The Prometheus text exposition format (version 0.0.4).
    public var prometheusText: String {
        var out = ""
        func family(_ name: String, _ type: String, _ help: String) {
            out += "# HELP imagecached_\(name) \(help)\n# TYPE imagecached_\(name) \(type)\n"
        }
        func sample(_ name: String, _ labels: [(String, String)] = [], _ value: Double) {
            out += "imagecached_" + name
            if !labels.isEmpty {
                out += "{" + labels.map { "\($0.0)=\"\(Self.escape($0.1))\"" }.joined(separator: ",") + "}"
            }
            out += " " + Self.number(value) + "\n"
        }
        func histogram(_ name: String, _ help: String, _ snapshot: HistogramSnapshot) {
            family(name, "histogram", help)
            for bucket in snapshot.buckets {
                sample(name + "_bucket", [("le", bucket.le.isInfinite ? "+Inf" : Self.number(bucket.le))], Double(bucket.count))
            }
            sample(name + "_sum", [], snapshot.sum)
            sample(name + "_count", [], Double(snapshot.count))
        }

        family("requests_total", "counter", "Requests answered through the cache, by outcome.")
        for outcome in ServedOutcome.allCases { sample("requests_total", [("outcome", outcome.rawValue)], Double(requests[outcome.rawValue] ?? 0)) }
        family("served_bytes_total", "counter", "Response body bytes written to clients, by outcome.")
        for outcome in ServedOutcome.allCases { sample("served_bytes_total", [("outcome", outcome.rawValue)], Double(servedBytes[outcome.rawValue] ?? 0)) }
        family("upstream_transfers_total", "counter", "Upstream transfers ended, by result (ok or the error kind).")
        for (result, count) in upstream.transfers.sorted(by: { $0.key < $1.key }) { sample("upstream_transfers_total", [("result", result)], Double(count)) }
        family("upstream_received_bytes_total", "counter", "Body bytes received from origins.")
        sample("upstream_received_bytes_total", [], Double(upstream.bytes))
        histogram("upstream_duration_seconds", "Time from the start of an upstream transfer to its end.", upstream.seconds)
        family("fetches_in_flight", "gauge", "Fetches (upstream or disk) in flight.")
        sample("fetches_in_flight", [], Double(upstream.inFlight))
        family("upstream_paused_total", "counter", "Upstream transfers paused because a client was behind while the in-flight budget was full.")
        sample("upstream_paused_total", [], Double(upstream.paused))
        family("inflight_bytes", "gauge", "Bytes of bodies in flight: retained to be stored, waiting to be written to disk, or not yet taken by the slowest client.")
        sample("inflight_bytes", [], Double(upstream.inFlightBytes))
        histogram("fetch_waiters", "Clients served by one fetch (more than 1: coalesced).", coalescing.waitersPerFetch)
        family("memory_bytes", "gauge", "Bytes held by the memory tier.")
        sample("memory_bytes", [], Double(memory.bytes))
        family("memory_entries", "gauge", "Entries in the memory tier.")
        sample("memory_entries", [], Double(memory.entries))
        family("memory_limit_bytes", "gauge", "Byte budget of the memory tier.")
        sample("memory_limit_bytes", [], Double(memory.limitBytes))
        family("memory_evictions_total", "counter", "Entries evicted from the memory tier to respect its limits.")
        sample("memory_evictions_total", [], Double(memory.evictions))
        if let disk {
            family("disk_bytes", "gauge", "Bytes held by the disk tier.")
            sample("disk_bytes", [], Double(disk.bytes))
            family("disk_entries", "gauge", "Entries in the disk tier.")
            sample("disk_entries", [], Double(disk.entries))
            family("disk_limit_bytes", "gauge", "Byte budget of the disk tier.")
            sample("disk_limit_bytes", [], Double(disk.limitBytes))
            family("disk_evictions_total", "counter", "Entries evicted from the disk tier, by reason.")
            sample("disk_evictions_total", [("reason", "limit")], Double(disk.evicted))
            sample("disk_evictions_total", [("reason", "max_age")], Double(disk.expired))
        }
        family("errors_total", "counter", "Errors, by kind.")
        for (kind, count) in errors.sorted(by: { $0.key < $1.key }) { sample("errors_total", [("kind", kind)], Double(count)) }
        family("prefetched_total", "counter", "URLs warmed through /_imagecached/prefetch.")
        sample("prefetched_total", [], Double(prefetched))
        family("config_reloads_total", "counter", "Configuration reloads (SIGHUP), by result.")
        sample("config_reloads_total", [("result", "applied")], Double(reloads))
        sample("config_reloads_total", [("result", "refused")], Double(reloadFailures))
        if let transforms {
            family("transforms_total", "counter", "Image transforms ended, by output format and result (ok or the refusal's limit).")
            for (format, results) in transforms.results.sorted(by: { $0.key < $1.key }) {
                for (result, count) in results.sorted(by: { $0.key < $1.key }) {
                    sample("transforms_total", [("format", format), ("result", result)], Double(count))
                }
            }
            histogram("transform_duration_seconds", "Time a transform ran on a worker (decode, process, encode).", transforms.seconds)
            family("transform_source_bytes_total", "counter", "Source bytes read by transforms.")
            sample("transform_source_bytes_total", [], Double(transforms.bytesIn))
            family("transform_result_bytes_total", "counter", "Bytes of transform results.")
            sample("transform_result_bytes_total", [], Double(transforms.bytesOut))
            family("transform_workers", "gauge", "Transform workers.")
            sample("transform_workers", [], Double(transforms.workers))
            family("transform_running", "gauge", "Transforms running now.")
            sample("transform_running", [], Double(transforms.running))
            family("transform_queue_depth", "gauge", "Transforms waiting for a worker.")
            sample("transform_queue_depth", [], Double(transforms.queued))
            if let cache = transforms.pixelCache {
                family("transform_pixel_cache_bytes", "gauge", "Bytes of decoded source levels (JPEG, opaque PNG) kept for their next variants.")
                sample("transform_pixel_cache_bytes", [], Double(cache.bytes))
                family("transform_pixel_cache_lookups_total", "counter", "Lookups of a source level: hit (a decode saved) or miss.")
                sample("transform_pixel_cache_lookups_total", [("result", "hit")], Double(cache.hits))
                sample("transform_pixel_cache_lookups_total", [("result", "miss")], Double(cache.misses))
                family("transform_pixel_cache_evictions_total", "counter", "Source levels evicted to stay within transform-pixel-cache.")
                sample("transform_pixel_cache_evictions_total", [], Double(cache.evictions))
            }
        }
        family("uptime_seconds", "gauge", "Seconds since the daemon started.")
        sample("uptime_seconds", [], uptimeSeconds)
        return out
    }

    static func number(_ value: Double) -> String {
        if value.isInfinite { return value > 0 ? "+Inf" : "-Inf" }
        if value == value.rounded(), abs(value) < 1e15 { return String(Int(value)) }
        return String(value)
    }

    static func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
            .replacingOccurrences(of: "\n", with: "\\n")
    }
}
