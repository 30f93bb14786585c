import ImageCacheHTTP
import ImageCacheStore
import Testing

enum Samples {
    static let jpeg: [UInt8] = [0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10] + Array("JFIF".utf8)
    static let png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 13] + Array("IHDR".utf8)
    static let gif87: [UInt8] = Array("GIF87a".utf8) + [1, 0, 1, 0]
    static let gif89: [UInt8] = Array("GIF89a".utf8) + [1, 0, 1, 0]
    static let webp: [UInt8] = Array("RIFF".utf8) + [0x24, 0, 0, 0] + Array("WEBPVP8 ".utf8)
    static func ftyp(major: String, compatible: [String]) -> [UInt8] {
        let size = 16 + 4 * compatible.count
        var box: [UInt8] = [0, 0, UInt8(size >> 8), UInt8(size & 0xFF)] + Array("ftyp".utf8) + Array(major.utf8) + [0, 0, 0, 0]
        for brand in compatible { box += Array(brand.utf8) }
        return box + [0, 0, 0, 8] + Array("meta".utf8)
    }
    static let avif = ftyp(major: "avif", compatible: ["mif1", "miaf"])
    static let avifCompatible = ftyp(major: "mif1", compatible: ["miaf", "MA1B", "avif"])
    static let avifLongBrandList = ftyp(major: "mif1", compatible: Array(repeating: "miaf", count: 14) + ["avif"])
    static let avis = ftyp(major: "msf1", compatible: ["avis"])
    static let heic = ftyp(major: "heic", compatible: ["mif1", "heic"])
    static let svg: [UInt8] = Array("<svg xmlns=\"http://www.w3.org/2000/svg\"/>".utf8)
    static let svgProlog: [UInt8] = [0xEF, 0xBB, 0xBF] + Array("""
        <?xml version="1.0" encoding="UTF-8"?>
        <!-- Generator: Something -->
        <!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN" "http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd" [
          <!ENTITY ns "x">
        ]>
        <svg width="10" height="10"></svg>
        """.utf8)
    static let html: [UInt8] = Array("<!DOCTYPE html><html><body>Not found</body></html>".utf8)
}

@Suite("ImageSignature", .timeLimit(.minutes(1)))
struct ImageSignatureTests {
    @Test("recognises each format by its leading bytes", arguments: [
        (Samples.jpeg, ImageFormat.jpeg),
        (Samples.png, .png),
        (Samples.gif87, .gif),
        (Samples.gif89, .gif),
        (Samples.webp, .webp),
        (Samples.avif, .avif),
        (Samples.avifCompatible, .avif),
        (Samples.avis, .avif),
        (Samples.svg, .svg),
        (Samples.svgProlog, .svg),
        (Array("\n  <svg>".utf8), .svg),
    ])
    func sniffs(bytes: [UInt8], format: ImageFormat) {
        #expect(ImageSignature.sniff(bytes[...]) == format)
    }

    @Test("recognises nothing in other or truncated data", arguments: [
        [], [0xFF, 0xD8], Array(Samples.png.prefix(7)), Array("GIF88a".utf8), Array("RIFF\0\0\0\0WAVE".utf8),
        Samples.heic, Samples.html, Array("<svgfoo>".utf8), Array("<html><svg>".utf8), Array("<?xml version=\"1.0\"".utf8),
        Array("<!-- unterminated <svg>".utf8), Array("{\"svg\": 1}".utf8),
    ] as [[UInt8]])
    func rejects(bytes: [UInt8]) {
        #expect(ImageSignature.sniff(bytes[...]) == nil)
    }

    @Test("media types map to formats ignoring case, parameters and aliases", arguments: [
        ("image/jpeg", ImageFormat.jpeg), ("image/JPEG; q=1", .jpeg), ("image/jpg", .jpeg), ("image/pjpeg", .jpeg),
        (" image/png ", .png), ("image/gif", .gif), ("image/webp", .webp), ("image/avif", .avif), ("image/svg+xml", .svg),
    ] as [(String, ImageFormat?)])
    func mediaTypes(text: String, format: ImageFormat?) {
        #expect(ImageFormat(mediaType: text) == format)
    }

    @Test("unknown media types have no format")
    func unknownMediaTypes() {
        #expect(ImageFormat(mediaType: "image/bmp") == nil)
        #expect(ImageFormat(mediaType: "text/html") == nil)
        #expect(ImageFormat.svg.mediaType == "image/svg+xml")
        #expect(ImageFormat.allCases.allSatisfy { ImageFormat(mediaType: $0.mediaType) == $0 })
    }
}

@Suite("ContentPolicy", .timeLimit(.minutes(1)))
struct ContentPolicyTests {
    static let images = ContentPolicy(allowedTypes: ["image/jpeg", "image/png", "image/gif", "image/webp", "image/avif"])

