// DaemonStats+Prometheus: the /_imagecached/metrics text, a pure function of the stats document.

internal import Foundation

extension DaemonStats {
    /// The Prometheus text exposition format (version 0.0.4).
    public var prometheusText: String {
        var out = PrometheusWriter()
        writeTraffic(to: &out)
        writeTiers(to: &out)
        writeOperations(to: &out)
        writeTransforms(to: &out)
        out.family("uptime_seconds", "gauge", "Seconds since the daemon started.")
        out.sample("uptime_seconds", [], uptimeSeconds)
        return out.text
    }

    /// Requests, served bytes, upstream transfers, coalescing.
    private func writeTraffic(to out: inout PrometheusWriter) {
        out.family("requests_total", "counter", "Requests answered through the cache, by outcome.")
        for outcome in ServedOutcome.allCases { out.sample("requests_total", [("outcome", outcome.rawValue)], Double(requests[outcome.rawValue] ?? 0)) }
        out.family("served_bytes_total", "counter", "Response body bytes written to clients, by outcome.")
        for outcome in ServedOutcome.allCases { out.sample("served_bytes_total", [("outcome", outcome.rawValue)], Double(servedBytes[outcome.rawValue] ?? 0)) }
        out.family("upstream_transfers_total", "counter", "Upstream transfers ended, by result (ok or the error kind).")
        for (result, count) in upstream.transfers.sorted(by: { $0.key < $1.key }) { out.sample("upstream_transfers_total", [("result", result)], Double(count)) }
        out.family("upstream_received_bytes_total", "counter", "Body bytes received from origins.")
        out.sample("upstream_received_bytes_total", [], Double(upstream.bytes))
        out.histogram("upstream_duration_seconds", "Time from the start of an upstream transfer to its end.", upstream.seconds)
        out.family("fetches_in_flight", "gauge", "Fetches (upstream or disk) in flight.")
        out.sample("fetches_in_flight", [], Double(upstream.inFlight))
        out.family("upstream_paused_total", "counter", "Upstream transfers paused because a client was behind while the in-flight budget was full.")
        out.sample("upstream_paused_total", [], Double(upstream.paused))
        out.family("inflight_bytes", "gauge", "Bytes of bodies in flight: retained to be stored, waiting to be written to disk, or not yet taken by the slowest client.")
        out.sample("inflight_bytes", [], Double(upstream.inFlightBytes))
        out.histogram("fetch_waiters", "Clients served by one fetch (more than 1: coalesced).", coalescing.waitersPerFetch)
    }

    /// The memory and disk tiers.
    private func writeTiers(to out: inout PrometheusWriter) {
        out.family("memory_bytes", "gauge", "Bytes held by the memory tier.")
        out.sample("memory_bytes", [], Double(memory.bytes))
        out.family("memory_entries", "gauge", "Entries in the memory tier.")
        out.sample("memory_entries", [], Double(memory.entries))
        out.family("memory_limit_bytes", "gauge", "Byte budget of the memory tier.")
        out.sample("memory_limit_bytes", [], Double(memory.limitBytes))
        out.family("memory_evictions_total", "counter", "Entries evicted from the memory tier to respect its limits.")
        out.sample("memory_evictions_total", [], Double(memory.evictions))
        if let disk {
            out.family("disk_bytes", "gauge", "Bytes held by the disk tier.")
            out.sample("disk_bytes", [], Double(disk.bytes))
            out.family("disk_entries", "gauge", "Entries in the disk tier.")
            out.sample("disk_entries", [], Double(disk.entries))
            out.family("disk_limit_bytes", "gauge", "Byte budget of the disk tier.")
            out.sample("disk_limit_bytes", [], Double(disk.limitBytes))
            out.family("disk_evictions_total", "counter", "Entries evicted from the disk tier, by reason.")
            out.sample("disk_evictions_total", [("reason", "limit")], Double(disk.evicted))
            out.sample("disk_evictions_total", [("reason", "max_age")], Double(disk.expired))
        }
    }

