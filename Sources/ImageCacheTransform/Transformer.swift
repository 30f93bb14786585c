// One transform, from source bytes to encoded result, on the calling thread (a worker of TransformPool). The
// limits are checked from the header, before any pixel is decoded; libvips decodes lazily, so the time limit covers
// decoding, processing and encoding (the save's evaluation is killed when it passes).
//
// LIMITS (each with its configuration key; a refused image gets 422 naming the limit, an over-large source 413)
//   transform-max-megapixels   50    width x height of the source; for an animation kept animated, of all its
//                                    frames together (read from the header: a pixel bomb is refused undecoded)
//   transform-max-frames       100   frames of an animation kept animated (a still output takes the first frame)
//   transform-max-dimension    8192  width or height of the result (padding and extend included) and of any size
//                                    option
//   transform-max-result-megapixels 16  width x height of the result (an animation's frames together); the scaled
//                                    image before its window is cut counts against transform-max-megapixels
//   transform-timeout          10s   one job from its start: every libvips evaluation of the job is killed once it
//                                    has passed (the encoders' own last pass runs to its end: its input is bounded
//                                    by transform-max-result-megapixels)
//   transform-max-source-bytes 32MiB source bytes (checked as they arrive, SourceCollector.swift)
//   transform-allow-svg        off   SVG sources (libvips's SVG loader is blocked unless on); an SVG source must
//                                    then pass SVGGuard (SVGGuard.swift: size, declarations, references, nesting,
//                                    <use> expansion, filters) before libvips sees it; its declared size is checked
//                                    against transform-max-megapixels from the header, as any source's
// Damaged, truncated or mislabelled files fail in libvips's loader (fail_on=error) and are answered 422; nothing
// partial is ever encoded.
//
// Animated sources (GIF, WebP) stay animated when the output format animates (GIF, WebP) and the options are ones
// that apply frame by frame: resizing (fit, force, fill and fill-down with centre or smart gravity; for smart, the
// window libvips's attention strategy finds on the first frame is cut from every frame), blur, sharpen, quality,
// format. Any other option (crop, trim, rotate, padding, extend, another gravity) makes a still of the
// first frame; so does a still output format.
//
// STEPS (one function each, in this order: `transform` calls them; each takes the values the one before returned)
//   load           the header only: the source's format and size against the limits, the output format, whether
//                  the result animates                                                                   -> Job
//   orientAndCrop  crop or trim only: the whole source decoded, turned (EXIF, then rotate), then cut     -> Cropped
//   resize         the plan (ResizePlan.swift) checked against the limits, then the cropped image resized to it;
//   resizeOnLoad   without crop or trim, the source decoded straight to the plan's size (a decoded level kept in
//                  PixelCache, or libvips's thumbnail), a smart or an animation's window cut as it is, then turned
//                                                                                                        -> Scaled
//   cutWindow      the plan's window still to cut
//   filter         blur, sharpen, alpha flattened onto the background
//   extend         the plan's canvas, then the padding
//   encode         the output format's encoder (the lazy pipeline is evaluated here)           -> TransformedImage

internal import Foundation
internal import ImageCacheHTTP

/// What a transform needs besides the source: the options, the chosen output format, the limits and encoder settings.
public struct TransformSpec: Sendable {
    public var options: TransformOptions
    /// nil: the source's format (decided from the source: a format browsers show, else JPEG or PNG with alpha).
    public var format: ImageOutputFormat?
    public var limits: TransformLimits
    public var defaultQuality: [ImageOutputFormat: Int]
    public var avifEffort: Int
    public var webpEffort: Int
    /// Where the decoded levels of JPEG and opaque PNG sources are kept for the next variant (PixelCache.swift); nil keeps none
    /// (the results are the same bytes either way).
    public var pixelCache: PixelCache?

    public init(options: TransformOptions, format: ImageOutputFormat?, limits: TransformLimits,
                defaultQuality: [ImageOutputFormat: Int] = TransformSpec.imgproxyQuality,
                avifEffort: Int = TransformSettings().avifEffort, webpEffort: Int = TransformSettings().webpEffort,
                pixelCache: PixelCache? = nil) {
        self.pixelCache = pixelCache
        self.options = options
        self.format = format
        self.limits = limits
        self.defaultQuality = defaultQuality
        self.avifEffort = avifEffort
        self.webpEffort = webpEffort
    }

