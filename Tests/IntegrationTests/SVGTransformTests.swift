// SVG sources end to end: the real daemon with allow-svg and transform-allow-svg in front of a local origin serving
// SVG documents. Good ones become decodable images of the asked size; the usual SVG bombs are refused 422 with a
// one-line reason naming the cause, the referenced URLs are never fetched, and the daemon keeps serving.

import Foundation
import Testing
@testable import ImageCacheConfig
@testable import ImageCacheTransform
@testable import ImageCacheCore

@Suite("SVG transforms end to end", .timeLimit(.minutes(3)))
struct SVGTransformTests {
    private static func svgHarness(_ configure: (inout Configuration) -> Void = { _ in }) throws -> ProxyHarness {
        try ProxyHarness {
            $0.allowSVG = true
            $0.transform.limits.allowSVG = true
            configure(&$0)
        }
    }

    private static func serve(_ harness: ProxyHarness, _ path: String, _ svg: String) {
        let body = Array(svg.utf8)
        harness.origin.route(path) { _ in
            Reply(status: 200, headers: [("Content-Type", "image/svg+xml"), ("Cache-Control", "max-age=600")], body: body)
        }
    }

    private static func svg(_ body: String, size: String = #"width="100" height="100""#) -> String {
        #"<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" \#(size)>\#(body)</svg>"#
    }

    @Test("a 100x100 SVG is transformed to a 50x50 PNG and JPEG", arguments: ["png", "jpg"])
    func goodSVG(_ format: String) async throws {
        // Given allow-svg and transform-allow-svg, and a 100x100 SVG at the origin
        let harness = try Self.svgHarness()
        ImageFiles.serve(harness, "image.svg")
        // When it is resized to 50x50
        let response = try await harness.get(TransformTests.path("rs:force:50:50/f:\(format)", "image.svg"))
        // Then the result decodes to an image of that size and format
        #expect(response.status == 200, "\(response.text.prefix(300))")
        #expect(Decoded.read(response.body) == Decoded(format: format == "jpg" ? "jpeg" : "png", width: 50, height: 50, frames: 1))
    }

