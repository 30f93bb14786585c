// Data model: image formats we know, their signatures, and the content policy that decides whether an upstream
// response may be served and stored. Immutable values; no owner, no lock. Pure functions, no I/O.
//
// Content policy (configuration `content-types`, `allow-svg`):
//   - An empty allowlist (the "*/*" setting) turns every check off.
//   - Otherwise the Content-Type must be present, an image/ type, and on the allowlist ("image/*" on the list allows
//     every image type). Aliases image/jpg and image/pjpeg count as image/jpeg. Parameters and case are ignored.
//   - When the declared type is one we know, the body must begin with that format's signature: a PNG declared as
//     image/jpeg, or an HTML error page declared as image/png, is refused. Types we do not know are not sniffed.
//   - The verdict waits (.needMoreBytes) until enough of the body has arrived to decide, or the body is complete.

/// An image format we can recognise.
public import ImageCacheHTTP

public enum ImageFormat: String, Sendable, CaseIterable {
    case jpeg, png, gif, webp, avif, svg

    /// "image/jpeg", ..., "image/svg+xml".
    public var mediaType: String {
        switch self {
        case .svg: "image/svg+xml"
        default: "image/" + rawValue
        }
    }

    /// Name for messages: "JPEG", "PNG", "GIF", "WebP", "AVIF", "SVG".
    public var displayName: String {
        switch self {
        case .webp: "WebP"
        default: rawValue.uppercased()
        }
    }

    /// "a" or "an" before `displayName` ("an SVG", "a PNG").
    var article: String { self == .avif || self == .svg ? "an" : "a" }

    /// The format of a media type; parameters and case ignored ("image/JPEG; q=1"); image/jpg, image/pjpeg and
    /// image/x-png are aliases.
    public init?(mediaType: String) {
        switch ImageFormat.essence(mediaType) {
        case "image/jpeg", "image/jpg", "image/pjpeg": self = .jpeg
        case "image/png", "image/x-png": self = .png
        case "image/gif": self = .gif
        case "image/webp": self = .webp
        case "image/avif": self = .avif
        case "image/svg+xml": self = .svg
        default: return nil
        }
    }

    /// "type/subtype" lower-cased, parameters and white space dropped.
    package static func essence(_ mediaType: String) -> String {
        let bare = mediaType.split(separator: ";", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        return String(bare.trimmingOWS()).lowercased()
    }
}

/// Recognises image formats by their leading bytes.
public enum ImageSignature {
    /// The most leading bytes `sniff` ever looks at (SVG: BOM, white space, XML declaration, comments, doctype).
    public static let bytesNeeded = 1024

    /// Leading bytes needed to recognise `format` (fewer may do for SVG; an AVIF ftyp box rarely needs more than 64).
    public static func bytesNeeded(for format: ImageFormat) -> Int {
        switch format {
        case .jpeg: 3
        case .png: 8
        case .gif: 6
        case .webp: 12
        case .avif: 64
        case .svg: bytesNeeded
        }
    }

    /// Like `bytesNeeded(for:)`, but an AVIF's ftyp box may be longer: its size is read from `prefix` when known.
    static func bytesNeeded(for format: ImageFormat, prefix: ArraySlice<UInt8>) -> Int {
        guard format == .avif, prefix.count >= 4 else { return bytesNeeded(for: format) }
        let p = prefix.startIndex
        let boxSize = Int(prefix[p]) << 24 | Int(prefix[p + 1]) << 16 | Int(prefix[p + 2]) << 8 | Int(prefix[p + 3])
        return min(max(boxSize, bytesNeeded(for: .avif)), bytesNeeded)
    }