    /// imgproxy's defaults: quality 80, WebP 79, AVIF 63.
    public static let imgproxyQuality: [ImageOutputFormat: Int] = [.jpeg: 80, .png: 80, .webp: 79, .avif: 63, .gif: 80]
}

public struct TransformLimits: Sendable, Equatable {
    public var maxPixels: Int
    /// Width x height of a result (an animation's frames together).
    public var maxResultPixels: Int
    public var maxFrames: Int
    public var maxDimension: Int
    public var timeoutSeconds: Double
    /// SVG sources are read (libvips's SVG loader must be allowed too: VipsRuntime.start).
    public var allowSVG: Bool
    /// What an SVG source must be to be read (SVGGuard.swift); the documented constants unless a test sets them.
    public var svg = SVGLimits()
    public init(maxPixels: Int = 50_000_000, maxResultPixels: Int = 16_000_000, maxFrames: Int = 100, maxDimension: Int = 8192,
                timeoutSeconds: Double = 10, allowSVG: Bool = false) {
        self.maxResultPixels = maxResultPixels
        self.allowSVG = allowSVG
        self.maxPixels = maxPixels
        self.maxFrames = maxFrames
        self.maxDimension = maxDimension
        self.timeoutSeconds = timeoutSeconds
    }
}

/// An encoded result.
public struct TransformedImage: Sendable {
    public var bytes: [UInt8]
    public var format: ImageOutputFormat
    public var width: Int
    /// Of one frame.
    public var height: Int
    public var frames: Int
}

/// Why a transform did not produce an image: the status the clients get, a one-line reason, and a short label for
/// metrics ("megapixels", "frames", "dimension", "timeout", "svg", "unreadable", "failed").
public struct TransformFailure: Error, Sendable, Equatable, CustomStringConvertible {
    public var status: Int
    public var reason: String
    public var label: String
    public init(status: Int, reason: String, label: String) {
        self.status = status
        self.reason = reason
        self.label = label
    }
    public var description: String { reason }
}

public enum Transformer {
    /// Runs one transform. Never throws: every failure is a `TransformFailure`.
    public static func run(_ source: [UInt8], _ spec: TransformSpec) -> Result<TransformedImage, TransformFailure> {
        // Started now: the time limit covers the whole job. Every image of the job keeps it alive.
        let deadline = Deadline(seconds: spec.limits.timeoutSeconds)
        return source.withUnsafeBytes { raw -> Result<TransformedImage, TransformFailure> in
            guard raw.count > 0 else {
                return .failure(TransformFailure(status: 422, reason: "the source is empty", label: "unreadable"))
            }
            do {
                return .success(try transform(raw, spec, deadline))
            } catch let failure as TransformFailure {
                return .failure(failure)
            } catch let error as VipsError {
                if deadline.passed {
                    return .failure(TransformFailure(status: 422, reason: "the transform took longer than transform-timeout (\(number(spec.limits.timeoutSeconds))s)", label: "timeout"))
                }
                return .failure(TransformFailure(status: 422, reason: "the source could not be transformed: \(error)", label: "failed"))
            } catch {
                return .failure(TransformFailure(status: 500, reason: "transform failed: \(error)", label: "failed"))
            }
        }
    }

    /// The source formats read, by libvips loader name prefix; anything else is refused.
    static func sourceFormat(loader: String) -> (format: ImageOutputFormat?, animates: Bool)? {
        if loader.hasPrefix("jpegload") { return (.jpeg, false) }
        if loader.hasPrefix("pngload") { return (.png, false) }
        if loader.hasPrefix("webpload") { return (.webp, true) }
        if loader.hasPrefix("gifload") { return (.gif, true) }
        if loader.hasPrefix("heifload") { return (.avif, false) }
        if loader.hasPrefix("tiffload") || loader.hasPrefix("svgload") { return (nil, false) }
        return nil
    }

    /// The steps, in order; each takes what the one before gave and returns what the next needs.
    private static func transform(_ raw: UnsafeRawBufferPointer, _ spec: TransformSpec, _ deadline: Deadline) throws -> TransformedImage {
        let job = try load(raw, spec, deadline)
        let scaled = job.decodesWhole ? try resize(orientAndCrop(job), job) : try resizeOnLoad(job)
        var image = try cutWindow(scaled)
        image = try filter(image, job)
        image = try extend(image, scaled.plan, job)
        return try encode(image, job)
    }

