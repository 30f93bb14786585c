import Testing
@testable import ImageCacheHTTP

@Suite("TransformSigning: imgproxy's key/salt signatures", .timeLimit(.minutes(1)))
struct TransformSigningTests {
    // imgproxy's examples folder (examples/signature.*) and the client libraries that copy it: this key and salt sign
    // "/rs:fit:300:300/plain/http://img.example.com/pretty/image.jpg" as "m3k5QADfcKPDj-SDI2AIogZbC3FlAXszuwhtWXYqavc".
    static let exampleKey = "943b421c9eb07c830af81030552c86009268de4e532ba2ee2eab8247c6da0881"
    static let exampleSalt = "520f986b998545b4785e0defbc4f3c1203f22de2374a3d53cb7a7fe9fea309c5"
    static let examplePath = "/rs:fit:300:300/plain/http://img.example.com/pretty/image.jpg"
    static let exampleSignature = "m3k5QADfcKPDj-SDI2AIogZbC3FlAXszuwhtWXYqavc"

    // imgproxy's "Signing a URL" page: key "secret" (hex 736563726574) and salt "hello" (hex 68656C6C6F) sign the
    // base64 example path as "oKfUtW34Dvo2BGQehJFR4Nr0_rIjOtdtzJ3QFsUcXH8".
    static let docsPath = "/rs:fill:300:400:0/g:sm/aHR0cDovL2V4YW1w/bGUuY29tL2ltYWdl/cy9jdXJpb3NpdHku/anBn.png"
    static let docsSignature = "oKfUtW34Dvo2BGQehJFR4Nr0_rIjOtdtzJ3QFsUcXH8"
    static let docsPair = TransformSigning.Pair(key: Array("secret".utf8), salt: Array("hello".utf8))

    static func examplePair() throws -> TransformSigning.Pair {
        try #require(try TransformSigning.pairs(keys: [exampleKey], salts: [exampleSalt]).get().first)
    }

    static func signing(_ pairs: [TransformSigning.Pair], size: Int = 32) -> TransformSigning {
        TransformSigning(pairs: pairs, signatureSize: size)
    }

    @Test("imgproxy's own vectors: sign(path:) gives the documented signature and verify accepts it")
    func imgproxyVectors() throws {
        // Given
        let example = Self.signing([try Self.examplePair()])
        let docs = Self.signing([Self.docsPair])
        // Then
        #expect(example.sign(path: Self.examplePath) == Self.exampleSignature)
        #expect(example.verify(signature: Self.exampleSignature[...], path: Self.examplePath[...]) == nil)
        #expect(docs.sign(path: Self.docsPath) == Self.docsSignature)
        #expect(docs.verify(signature: Self.docsSignature[...], path: Self.docsPath[...]) == nil)
        // The example key over the docs' path (HMAC-SHA256 computed independently, Python's hmac module).
        #expect(example.sign(path: Self.docsPath) == "90UxdwGRAI2bpLSHKkZculJau5ahfxfS0h3fMuQAf40")
        // One pair's signature is not the other's.
        #expect(docs.verify(signature: Self.exampleSignature[...], path: Self.examplePath[...]) != nil)
    }

    @Test("the signature of a whole path, parsed by TransformPath, verifies over its signed part")
    func throughTransformPathShape() throws {
        let signing = Self.signing([Self.docsPair])
        let full = Self.docsSignature + Self.docsPath
        let slash = try #require(full.firstIndex(of: "/"))
        #expect(signing.verify(signature: full[..<slash], path: full[slash...]) == nil)
    }

    @Test("wrong, altered-path, truncated, absent and keyword signatures are refused with a reason", arguments: [
        ("oKfUtW34Dvo2BGQehJFR4Nr0_rIjOtdtzJ3QFsUcXG8", TransformSigningTests.docsPath, "does not match"),
        ("pKfUtW34Dvo2BGQehJFR4Nr0_rIjOtdtzJ3QFsUcXH8", TransformSigningTests.docsPath, "does not match"),
        (TransformSigningTests.docsSignature, "/rs:fill:301:400:0/g:sm/aHR0cDovL2V4YW1w/bGUuY29tL2ltYWdl/cy9jdXJpb3NpdHku/anBn.png", "does not match"),
        (TransformSigningTests.docsSignature, TransformSigningTests.docsPath + "?x", "does not match"),
        (String(TransformSigningTests.docsSignature.dropLast(11)), TransformSigningTests.docsPath, "missing or malformed"),
        (String(TransformSigningTests.docsSignature.prefix(11)), TransformSigningTests.docsPath, "missing or malformed"),
        ("", TransformSigningTests.docsPath, "missing or malformed"),
        ("insecure", TransformSigningTests.docsPath, "missing or malformed"),
        ("unsafe", TransformSigningTests.docsPath, "missing or malformed"),
        ("oKfUtW34Dvo2BGQe!JFR4Nr0_rIjOtdtzJ3QFsUcXH8", TransformSigningTests.docsPath, "missing or malformed"),
    ])
    func refusals(signature: String, path: String, reason: String) {
        let refusal = Self.signing([Self.docsPair]).verify(signature: signature[...], path: path[...])
        #expect(refusal?.reason.contains(reason) == true, "\(refusal?.reason ?? "verified")")
    }