    /// The format whose signature the bytes begin with, or nil.
    public static func sniff(_ prefix: ArraySlice<UInt8>) -> ImageFormat? {
        let p = Array(prefix.prefix(bytesNeeded))
        if p.starts(with: [0xFF, 0xD8, 0xFF]) { return .jpeg }
        if p.starts(with: [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) { return .png }
        if p.starts(with: Array("GIF87a".utf8)) || p.starts(with: Array("GIF89a".utf8)) { return .gif }
        if p.count >= 12, p[0..<4].elementsEqual("RIFF".utf8), p[8..<12].elementsEqual("WEBP".utf8) { return .webp }
        if isAVIF(p) { return .avif }
        if isSVG(p) { return .svg }
        return nil
    }

    /// ISO-BMFF: a "ftyp" box first, whose major brand or a compatible brand is "avif" or "avis".
    private static func isAVIF(_ p: [UInt8]) -> Bool {
        guard p.count >= 12, p[4..<8].elementsEqual("ftyp".utf8) else { return false }
        let boxSize = Int(p[0]) << 24 | Int(p[1]) << 16 | Int(p[2]) << 8 | Int(p[3])
        func isAVIFBrand(_ at: Int) -> Bool {
            p[at..<(at + 4)].elementsEqual("avif".utf8) || p[at..<(at + 4)].elementsEqual("avis".utf8)
        }
        if isAVIFBrand(8) { return true }
        // major_brand (8..<12), minor_version (12..<16), then compatible brands to the end of the box.
        var at = 16
        let end = min(max(boxSize, 16), p.count)
        while at + 4 <= end {
            if isAVIFBrand(at) { return true }
            at += 4
        }
        return false
    }

    /// Text whose first element is <svg, after an optional UTF-8 BOM, white space, XML declaration / processing
    /// instructions, comments and a doctype.
    private static func isSVG(_ p: [UInt8]) -> Bool {
        var i = 0
        if p.starts(with: [0xEF, 0xBB, 0xBF]) { i = 3 }
        func skipSpace() { while i < p.count, p[i] == 0x20 || p[i] == 0x09 || p[i] == 0x0A || p[i] == 0x0D { i += 1 } }
        func has(_ s: String, at j: Int, ignoringCase: Bool = false) -> Bool {
            let bytes = Array(s.utf8)
            guard j + bytes.count <= p.count else { return false }
            for (k, b) in bytes.enumerated() {
                let c = p[j + k]
                if ignoringCase ? (c | 0x20) != (b | 0x20) : c != b { return false }
            }
            return true
        }
        /// Moves `i` past the next `terminator`; false when it is not in the prefix.
        func skip(past terminator: String) -> Bool {
            let n = terminator.utf8.count
            while i + n <= p.count {
                if has(terminator, at: i) {
                    i += n
                    return true
                }
                i += 1
            }
            return false
        }
        while true {
            skipSpace()
            if has("<?", at: i) {
                guard skip(past: "?>") else { return false }
            } else if has("<!--", at: i) {
                guard skip(past: "-->") else { return false }
            } else if has("<!DOCTYPE", at: i, ignoringCase: true) {
                // Skip to the closing ">", past an internal subset in brackets if any.
                var depth = 0
                i += 9
                while i < p.count, !(p[i] == 0x3E && depth == 0) {
                    if p[i] == 0x5B { depth += 1 } else if p[i] == 0x5D { depth -= 1 }
                    i += 1
                }
                guard i < p.count else { return false }
                i += 1
            } else {
                break
            }
        }
        guard has("<svg", at: i), i + 4 < p.count else { return false }
        let next = p[i + 4]
        return next == 0x20 || next == 0x09 || next == 0x0A || next == 0x0D || next == 0x3E || next == 0x2F
    }
}

/// Decides whether an upstream response may be served, from its Content-Type and first bytes (the policy above).
public struct ContentPolicy: Sendable, Equatable {
    public enum Verdict: Sendable, Equatable {
        case allowed
        case needMoreBytes
        case refused(String)
    }

    /// Allowed media types, lower-cased essences. Empty: every type, no checks.
    public let allowedTypes: [String]

    /// `allowedTypes` empty (or containing "*/*") allows everything without checks.
    public init(allowedTypes: [String]) {
        let essences = allowedTypes.map(ImageFormat.essence)
        self.allowedTypes = essences.contains("*/*") ? [] : essences
    }

    /// Whether checks are off.
    public var allowsEverything: Bool { allowedTypes.isEmpty }