    // MARK: - Step 1: load (the header only)

    /// A job as the source's header describes it: what every later step reads.
    private struct Job {
        let raw: UnsafeRawBufferPointer
        let spec: TransformSpec
        let deadline: Deadline
        /// What SVGGuard found, for an SVG source; nil for any other.
        let svg: SVGFindings?
        /// The libvips loader that claimed the source ("jpegload_buffer", ...).
        let loader: String
        /// One frame's size, as stored (before any orientation).
        let frameWidth: Int, frameHeight: Int
        let frames: Int
        let hasAlpha: Bool
        /// Bytes of the source's decoded pixels (whether PixelCache keeps its whole decode).
        let pixelBytes: Int
        let output: ImageOutputFormat
        /// Every frame is transformed and encoded: an animated source, an output format that animates, and options
        /// that apply frame by frame (the top of this file).
        let animate: Bool
        /// The EXIF orientation turns the image a quarter, and auto-rotation applies it.
        let swaps: Bool

        var options: TransformOptions { spec.options }
        var limits: TransformLimits { spec.limits }
        /// `rotate` turns the image a quarter.
        var quarterTurn: Bool { options.rotate == 90 || options.rotate == 270 }
        /// The source's size in the final orientation (imgproxy's rule: the EXIF rotation, then `rotate`), in which
        /// sizes are planned.
        var orientedWidth: Int { swaps != quarterTurn ? frameHeight : frameWidth }
        var orientedHeight: Int { swaps != quarterTurn ? frameWidth : frameHeight }
        /// Crop and trim need the whole decoded source; every other job is scaled as it is decoded.
        var decodesWhole: Bool { options.crop != nil || options.trim != nil }
        /// The frames a result holds, for its limits.
        var resultFrames: Int { animate ? frames : 1 }
        /// How a decoded level of the source is made and kept (PixelCache.swift): a still JPEG or opaque PNG; nil
        /// for any other source, which libvips's thumbnail scales on load.
        var levelKind: PixelCache.Kind? {
            if animate { return nil }
            if loader.hasPrefix("jpegload") { return .shrinkOnLoad }
            return loader.hasPrefix("pngload") && !hasAlpha ? .boxAverage : nil
        }
    }

    /// The source's format and size checked against the limits from its header, before any pixel is decoded; the
    /// output format decided and whether the result animates.
    private static func load(_ raw: UnsafeRawBufferPointer, _ spec: TransformSpec, _ deadline: Deadline) throws -> Job {
        let options = spec.options, limits = spec.limits
        let svg = try admitSVG(raw, limits)
        let probe: VipsImage
        do {
            probe = try VipsImage.load(raw, deadline: deadline)
        } catch {
            throw TransformFailure(status: 422, reason: "the source is not an image this daemon reads (\(error.message.isEmpty ? "unknown format" : error.message))", label: "unreadable")
        }
        guard let (sourceFormat, sourceAnimates) = sourceFormat(loader: probe.loader) else {
            throw TransformFailure(status: 422, reason: "the source's format (\(probe.loader)) is not one this daemon transforms", label: "unreadable")
        }
        let frameWidth = probe.width, frameHeight = probe.pageHeight, frames = probe.pages
        if frameWidth * frameHeight > limits.maxPixels {
            throw TransformFailure(status: 422, reason: "the source is \(frameWidth)x\(frameHeight) (\(megapixels(frameWidth * frameHeight)) MP), over transform-max-megapixels (\(megapixels(limits.maxPixels)))", label: "megapixels")
        }
        let output = spec.format ?? sourceFormat ?? (probe.hasAlpha ? .png : .jpeg)
        let frameByFrame = options.crop == nil && options.trim == nil && options.rotate == 0 && options.targetPadding == [0, 0, 0, 0]
            && !options.extend && (options.gravity == .centre || options.gravity == .smart)
        let animate = frames > 1 && sourceAnimates && output.animates && frameByFrame
        if animate { try checkFrames(frames, width: frameWidth, height: frameHeight, limits) }
        return Job(raw: raw, spec: spec, deadline: deadline, svg: svg, loader: probe.loader, frameWidth: frameWidth,
                   frameHeight: frameHeight, frames: frames, hasAlpha: probe.hasAlpha, pixelBytes: probe.pixelBytes,
                   output: output, animate: animate, swaps: options.autoRotate && (5...8).contains(probe.orientation))
    }

