// Signed fetch URLs end to end: the real daemon with signing keys in front of a scripted origin, and the
// `imagecached sign` command whose URLs it serves.

import Foundation
import Testing
@testable import ImageCacheHTTP
@testable import ImageCacheConfig

@Suite("Signed fetch URLs end to end", .timeLimit(.minutes(2)))
struct SignedURLTests {
    static let oldKey = "text:old-key-0123456789abcdef"
    static let newKey = "text:new-key-0123456789abcdef"
    static let png = Fixtures.png(size: 3_000)

    static func harness(keys: [String], required: Bool?) throws -> ProxyHarness {
        let harness = try ProxyHarness {
            $0.origins = []   // fetch mode only: "/" serves the camo form too
            $0.signingKeys = keys.compactMap(URLSigning.decodeKey)
            $0.requireSignature = required
        }
        harness.origin.route("/s.png") { _ in
            Reply(status: 200, headers: [("Content-Type", "image/png"), ("Cache-Control", "max-age=600")], body: SignedURLTests.png)
        }
        return harness
    }

    static func encoded(_ url: String) -> String {
        url.addingPercentEncoding(withAllowedCharacters: CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"))!
    }

    @Test("with signatures required: signed sig and camo forms are served, unsigned, forward, wrong and truncated ones are 403")
    func required() async throws {
        let harness = try Self.harness(keys: [Self.newKey, Self.oldKey], required: true)
        let url = harness.origin.baseURL + "/s.png"
        let old = URLSigning(keys: [URLSigning.decodeKey(Self.oldKey)!])
        let new = URLSigning(keys: [URLSigning.decodeKey(Self.newKey)!])
        let sigOld = try #require(old.signature(for: url))
        let sigNew = try #require(new.signature(for: url))
        // When
        let signedOld = try await harness.get("/fetch?url=\(Self.encoded(url))&sig=\(sigOld)")
        let signedNew = try await harness.get("/fetch?url=\(Self.encoded(url))&sig=\(sigNew)")
        let camoFetch = try await harness.get("/fetch/" + old.camoPath(for: url)!)
        let camoRoot = try await harness.get("/" + new.camoPath(for: url)!)
        let unsigned = try await harness.get("/fetch?url=\(Self.encoded(url))")
        let forward = try await harness.get(url)
        let wrong = try await harness.get("/fetch?url=\(Self.encoded(url + "?other"))&sig=\(sigOld)")
        let truncated = try await harness.get("/fetch?url=\(Self.encoded(url))&sig=\(sigOld.dropLast(4))")
        // Then
        for response in [signedOld, signedNew, camoFetch, camoRoot] {
            #expect(response.status == 200 && response.body == Self.png)
        }
        #expect(harness.origin.requestCount("/s.png") == 1, "every form shares one cache entry")
        #expect(unsigned.status == 403 && unsigned.text.contains("requires signed fetch URLs"))
        #expect(forward.status == 403 && forward.text.contains("forward-proxy request cannot carry"))
        #expect(wrong.status == 403 && wrong.text.hasPrefix("wrong signature"))
        #expect(truncated.status == 403 && truncated.text.contains("truncated"))
    }

    @Test("with signatures optional: unsigned fetches are served, a wrong signature is still 403")
    func optional() async throws {
        let harness = try Self.harness(keys: [Self.newKey], required: false)
        let url = harness.origin.baseURL + "/s.png"
        let unsigned = try await harness.get("/fetch?url=\(Self.encoded(url))")
        let wrong = try await harness.get("/fetch?url=\(Self.encoded(url))&sig=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
        #expect(unsigned.status == 200)
        #expect(wrong.status == 403)
    }

    @Test("imagecached sign prints a URL the daemon serves, with the first key of IMAGECACHED_SIGNING_KEYS", arguments: [false, true])
    func signCommand(camo: Bool) async throws {
        // Given a daemon requiring signatures, with the new key first and the old one still accepted
        let harness = try Self.harness(keys: [Self.newKey, Self.oldKey], required: true)
        let url = harness.origin.baseURL + "/s.png"
        // When the command signs with the old key only (a client not yet rotated)
        let port = harness.port
        let (status, stdout, stderr) = try await CLITests.run(
            ["sign", "--address", "127.0.0.1:\(port)"] + (camo ? ["--camo"] : []) + [url],
            environment: ["IMAGECACHED_SIGNING_KEYS": Self.oldKey])
        #expect(status == 0, "\(stderr)")
        let prefix = "http://127.0.0.1:\(harness.port)"
        #expect(stdout.hasPrefix(prefix + (camo ? "/fetch/" : "/fetch?url=")))
        let response = try await harness.get(String(stdout.trimmingCharacters(in: .whitespacesAndNewlines).dropFirst(prefix.count)))
        // Then
        #expect(response.status == 200 && response.body == Self.png)
    }
}
