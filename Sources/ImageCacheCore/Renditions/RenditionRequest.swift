// RenditionRequest: what a transform URL asks for (options, output format, the rendition's text and key), and how
// the proxy serves it: as any request for its rendition's key (Renditions.swift has the rules).

internal import ImageCacheHTTP
internal import ImageCacheConfig
internal import ImageCacheServer
internal import ImageCacheStore
internal import ImageCacheTransform

/// What a rendition request adds to a client request. A class: a client request (passed along the hit path) holds
/// one reference, nil for every request that is not a transform.
final class RenditionRequest: Sendable {
    let options: TransformOptions
    /// The output format (nil: the source's) and whether it was negotiated from Accept.
    let choice: FormatNegotiation.Choice
    /// The key's rendition text.
    let text: String
    /// The key it is stored under.
    let key: CacheKey

    init(source: UpstreamURL, options: TransformOptions, canonical: String, choice: FormatNegotiation.Choice) {
        self.options = options
        self.choice = choice
        text = canonical + "/f:" + choice.keyClass + (choice.variesOnAccept ? ":v" : "")
        key = CacheKey(source, rendition: text)
    }

    /// The rendition a request asks for: the target's own when its format is fixed, else negotiated from Accept.
    static func of(_ target: TransformTarget, accept: String?, settings: TransformSettings) -> RenditionRequest {
        if let fixed = target.fixed { return fixed }
        return RenditionRequest(source: target.source, options: target.options, canonical: target.canonical,
                                choice: FormatNegotiation.choose(target.options.format, accept: accept,
                                                                 autoAVIF: settings.autoAVIF, autoWebP: settings.autoWebP))
    }
}

extension Proxy {
    /// A transform URL: served as its rendition's key (see the top).
    func serveTransform(_ target: TransformTarget, head: HTTPRequestHead, client: ClientInfo, sink: any ResponseSink,
                        settings: ProxySettings) {
        let rendition = RenditionRequest.of(target, accept: head.headers["Accept"], settings: settings.configuration.transform)
        if settings.configuration.accessLog { (sink as? AccessLogSink)?.describe(transform: rendition.text) }
        let request = ClientRequest(head: head, url: target.source, mode: target.mode, trusted: target.trusted, client: client,
                                    fields: settings.requestFields, rendition: rendition,
                                    staleWhileRevalidate: settings.configuration.staleWhileRevalidateSeconds)
        serve(request, sink: sink)
    }
}