    // MARK: - Step 2: orient and crop (crop and trim only)

    /// An image and the size it is taken to have (in the final orientation, after any crop and trim).
    private struct Cropped {
        var image: VipsImage
        var width: Int
        var height: Int
    }

    /// The whole source decoded (random access: crop by attention and trim read the image before cutting it; within
    /// transform-max-megapixels), turned (EXIF, then `rotate`), then cut by the crop and the trim.
    private static func orientAndCrop(_ job: Job) throws -> Cropped {
        let options = job.options
        try checkFilterWork(job.svg, pixels: job.frameWidth * job.frameHeight, job.limits)
        var image = try VipsImage.load(job.raw, random: true, deadline: job.deadline).toSRGB()
        if options.autoRotate { image = try image.autorot() }
        if options.rotate != 0 { image = try image.rotate(options.rotate) }
        var cropped = Cropped(image: image, width: job.orientedWidth, height: job.orientedHeight)
        if let crop = options.crop { cropped = try self.crop(cropped, crop, gravity: crop.gravity ?? options.gravity) }
        if let trim = options.trim { cropped = try self.trim(cropped, trim) }
        return cropped
    }

    /// The crop's window (pixels, or a fraction of the image; 0: all of it), at its gravity; smart: where libvips's
    /// attention strategy puts it.
    private static func crop(_ cropped: Cropped, _ crop: TransformOptions.Crop, gravity: Gravity) throws -> Cropped {
        let width = cropped.width, height = cropped.height
        let cw = crop.width == 0 ? width : (crop.width < 1 ? Int((crop.width * Double(width)).rounded()) : Int(crop.width))
        let ch = crop.height == 0 ? height : (crop.height < 1 ? Int((crop.height * Double(height)).rounded()) : Int(crop.height))
        let w = max(1, min(cw, width)), h = max(1, min(ch, height))
        guard w < width || h < height else { return cropped }
        if gravity == .smart { return Cropped(image: try cropped.image.smartcrop(width: w, height: h), width: w, height: h) }
        let (left, top) = ResizePlan.place(w, h, in: width, height, gravity: gravity)
        return Cropped(image: try cropped.image.extract(left: left, top: top, width: w, height: h), width: w, height: h)
    }

    /// What is not background cut out: the trim's colour, or imgproxy's default, the top-left pixel's (alpha left
    /// out: find_trim flattens it).
    private static func trim(_ cropped: Cropped, _ trim: TransformOptions.Trim) throws -> Cropped {
        let image = cropped.image
        let bands = image.hasAlpha ? image.bands - 1 : image.bands
        let colour = try trim.colour ?? image.pixel(x: 0, y: 0)
        let background = Array(colour.prefix(bands))
        let box = try image.findTrim(threshold: trim.threshold, background: background)
        guard box.width > 0, box.height > 0, box.width < cropped.width || box.height < cropped.height else { return cropped }
        return Cropped(image: try image.extract(left: box.left, top: box.top, width: box.width, height: box.height),
                       width: box.width, height: box.height)
    }

    // MARK: - Step 3: resize

    /// An image scaled, and the plan for the rest: the window still to cut (nil once cut) and the canvas.
    private struct Scaled {
        var image: VipsImage
        var plan: ResizePlan
    }

    /// A cropped image's plan, checked against the limits, then the image resized to it.
    private static func resize(_ cropped: Cropped, _ job: Job) throws -> Scaled {
        let plan = ResizePlan.make(width: cropped.width, height: cropped.height, options: job.options)
        try checkResult(plan, job.options, job.limits, frames: job.resultFrames)
        guard plan.scaledWidth != cropped.width || plan.scaledHeight != cropped.height else {
            return Scaled(image: cropped.image, plan: plan)
        }
        let image = try cropped.image.resize(Double(plan.scaledWidth) / Double(cropped.width),
                                             Double(plan.scaledHeight) / Double(cropped.height))
        return Scaled(image: image, plan: plan)
    }

