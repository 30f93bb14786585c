// Signed transform URLs, as imgproxy signs them. Pure: keys in, verdicts out; no I/O, no state.
//
// POLICY
//   Keys and salts: `transform-keys` and `transform-salts` (hex, paired in order: the first key with the first salt;
//   configuration file or environment, never a flag), or imgproxy's own IMGPROXY_KEY / IMGPROXY_SALT (one pair) and
//   IMGPROXY_KEYS / IMGPROXY_SALTS (comma-separated pairs) for drop-in use. Several pairs at once: any verifies
//   (rotation); `imagecached sign --transform` signs with the first.
//   Signature: HMAC-SHA256(key, salt + path), where path is everything after the signature segment, starting with
//   "/" ("/rs:fit:300:0/plain/http://..."), as the client sent it; URL-safe base64 without padding. Truncated
//   signatures (imgproxy's IMGPROXY_SIGNATURE_SIZE) are taken at exactly `transform-signature-size` bytes (default
//   32, the whole HMAC; at least 8): a signature of any other length is wrong, so a client cannot shorten it to
//   guess. Compared in constant time.
//   No pair configured: every signature value is accepted ("insecure", "unsafe", anything; imgproxy's behaviour),
//   and the daemon says so loudly at start. With pairs configured, "insecure" is a wrong signature like any other.

internal import Crypto
internal import Foundation

/// The key/salt pairs that verify transform URLs.
public struct TransformSigning: Sendable, Equatable {
    public struct Pair: Sendable, Equatable {
        public var key: [UInt8]
        public var salt: [UInt8]
        public init(key: [UInt8], salt: [UInt8]) {
            self.key = key
            self.salt = salt
        }
    }

    public var pairs: [Pair]
    /// Bytes of the HMAC a signature carries (imgproxy's IMGPROXY_SIGNATURE_SIZE).
    public var signatureSize: Int

    public init(pairs: [Pair] = [], signatureSize: Int = 32) {
        self.pairs = pairs
        self.signatureSize = signatureSize
    }

    /// No key configured: URLs are not checked.
    public var isInsecure: Bool { pairs.isEmpty }

    /// Pairs from hex texts, in order; nil (with why) when they do not decode or do not pair up.
    public static func pairs(keys: [String], salts: [String]) -> Result<[Pair], URLSigning.Refusal> {
        guard keys.count == salts.count else {
            return .failure(.init(reason: "\(keys.count) transform key(s) but \(salts.count) salt(s): they are paired in order"))
        }
        var pairs: [Pair] = []
        for (n, (keyText, saltText)) in zip(keys, salts).enumerated() {
            guard let key = URLSigning.hexDecode(Substring(keyText.trimmingCharacters(in: .whitespaces))), key.count >= 8 else {
                return .failure(.init(reason: "transform key \(n + 1) is not hex of at least 8 bytes"))
            }
            guard let salt = URLSigning.hexDecode(Substring(saltText.trimmingCharacters(in: .whitespaces))) else {
                return .failure(.init(reason: "transform salt \(n + 1) is not hex"))
            }
            pairs.append(Pair(key: key, salt: salt))
        }
        return .success(pairs)
    }

    /// Checks `signature` over `path` (everything after the signature segment, from its "/"); nil when it verifies.
    public func verify(signature: Substring, path: Substring) -> URLSigning.Refusal? {
        if isInsecure { return nil }
        guard let presented = URLSigning.base64Decode(signature), presented.count == signatureSize else {
            return .init(reason: "the transform URL's signature is missing or malformed (URL-safe base64 of \(signatureSize) bytes expected)")
        }
        var found = false
        for pair in pairs {
            let expected = Array(Self.hmac(pair, path).prefix(signatureSize))
            if URLSigning.constantTimeEqual(expected, presented) { found = true }
        }
        return found ? nil : .init(reason: "the transform URL's signature does not match (wrong key, salt or path)")
    }

    /// The signature of `path` with the first pair; "insecure" without one.
    public func sign(path: String) -> String {
        guard let pair = pairs.first else { return "insecure" }
        return URLSigning.base64URLEncode(Array(Self.hmac(pair, Substring(path)).prefix(signatureSize)))
    }

    private static func hmac(_ pair: Pair, _ path: Substring) -> [UInt8] {
        let message = pair.salt + Array(path.utf8)
        return Array(HMAC<SHA256>.authenticationCode(for: message, using: SymmetricKey(data: pair.key)))
    }
}
