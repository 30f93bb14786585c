// Fuzz targets of URLs: normalisation, routing, signed URLs.

internal import ImageCacheHTTP
internal import ImageCacheConfig
internal import ImageCacheCore

enum URLFuzz {
    // MARK: - URL normalisation

    /// The bytes as an absolute URL and as an origin-form target. Checks: a parsed URL's text parses to itself
    /// (normalising is idempotent) and is within the length limit; the fast path (`withNormalPath`) agrees with the
    /// parse; an origin-form target's normal form is a fixed point, and is what the parse makes of the same path.
    static func url(_ bytes: [UInt8]) {
        let text = bytes.text
        if let url = try? UpstreamURL.parse(text) {
            let again = try? UpstreamURL.parse(url.string)
            expect(again == url, "\(text.debugDescription) -> \(url.string.debugDescription) -> \(String(describing: again?.string))")
            expect(url.pathAndQuery.hasPrefix("/"), "path \(url.pathAndQuery.debugDescription)")
            if let fast = UpstreamURL.withNormalPath(origin: url, url.pathAndQuery) {
                expect(fast == url, "withNormalPath(\(url.pathAndQuery.debugDescription)) is not the parse")
            }
        }
        let target = text.hasPrefix("/") ? text : "/" + text
        let normal = UpstreamURL.normalisedOriginForm(target)
        expect(UpstreamURL.normalisedOriginForm(normal) == normal, "normal form \(normal.debugDescription) of \(target.debugDescription) is not a fixed point")
        if UpstreamURL.isNormalPathAndQuery(target) {
            expect(normal == target, "\(target.debugDescription) is called normal but normalises to \(normal.debugDescription)")
        }
        if let base = try? UpstreamURL.parse("http://example.com"), let parsed = try? UpstreamURL.parse("http://example.com" + target) {
            expect(parsed.pathAndQuery == normal, "\(target.debugDescription): parse gives \(parsed.pathAndQuery.debugDescription), normalisedOriginForm \(normal.debugDescription)")
            if let fast = UpstreamURL.withNormalPath(origin: base, target) {
                expect(fast == parsed, "withNormalPath(\(target.debugDescription)) is not the parse")
            }
        }
    }

    // MARK: - Routing

    /// Settings with every way in: two origins (one with a base path), signing keys, transforms under /t with a key
    /// and presets, allowed sources. And settings with no origin (signed paths and transforms at "/").
    struct Settings: Sendable {
        let origins: [OriginMapping]
        let signing: URLSigning
        let transforms: TransformRouting
        let allowed: AllowedSources
    }

    static let withOrigins: Settings = settings([
        "origins": .origins([OriginMapping(prefix: "/img", url: "https://images.example.com/base/"),
                             OriginMapping(prefix: "/cdn/static", url: "http://cdn.example.net:8080")]),
        "transform-prefix": .scalar("/t"),
    ])
    static let withoutOrigins: Settings = settings(["transform-prefix": .scalar("/")])

    static func settings(_ extra: [String: ConfigSetting.Value]) -> Settings {
        var values: [String: ConfigSetting.Value] = [
            "transforms": .scalar("true"),
            "transform-keys": .list(["943b421c9eb07c830af81030552c86009268de4e532ba2ee2eab8247c6da0881"]),
            "transform-salts": .list(["520f986b998545b4785e0defbc4f3c1203f22de2374a3d53cb7a7fe9fea309c5"]),
            "transform-presets": .list(["small=rs:fit:100:100", "sharp=sh:1/q:90/pr:small"]),
            "signing-keys": .list(["hex:000102030405060708090a0b0c0d0e0f"]),
            "allowed-sources": .list(["https://*.example.org/pub", "http://example.com"]),
        ]
        values.merge(extra) { $1 }
        let flags = values.sorted { $0.key < $1.key }.map { ConfigSetting(key: $0.key, value: $0.value, source: $0.key) }
        let configuration: Configuration
        do {
            configuration = try Configuration.load(file: nil, environment: [:], flags: flags)
        } catch {
            fatalError("the routing target's settings do not load: \(error)")
        }
        return Settings(origins: configuration.origins,
                        signing: URLSigning(keys: configuration.signingKeys, required: configuration.signaturesRequired),
                        transforms: TransformRouting(configuration), allowed: AllowedSources(configuration.allowedSources))
    }