    /// The source's plan, checked against the limits, then the source decoded straight to the scaled size
    /// (shrink-on-load; an SVG is rendered at it), with a smart window or an animation's window cut as it is, then
    /// turned by `rotate`.
    private static func resizeOnLoad(_ job: Job) throws -> Scaled {
        var plan = ResizePlan.make(width: job.orientedWidth, height: job.orientedHeight, options: job.options)
        try checkResult(plan, job.options, job.limits, frames: job.resultFrames)
        try checkFilterWork(job.svg, pixels: plan.scaledWidth * plan.scaledHeight, job.limits)
        var image: VipsImage
        if let window = plan.window, job.animate {
            image = try cutAnimation(job, plan, window)
            plan.window = nil
        } else if let window = plan.window, window.smart {
            // libvips scales to cover the window and cuts the most interesting part: shrink-on-load and a smart crop
            // in one pass (in the source's orientation: the window turned back by `rotate`).
            image = try scaledSource(job, width: job.quarterTurn ? window.height : window.width,
                                     height: job.quarterTurn ? window.width : window.height, crop: 2)
            plan.window = nil
        } else {
            image = try scaledSource(job, width: job.quarterTurn ? plan.scaledHeight : plan.scaledWidth,
                                     height: job.quarterTurn ? plan.scaledWidth : plan.scaledHeight, crop: 0)
        }
        image = try image.toSRGB()
        // Turned now, so that the window, the gravity and the canvas are those of the final orientation. A quarter
        // turn reads the image by columns: it is evaluated into memory first (the scaled size, bounded by
        // transform-max-dimension).
        let rotate = job.options.rotate
        if rotate != 0 { image = try (job.quarterTurn ? image.copyMemory() : image).rotate(rotate) }
        return Scaled(image: image, plan: plan)
    }

    /// An animation's frames scaled (shrink-on-load), then the same window cut out of each: at the plan's gravity,
    /// or for smart where libvips's attention strategy centres it on the first frame.
    private static func cutAnimation(_ job: Job, _ plan: ResizePlan, _ window: ResizePlan.Window) throws -> VipsImage {
        let scaled = try VipsImage.thumbnail(job.raw, width: plan.scaledWidth, height: plan.scaledHeight, crop: 0,
                                             allPages: true, autoRotate: job.options.autoRotate, deadline: job.deadline)
        var (left, top) = (window.left, window.top)
        if window.smart {
            let first = try scaled.copyMemory().extract(left: 0, top: 0, width: plan.scaledWidth, height: scaled.pageHeight)
            let centre = try first.attention(width: window.width, height: window.height)
            left = min(max(0, centre.x - window.width / 2), plan.scaledWidth - window.width)
            top = min(max(0, centre.y - window.height / 2), scaled.pageHeight - window.height)
        }
        return try scaled.cropFrames(pageHeight: scaled.pageHeight, left: left, top: top, width: window.width, height: window.height)
    }

    /// The source scaled to width x height (after auto-rotation), or to cover it and cut a window (crop 1 or 2): a
    /// JPEG or an opaque PNG from a decoded level (`scaledLevel`), anything else through libvips's thumbnail with
    /// shrink-on-load. The bytes of a result never depend on which of these made it.
    private static func scaledSource(_ job: Job, width: Int, height: Int, crop: Int32) throws -> VipsImage {
        if let kind = job.levelKind, let image = try scaledLevel(job, kind, width: width, height: height, crop: crop) {
            return image
        }
        return try VipsImage.thumbnail(job.raw, width: width, height: height, crop: crop, allPages: job.animate && crop == 0,
                                       autoRotate: job.options.autoRotate, deadline: job.deadline)
    }

    /// The source scaled from a decoded level kept for its other variants (PixelCache.swift): its whole decode when
    /// that fits the cache's whole-source share (an opaque PNG's deeper levels are then box averages of it), else the
    /// level a result at least 4 times smaller is made from. Nil when there is no such level (libvips's thumbnail
    /// decodes the whole source then, the same pixels).
    private static func scaledLevel(_ job: Job, _ kind: PixelCache.Kind, width: Int, height: Int, crop: Int32) throws -> VipsImage? {
        let (stored, storedHeight) = job.swaps ? (height, width) : (width, height)
        var scaleX = Double(stored) / Double(job.frameWidth), scaleY = Double(storedHeight) / Double(job.frameHeight)
        if crop != 0 { (scaleX, scaleY) = (max(scaleX, scaleY), max(scaleX, scaleY)) }
        let k = PixelCache.level(sourceWidth: job.frameWidth, sourceHeight: job.frameHeight, scaleX: scaleX, scaleY: scaleY, kind: kind)
        let raw = job.raw, deadline = job.deadline
        let level: VipsImage
        let whole = job.spec.pixelCache.map { job.pixelBytes <= $0.wholeSourceLimitBytes } ?? false
        if whole, k == 0 || kind == .boxAverage {
            let decoded = try kept(job, level: 0) { try VipsImage.load(raw, deadline: deadline).shareable() }
            level = k == 0 ? decoded : try decoded.shrink(by: 1 << k, deadline: deadline)
        } else if k > 0 {
            level = try kept(job, level: k) {
                switch kind {
                case .boxAverage: try VipsImage.load(raw, deadline: deadline).shrink(by: 1 << k, deadline: deadline).shareable()
                case .shrinkOnLoad: try VipsImage.loadJPEG(raw, shrink: 1 << k, deadline: deadline).shareable()
                }
            }
        } else {
            return nil
        }
        return try level.thumbnail(width: width, height: height, crop: crop, autoRotate: job.options.autoRotate, deadline: deadline)
    }

