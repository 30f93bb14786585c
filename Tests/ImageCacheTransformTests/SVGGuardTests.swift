import Foundation
import Testing
@testable import ImageCacheTransform

@Suite("SVGGuard: what an SVG must be before librsvg sees it", .timeLimit(.minutes(1)))
struct SVGGuardTests {
    /// The guard's answer: nil when it passes, else its reason.
    private static func refusal(_ text: String, _ limits: SVGLimits = SVGLimits(), maxEmbeddedPixels: Int = 50_000_000) -> String? {
        refusal(Array(text.utf8), limits, maxEmbeddedPixels: maxEmbeddedPixels)
    }

    private static func refusal(_ bytes: [UInt8], _ limits: SVGLimits = SVGLimits(), maxEmbeddedPixels: Int = 50_000_000) -> String? {
        bytes.withUnsafeBytes { raw -> String? in
            do {
                _ = try SVGGuard.check(raw, limits: limits, maxEmbeddedPixels: maxEmbeddedPixels)
                return nil
            } catch {
                return (error as? SVGRefusal)?.reason ?? "\(error)"
            }
        }
    }

    private static func svg(_ body: String, attributes: String = "") -> String {
        #"<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" width="100" height="100"\#(attributes)>\#(body)</svg>"#
    }

    private static func nested(_ depth: Int) -> String {
        svg(String(repeating: "<g>", count: depth - 1) + String(repeating: "</g>", count: depth - 1))
    }

    private static func base64(_ bytes: [UInt8]) -> String { Data(bytes).base64EncodedString() }

    /// A PNG's first 24 bytes: signature and IHDR with `width` x `height` (all the guard reads).
    private static func pngHeader(_ width: UInt32, _ height: UInt32) -> [UInt8] {
        [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 13] + Array("IHDR".utf8)
            + withUnsafeBytes(of: width.bigEndian, Array.init) + withUnsafeBytes(of: height.bigEndian, Array.init) + [8, 6, 0, 0, 0]
    }

    /// The use bomb: level n holds ten <use> of level n-1.
    private static func useBomb(levels: Int) -> String {
        var defs = #"<rect id="l0" width="1" height="1"/>"#
        for level in 1...levels {
            defs += #"<g id="l\#(level)">"# + String(repeating: ##"<use href="#l\##(level - 1)"/>"##, count: 10) + "</g>"
        }
        return svg("<defs>\(defs)</defs><use href=\"#l\(levels)\"/>")
    }

