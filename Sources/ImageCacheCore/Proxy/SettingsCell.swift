internal import ImageCacheHTTP
internal import ImageCacheStatus
public import ImageCacheConfig
internal import ImageCacheServer
internal import ImageCacheTransform
package import ImageCacheStore
internal import Foundation
internal import Synchronization
internal import ImageCacheSystem

/// The settings in force, replaced whole on reload. Shared by the proxy and the coalescer.
final class SettingsCell: Sendable {
    private let lock: Locked<ProxySettings>

    init(_ settings: ProxySettings) { lock = Locked(settings) }

    var current: ProxySettings { lock.withLock { $0 } }

    func replace(with settings: ProxySettings) { lock.withLock { $0 = settings } }
}