    @Test("with a signature size of 8, only an 8-byte signature is accepted")
    func truncatedSize() throws {
        // Given
        let pair = try Self.examplePair()
        let short = Self.signing([pair], size: 8)
        let full = Self.signing([pair])
        // When
        let signature = short.sign(path: Self.examplePath)
        // Then: the first 8 bytes of the whole HMAC, 11 base64 characters
        #expect(signature == "m3k5QADfcKM")
        #expect(short.verify(signature: signature[...], path: Self.examplePath[...]) == nil)
        #expect(short.verify(signature: Self.exampleSignature[...], path: Self.examplePath[...])?.reason.contains("8 bytes") == true)
        #expect(short.verify(signature: "m3k5QAD"[...], path: Self.examplePath[...]) != nil)
        #expect(short.verify(signature: "m3k5QAEfcKM"[...], path: Self.examplePath[...]) != nil)
        // and the full size does not take a truncated one
        #expect(full.verify(signature: signature[...], path: Self.examplePath[...])?.reason.contains("32 bytes") == true)
    }

    @Test("with two pairs either verifies (rotation); sign uses the first; a third pair's signature is refused")
    func rotation() throws {
        // Given
        let old = try Self.examplePair()
        let new = Self.docsPair
        let other = TransformSigning.Pair(key: Array("another-key".utf8), salt: Array("salt".utf8))
        let both = Self.signing([new, old])
        // Then
        #expect(both.verify(signature: Self.exampleSignature[...], path: Self.examplePath[...]) == nil)
        #expect(both.verify(signature: Self.docsSignature[...], path: Self.docsPath[...]) == nil)
        #expect(both.sign(path: Self.docsPath) == Self.docsSignature)
        let otherSignature = Self.signing([other]).sign(path: Self.docsPath)
        #expect(both.verify(signature: otherSignature[...], path: Self.docsPath[...])?.reason.contains("does not match") == true)
        #expect(!both.isInsecure)
    }

    @Test("with no pair every signature is accepted and sign gives \"insecure\"", arguments: [
        "insecure", "unsafe", "", "anything at all", TransformSigningTests.docsSignature,
    ])
    func insecure(signature: String) {
        let signing = TransformSigning()
        #expect(signing.isInsecure)
        #expect(signing.verify(signature: signature[...], path: Self.docsPath[...]) == nil)
        #expect(signing.sign(path: Self.docsPath) == "insecure")
    }

    @Test("pairs(keys:salts:) decodes hex pairs in order (surrounding spaces ignored)")
    func pairsDecode() throws {
        let pairs = try TransformSigning.pairs(keys: [" 0001020304050607 ", "ffeeddccbbaa9988"], salts: ["aa", "BBcc"]).get()
        #expect(pairs == [
            TransformSigning.Pair(key: [0, 1, 2, 3, 4, 5, 6, 7], salt: [0xAA]),
            TransformSigning.Pair(key: [0xFF, 0xEE, 0xDD, 0xCC, 0xBB, 0xAA, 0x99, 0x88], salt: [0xBB, 0xCC]),
        ])
        #expect(try TransformSigning.pairs(keys: [], salts: []).get().isEmpty)
    }

    @Test("pairs(keys:salts:) refuses mismatched counts, non-hex and short keys, and non-hex salts", arguments: [
        ([TransformSigningTests.exampleKey, TransformSigningTests.exampleKey], [TransformSigningTests.exampleSalt], "2 transform key(s) but 1 salt(s)"),
        ([TransformSigningTests.exampleKey], [] as [String], "1 transform key(s) but 0 salt(s)"),
        (["zz3b421c9eb07c83"], [TransformSigningTests.exampleSalt], "transform key 1 is not hex"),
        ([TransformSigningTests.exampleKey, "0123456789abcde"], [TransformSigningTests.exampleSalt, TransformSigningTests.exampleSalt], "transform key 2 is not hex"),
        (["736563726574"], ["68656C6C6F"], "transform key 1 is not hex of at least 8 bytes"),
        ([TransformSigningTests.exampleKey, TransformSigningTests.exampleKey], [TransformSigningTests.exampleSalt, "salt"], "transform salt 2 is not hex"),
        ([TransformSigningTests.exampleKey], [""], "transform salt 1 is not hex"),
    ])
    func pairsRefused(keys: [String], salts: [String], reason: String) {
        guard case let .failure(refusal) = TransformSigning.pairs(keys: keys, salts: salts) else {
            Issue.record("\(keys) / \(salts) were accepted")
            return
        }
        #expect(refusal.reason.contains(reason), "\(refusal.reason)")
    }
}
