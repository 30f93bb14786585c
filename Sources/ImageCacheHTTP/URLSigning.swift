// Signed fetch URLs: who may make the daemon fetch a URL it is not configured for. Pure: keys in, verdicts out; no
// I/O, no state.
//
// POLICY
//   Keys: `signing-keys` (configuration file or IMAGECACHED_SIGNING_KEYS, or one per line in `signing-keys-file`;
//   never a flag). Each key is `hex:...`, `base64:...` (standard or URL-safe), `text:...` (the string's own bytes:
//   how go-camo and Camo take their key), or unprefixed: hex when it is all hex digits of even length, else base64.
//   At least 16 bytes. Several keys at once: any of them verifies (rotation); `imagecached sign` uses the first.
//   Forms (the signed message is the URL exactly as the client gives it, or its normal form, which is the cache key
//   and what is fetched: a signature over either verifies, since both name the same resource):
//     /fetch?url=<percent-encoded URL>&sig=<HMAC-SHA256, URL-safe base64, padding optional>
//     /fetch/<hex HMAC>/<hex URL>           go-camo's hex form: HMAC-SHA1 (40 hex digits) or HMAC-SHA256 (64)
//     /fetch/<base64 HMAC>/<base64 URL>     go-camo's base64 form (URL-safe, no padding): SHA-1 or SHA-256
//   The path forms are also served at "/" when no origin is configured (reverse-proxy paths own "/" otherwise).
//   A signature is compared in constant time and must be whole: a truncated one is wrong.
//   `require-signature` (auto | true | false; auto: on when the daemon listens on any address that is not loopback):
//   when on, an unsigned /fetch and a forward-proxy request (it cannot carry a signature) are refused with 403.
//   A request that carries a signature is always checked, required or not: a wrong one is 403, never served.

internal import Crypto
internal import Foundation

/// The signing keys and whether unsigned fetches are allowed.
public struct URLSigning: Sendable, Equatable {
    /// Raw key bytes, in the configured order.
    public var keys: [[UInt8]]
    public var required: Bool

    public init(keys: [[UInt8]] = [], required: Bool = false) {
        self.keys = keys
        self.required = required
    }

    /// Shortest key accepted by the configuration, bytes.
    public static let minimumKeyBytes = 16

    /// A configured key: `hex:`, `base64:`, `text:` or unprefixed (see the policy above); nil when it does not decode.
    public static func decodeKey(_ text: String) -> [UInt8]? {
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        if trimmed.hasPrefix("hex:") { return hexDecode(trimmed.dropFirst(4)) }
        if trimmed.hasPrefix("base64:") { return base64Decode(trimmed.dropFirst(7)) }
        if trimmed.hasPrefix("text:") { return Array(trimmed.dropFirst(5).utf8) }
        if trimmed.utf8.count % 2 == 0, let bytes = hexDecode(trimmed[...]) { return bytes }
        return base64Decode(trimmed[...])
    }

    // MARK: - Verifying

    /// Why a signed request is refused.
    public struct Refusal: Error, Equatable, CustomStringConvertible {
        public var reason: String
        public var description: String { reason }
    }

    /// Checks `sig` (the query parameter, still percent-encoded) over `url` (decoded) and its normal form.
    public func verify(sig: String, url: String, normalised: String) -> Refusal? {
        guard !keys.isEmpty else { return Refusal(reason: "signed URLs are not configured on this daemon (no signing-keys)") }
        guard let decodedSig = PercentDecoding.decode(sig), let presented = Self.base64Decode(decodedSig[...]) else {
            return Refusal(reason: "the sig parameter is not URL-safe base64")
        }
        guard presented.count == SHA256.byteCount else {
            return Refusal(reason: "the sig parameter is \(presented.count) bytes, not the 32 of an HMAC-SHA256 (truncated?)")
        }
        return matches(presented, messages: [url, normalised], sha1: false) ? nil : Refusal(reason: "wrong signature for \(url.prefix(200))")
    }

    /// Whether a path (without its leading "/") has the shape of a signed path: two segments that both decode as hex,
    /// or both as URL-safe base64. Anything else at "/" keeps its usual answer.
    public static func looksSigned(_ rest: Substring) -> Bool {
        let parts = rest.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty, !parts[1].contains("/") else { return false }
        return (hexDecode(parts[0]) != nil && hexDecode(parts[1]) != nil)
            || (base64Decode(parts[0]) != nil && base64Decode(parts[1]) != nil)
    }