    /// The source's level `level`, from the job's pixel cache (named by the source's SHA-256), or made by `make`
    /// when the job has none.
    private static func kept(_ job: Job, level: Int, make: () throws -> VipsImage) throws -> VipsImage {
        guard let cache = job.spec.pixelCache else { return try make() }
        let key = PixelCache.Key(digest: ContentHash.sha256Base64(bytes: job.raw), level: level)
        return try cache.level(key, deadline: job.deadline, make: make)
    }

    // MARK: - Step 4: window, filters, canvas

    /// The plan's window still to cut (a smart one found by libvips's attention strategy); the image itself when
    /// there is none.
    private static func cutWindow(_ scaled: Scaled) throws -> VipsImage {
        guard let window = scaled.plan.window else { return scaled.image }
        if window.smart { return try scaled.image.smartcrop(width: window.width, height: window.height) }
        return try scaled.image.extract(left: window.left, top: window.top, width: window.width, height: window.height)
    }

    /// The per-pixel options (blur, sharpen), then alpha flattened onto the background when the output keeps none
    /// or a background is asked for.
    private static func filter(_ image: VipsImage, _ job: Job) throws -> VipsImage {
        let options = job.options
        var image = image
        if options.blur > 0 { image = try image.blur(options.blur) }
        if options.sharpen > 0 { image = try image.sharpen(options.sharpen) }
        if image.hasAlpha, !job.output.hasAlpha || options.background != nil {
            image = try image.flatten(options.background ?? [255, 255, 255])
        }
        return image
    }

    /// The plan's canvas (extend), then the padding around it: transparent where the output keeps alpha and no
    /// background is asked for, else the background (white).
    private static func extend(_ image: VipsImage, _ plan: ResizePlan, _ job: Job) throws -> VipsImage {
        let padding = job.options.targetPadding, background = job.options.background
        guard plan.canvas != nil || padding != [0, 0, 0, 0] else { return image }
        var image = image
        if job.output.hasAlpha && background == nil && !image.hasAlpha { image = try image.addAlpha() }
        if let canvas = plan.canvas {
            image = try image.embed(x: canvas.x, y: canvas.y, width: canvas.width, height: canvas.height,
                                    background: fill(image, background))
        }
        if padding != [0, 0, 0, 0] {
            image = try image.embed(x: padding[3], y: padding[0], width: image.width + padding[1] + padding[3],
                                    height: image.height + padding[0] + padding[2], background: fill(image, background))
        }
        return image
    }

    /// The band values an extended area of `image` is filled with: `background` (RGB, white if nil) in its bands,
    /// transparent when it has alpha and no background is asked for.
    private static func fill(_ image: VipsImage, _ background: [Double]?) -> [Double] {
        let rgb = background ?? [255, 255, 255]
        switch image.bands {
        case 1: return [rgb[0]]
        case 2: return image.hasAlpha ? [rgb[0], 0] : [rgb[0], rgb[1]]
        case 3: return rgb
        default: return image.hasAlpha && background == nil ? [0, 0, 0, 0] : rgb + [255]
        }
    }

    // MARK: - Step 5: encode

