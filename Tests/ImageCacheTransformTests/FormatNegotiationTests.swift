import Testing
@testable import ImageCacheTransform

@Suite("FormatNegotiation: the output format from the URL and Accept", .timeLimit(.minutes(1)))
struct FormatNegotiationTests {
    static let accepts: [String?] = [nil, "", "*/*", "image/avif,image/webp,*/*", "image/webp", "image/avif;q=0"]

    @Test("a format the URL names is used as named, whatever Accept and the configuration say",
          arguments: ImageOutputFormat.allCases, FormatNegotiationTests.accepts)
    func explicit(format: ImageOutputFormat, accept: String?) {
        for (avif, webp) in [(false, false), (true, true)] {
            let choice = FormatNegotiation.choose(.explicit(format), accept: accept, autoAVIF: avif, autoWebP: webp)
            #expect(choice == .init(format: format, variesOnAccept: false))
            #expect(choice.keyClass == format.rawValue)
        }
    }

    @Test("f:auto picks AVIF before WebP before the source's format; q=0 excludes; wildcards do not count", arguments: [
        ("image/avif,image/webp,*/*", ImageOutputFormat.avif),
        ("image/webp,image/avif", .avif),
        ("image/webp;q=0.9, image/avif;q=0.1", .avif),
        ("image/webp,*/*", .webp),
        ("IMAGE/WEBP", .webp),
        (" image/png , image/webp ; q=0.5 ", .webp),
        ("image/avif;q=0, image/webp", .webp),
        ("image/avif;q=0.0,image/webp;q=0", nil),
        ("image/avif;q=0.000", nil),
        ("image/*", nil),
        ("*/*", nil),
        ("image/*,*/*;q=0.8", nil),
        ("image/png,image/jpeg", nil),
        ("", nil),
        (nil, nil),
    ] as [(String?, ImageOutputFormat?)])
    func auto(accept: String?, format: ImageOutputFormat?) {
        // When
        let choice = FormatNegotiation.choose(.auto, accept: accept, autoAVIF: false, autoWebP: false)
        // Then: negotiated, so it always varies on Accept; no match is the source's format
        #expect(choice.format == format, "\(accept ?? "no Accept")")
        #expect(choice.variesOnAccept)
        #expect(choice.keyClass == (format?.rawValue ?? "src"))
    }

    @Test("no format and no automatic format: the source's format, not varying on Accept")
    func sourcePlain() {
        let choice = FormatNegotiation.choose(.source, accept: "image/avif,image/webp", autoAVIF: false, autoWebP: false)
        #expect(choice == .init(format: nil, variesOnAccept: false))
        #expect(choice.keyClass == "src")
    }

    @Test("no format with automatic WebP and/or AVIF configured negotiates only the formats that are on", arguments: [
        // autoAVIF, autoWebP, Accept, format
        (true, true, "image/avif,image/webp", ImageOutputFormat.avif),
        (true, true, "image/webp", .webp),
        (true, true, "image/jpeg", nil),
        (false, true, "image/avif,image/webp", .webp),
        (false, true, "image/avif", nil),
        (true, false, "image/avif,image/webp", .avif),
        (true, false, "image/webp", nil),
        (true, false, "image/*", nil),
    ] as [(Bool, Bool, String, ImageOutputFormat?)])
    func sourceAutomatic(avif: Bool, webp: Bool, accept: String, format: ImageOutputFormat?) {
        let choice = FormatNegotiation.choose(.source, accept: accept, autoAVIF: avif, autoWebP: webp)
        #expect(choice.format == format)
        // Whether or not a format was picked, another Accept could pick another: the response varies.
        #expect(choice.variesOnAccept)
    }

    @Test("Accept's media types with a quality above 0, lower-cased")
    func acceptedTypes() {
        #expect(FormatNegotiation.acceptedTypes("Image/AVIF;q=0.5, image/webp;q=0, text/html;level=1;q=0.3, ,*/*")
            == ["image/avif", "text/html", "*/*"])
    }
}