    @Test("checks the Content-Type against the allowlist", arguments: [
        ("image/png", ContentPolicy.Verdict.allowed),
        ("IMAGE/PNG; charset=binary", .allowed),
        ("image/jpg", .allowed),
        (nil, .refused("upstream sent no Content-Type")),
        ("", .refused("upstream sent no Content-Type")),
        ("text/html; charset=utf-8", .refused("upstream sent text/html, not an image")),
        ("image/svg+xml", .refused("upstream sent image/svg+xml, which is not allowed (--content-types)")),
        ("image/bmp", .refused("upstream sent image/bmp, which is not allowed (--content-types)")),
    ] as [(String?, ContentPolicy.Verdict)])
    func contentType(type: String?, expected: ContentPolicy.Verdict) {
        #expect(ContentPolicyTests.images.checkContentType(type) == expected)
    }

    @Test("a response declares one media type, none, or something ambiguous that is refused whatever the allowlist", arguments: [
        ([], ContentPolicy.DeclaredType.none),
        (["image/png"], .one("image/png")),
        (["image/png; charset=binary"], .one("image/png; charset=binary")),
        (["image/svg+xml; a=\"x, y\"; b=c"], .one("image/svg+xml; a=\"x, y\"; b=c")),
        (["image/png", "text/html"], .ambiguous("upstream sent 2 Content-Type fields (image/png | text/html)")),
        (["image/png", "image/png"], .ambiguous("upstream sent 2 Content-Type fields (image/png | image/png)")),
        (["image/png, text/html"], .ambiguous("upstream sent a Content-Type that is not one media type: image/png, text/html")),
        (["image/png; x=\"open"], .ambiguous("upstream sent a Content-Type that is not one media type: image/png; x=\"open")),
        (["image"], .ambiguous("upstream sent a Content-Type that is not one media type: image")),
        (["image/"], .ambiguous("upstream sent a Content-Type that is not one media type: image/")),
    ] as [([String], ContentPolicy.DeclaredType)])
    func declaredType(values: [String], expected: ContentPolicy.DeclaredType) {
        #expect(ContentPolicy.declaredType(HTTPHeaders(values.map { ("Content-Type", $0) })) == expected)
    }

    @Test("checks that the body matches the declared type", arguments: [
        ("image/png", Samples.png, false, ContentPolicy.Verdict.allowed),
        ("image/png", Array(Samples.png.prefix(4)), false, .needMoreBytes),
        ("image/png", Array(Samples.png.prefix(4)), true, .refused("upstream sent image/png but the body is not a PNG image")),
        ("image/png", Samples.html, false, .refused("upstream sent image/png but the body is not a PNG image")),
        ("image/jpeg", Samples.png, false, .refused("upstream sent image/jpeg but the body is not a JPEG image")),
        ("image/jpeg", [], false, .needMoreBytes),
        ("image/jpeg", [], true, .refused("upstream sent image/jpeg but the body is not a JPEG image")),
        ("image/avif", Samples.avifCompatible, true, .allowed),
        ("image/avif", Samples.heic, true, .refused("upstream sent image/avif but the body is not an AVIF image")),
        ("image/avif", Array(Samples.avifCompatible.prefix(20)), false, .needMoreBytes),
        ("image/avif", Array(Samples.avifLongBrandList.prefix(64)), false, .needMoreBytes),
        ("image/avif", Samples.avifLongBrandList, false, .allowed),
        ("image/webp", Samples.webp, false, .allowed),
        ("image/gif", Samples.gif89, false, .allowed),
        ("text/html", Samples.png, false, .refused("upstream sent text/html, not an image")),
    ] as [(String, [UInt8], Bool, ContentPolicy.Verdict)])
    func body(type: String, bytes: [UInt8], complete: Bool, expected: ContentPolicy.Verdict) {
        #expect(ContentPolicyTests.images.check(contentType: type, prefix: bytes[...], complete: complete) == expected)
    }

    @Test("SVG is sniffed only when allowed, and waits for its prolog")
    func svg() {
        // Given a policy that allows SVG
        let policy = ContentPolicy(allowedTypes: ["image/png", "image/svg+xml"])
        // When / Then
        #expect(policy.check(contentType: "image/svg+xml", prefix: Samples.svgProlog[...], complete: true) == .allowed)
        #expect(policy.check(contentType: "image/svg+xml", prefix: Samples.svgProlog.prefix(20), complete: false) == .needMoreBytes)
        #expect(policy.check(contentType: "image/svg+xml", prefix: Samples.html[...], complete: true)
            == .refused("upstream sent image/svg+xml but the body is not an SVG image"))
    }

    @Test("*/* and an empty list allow everything without checks", arguments: [[], ["*/*"], ["image/png", "*/*"]])
    func everything(types: [String]) {
        let policy = ContentPolicy(allowedTypes: types)
        #expect(policy.checkContentType(nil) == .allowed)
        #expect(policy.checkContentType("text/html") == .allowed)
        #expect(policy.check(contentType: "image/png", prefix: Samples.html[...], complete: true) == .allowed)
    }

    @Test("image/* allows image types we cannot sniff")
    func imageWildcard() {
        let policy = ContentPolicy(allowedTypes: ["image/*"])
        #expect(policy.check(contentType: "image/bmp", prefix: [0x42, 0x4D][...], complete: true) == .allowed)
        #expect(policy.check(contentType: "image/png", prefix: Samples.html[...], complete: true)
            == .refused("upstream sent image/png but the body is not a PNG image"))
        #expect(policy.checkContentType("text/plain") == .refused("upstream sent text/plain, not an image"))
    }
}
