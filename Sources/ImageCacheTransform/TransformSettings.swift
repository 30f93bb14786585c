// The transform layer's settings (the `transform*` keys, docs/transforms.md) and their defaults. ImageCacheConfig
// sets them from the keys (ConfigKeys.swift, whose documented defaults are rendered from this struct's) and keeps
// the keys and salts as given until every source is read (Configuration.resolveTransformSigning).

public import ImageCacheHTTP

public struct TransformSettings: Sendable, Equatable {
    /// `transforms`: serve transform URLs under `transform-prefix`. Default true.
    public var enabled = true
    /// `transform-prefix`: the path transform URLs live under ("/" only when no origin is configured). Default /transform.
    public var prefix = "/transform"
    /// `transform-keys`, `transform-salts` (hex, paired; or IMGPROXY_KEY/IMGPROXY_SALT), `transform-signature-size`.
    public var signing = TransformSigning()
    /// Whether `signing` came from imgproxy's environment variables.
    public var signingFromIMGPROXY = false
    /// `transform-presets`: name -> option segments ("thumb=rs:fill:200:200/q:70"); "default" applies to every URL.
    public var presets: [String: [String]] = [:]
    /// `transform-only-presets`: URLs may name presets only. Default false.
    public var onlyPresets = false
    /// `transform-workers`: transforms at once; 0: the CPUs this process may use. Default 0. Restart only.
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

    /// The prefix without a trailing "/" ("" for "/").
    public var normalisedPrefix: String {
        var text = Substring(prefix)
        while text.hasSuffix("/") { text = text.dropLast() }
        return String(text)
    }
}
