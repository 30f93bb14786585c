package import ImageCacheHTTP
package import ImageCacheConfig
package import ImageCacheTransform
internal import Foundation
internal import Synchronization
internal import ImageCacheSystem

/// A verified transform request: where the source is and what to do to it. Immutable; a class, so that the memo
/// hands out one reference per request, not a copy of every option.
package final class TransformTarget: Equatable, Sendable {
    package let source: UpstreamURL
    package let mode: Route.Mode
    package let trusted: Bool
    package let options: TransformOptions
    /// `options.canonical`, made once.
    package let canonical: String
    /// The rendition when its format does not depend on the request (explicit, or the source's without automatic
    /// WebP/AVIF): made once, key included; nil when Accept decides.
    let fixed: RenditionRequest?

    init(source: UpstreamURL, mode: Route.Mode, trusted: Bool, options: TransformOptions,
         autoAVIF: Bool = false, autoWebP: Bool = false) {
        self.source = source
        self.mode = mode
        self.trusted = trusted
        self.options = options
        canonical = options.canonical
        let varies: Bool
        switch options.format {
        case .explicit: varies = false
        case .auto: varies = true
        case .source: varies = autoAVIF || autoWebP
        }
        fixed = varies ? nil : RenditionRequest(source: source, options: options, canonical: canonical,
                                                 choice: FormatNegotiation.choose(options.format, accept: nil, autoAVIF: false, autoWebP: false))
    }

    package static func == (a: TransformTarget, b: TransformTarget) -> Bool {
        a.source == b.source && a.mode == b.mode && a.trusted == b.trusted && a.options == b.options
    }
}