    /// A camo-style path `<digest>/<encoded URL>` (after "/fetch/" or "/"): the URL when the digest verifies.
    public func verifyPath(_ rest: Substring) -> Result<String, Refusal> {
        let parts = rest.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty else {
            return .failure(Refusal(reason: "a signed path is /<digest>/<encoded URL>"))
        }
        guard !keys.isEmpty else { return .failure(Refusal(reason: "signed URLs are not configured on this daemon (no signing-keys)")) }
        let (digestText, urlText) = (parts[0], parts[1])
        let digest: [UInt8]
        let urlBytes: [UInt8]
        if let hexDigest = Self.hexDecode(digestText), let hexURL = Self.hexDecode(urlText) {
            (digest, urlBytes) = (hexDigest, hexURL)
        } else if let b64Digest = Self.base64Decode(digestText), let b64URL = Self.base64Decode(urlText) {
            (digest, urlBytes) = (b64Digest, b64URL)
        } else {
            return .failure(Refusal(reason: "the signed path is neither hex nor URL-safe base64"))
        }
        guard let url = String(validating: urlBytes, as: UTF8.self) else {
            return .failure(Refusal(reason: "the signed URL is not UTF-8"))
        }
        let sha1: Bool
        switch digest.count {
        case Insecure.SHA1.byteCount: sha1 = true
        case SHA256.byteCount: sha1 = false
        default:
            return .failure(Refusal(reason: "the digest is \(digest.count) bytes, not an HMAC-SHA1 (20) or HMAC-SHA256 (32) (truncated?)"))
        }
        let normalised = (try? UpstreamURL.parse(url))?.string ?? url
        guard matches(digest, messages: [url, normalised], sha1: sha1) else {
            return .failure(Refusal(reason: "wrong signature for \(url.prefix(200))"))
        }
        return .success(url)
    }

    private func matches(_ presented: [UInt8], messages: [String], sha1: Bool) -> Bool {
        var found = false
        for key in keys {
            for message in Set(messages) {
                // No early exit: every key and form is tried, so timing does not tell which one matched.
                let expected = sha1 ? Self.hmacSHA1(key: key, message) : Self.hmacSHA256(key: key, message)
                if Self.constantTimeEqual(expected, presented) { found = true }
            }
        }
        return found
    }

    // MARK: - Signing

    /// The `sig` parameter for `url` with the first key (URL-safe base64, no padding).
    public func signature(for url: String) -> String? {
        keys.first.map { Self.base64URLEncode(Self.hmacSHA256(key: $0, url)) }
    }

    /// The camo hex path `<HMAC-SHA256 hex>/<URL hex>` with the first key.
    public func camoPath(for url: String) -> String? {
        keys.first.map { Self.hexEncode(Self.hmacSHA256(key: $0, url)) + "/" + Self.hexEncode(Array(url.utf8)) }
    }

    // MARK: - Primitives

    package static func hmacSHA256(key: [UInt8], _ message: String) -> [UInt8] {
        Array(HMAC<SHA256>.authenticationCode(for: Array(message.utf8), using: SymmetricKey(data: key)))
    }

    static func hmacSHA1(key: [UInt8], _ message: String) -> [UInt8] {
        Array(HMAC<Insecure.SHA1>.authenticationCode(for: Array(message.utf8), using: SymmetricKey(data: key)))
    }

    /// Equal bytes, in time that depends on the lengths only.
    public static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        var difference = UInt8(a.count == b.count ? 0 : 1)
        for index in 0..<max(a.count, b.count) {
            difference |= (index < a.count ? a[index] : 0) ^ (index < b.count ? b[index] : 0)
        }
        return difference == 0
    }

    package static func hexDecode(_ text: Substring) -> [UInt8]? {
        let digits = Array(text.utf8)
        guard !digits.isEmpty, digits.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(digits.count / 2)
        var index = 0
        while index < digits.count {
            guard let high = hexValue(digits[index]), let low = hexValue(digits[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        return bytes
    }

    package static func hexEncode(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count * 2)
        for byte in bytes { out += [digits[Int(byte >> 4)], digits[Int(byte & 0x0F)]] }
        return String(decoding: out, as: UTF8.self)
    }

    /// Standard or URL-safe base64, padding optional; nil for anything else.
    package static func base64Decode(_ text: Substring) -> [UInt8]? {
        var standard = String(text).replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        guard !standard.isEmpty, standard.utf8.allSatisfy({ isBase64Byte($0) }) else { return nil }
        while standard.hasSuffix("=") { standard.removeLast() }
        guard standard.utf8.count % 4 != 1 else { return nil }
        standard += String(repeating: "=", count: (4 - standard.utf8.count % 4) % 4)
        return Data(base64Encoded: standard).map { Array($0) }
    }

    package static func base64URLEncode(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    private static func isBase64Byte(_ byte: UInt8) -> Bool {
        switch byte {
        case 48...57, 65...90, 97...122, 43, 47, 61: true
        default: false
        }
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case 48...57: byte - 48
        case 65...70: byte - 55
        case 97...102: byte - 87
        default: nil
        }
    }
}