    /// Errors, prefetches, reloads.
    private func writeOperations(to out: inout PrometheusWriter) {
        out.family("errors_total", "counter", "Errors, by kind.")
        for (kind, count) in errors.sorted(by: { $0.key < $1.key }) { out.sample("errors_total", [("kind", kind)], Double(count)) }
        out.family("prefetched_total", "counter", "URLs warmed through /_imagecached/prefetch.")
        out.sample("prefetched_total", [], Double(prefetched))
        out.family("config_reloads_total", "counter", "Configuration reloads (SIGHUP), by result.")
        out.sample("config_reloads_total", [("result", "applied")], Double(reloads))
        out.sample("config_reloads_total", [("result", "refused")], Double(reloadFailures))
        if let fleet { writeFleet(fleet, to: &out) }
        if let tunnels {
            out.family("tunnels_open", "gauge", "CONNECT tunnels open now, by kind.")
            out.sample("tunnels_open", [("kind", "blind")], Double(tunnels.open - (tunnels.intercepted ?? 0)))
            if let intercepted = tunnels.intercepted {
                out.sample("tunnels_open", [("kind", "intercepted")], Double(intercepted))
            }
            out.family("tunnels_limit", "gauge", "Most CONNECT tunnels open at once (max-tunnels).")
            out.sample("tunnels_limit", [], Double(tunnels.limit))
            out.family("connects_total", "counter", "CONNECT requests, by result.")
            for (result, count) in tunnels.connects.sorted(by: { $0.key < $1.key }) { out.sample("connects_total", [("result", result)], Double(count)) }
            out.family("tunnels_total", "counter", "CONNECT tunnels closed, by kind and how they ended.")
            for (end, count) in tunnels.ends.sorted(by: { $0.key < $1.key }) { out.sample("tunnels_total", [("kind", "blind"), ("end", end)], Double(count)) }
            for (end, count) in (tunnels.interceptedEnds ?? [:]).sorted(by: { $0.key < $1.key }) {
                out.sample("tunnels_total", [("kind", "intercepted"), ("end", end)], Double(count))
            }
            out.family("tunnel_bytes_total", "counter", "Bytes carried by closed CONNECT tunnels, by direction (up: client to upstream).")
            out.sample("tunnel_bytes_total", [("direction", "up")], Double(tunnels.bytesUp))
            out.sample("tunnel_bytes_total", [("direction", "down")], Double(tunnels.bytesDown))
        }
        if let leafCertificates {
            out.family("leaf_certificates_minted_total", "counter", "Leaf certificates minted for intercepted hosts (intercept-hosts).")
            out.sample("leaf_certificates_minted_total", [], Double(leafCertificates.minted))
            out.family("leaf_certificate_cache_entries", "gauge", "Leaf certificates cached for the local CA in force (at most 1024 hosts).")
            out.sample("leaf_certificate_cache_entries", [], Double(leafCertificates.cached))
            out.family("leaf_mints_queued", "gauge", "Leaf certificates queued or being minted (at most 256; past it a CONNECT gets 503).")
            out.sample("leaf_mints_queued", [], Double(leafCertificates.mintsQueued))
        }
        let listeners = [("tls", tls), ("intercept", interceptedTLS)].compactMap { name, value in value.map { (name, $0) } }
        if !listeners.isEmpty {
            out.family("tls_handshakes_total", "counter", "TLS handshakes completed, by listener (tls: tls-listen; intercept: inside intercepted tunnels) and whether a ticket resumed them.")
            for (name, stats) in listeners {
                out.sample("tls_handshakes_total", [("listener", name), ("resumed", "false")], Double(stats.fullHandshakes))
                out.sample("tls_handshakes_total", [("listener", name), ("resumed", "true")], Double(stats.resumedHandshakes))
            }
            out.family("tls_handshake_failures_total", "counter", "TLS connections that failed before or during the handshake, by listener and reason.")
            for (name, stats) in listeners {
                for (reason, count) in stats.failures.sorted(by: { $0.key < $1.key }) {
                    out.sample("tls_handshake_failures_total", [("listener", name), ("reason", reason)], Double(count))
                }
            }
            out.family("tls_connections_open", "gauge", "TLS connections open, by listener.")
            for (name, stats) in listeners { out.sample("tls_connections_open", [("listener", name)], Double(stats.openConnections)) }
        }
        if let tls {
            out.family("tls_certificate_expiry_seconds", "gauge", "Seconds until the TLS listener's certificate expires (tls-cert).")
            out.sample("tls_certificate_expiry_seconds", [], tls.certificateNotAfter - (time ?? 0))
        }
        if let interceptCA {
            out.family("intercept_ca_expiry_seconds", "gauge", "Seconds until the local CA's certificate expires (intercept-ca-dir).")
            out.sample("intercept_ca_expiry_seconds", [], interceptCA.expirySeconds)
        }
    }