    /// First line the target, second the method (GET when absent). Checks: an upstream URL is in normal form; a
    /// reverse-proxy URL stays on its origin's scheme, host and port and under its base path; a reverse target goes
    /// where its normal form goes; a transform's source is in normal form.
    static func routing(_ bytes: [UInt8]) {
        let lines = bytes.lines
        let target = lines.first ?? ""
        let method = lines.count > 1 && !lines[1].isEmpty ? lines[1] : "GET"
        for settings in [withOrigins, withoutOrigins] {
            let route = resolve(target, method: method, settings)
            switch route {
            case let .upstream(url, mode, trusted):
                expect((try? UpstreamURL.parse(url.string)) == url, "upstream \(url) is not in normal form")
                if mode == .reverse {
                    expect(trusted, "a reverse route is untrusted")
                    expect(settings.origins.contains { isUnder(url, $0) }, "\(target.debugDescription) -> \(url) leaves every origin")
                    if target.hasPrefix("/") {
                        let normal = UpstreamURL.normalisedOriginForm(target)
                        let again = resolve(normal, method: method, settings)
                        expect(again == route, "\(target.debugDescription) -> \(url), but its normal form \(normal.debugDescription) -> \(again)")
                    }
                }
            case let .transform(transform):
                expect((try? UpstreamURL.parse(transform.source.string)) == transform.source, "source \(transform.source) is not in normal form")
                expect(transform.canonical.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F }, "canonical \(transform.canonical.debugDescription)")
                if transform.mode == .reverse {
                    expect(settings.origins.contains { isUnder(transform.source, $0) }, "transform source \(transform.source) leaves every origin")
                }
            case let .error(status, _):
                expect([400, 403, 404, 501].contains(status), "status \(status)")
            case .admin:
                break
            }
        }
    }

    static func resolve(_ target: String, method: String, _ settings: Settings) -> Route {
        Route.resolve(HTTPRequestHead(method: method, target: target, headers: ["Host": "proxy.example"]), origins: settings.origins,
                      signing: settings.signing, transforms: settings.transforms, allowed: settings.allowed)
    }

    /// `url` is on `origin`'s scheme, host and port, and under its base path.
    static func isUnder(_ url: UpstreamURL, _ origin: OriginMapping) -> Bool {
        guard let base = try? UpstreamURL.parse(origin.url) else { return false }
        var basePath = Substring(base.pathAndQuery)
        while basePath.hasSuffix("/") { basePath = basePath.dropLast() }
        return url.scheme == base.scheme && url.host == base.host && url.effectivePort == base.effectivePort
            && (basePath.isEmpty || url.pathAndQuery == basePath || url.pathAndQuery.hasPrefix(basePath + "/")
                || url.pathAndQuery.hasPrefix(basePath + "?"))
    }

    // MARK: - Signed URLs

    static let signing = URLSigning(keys: [Array("fuzzing-key-0123".utf8), Array(0..<32)], required: true)
    static let transformSigning = TransformSigning(pairs: [.init(key: Array(0..<16), salt: Array("salt".utf8))], signatureSize: 32)
    static let truncatedSigning = TransformSigning(pairs: [.init(key: Array(0..<16), salt: [])], signatureSize: 8)

    /// The bytes as a camo path, as a sig parameter with a URL, as a key, as a transform path. Checks: the decoders
    /// round-trip what the encoders make; what `sign` / `camoPath` / `signature` make verifies; nothing else does
    /// unless it is the same signature (a path that verifies names the URL it carries).
    static func signedURL(_ bytes: [UInt8]) {
        let text = bytes.text
        let lines = bytes.lines
        // Decoders against encoders.
        expect(URLSigning.hexDecode(Substring(URLSigning.hexEncode(bytes))) == (bytes.isEmpty ? nil : bytes), "hex round trip")
        expect(URLSigning.base64Decode(Substring(URLSigning.base64URLEncode(bytes))) == (bytes.isEmpty ? nil : bytes), "base64 round trip")
        if let decoded = URLSigning.hexDecode(Substring(text)) { expect(URLSigning.hexEncode(decoded) == text.lowercased(), "hex of \(text.debugDescription)") }
        _ = URLSigning.decodeKey(text)
        _ = TransformSigning.pairs(keys: lines.filter { $0.hasPrefix("k") }, salts: lines.filter { $0.hasPrefix("s") })

        // Camo paths: whatever verifies carries the URL signed.
        _ = URLSigning.looksSigned(Substring(text))
        if case let .success(url) = signing.verifyPath(Substring(text)) {
            let parts = text.split(separator: "/", maxSplits: 1)
            let hex = URLSigning.hexDecode(parts[0]) != nil ? URLSigning.hexDecode(parts[1]) : nil
            let carried = hex ?? URLSigning.base64Decode(parts[1])
            expect(carried == Array(url.utf8), "a verified path \(text.debugDescription) names another URL than \(url.debugDescription)")
        }
        if !text.isEmpty, let path = signing.camoPath(for: text) {
            expect(signing.verifyPath(Substring(path)) == .success(text), "camo path of \(text.debugDescription) does not verify")
            expect(URLSigning.looksSigned(Substring(path)), "camo path \(path) does not look signed")
        }
        // The sig parameter.
        if lines.count >= 2 {
            _ = signing.verify(sig: lines[0], url: lines[1], normalised: (try? UpstreamURL.parse(lines[1]))?.string ?? lines[1])
        }
        if let sig = signing.signature(for: text) {
            expect(signing.verify(sig: sig, url: text, normalised: text) == nil, "signature of \(text.debugDescription) does not verify")
        }
        // imgproxy signatures.
        for transform in [transformSigning, truncatedSigning] {
            let signature = transform.sign(path: text)
            expect(transform.verify(signature: Substring(signature), path: Substring(text)) == nil, "transform signature does not verify")
            if let first = lines.first, lines.count > 1, first != signature {
                expect(transform.verify(signature: Substring(first), path: Substring(text)) != nil
                       || URLSigning.base64Decode(Substring(first)) == URLSigning.base64Decode(Substring(signature)),
                       "a foreign signature \(first.debugDescription) verifies")
            }
        }
    }

    /// A CONNECT target: what is accepted has a port in range, a lower-cased host of dialable bytes, and its authority
    /// parses back to itself.
    static func connectTarget(_ bytes: [UInt8]) {
        guard case let .success(target) = ConnectTarget.parse(bytes.text) else { return }
        expect((1...65535).contains(target.port), "port \(target.port)")
        expect(target.host == target.host.lowercased(), "host \(target.host) not lower-cased")
        expect(target.host.utf8.allSatisfy { $0 > 32 && $0 < 127 && $0 != UInt8(ascii: "/") && $0 != UInt8(ascii: "@") }, "host bytes \(target.host)")
        guard case let .success(again) = ConnectTarget.parse(target.authority) else {
            return expect(false, "\(target.authority) does not parse back")
        }
        expect(again == target, "\(target.authority) parses to \(again.authority)")
    }
}