    @Test("ordinary SVGs pass: shapes, fragments, gradients, a <use>, a style with url(#id), a data: PNG, a drop shadow, entities", arguments: [
        svg(#"<rect width="100" height="100" fill="red"/>"#),
        #"<?xml version="1.0" encoding="UTF-8"?>"# + "\n<!-- made by hand -->\n" + svg(#"<circle r="5"/>"#),
        "\u{FEFF}" + svg(#"<text x="1" y="10">a &lt; b &amp; &#x263A; &#9731;</text>"#),
        svg(#"<defs><linearGradient id="g"><stop offset="0"/></linearGradient></defs><rect fill="url(#g)" width="9" height="9"/>"#),
        svg(##"<defs><path id="p" d="M0 0L9 9"/></defs><use xlink:href="#p"/><use href=" #p "/>"##),
        svg(#"<style><![CDATA[ rect { fill: url('#g'); } ]]></style><rect width="1" height="1" style="stroke: url(&quot;#g&quot;)"/>"#),
        svg(#"<image width="1" height="1" href="data:image/png;base64,\#(base64(pngHeader(10, 10)))"/>"#),
        svg(#"<filter id="f"><feGaussianBlur stdDeviation="2 3"/><feOffset dx="2"/><feMerge><feMergeNode/></feMerge></filter><g filter="url(#f)"/>"#),
        svg(#"<a href="https://example.com/"><rect width="1" height="1"/></a>"#),
    ])
    func ordinary(_ text: String) {
        // Given an ordinary SVG / When it is checked / Then it passes
        #expect(Self.refusal(text) == nil)
    }

    @Test("each hostile SVG is refused with a reason naming its cause", arguments: [
        // Declarations: billion laughs, external entities (XXE), any other <!...>
        (#"<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;">]><svg>&lol2;</svg>"#, "<!DOCTYPE declaration"),
        (#"<!DOCTYPE svg SYSTEM "file:///etc/passwd"><svg/>"#, "<!DOCTYPE declaration"),
        (svg("&xxe;"), "an entity it cannot declare (&xxe;)"),
        (svg("<!ELEMENT x ANY>"), "<!ELEMENT declaration"),
        // Processing instructions
        (#"<?xml-stylesheet href="http://127.0.0.1/x.css"?>"# + svg(""), "processing instruction (<?xml-stylesheet"),
        (svg(#"<?php echo 1; ?>"#), "processing instruction (<?php"),
        // External references and file reads, however spelt
        (svg(#"<image href="file:///etc/passwd" width="9" height="9"/>"#), #"references "file:///etc/passwd""#),
        (svg(#"<image xlink:href="http://127.0.0.1:8080/secret.png"/>"#), #"references "http://127.0.0.1:8080/secret.png""#),
        (svg(#"<image href="&#102;ile:///etc/passwd"/>"#), #"references "file:///etc/passwd""#),
        (svg(#"<image other:href="passwd" xmlns:other="http://www.w3.org/1999/xlink"/>"#), #"references "passwd""#),
        (svg(#"<use href="other.svg#a"/>"#), #"references "other.svg#a""#),
        (svg(#"<xi:include xmlns:xi="http://www.w3.org/2001/XInclude" href="/etc/passwd" parse="text"/>"#), #"references "/etc/passwd""#),
        (svg(#"<feImage src="x.png"/>"#), #"references "x.png""#),
        (svg(#"<rect fill="url(http://127.0.0.1/p.svg#g)"/>"#), "in url()"),
        (svg(#"<rect style="fill: URL( 'file:///x#g' )"/>"#), #"references "file:///x#g" in url()"#),
        (svg(#"<style>@import "http://127.0.0.1/x.css";</style>"#), "@import"),
        (svg(#"<style>rect { fill: \75 rl(http://x/) }</style>"#), "escape"),
        (svg(#"<style>&#64;import url(#a);</style>"#), "@import"),
        (svg(#"<style>rect { filter: url(#f) }</style>"#), "<style> sets a filter"),
        // data: URIs: only base64 PNG, JPEG or GIF on <image>/<feImage>, within the pixel limit
        (svg(#"<image href="data:image/svg+xml;base64,PHN2Zy8+"/>"#), "not a base64 PNG, JPEG or GIF"),
        (svg(#"<use href="data:image/png;base64,AAAA"/>"#), "references \"data:image/png"),
        (svg(#"<image href="data:image/png;base64,\#(base64(pngHeader(60000, 60000)))"/>"#), "embeds a 60000x60000 image"),
        (svg(#"<image href="data:image/png;base64,AAAA"/>"#), "unreadable image/png image"),
        // Structure
        (svg("<g>"), "not well-formed XML"),
        (svg("<g></h>"), "</h> closes <g>"),
        (svg("") + "<svg/>", "after the root element"),
        (svg(#"<rect width=100/>"#), "not quoted"),
        ("<!-- <svg -->", "no root element"),
        // Filters
        (svg(#"<filter id="f"><feMorphology radius="10000"/></filter>"#), "radius of <feMorphology> is 10000, over 16"),
        (svg(#"<filter id="f"><feGaussianBlur stdDeviation="1 1e9"/></filter>"#), "stdDeviation of <feGaussianBlur> is 1e9, over 100"),
        (svg(#"<filter id="f"><feConvolveMatrix order="300" kernelMatrix="1"/></filter>"#), "order of <feConvolveMatrix> is 300, over 5"),
        (svg(#"<filter id="f"><feTurbulence numOctaves="100000"/></filter>"#), "numOctaves of <feTurbulence> is 100000, over 8"),
        (svg(#"<filter id="f"><feMorphology radius="nan"/></filter>"#), "radius of <feMorphology> is nan"),
        // Instancing
        (useBomb(levels: 6), "expands to more than 100000 elements through its references"),
        (svg(##"<g id="a"><use href="#a"/></g>"##), "references itself or an element around it"),
        (svg(##"<use id="a" href="#b"/><use id="b" href="#a"/>"##), "references itself or an element around it"),
    ])
    func hostile(_ text: String, _ reason: String) {
        // Given a hostile SVG / When it is checked
        let refused = Self.refusal(text)
        // Then it is refused, the one-line reason naming the cause
        #expect(refused?.contains(reason) == true, "\(refused ?? "passed")")
        #expect(refused?.contains("\n") == false)
    }

    @Test("each limit holds at its edge: at the limit passes, one over is refused")
    func edges() {
        // Given the default limits
        let limits = SVGLimits()
        let padding = { (total: Int) in Self.svg("<!--" + String(repeating: "x", count: total - Self.svg("<!---->").utf8.count) + "-->") }
        let filters = { (n: Int) in Self.svg("<filter id=\"f\">" + String(repeating: "<feOffset dx=\"1\"/>", count: n) + "</filter>") }
        let uses = { (n: Int) in Self.svg("<rect id=\"r\"/>" + String(repeating: "<use href=\"#r\"/>", count: n)) }
        let elements = { (n: Int) in Self.svg(String(repeating: "<g/>", count: n - 1)) }
        let cases: [(String, (Int) -> String, Int, String)] = [
            ("bytes", padding, limits.maxBytes, "over the SVG limit of 1048576 bytes"),
            ("depth", Self.nested, limits.maxDepth, "more than 64 deep"),
            ("elements", elements, limits.maxElements, "more than 10000 elements"),
            ("uses", uses, limits.maxUses, "more than 256 <use>"),
            ("filter primitives", filters, limits.maxFilterPrimitives, "more than 32 filter primitives"),
            ("blur", { Self.svg("<filter id=\"f\"><feGaussianBlur stdDeviation=\"\($0)\"/></filter>") }, Int(limits.maxBlurDeviation), "over 100"),
            ("radius", { Self.svg("<filter id=\"f\"><feMorphology radius=\"\($0)\"/></filter>") }, Int(limits.maxMorphologyRadius), "over 16"),
            ("order", { Self.svg("<filter id=\"f\"><feConvolveMatrix order=\"\($0)\"/></filter>") }, Int(limits.maxConvolveOrder), "over 5"),
            ("octaves", { Self.svg("<filter id=\"f\"><feTurbulence numOctaves=\"\($0)\"/></filter>") }, Int(limits.maxTurbulenceOctaves), "over 8"),
            ("embedded pixels", { Self.svg(#"<image href="data:image/png;base64,\#(Self.base64(Self.pngHeader(UInt32($0), 1000)))"/>"#) },
             50_000, "over 50000000 pixels"),
        ]
        for (name, make, limit, reason) in cases {
            // When the document is at the limit, then one over it / Then the first passes and the second is refused
            #expect(Self.refusal(make(limit)) == nil, "\(name) at \(limit): \(Self.refusal(make(limit)) ?? "")")
            #expect(Self.refusal(make(limit + 1))?.contains(reason) == true, "\(name) at \(limit + 1): \(Self.refusal(make(limit + 1)) ?? "passed")")
        }
    }

    @Test("the <use> expansion counts every instance, at its edge, and a bomb of few <use> elements over it")
    func instances() {
        // Given a root, a rect and 100 <use> of it: 2 + 100 x 2 instances
        let hundred = Self.svg("<rect id=\"r\"/>" + String(repeating: "<use href=\"#r\"/>", count: 100))
        var limits = SVGLimits()
        // When / Then: at the limit it passes, one under it is refused
        limits.maxInstances = 202
        #expect(Self.refusal(hundred, limits) == nil)
        limits.maxInstances = 201
        #expect(Self.refusal(hundred, limits)?.contains("more than 201 elements through its references") == true)
        // The default limit: 4 levels of ten <use> of the level below expand to about 47,000 elements (41 <use>),
        // 5 levels to about 490,000 (51 <use>)
        #expect(Self.refusal(Self.useBomb(levels: 4)) == nil)
        #expect(Self.refusal(Self.useBomb(levels: 5))?.contains("more than 100000 elements through its references") == true)
    }

    @Test("a gzip-compressed SVG (SVGZ) and text that is not UTF-8 are refused")
    func encodings() {
        // Given gzip's magic bytes, then Latin-1 text / When checked / Then refused
        #expect(Self.refusal([0x1F, 0x8B, 0x08, 0x00] + Array(Self.svg("").utf8))?.contains("gzip-compressed (SVGZ is refused)") == true)
        #expect(Self.refusal(Array(Self.svg("<text>").utf8) + [0xE9] + Array("</text>".utf8))?.contains("not UTF-8") == true)
    }

    private static func passes(_ text: String) -> Int? {
        Array(text.utf8).withUnsafeBytes { try? SVGGuard.check($0).filterPasses }
    }

    @Test("filter passes count each primitive once per reference reaching it; unreferenced filters run nothing")
    func filterPasses() {
        let filter = #"<filter id="f"><feGaussianBlur stdDeviation="2"/><feOffset dx="1"/><feMerge><feMergeNode/></feMerge></filter>"#
        // Given / When / Then: a filter of 3 primitives, unused, used once, used by a group that 10 <use> repeat
        #expect(Self.passes(Self.svg(filter)) == 0)
        #expect(Self.passes(Self.svg(filter + #"<rect width="9" height="9" filter="url(#f)"/>"#)) == 3)
        #expect(Self.passes(Self.svg(filter + #"<rect width="9" height="9" style="filter: url('#f')"/>"#)) == 3)
        #expect(Self.passes(Self.svg(filter + #"<g id="g"><rect filter="url(#f)"/></g>"# + String(repeating: ##"<use href="#g"/>"##, count: 10))) == 33)
    }

    @Test("filter work holds at its edge: passes x rendered pixels at the limit pass, one pixel more is refused")
    func filterWork() {
        // Given 4 passes and the default limit of 4,000,000 pixel passes
        let findings = SVGFindings(filterPasses: 4)
        // When rendered over 1,000,000 pixels, then one more / Then the first passes, the second is refused
        #expect((try? SVGGuard.checkFilterWork(findings, pixels: 1_000_000)) != nil)
        #expect(throws: SVGRefusal("the SVG's 4 filter passes over 1000001 pixels are over the SVG filter limit of 4000000 pixel passes")) {
            try SVGGuard.checkFilterWork(findings, pixels: 1_000_001)
        }
        #expect((try? SVGGuard.checkFilterWork(SVGFindings(filterPasses: 0), pixels: Int.max)) != nil)
        #expect(throws: SVGRefusal.self) { try SVGGuard.checkFilterWork(SVGFindings(filterPasses: 3), pixels: Int.max) }
    }

    static let candidateCases: [([UInt8], Bool)] = [
        (Array("<svg/>".utf8), true),
        (Array(("<?xml version=\"1.0\"?><!-- é -->" + String(repeating: " ", count: 900) + "<SVG/>").utf8), true),
        (Array((String(repeating: " ", count: 1021) + "<svg/>").utf8), false),
        ([0xFF, 0xD8, 0xFF, 0xE0] + Array("<svg/>".utf8), false),
        ([0x1F, 0x8B, 0x08, 0x00], true),
        ([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A], false),
    ]

    @Test("what libvips's SVG loader would claim is a candidate: <svg within 1024 bytes after valid UTF-8, or gzip",
          arguments: candidateCases)
    func candidates(_ bytes: [UInt8], _ expected: Bool) {
        // Given leading bytes / When asked / Then as libvips would see them (a superset)
        #expect(bytes.withUnsafeBytes { SVGGuard.isCandidate($0) } == expected)
    }
}