    /// The bombs by name (the documents stay out of the test's arguments: one is a megabyte).
    static let bombDocuments: [String: String] = [
        "billion-laughs.svg":
            #"<?xml version="1.0"?><!DOCTYPE svg [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;"><!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;"><!ENTITY d "&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;"><!ENTITY e "&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;"><!ENTITY f "&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;"><!ENTITY g "&f;&f;&f;&f;&f;&f;&f;&f;&f;&f;">]>"#
            + svg("<text>&g;</text>"),
        "deep.svg": svg(String(repeating: "<g>", count: 5000) + String(repeating: "</g>", count: 5000)),
        "use-bomb.svg": useBomb,
        "filter.svg": svg(#"<filter id="f"><feMorphology operator="dilate" radius="10000"/></filter><rect width="100" height="100" filter="url(#f)"/>"#),
        "oversize.svg": svg("<!--" + String(repeating: "x", count: 1 << 20) + "-->"),
        "file-ref.svg": svg(#"<image href="file:///etc/passwd" width="100" height="100"/>"#),
    ]

    @Test("each SVG bomb is refused 422 with a one-line reason naming its cause; the daemon keeps serving", arguments: [
        ("billion-laughs.svg", "the SVG has a <!DOCTYPE declaration"),
        ("deep.svg", "nests elements more than 64 deep"),
        ("use-bomb.svg", "expands to more than 100000 elements through its references"),
        ("filter.svg", "radius of <feMorphology> is 10000, over 16"),
        ("oversize.svg", "over the SVG limit of 1048576 bytes"),
        ("file-ref.svg", #"references "file:///etc/passwd""#),
    ])
    func bombs(_ name: String, _ reason: String) async throws {
        let document = try #require(Self.bombDocuments[name])
        // Given an SVG bomb and a good SVG at the origin
        let harness = try Self.svgHarness()
        Self.serve(harness, "/" + name, document)
        ImageFiles.serve(harness, "image.svg")
        // When it is transformed
        let refused = try await harness.get(TransformTests.path("w:50/f:png", name))
        // Then 422 with a one-line reason naming the cause
        #expect(refused.status == 422 && refused.text.contains(reason), "\(refused.status) \(refused.text.prefix(300))")
        #expect(!refused.text.trimmingCharacters(in: .newlines).contains("\n"))
        // ... and a following good request is served
        let good = try await harness.get(TransformTests.path("w:50/f:png", "image.svg"))
        #expect(good.status == 200 && Decoded.read(good.body)?.width == 50, "\(good.text.prefix(300))")
    }

    @Test("an SVG referencing a URL on the origin is refused 422, and the origin never sees a request for it",
          arguments: ["image", "use", "style"])
    func externalReference(_ how: String) async throws {
        // Given an SVG that references an image the origin serves
        let harness = try Self.svgHarness()
        ImageFiles.serve(harness, "photo.jpg")
        let url = harness.origin.baseURL + "/photo.jpg"
        let body = switch how {
        case "image": #"<image xlink:href="\#(url)" width="100" height="100"/>"#
        case "use": #"<use href="\#(url)#a"/>"#
        default: #"<style>rect { fill: url(\#(url)#g); }</style><rect width="100" height="100"/>"#
        }
        Self.serve(harness, "/external.svg", Self.svg(body))
        // When it is transformed
        let refused = try await harness.get(TransformTests.path("w:50/f:png", "external.svg"))
        // Then 422 naming the reference, and no request for it reached the origin
        #expect(refused.status == 422 && refused.text.contains("references \"\(url)"), "\(refused.status) \(refused.text.prefix(300))")
        #expect(harness.origin.requestCount("/photo.jpg") == 0)
        #expect(harness.origin.requestCount("/external.svg") == 1)
    }

    @Test("an SVG declaring 100000x100000 is refused from its header, before any pixel is rendered")
    func hugeDeclaredSize() async throws {
        // Given a small document declaring a huge canvas
        let harness = try Self.svgHarness()
        Self.serve(harness, "/huge.svg", Self.svg(#"<rect width="10" height="10"/>"#, size: #"width="100000" height="100000""#))
        Self.serve(harness, "/huge-viewbox.svg", Self.svg(#"<rect width="10" height="10"/>"#, size: #"viewBox="0 0 100000 100000""#))
        for name in ["huge.svg", "huge-viewbox.svg"] {
            // When it is transformed to a small size
            let refused = try await harness.get(TransformTests.path("w:50/f:png", name))
            // Then 422 naming transform-max-megapixels
            #expect(refused.status == 422 && refused.text.contains("100000x100000 (10000 MP), over transform-max-megapixels (50)"),
                    "\(name): \(refused.status) \(refused.text.prefix(300))")
        }
    }

    /// `count` chained blurs over a `size` x `size` canvas.
    private static func blurred(_ count: Int, size: Int) -> String {
        let blurs = (0..<count).map { #"<feGaussianBlur stdDeviation="100" in="\#($0 == 0 ? "SourceGraphic" : "b\($0 - 1)")" result="b\#($0)"/>"# }
        return svg(#"<filter id="f" x="0" y="0" width="1" height="1">\#(blurs.joined())</filter><rect width="\#(size)" height="\#(size)" fill="red" filter="url(#f)"/>"#,
                   size: #"width="\#(size)" height="\#(size)""#)
    }

    @Test("an SVG whose filters would run over too many pixels is refused before rendering; smaller, it is rendered")
    func heavyFilters() async throws {
        // Given 32 blurs over a 4000x4000 canvas (every other SVG limit is met)
        let harness = try Self.svgHarness()
        Self.serve(harness, "/heavy.svg", Self.blurred(32, size: 4000))
        // When it is asked for at full size
        let refused = try await harness.get(TransformTests.path("w:4000/f:png", "heavy.svg"))
        // Then 422 naming the filter limit, at once (rendered, one librsvg call of it would take over a minute)
        #expect(refused.status == 422 && refused.text.contains("32 filter passes over 16000000 pixels are over the SVG filter limit of 4000000"),
                "\(refused.status) \(refused.text.prefix(300))")
        // ... and at 50x50 it is rendered (librsvg renders at the asked size)
        let small = try await harness.get(TransformTests.path("w:50/f:png", "heavy.svg"))
        #expect(small.status == 200 && Decoded.read(small.body) == Decoded(format: "png", width: 50, height: 50, frames: 1), "\(small.text.prefix(300))")
    }

    @Test("an SVG within every limit whose rendering runs past transform-timeout is killed and answered 422 naming it")
    func slowRendering() async throws {
        // Given a short transform-timeout and 4 blurs over 1000x1000, at the filter limit: seconds of librsvg calls
        let harness = try Self.svgHarness { $0.transform.limits.timeoutSeconds = 0.2 }
        ImageFiles.serve(harness, "image.svg")
        Self.serve(harness, "/slow.svg", Self.blurred(4, size: 1000))
        // When it is rendered at full size
        let refused = try await harness.get(TransformTests.path("w:1000/f:png", "slow.svg"))
        // Then the job is killed at its deadline (between strips): 422 naming transform-timeout; the next job is served
        #expect(refused.status == 422 && refused.text.contains("longer than transform-timeout (0.2s)"), "\(refused.status) \(refused.text.prefix(300))")
        #expect(try await harness.get(TransformTests.path("w:50/f:png", "image.svg")).status == 200)
    }

    /// Six levels of ten <use> of the level below: 61 <use> elements, a million instances.
    static let useBomb: String = {
        var defs = #"<rect id="l0" width="1" height="1"/>"#
        for level in 1...6 {
            defs += #"<g id="l\#(level)">"# + String(repeating: ##"<use href="#l\##(level - 1)"/>"##, count: 10) + "</g>"
        }
        return svg("<defs>\(defs)</defs><use href=\"#l6\"/>")
    }()
}
