// Transform URLs, routed: the prefix, the signature, the options and the source, checked in that order, into a
// `TransformTarget` or an error (403 signature, 400 options or source). Pure; no I/O.
//
// SOURCES
//   An absolute http(s) URL is fetched as fetch mode fetches it (untrusted: the private-network guard applies, and
//   `allowed-sources` when set, with redirects not followed then), unless it lies under a configured origin (then as
//   that origin: trusted). When the daemon requires signatures (`require-signature`) and has no transform key, such
//   a URL is refused (403): unsigned transforms of any URL would make it an open image proxy.
//   A relative source ("/path", "path" or "local:///path") is a path under the configured origins, resolved as a
//   reverse-mode request for it would be; without a matching origin it is refused (400).

package import ImageCacheHTTP
package import ImageCacheConfig
package import ImageCacheTransform
internal import Foundation
internal import Synchronization
internal import ImageCacheSystem

/// What routing needs of the transform settings. Immutable, built with ProxySettings.
package struct TransformRouting: Sendable {
    /// Without a trailing "/" ("" for "/").
    let prefix: String
    let signing: TransformSigning
    let presets: [String: [String]]
    let onlyPresets: Bool
    let maxDimension: Int
    let allowedSources: AllowedSources
    /// `require-signature` in force: without transform keys, only sources under configured origins are served.
    let signaturesRequired: Bool
    let autoAVIF: Bool
    let autoWebP: Bool
    let memo = TransformRouteMemo()

    package init(_ configuration: Configuration) {
        prefix = configuration.transform.normalisedPrefix
        signing = configuration.transform.signing
        presets = configuration.transform.presets
        onlyPresets = configuration.transform.onlyPresets
        maxDimension = configuration.transform.limits.maxDimension
        allowedSources = AllowedSources(configuration.allowedSources)
        signaturesRequired = configuration.signaturesRequired
        autoAVIF = configuration.transform.autoAVIF
        autoWebP = configuration.transform.autoWebP
    }

    /// `rest`: the raw target after the prefix and its "/" ("<signature>/<options>/plain/<source>").
    func resolve(_ rest: Substring, origins: [OriginRoute]) -> Route {
        if let target = memo.target(rest) { return .transform(target) }
        let route = resolveUncached(rest, origins: origins)
        if case let .transform(target) = route { memo.keep(rest, target) }
        return route
    }

    private func resolveUncached(_ rest: Substring, origins: [OriginRoute]) -> Route {
        let path: TransformPath
        do {
            path = try TransformPath.parse(rest)
        } catch {
            return .error(status: 400, reason: error.reason)
        }
        if let refusal = signing.verify(signature: path.signature, path: path.signed) {
            return .error(status: 403, reason: refusal.reason)
        }
        var options: TransformOptions
        do {
            options = try TransformOptions.parse(path.options, presets: presets, onlyPresets: onlyPresets, maxDimension: maxDimension)
        } catch {
            return .error(status: 400, reason: error.reason)
        }
        if let format = path.extensionFormat { options.format = .explicit(format) }
        var source = path.source
        if source.hasPrefix("local://") { source = String(source.dropFirst("local://".count)) }
        if !source.contains("://") && !source.hasPrefix("/") { source = "/" + source }
        if source.hasPrefix("/") {
            let normal = UpstreamURL.isNormalPathAndQuery(source) ? source : UpstreamURL.normalisedOriginForm(source)
            let mark = normal.firstIndex(of: "?") ?? normal.endIndex
            guard let best = OriginRoute.longest(matching: normal[..<mark], in: origins) else {
                return .error(status: 400, reason: "the relative source \(source.prefix(200)) is under no configured origin (--origin)")
            }
            do {
                let url = try best.upstreamURL(for: normal)
                return .transform(TransformTarget(source: url, mode: .reverse, trusted: true, options: options,
                                              autoAVIF: autoAVIF, autoWebP: autoWebP))
            } catch {
                return .error(status: 400, reason: "bad source path: \(error.reason)")
            }
        }
        let url: UpstreamURL
        do {
            url = try UpstreamURL.parse(source)
        } catch {
            return .error(status: 400, reason: "bad source URL: \(error.reason)")
        }
        if origins.contains(where: { PrefetchRun.isUnder($0, url) }) {
            return .transform(TransformTarget(source: url, mode: .reverse, trusted: true, options: options,
                                              autoAVIF: autoAVIF, autoWebP: autoWebP))
        }
        // Unsigned transforms of any URL would make a daemon that requires signed fetch URLs an open image proxy.
        if signaturesRequired && signing.isInsecure {
            return .error(status: 403, reason: "this daemon requires signed URLs (require-signature) and has no transform key: only sources under its configured origins are transformed (set transform-keys and transform-salts, or IMGPROXY_KEY and IMGPROXY_SALT)")
        }
        if let refusal = allowedSources.refusal(url) { return .error(status: 403, reason: refusal) }
        return .transform(TransformTarget(source: url, mode: .fetch, trusted: false, options: options,
                                              autoAVIF: autoAVIF, autoWebP: autoWebP))
    }
}