    /// The image encoded in the output format (decoding happens here: the pipeline is lazy, and the time limit
    /// covers it).
    private static func encode(_ image: VipsImage, _ job: Job) throws -> TransformedImage {
        let output = job.output
        let effort = output == .avif ? job.spec.avifEffort : job.spec.webpEffort
        let bytes = try image.save(output, quality: job.options.quality(for: output, defaults: job.spec.defaultQuality),
                                   strip: job.options.stripMetadata, effort: effort)
        return TransformedImage(bytes: bytes, format: output, width: image.width,
                                height: job.animate ? image.pageHeight : image.height, frames: job.animate ? image.pages : 1)
    }

    /// An SVG source (what libvips's SVG loader would claim) is refused unless transform-allow-svg, and then unless
    /// SVGGuard passes it: before libvips, so librsvg never parses what the guard refused. What the guard found, for
    /// an SVG; nil for any other source.
    private static func admitSVG(_ raw: UnsafeRawBufferPointer, _ limits: TransformLimits) throws(TransformFailure) -> SVGFindings? {
        guard SVGGuard.isCandidate(raw) else { return nil }
        guard limits.allowSVG else {
            throw TransformFailure(status: 422, reason: "SVG sources are refused (transform-allow-svg is off)", label: "svg")
        }
        do {
            return try SVGGuard.check(raw, limits: limits.svg, maxEmbeddedPixels: limits.maxPixels)
        } catch {
            throw TransformFailure(status: 422, reason: error.reason, label: "svg")
        }
    }

    /// An SVG's filter passes over the pixels librsvg will render, within SVGLimits.maxFilterWork (SVGGuard.swift
    /// says why), before any is rendered.
    private static func checkFilterWork(_ svg: SVGFindings?, pixels: Int, _ limits: TransformLimits) throws(TransformFailure) {
        guard let svg else { return }
        do {
            try SVGGuard.checkFilterWork(svg, pixels: pixels, limits: limits.svg)
        } catch {
            throw TransformFailure(status: 422, reason: error.reason, label: "svg")
        }
    }

    /// An animation kept animated within transform-max-frames, and its frames together within
    /// transform-max-megapixels (from the header: a pixel bomb is refused undecoded).
    private static func checkFrames(_ frames: Int, width: Int, height: Int, _ limits: TransformLimits) throws(TransformFailure) {
        if frames > limits.maxFrames {
            throw TransformFailure(status: 422, reason: "the source has \(frames) frames, over transform-max-frames (\(limits.maxFrames))", label: "frames")
        }
        if width * height * frames > limits.maxPixels {
            throw TransformFailure(status: 422, reason: "the animation's \(frames) frames of \(width)x\(height) are \(megapixels(width * height * frames)) MP together, over transform-max-megapixels (\(megapixels(limits.maxPixels)))", label: "megapixels")
        }
    }

    /// The result's size (padding and extend included) within transform-max-dimension and
    /// transform-max-result-megapixels, and the scaled image (before its window is cut) within
    /// transform-max-megapixels, an animation's frames counted: what is held in memory is bounded by the limits, never
    /// by the options alone.
    private static func checkResult(_ plan: ResizePlan, _ options: TransformOptions, _ limits: TransformLimits, frames: Int) throws(TransformFailure) {
        let padding = options.targetPadding
        let width = plan.resultWidth + padding[1] + padding[3], height = plan.resultHeight + padding[0] + padding[2]
        if width > limits.maxDimension || height > limits.maxDimension {
            throw TransformFailure(status: 422, reason: "the result would be \(width)x\(height), over transform-max-dimension (\(limits.maxDimension))", label: "dimension")
        }
        if width * height * frames > limits.maxResultPixels {
            throw TransformFailure(status: 422, reason: "the result would be \(width)x\(height)\(frames > 1 ? " x \(frames) frames" : "") (\(megapixels(width * height * frames)) MP), over transform-max-result-megapixels (\(megapixels(limits.maxResultPixels)))", label: "result_megapixels")
        }
        if plan.scaledWidth * plan.scaledHeight * frames > limits.maxPixels {
            throw TransformFailure(status: 422, reason: "the scaled image would be \(plan.scaledWidth)x\(plan.scaledHeight)\(frames > 1 ? " x \(frames) frames" : "") (\(megapixels(plan.scaledWidth * plan.scaledHeight * frames)) MP) before its window is cut, over transform-max-megapixels (\(megapixels(limits.maxPixels)))", label: "megapixels")
        }
    }

    private static func megapixels(_ pixels: Int) -> String { number(Double(pixels) / 1_000_000) }
}