    /// What a response declares as its type: no Content-Type, exactly one media type, or something a browser could
    /// read otherwise than the checks do (several Content-Type fields, of which browsers take the last and the
    /// checks the first; a list; a value that is not one `type/subtype;parameters` media type). The last is refused
    /// whatever the allowlist, since no origin sends it by mistake that a client could rely on (RFC 9110 8.3: one
    /// media type).
    public enum DeclaredType: Sendable, Equatable {
        case none
        case one(String)
        case ambiguous(String)
    }

    public static func declaredType(_ headers: HTTPHeaders) -> DeclaredType {
        let values = headers.values("Content-Type")
        guard let value = values.first else { return .none }
        if values.count > 1 {
            return .ambiguous("upstream sent \(values.count) Content-Type fields (\(values.joined(separator: " | ").prefix(120)))")
        }
        guard isSingleMediaType(value) else {
            return .ambiguous("upstream sent a Content-Type that is not one media type: \(value.prefix(120))")
        }
        return .one(value)
    }

    /// `type "/" subtype *( OWS ";" OWS [ token "=" ( token / quoted-string ) ] )` (RFC 9110 8.3.1, 5.6.6).
    static func isSingleMediaType(_ value: String) -> Bool {
        let bytes = Array(value.utf8)
        var i = 0
        func token() -> Bool {
            let start = i
            while i < bytes.count, isTokenByte(bytes[i]) { i += 1 }
            return i > start
        }
        func skipOWS() { while i < bytes.count, bytes[i] == 0x20 || bytes[i] == 0x09 { i += 1 } }
        skipOWS()
        guard token(), i < bytes.count, bytes[i] == UInt8(ascii: "/") else { return false }
        i += 1
        guard token() else { return false }
        skipOWS()
        while i < bytes.count {
            guard bytes[i] == UInt8(ascii: ";") else { return false }
            i += 1
            skipOWS()
            if i == bytes.count { break }
            if bytes[i] == UInt8(ascii: ";") { continue }
            guard token(), i < bytes.count, bytes[i] == UInt8(ascii: "=") else { return false }
            i += 1
            if i < bytes.count, bytes[i] == UInt8(ascii: "\"") {
                i += 1
                var closed = false
                while i < bytes.count {
                    if bytes[i] == UInt8(ascii: "\\") { i += 2; continue }
                    if bytes[i] == UInt8(ascii: "\"") { closed = true; i += 1; break }
                    i += 1
                }
                guard closed else { return false }
            } else {
                guard token() else { return false }
            }
            skipOWS()
        }
        return true
    }

    private static func isTokenByte(_ byte: UInt8) -> Bool {
        byte > 0x20 && byte < 0x7F && !"\"(),/:;<=>?@[\\]{}".utf8.contains(byte)
    }

    /// The Content-Type check alone.
    public func checkContentType(_ contentType: String?) -> Verdict {
        if allowsEverything { return .allowed }
        guard let contentType, !contentType.trimmingOWS().isEmpty else { return .refused("upstream sent no Content-Type") }
        let essence = ImageFormat.essence(contentType)
        guard essence.hasPrefix("image/") else { return .refused("upstream sent \(essence), not an image") }
        if allowedTypes.contains(essence) || allowedTypes.contains("image/*") { return .allowed }
        if let format = ImageFormat(mediaType: essence),
           allowedTypes.contains(where: { ImageFormat(mediaType: $0) == format }) {
            return .allowed
        }
        return .refused("upstream sent \(essence), which is not allowed (--content-types)")
    }

    /// The full check with the first body bytes (`complete`: `prefix` is the whole body).
    public func check(contentType: String?, prefix: ArraySlice<UInt8>, complete: Bool) -> Verdict {
        let typeVerdict = checkContentType(contentType)
        guard typeVerdict == .allowed, !allowsEverything, let contentType,
              let declared = ImageFormat(mediaType: contentType) else { return typeVerdict }
        if ImageSignature.sniff(prefix) == declared { return .allowed }
        if !complete && prefix.count < ImageSignature.bytesNeeded(for: declared, prefix: prefix) { return .needMoreBytes }
        return .refused("upstream sent \(ImageFormat.essence(contentType)) but the body is not \(declared.article) \(declared.displayName) image")
    }
}
