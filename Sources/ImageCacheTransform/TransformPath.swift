// The path of a transform URL, in imgproxy's two forms, split into its parts. Pure; no I/O.
//
//   /<signature>/<option>/<option>/.../plain/<source URL, percent-encoded or not>[@<extension>]
//   /<signature>/<option>/<option>/.../<base64url source URL, may be split by "/">[.<extension>]
//
// The path is taken as the client sent it (after the transform prefix), query included: it is what was signed.
// Options are the segments after the signature that hold a ":"; "plain" starts a plain source; the first other
// segment starts a base64 source (imgproxy's rule). The extension, when present, is the output format (the same
// as a format option placed last). imgproxy's encrypted sources ("enc") are refused: they are an imgproxy Pro
// feature this daemon does not have.

internal import ImageCacheHTTP
internal import Foundation

public struct TransformPath: Sendable, Equatable {
    public var signature: Substring
    /// What the signature covers: from the "/" after the signature to the end.
    public var signed: Substring
    public var options: [Substring]
    /// The source as given (decoded): an absolute URL, "local:///path" or a path.
    public var source: String
    /// The output format named by "@ext" or ".ext".
    public var extensionFormat: ImageOutputFormat?

    /// `path`: the target after the transform prefix, without its leading "/" ("sig/rs:fit:300:0/plain/...").
    public static func parse(_ path: Substring) throws(TransformOptions.Failure) -> TransformPath {
        guard let slash = path.firstIndex(of: "/"), slash != path.startIndex else {
            throw .init("not a transform URL: expected /<signature>/<options>/plain/<source URL> or /<signature>/<options>/<base64 source URL>")
        }
        let signature = path[..<slash]
        let signed = path[slash...]
        var rest = signed.dropFirst()
        var options: [Substring] = []
        while true {
            let end = rest.firstIndex(of: "/") ?? rest.endIndex
            let segment = rest[..<end]
            if segment == "plain" {
                guard end < rest.endIndex else { throw .init("the plain source URL is missing after /plain/") }
                return try plain(rest[rest.index(after: end)...], signature: signature, signed: signed, options: options)
            }
            if segment == "enc" { throw .init("encrypted source URLs (/enc/) are not supported") }
            if segment.contains(":") {
                options.append(segment)
                guard end < rest.endIndex else { throw .init("the source URL is missing after the options") }
                rest = rest[rest.index(after: end)...]
                continue
            }
            return try base64(rest, signature: signature, signed: signed, options: options)
        }
    }

    private static func plain(_ text: Substring, signature: Substring, signed: Substring, options: [Substring])
        throws(TransformOptions.Failure) -> TransformPath {
        var encoded = text
        var format: ImageOutputFormat?
        if let at = text.lastIndex(of: "@"), let named = ImageOutputFormat(name: String(text[text.index(after: at)...])) {
            encoded = text[..<at]
            format = named
        }
        guard let source = PercentDecoding.decode(String(encoded)), !source.isEmpty else {
            throw .init("the plain source URL is not valid percent-encoding")
        }
        return TransformPath(signature: signature, signed: signed, options: options, source: source, extensionFormat: format)
    }

    private static func base64(_ text: Substring, signature: Substring, signed: Substring, options: [Substring])
        throws(TransformOptions.Failure) -> TransformPath {
        var encoded = text
        if let mark = encoded.firstIndex(of: "?") { encoded = encoded[..<mark] }
        var format: ImageOutputFormat?
        if let dot = encoded.lastIndex(of: "."), let named = ImageOutputFormat(name: String(encoded[encoded.index(after: dot)...])) {
            encoded = encoded[..<dot]
            format = named
        }
        let joined = encoded.split(separator: "/").joined()
        guard let bytes = URLSigning.base64Decode(Substring(joined)), let source = String(validating: bytes, as: UTF8.self),
              !source.isEmpty else {
            throw .init("the source URL is neither /plain/<URL> nor URL-safe base64")
        }
        return TransformPath(signature: signature, signed: signed, options: options, source: source, extensionFormat: format)
    }
}

/// Which output format a request gets, from what its URL asks and what its Accept field allows. Pure.
///
/// POLICY (imgproxy's, made explicit): a format the URL names is used as named. `f:auto`, or no format with
/// `transform-auto-avif` / `transform-auto-webp` on, picks AVIF when Accept lists image/avif, else WebP when it lists
/// image/webp, else the source's format; a wildcard (image/*, */*) does not count, and q=0 excludes. The choice is a
/// format class ("avif", "webp", "src"): that, never the raw Accept, is part of the cache key, and a response whose
/// format was negotiated says `Vary: Accept`.
public enum FormatNegotiation {
    public struct Choice: Sendable, Equatable {
        /// nil: the source's format (decided once the source is read).
        public var format: ImageOutputFormat?
        /// The response depends on Accept.
        public var variesOnAccept: Bool
        /// The key's text: "avif", "webp", "jpeg", ..., or "src".
        public var keyClass: String { format?.rawValue ?? "src" }
    }

    public static func choose(_ request: FormatRequest, accept: String?, autoAVIF: Bool, autoWebP: Bool) -> Choice {
        switch request {
        case let .explicit(format):
            return Choice(format: format, variesOnAccept: false)
        case .auto:
            return negotiate(accept, avif: true, webp: true)
        case .source:
            guard autoAVIF || autoWebP else { return Choice(format: nil, variesOnAccept: false) }
            return negotiate(accept, avif: autoAVIF, webp: autoWebP)
        }
    }

    private static func negotiate(_ accept: String?, avif: Bool, webp: Bool) -> Choice {
        let accepted = acceptedTypes(accept ?? "")
        if avif && accepted.contains("image/avif") { return Choice(format: .avif, variesOnAccept: true) }
        if webp && accepted.contains("image/webp") { return Choice(format: .webp, variesOnAccept: true) }
        return Choice(format: nil, variesOnAccept: true)
    }

    /// The media types Accept lists with a quality above 0, lower-cased.
    static func acceptedTypes(_ accept: String) -> Set<String> {
        var types = Set<String>()
        for item in accept.split(separator: ",") {
            let parts = item.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
            guard let type = parts.first, !type.isEmpty else { continue }
            let q = parts.dropFirst().first { $0.hasPrefix("q=") }.flatMap { Double($0.dropFirst(2)) } ?? 1
            if q > 0 { types.insert(type) }
        }
        return types
    }
}
