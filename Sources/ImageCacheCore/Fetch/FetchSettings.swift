internal import ImageCacheSystem
internal import ImageCacheHTTP
internal import ImageCacheStatus
internal import ImageCacheConfig
internal import ImageCacheServer
internal import ImageCacheStore
internal import ImageCacheUpstream
internal import ImageCacheFleet
internal import Dispatch
internal import Foundation
internal import Logging
internal import Synchronization

/// The settings a fetch runs with, read once when it starts.
struct FetchSettings {
    let rules: FetchMachine.Rules
    let inFlightLimitBytes: Int
    let writeBufferBytes: Int
    /// Forward and fetch modes follow redirects unless `allowed-sources` is set (a redirect could leave the list).
    let followsRedirects: Bool
    /// fleet.item-max: an entry larger than this leaves a pass marker instead.
    let fleetItemMaxBytes: Int

    init(_ settings: ProxySettings, writesToDisk: Bool) {
        let configuration = settings.configuration
        rules = FetchMachine.Rules(
            maxObjectSizeBytes: configuration.maxObjectSizeBytes,
            memoryObjectLimitBytes: configuration.effectiveMemoryObjectLimitBytes,
            writesToDisk: writesToDisk,
            completeAbandonedFetches: configuration.completeAbandonedFetches,
            staleIfErrorSeconds: configuration.staleIfErrorSeconds,
            contentPolicy: settings.contentPolicy,
            freshnessPolicy: settings.freshnessPolicy,
            forwardNonImages: configuration.forwardNonImages,
            fleet: Self.fleetRules(configuration))
        fleetItemMaxBytes = configuration.fleet.itemMaxBytes
        inFlightLimitBytes = configuration.inFlightLimitBytes
        writeBufferBytes = configuration.server.writeBufferBytes
        followsRedirects = configuration.allowedSources.isEmpty
    }
}

extension FetchSettings {
    /// The fleet tier's rules for a machine (a fetch's, a rendition job's); nil without fleet.servers.
    static func fleetRules(_ configuration: Configuration) -> FetchMachine.FleetRules? {
        configuration.fleet.isEnabled ? FetchMachine.FleetRules(waitSeconds: configuration.fleet.waitSeconds) : nil
    }
}
