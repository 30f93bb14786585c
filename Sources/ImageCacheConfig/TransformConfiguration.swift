// The `transform-*` settings (docs/transforms.md). One Sendable value inside `Configuration`; the keys that
// set it are in ConfigKeys.swift with the others.

public import ImageCacheHTTP
public import ImageCacheTransform
internal import Foundation

public struct TransformConfiguration: Sendable, Equatable {
    /// `transforms`: serve transform URLs under `transform-prefix`. Default true.
    public var enabled = true
    /// `transform-prefix`: the path transform URLs live under ("/" only when no origin is configured). Default /transform.
    public var prefix = "/transform"
    /// `transform-keys`, `transform-salts` (hex, paired; or IMGPROXY_KEY/IMGPROXY_SALT), `transform-signature-size`.
    public var signing = TransformSigning()
    /// Whether `signing` came from imgproxy's environment variables.
    public var signingFromIMGPROXY = false
    /// `transform-keys` and `transform-salts` as given; paired into `signing` once every source is read.
    var keyTexts: [String] = []
    var saltTexts: [String] = []
    /// `transform-presets`: name -> option segments ("thumb=rs:fill:200:200/q:70"); "default" applies to every URL.
    public var presets: [String: [String]] = [:]
    /// `transform-only-presets`: URLs may name presets only. Default false.
    public var onlyPresets = false
    /// `transform-workers`: transforms at once; 0: the CPUs this process may use. Restart only.
    public var workers = 0
    /// `transform-queue`: transforms admitted beyond the workers (fetching their source or waiting for a worker)
    /// before more get 503. Default 64. Restart only.
    public var queueLimit = 64
    /// `transform-queue-timeout`: how long a transform may wait for a worker, seconds. Default 10. Restart only.
    public var queueTimeoutSeconds: Double = 10
    /// The image limits (`transform-max-megapixels`, `-max-frames`, `-max-dimension`, `-timeout`, `-allow-svg`).
    public var limits = TransformLimits()
    /// `transform-max-source-bytes`: largest source a transform reads (413 past it). Default 32 MiB.
    public var maxSourceBytes = 32 << 20
    /// `transform-source-timeout`: how long a transform waits for its whole source, seconds (504 past it; the fetch
    /// goes on for the cache). Default 10.
    public var sourceTimeoutSeconds: Double = 10
    /// `transform-auto-webp`, `transform-auto-avif`: a URL without a format gets WebP / AVIF when Accept allows.
    public var autoWebP = false
    public var autoAVIF = false
    /// `transform-quality`: default quality per format ("jpeg=80,webp=79,avif=63"; imgproxy's defaults).
    public var quality: [ImageOutputFormat: Int] = TransformSpec.imgproxyQuality
    /// `transform-avif-effort` (0-9, default 2) and `transform-webp-effort` (0-6, default 4): encoder effort.
    public var avifEffort = 2
    public var webpEffort = 4
    /// `transform-pixel-cache`: bytes of decoded source pixels (whole up to an eighth of it, and shrunk) kept for
    /// the next variant of a source (PixelCache: JPEG and opaque PNG sources); 0 keeps none. Default 128 MiB.
    public var pixelCacheBytes = 128 << 20

    public init() {}

    public static func == (a: TransformConfiguration, b: TransformConfiguration) -> Bool {
        a.enabled == b.enabled && a.prefix == b.prefix && a.signing == b.signing && a.presets == b.presets
            && a.onlyPresets == b.onlyPresets && a.workers == b.workers && a.queueLimit == b.queueLimit
            && a.queueTimeoutSeconds == b.queueTimeoutSeconds && a.limits == b.limits && a.maxSourceBytes == b.maxSourceBytes
            && a.sourceTimeoutSeconds == b.sourceTimeoutSeconds
            && a.autoWebP == b.autoWebP && a.autoAVIF == b.autoAVIF && a.quality == b.quality
            && a.avifEffort == b.avifEffort && a.webpEffort == b.webpEffort && a.signingFromIMGPROXY == b.signingFromIMGPROXY
            && a.pixelCacheBytes == b.pixelCacheBytes
            && a.keyTexts == b.keyTexts && a.saltTexts == b.saltTexts
    }

    /// Pairs the configured keys and salts into `signing`; without them, imgproxy's IMGPROXY_KEY / IMGPROXY_SALT
    /// (one pair) or IMGPROXY_KEYS / IMGPROXY_SALTS (comma-separated pairs), and IMGPROXY_SIGNATURE_SIZE, are read.
    mutating func resolveSigning(environment: [String: String]) throws(ConfigError) {
        var keys = keyTexts, salts = saltTexts, source = "transform-keys"
        signingFromIMGPROXY = false
        if keys.isEmpty && salts.isEmpty {
            func list(_ name: String) -> [String] {
                (environment[name] ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            }
            keys = list("IMGPROXY_KEYS") + list("IMGPROXY_KEY")
            salts = list("IMGPROXY_SALTS") + list("IMGPROXY_SALT")
            source = "IMGPROXY_KEY"
            signingFromIMGPROXY = !keys.isEmpty
            if let size = environment["IMGPROXY_SIGNATURE_SIZE"], signingFromIMGPROXY {
                guard let bytes = Int(size), (8...32).contains(bytes) else {
                    throw ConfigError(key: "IMGPROXY_SIGNATURE_SIZE", reason: "'\(size)' is not 8 to 32")
                }
                signing.signatureSize = bytes
            }
        }
        switch TransformSigning.pairs(keys: keys, salts: salts) {
        case let .success(pairs): signing.pairs = pairs
        case let .failure(refusal): throw ConfigError(key: source, reason: refusal.reason)
        }
    }

    /// The prefix without a trailing "/" ("" for "/").
    public var normalisedPrefix: String {
        var text = Substring(prefix)
        while text.hasSuffix("/") { text = text.dropLast() }
        return String(text)
    }
}