    /// Image transforms and the pixel cache.
    private func writeTransforms(to out: inout PrometheusWriter) {
        if let transforms {
            out.family("transforms_total", "counter", "Image transforms ended, by output format and result (ok or the refusal's limit).")
            for (format, results) in transforms.results.sorted(by: { $0.key < $1.key }) {
                for (result, count) in results.sorted(by: { $0.key < $1.key }) {
                    out.sample("transforms_total", [("format", format), ("result", result)], Double(count))
                }
            }
            out.histogram("transform_duration_seconds", "Time a transform ran on a worker (decode, process, encode).", transforms.seconds)
            out.family("transform_source_bytes_total", "counter", "Source bytes read by transforms.")
            out.sample("transform_source_bytes_total", [], Double(transforms.bytesIn))
            out.family("transform_result_bytes_total", "counter", "Bytes of transform results.")
            out.sample("transform_result_bytes_total", [], Double(transforms.bytesOut))
            out.family("transform_workers", "gauge", "Transform workers.")
            out.sample("transform_workers", [], Double(transforms.workers))
            out.family("transform_running", "gauge", "Transforms running now.")
            out.sample("transform_running", [], Double(transforms.running))
            out.family("transform_queue_depth", "gauge", "Transforms waiting for a worker.")
            out.sample("transform_queue_depth", [], Double(transforms.queued))
            if let cache = transforms.pixelCache {
                out.family("transform_pixel_cache_bytes", "gauge", "Bytes of decoded source levels (JPEG, opaque PNG) kept for their next variants.")
                out.sample("transform_pixel_cache_bytes", [], Double(cache.bytes))
                out.family("transform_pixel_cache_lookups_total", "counter", "Lookups of a source level: hit (a decode saved) or miss.")
                out.sample("transform_pixel_cache_lookups_total", [("result", "hit")], Double(cache.hits))
                out.sample("transform_pixel_cache_lookups_total", [("result", "miss")], Double(cache.misses))
                out.family("transform_pixel_cache_evictions_total", "counter", "Source levels evicted to stay within transform-pixel-cache.")
                out.sample("transform_pixel_cache_evictions_total", [], Double(cache.evictions))
            }
        }
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

extension DaemonStats {
    /// The fleet tier (fleet.servers).
    private func writeFleet(_ fleet: Fleet, to out: inout PrometheusWriter) {
        out.family("fleet_hits_total", "counter", "Entries found in the fleet tier (another host stored them), verified and served.")
        out.sample("fleet_hits_total", [], Double(fleet.hits))
        out.family("fleet_lease_wins_total", "counter", "Fill leases this host won: it fetched from the origin for the fleet.")
        out.sample("fleet_lease_wins_total", [], Double(fleet.leaseWins))
        out.family("fleet_takeovers_total", "counter", "Fill leases won after waiting on another host's (it died, hung, lost its clients or failed).")
        out.sample("fleet_takeovers_total", [], Double(fleet.takeovers))
        out.family("fleet_waits_total", "counter", "Fleet lookups told to wait for another host's fill.")
        out.sample("fleet_waits_total", [], Double(fleet.waits))
        out.family("fleet_markers_total", "counter", "Pass markers (a fill that could not be shared), left by this host and found by it.")
        out.sample("fleet_markers_total", [("direction", "left")], Double(fleet.passMarkers))
        out.sample("fleet_markers_total", [("direction", "found")], Double(fleet.passMarkersSeen))
        out.family("fleet_stores_total", "counter", "Entries this host stored in the fleet tier with its lease, and stores refused because the lease was lost.")
        out.sample("fleet_stores_total", [("result", "stored")], Double(fleet.stored))
        out.sample("fleet_stores_total", [("result", "lost_lease")], Double(fleet.lostLeases))
        out.family("fleet_releases_total", "counter", "Fill leases handed back (every client of the fill went away).")
        out.sample("fleet_releases_total", [], Double(fleet.releases))
        out.family("fleet_unavailable_total", "counter", "Fleet lookups the tier could not answer (breaker open, deadline, connection): served locally.")
        out.sample("fleet_unavailable_total", [], Double(fleet.unavailable))
        out.family("fleet_damaged_total", "counter", "Fleet values refused (damaged or another key's) and deleted.")
        out.sample("fleet_damaged_total", [], Double(fleet.damaged))
        out.family("fleet_purged_refused_total", "counter", "Fleet values refused as older than a purge of their URL (their server missed the purge).")
        out.sample("fleet_purged_refused_total", [], Double(fleet.purgedRefused))
        out.family("fleet_catch_up_refused_total", "counter", "Fleet values not served because this host had not read the purge logs yet (its first second after a start).")
        out.sample("fleet_catch_up_refused_total", [], Double(fleet.catchUpRefused))
        out.family("fleet_leases_held", "gauge", "Fill leases this host holds now.")
        out.sample("fleet_leases_held", [], Double(fleet.leasesHeld))
        out.family("fleet_server_up", "gauge", "1 while a fleet server answers; 0 while its breaker is open (its keys are local-only) or a probe is out.")
        for server in fleet.servers { out.sample("fleet_server_up", [("server", server.address)], server.state == "up" ? 1 : 0) }
        out.family("fleet_server_operations_total", "counter", "Operations sent to each fleet server.")
        for server in fleet.servers { out.sample("fleet_server_operations_total", [("server", server.address)], Double(server.operations)) }
        out.family("fleet_server_failures_total", "counter", "Failed operations on each fleet server (deadline, connection, protocol).")
        for server in fleet.servers { out.sample("fleet_server_failures_total", [("server", server.address)], Double(server.failures)) }
        out.family("fleet_breaker_opens_total", "counter", "Times each fleet server's circuit breaker opened.")
        for server in fleet.servers { out.sample("fleet_breaker_opens_total", [("server", server.address)], Double(server.breakerOpens)) }
        out.family("fleet_bytes_total", "counter", "Bytes read from and written to each fleet server.")
        for server in fleet.servers {
            out.sample("fleet_bytes_total", [("server", server.address), ("direction", "read")], Double(server.bytesRead))
            out.sample("fleet_bytes_total", [("server", server.address), ("direction", "written")], Double(server.bytesWritten))
        }
    }

}

/// Appends metric families and samples in the text format.
struct PrometheusWriter {
    private(set) var text = ""

    mutating func family(_ name: String, _ type: String, _ help: String) {
        text += "# HELP imagecached_\(name) \(help)\n# TYPE imagecached_\(name) \(type)\n"
    }

    mutating func sample(_ name: String, _ labels: [(String, String)] = [], _ value: Double) {
        text += "imagecached_" + name
        if !labels.isEmpty {
            text += "{" + labels.map { "\($0.0)=\"\(DaemonStats.escape($0.1))\"" }.joined(separator: ",") + "}"
        }
        text += " " + DaemonStats.number(value) + "\n"
    }

    mutating func histogram(_ name: String, _ help: String, _ snapshot: HistogramSnapshot) {
        family(name, "histogram", help)
        for bucket in snapshot.buckets {
            sample(name + "_bucket", [("le", bucket.le.isInfinite ? "+Inf" : DaemonStats.number(bucket.le))], Double(bucket.count))
        }
        sample(name + "_sum", [], snapshot.sum)
        sample(name + "_count", [], Double(snapshot.count))
    }

}
