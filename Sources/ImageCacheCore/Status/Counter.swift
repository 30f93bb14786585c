internal import ImageCacheSystem
internal import ImageCacheHTTP
internal import ImageCacheConfig
internal import ImageCacheServer
internal import ImageCacheStore
package import ImageCacheStatus
public import Foundation
internal import Synchronization

/// A relaxed atomic counter in a class, so that counters can sit in arrays (Atomic is not copyable).
package final class Counter: Sendable {
    private let value = Atomic<Int>(0)
    package func add(_ amount: Int = 1) { value.wrappingAdd(amount, ordering: .relaxed) }
    var current: Int { value.load(ordering: .relaxed) }
}
