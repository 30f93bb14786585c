import Testing
@testable import ImageCacheTransform

@Suite("TransformPath: imgproxy's URL forms, split into signature, options and source", .timeLimit(.minutes(1)))
struct TransformPathTests {
    private func refusal(_ path: String) -> String? {
        do {
            _ = try TransformPath.parse(path[...])
            return nil
        } catch {
            return error.reason
        }
    }

    @Test("the plain form: options, then /plain/ and the source URL, with @ext as the output format")
    func plainWithExtension() throws {
        // When
        let path = try TransformPath.parse("sig/rs:fit:300:0/g:no/plain/http://example.com/images/a.jpg@webp")
        // Then
        #expect(path.signature == "sig")
        #expect(path.options == ["rs:fit:300:0", "g:no"])
        #expect(path.source == "http://example.com/images/a.jpg")
        #expect(path.extensionFormat == .webp)
    }

    @Test("the plain form without @ext has no extension format; an @ that names no format stays in the URL")
    func plainWithoutExtension() throws {
        let bare = try TransformPath.parse("sig/w:10/plain/http://example.com/a.jpg")
        #expect(bare.source == "http://example.com/a.jpg" && bare.extensionFormat == nil)
        let at = try TransformPath.parse("sig/w:10/plain/http://example.com/a@2x.jpg")
        #expect(at.source == "http://example.com/a@2x.jpg" && at.extensionFormat == nil)
        let jpg = try TransformPath.parse("sig/plain/http://example.com/a@2x.png@jpg")
        #expect(jpg.source == "http://example.com/a@2x.png" && jpg.extensionFormat == .jpeg && jpg.options.isEmpty)
    }

    @Test("a percent-encoded plain source URL is decoded (query included), the extension taken off first")
    func plainPercentEncoded() throws {
        let path = try TransformPath.parse("sig/w:100/plain/http%3A%2F%2Fexample.com%2Fimages%2Fa%20b.jpg%3Fv%3D1%26w%3D2@png")
        #expect(path.source == "http://example.com/images/a b.jpg?v=1&w=2")
        #expect(path.extensionFormat == .png)
        #expect(path.options == ["w:100"])
    }

    @Test("the base64url form, split across \"/\", with .ext as the output format (imgproxy's documented example)")
    func base64Split() throws {
        // When
        let path = try TransformPath.parse("insecure/rs:fill:300:400:0/g:sm/aHR0cDovL2V4YW1w/bGUuY29tL2ltYWdl/cy9jdXJpb3NpdHku/anBn.png")
        // Then
        #expect(path.signature == "insecure")
        #expect(path.options == ["rs:fill:300:400:0", "g:sm"])
        #expect(path.source == "http://example.com/images/curiosity.jpg")
        #expect(path.extensionFormat == .png)
    }

    @Test("the base64url form in one piece, without options or extension, padded or not")
    func base64Whole() throws {
        let path = try TransformPath.parse("sig/aHR0cDovL2V4YW1wbGUuY29tL2ltYWdlcy9jdXJpb3NpdHkuanBn")
        #expect(path.source == "http://example.com/images/curiosity.jpg")
        #expect(path.extensionFormat == nil && path.options.isEmpty)
        // "http://example.com/a?x=1&y=~" holds bytes that base64url spells with "-" or "_".
        let urlSafe = try TransformPath.parse("sig/w:1/aHR0cDovL2V4YW1wbGUuY29tL2E_eD0xJnk9fg.webp")
        #expect(urlSafe.source == "http://example.com/a?x=1&y=~" && urlSafe.extensionFormat == .webp)
        let padded = try TransformPath.parse("sig/aHR0cDovL2EudGVzdC94LnBuZw==")
        #expect(padded.source == "http://a.test/x.png")
    }

    @Test("the signed part runs from the \"/\" after the signature to the end, query included", arguments: [
        "sig/rs:fit:300:0/plain/http://example.com/a.jpg@webp",
        "abcDEF_-123/rs:fill:300:400:0/g:sm/aHR0cDovL2V4YW1w/bGUuY29tL2ltYWdl/cy9jdXJpb3NpdHku/anBn.png",
        "sig/w:1/aHR0cDovL2EudGVzdC94LnBuZw?cb=2",
    ])
    func signedPart(text: String) throws {
        let path = try TransformPath.parse(text[...])
        let slash = try #require(text.firstIndex(of: "/"))
        #expect(path.signature == text[..<slash])
        #expect(path.signed == text[slash...])
        #expect(path.signed.hasPrefix("/") && !path.signed.hasPrefix("/" + path.signature))
    }

    @Test("a query after a base64 source is not part of the source")
    func base64Query() throws {
        let path = try TransformPath.parse("sig/w:1/aHR0cDovL2EudGVzdC94LnBuZw.jpg?cb=2")
        #expect(path.source == "http://a.test/x.png" && path.extensionFormat == .jpeg)
    }

    @Test("encrypted sources, missing sources and malformed paths are refused with a reason", arguments: [
        ("sig/rs:fit:300:0/enc/aGVsbG8", "encrypted source URLs (/enc/) are not supported"),
        ("sig/enc/aGVsbG8", "encrypted source URLs"),
        ("sig/rs:fit:300:0", "the source URL is missing after the options"),
        ("sig/rs:fit:300:0/g:no", "the source URL is missing after the options"),
        ("sig/rs:fit:300:0/plain", "the plain source URL is missing after /plain/"),
        ("sig/rs:fit:300:0/plain/", "the plain source URL is not valid percent-encoding"),
        ("sig/w:1/plain/http%3A%2F%zzexample.com", "not valid percent-encoding"),
        ("sig/rs:fit:300:0/", "neither /plain/<URL> nor URL-safe base64"),
        ("sig/w:1/not*base64!", "neither /plain/<URL> nor URL-safe base64"),
        ("sig", "not a transform URL"),
        ("/rs:fit:300:0/plain/http://example.com/a.jpg", "not a transform URL"),
        ("", "not a transform URL"),
    ])
    func refusals(path: String, reason: String) {
        let got = refusal(path)
        #expect(got?.contains(reason) == true, "\(path): \(got ?? "accepted")")
    }
}
