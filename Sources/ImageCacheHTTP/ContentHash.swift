// ContentHash: digests of text the daemon serves, in the forms headers want. Pure; no state.
// Uses: the status page's Content-Security-Policy allows its inline script and style by hash ('sha256-<base64>',
// CSP Level 2: SHA-256 of the element's exact text, UTF-8, standard base64 with padding); the transforms' PixelCache
// names a source by the digest of its bytes.

internal import Crypto
internal import Foundation

public enum ContentHash {
    /// SHA-256 of `text`'s UTF-8 bytes, standard base64 (with padding), as a CSP hash source wants it.
    public static func sha256Base64(_ text: String) -> String {
        Data(SHA256.hash(data: Array(text.utf8))).base64EncodedString()
    }

    /// SHA-256 of `bytes`, standard base64 (the transforms' PixelCache names a source by it).
    public static func sha256Base64(bytes: UnsafeRawBufferPointer) -> String {
        Data(SHA256.hash(data: bytes)).base64EncodedString()
    }
}
