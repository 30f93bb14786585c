internal import ImageCacheSystem
internal import ImageCacheHTTP
internal import ImageCacheConfig
internal import ImageCacheServer
internal import ImageCacheStore
internal import ImageCacheUpstream
internal import Dispatch
internal import Foundation
internal import Logging
internal import Synchronization

/// A request's body as the server gave it: read whole (a short one, or none), or streamed as it arrives.
enum RequestBody {
    case bytes([UInt8])
    case stream(RequestBodyStream)

    /// The bytes read whole (none for a streamed body).
    var bytes: [UInt8] { if case let .bytes(bytes) = self { bytes } else { [] } }
}
