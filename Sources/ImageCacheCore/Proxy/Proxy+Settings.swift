// The reloadable part of the proxy: one immutable `ProxySettings` built from a Configuration, held behind one
// Mutex (`SettingsCell`, shared by the proxy and its coalescer) and replaced whole by `apply` (SIGHUP). A request
// reads it once (`settings`), so it sees one version from start to end; a fetch reads it when it starts and keeps
// it (a reload applies to the fetches started after it).
//
// Which keys a reload applies and which need a restart (the daemon logs those) is said once, per key, in
// ConfigKeys.swift (`ConfigKey.reload`); `Configuration.restartOnlyChanges` names the ones that changed.

internal import ImageCacheHTTP
internal import ImageCacheStatus
public import ImageCacheConfig
internal import ImageCacheServer
internal import ImageCacheTransform
internal import ImageCacheFleet
package import ImageCacheStore
internal import Foundation
internal import Synchronization
internal import ImageCacheSystem

/// The settings one request sees. Immutable; shared by reference (one retain per read).
final class ProxySettings: Sendable {
    let configuration: Configuration
    let contentPolicy: ContentPolicy
    let freshnessPolicy: FreshnessPolicy
    /// The reverse-proxy mappings, parsed once.
    let originRoutes: [OriginRoute]
    /// Signed fetch URLs: keys and whether unsigned fetch and forward requests are refused.
    let signing: URLSigning
    /// Which request fields go upstream.
    let requestFields: RequestFieldPolicy
    /// Transform URLs: prefix, keys, presets (nil: transforms off).
    let transformRouting: TransformRouting?
    /// `allowed-sources`.
    let allowedSources: AllowedSources
    /// `proxy-allow`: the clients that may use the forward proxy (ProxyAllow.swift).
    let proxyAllow: ProxyAllow

    init(_ configuration: Configuration) {
        requestFields = RequestFieldPolicy(configuration)
        self.configuration = configuration
        contentPolicy = ContentPolicy(allowedTypes: configuration.effectiveContentTypes)
        originRoutes = configuration.origins.compactMap(OriginRoute.init)
        signing = URLSigning(keys: configuration.signingKeys, required: configuration.signaturesRequired)
        freshnessPolicy = configuration.freshnessPolicy
        transformRouting = configuration.transform.enabled ? TransformRouting(configuration) : nil
        allowedSources = AllowedSources(configuration.allowedSources)
        proxyAllow = ProxyAllow(configuration.proxyAllow)
    }
}

extension Proxy {
    /// The settings in force. Read once per request.
    var settings: ProxySettings { settingsCell.current }
    public var configuration: Configuration { settings.configuration }
    var contentPolicy: ContentPolicy { settings.contentPolicy }
    var freshnessPolicy: FreshnessPolicy { settings.freshnessPolicy }
    var originRoutes: [OriginRoute] { settings.originRoutes }

    /// Puts the reloadable parts of `configuration` in force: new requests see them at once; the memory tier is
    /// trimmed to its new limits. Keys that need a restart keep the value they started with.
    package func apply(_ configuration: Configuration) {
        let current = self.configuration
        var next = configuration
        next.keepRestartOnlySettings(of: current)
        settingsCell.replace(with: ProxySettings(next))
        fleet.reload(next.fleet)
        startFleetIfConfigured(next.fleet)
        memory.setLimits(bytes: next.memoryLimitBytes, count: next.memoryCountLimit,
                         objectLimitBytes: next.effectiveMemoryObjectLimitBytes)
    }

    /// Cache-path sinks that leave the connection's loop are wrapped to count their outcome and bytes.
    func countingSink(_ sink: any ResponseSink, request: ClientRequest) -> any ResponseSink {
        // A transform's source request: its client is the transform, which is counted itself.
        if request.isInternal { return sink }
        return MetricsSink(wrapping: sink, metrics: metrics, isHead: request.isHead)
    }

    /// A hit answered on the connection's loop: counted here, with no wrapper on the hot path. `bodyBytes`: the body
    /// bytes sent (0 for a 304 or a 416).
    func countHit(_ entry: CacheEntry, request: ClientRequest, outcome: ServedOutcome, bodyBytes: Int) {
        if request.isInternal { return }
        metrics.served(outcome)
        if !request.isHead, bodyBytes > 0 { metrics.servedBytes(outcome, bodyBytes) }
    }
}

extension Configuration {
    /// The freshness policy the configuration describes: heuristic freshness and the targeted cache-control fields.
    package var freshnessPolicy: FreshnessPolicy {
        FreshnessPolicy(heuristicFraction: heuristicFraction, heuristicMaxSeconds: heuristicMaxSeconds,
                        targetedFields: targetedCacheControl, stripsTargetedFields: stripTargetedCacheControl,
                        negativeTTLSeconds: negativeTTLSeconds)
    }
}
