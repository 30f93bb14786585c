package import ImageCacheHTTP
package import ImageCacheConfig
package import ImageCacheTransform
internal import Foundation
internal import Synchronization
internal import ImageCacheSystem

/// Transform targets already resolved, by the raw text after the prefix: a warm rendition is asked for by the same
/// URL again and again, and its signature, options and source need checking once per settings version (a reload
/// makes new settings, with an empty memo). Bounded: emptied when it reaches `limit`. Only successes are kept.
final class TransformRouteMemo: Sendable {
    static let limit = 4096
    private let targets = Locked<[Substring: TransformTarget]>([:])

    func target(_ rest: Substring) -> TransformTarget? { targets.withLock { $0[rest] } }

    func keep(_ rest: Substring, _ target: TransformTarget) {
        targets.withLock { targets in
            if targets.count >= Self.limit { targets.removeAll(keepingCapacity: true) }
            targets[rest] = target
        }
    }
}
