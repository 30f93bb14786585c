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
//   transform-max-source-bytes 32MiB source bytes (checked as they arrive, Proxy+Transform.swift)
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
                defaultQuality: [ImageOutputFormat: Int] = TransformSpec.imgproxyQuality, avifEffort: Int = 2, webpEffort: Int = 4,
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

    private static func transform(_ raw: UnsafeRawBufferPointer, _ spec: TransformSpec, _ deadline: Deadline) throws -> TransformedImage {
        let options = spec.options
        let limits = spec.limits
        let svg = try admitSVG(raw, limits)
        // 1. The header only: formats and limits before any pixel is decoded.
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
        let hasAlpha = probe.hasAlpha
        let orientation = probe.orientation
        if frameWidth * frameHeight > limits.maxPixels {
            throw TransformFailure(status: 422, reason: "the source is \(frameWidth)x\(frameHeight) (\(megapixels(frameWidth * frameHeight)) MP), over transform-max-megapixels (\(megapixels(limits.maxPixels)))", label: "megapixels")
        }
        let output = spec.format ?? sourceFormat ?? (hasAlpha ? .png : .jpeg)
        let frameByFrame = options.crop == nil && options.trim == nil && options.rotate == 0 && options.targetPadding == [0, 0, 0, 0]
            && !options.extend && (options.gravity == .centre || options.gravity == .smart)
        let animate = frames > 1 && sourceAnimates && output.animates && frameByFrame
        if animate {
            if frames > limits.maxFrames {
                throw TransformFailure(status: 422, reason: "the source has \(frames) frames, over transform-max-frames (\(limits.maxFrames))", label: "frames")
            }
            if frameWidth * frameHeight * frames > limits.maxPixels {
                throw TransformFailure(status: 422, reason: "the animation's \(frames) frames of \(frameWidth)x\(frameHeight) are \(megapixels(frameWidth * frameHeight * frames)) MP together, over transform-max-megapixels (\(megapixels(limits.maxPixels)))", label: "megapixels")
            }
        }
        let swaps = options.autoRotate && (5...8).contains(orientation)
        // Sizes are planned in the final orientation (imgproxy's rule): the EXIF rotation, then `rotate`.
        let quarterTurn = options.rotate == 90 || options.rotate == 270
        var width = swaps != quarterTurn ? frameHeight : frameWidth, height = swaps != quarterTurn ? frameWidth : frameHeight

        // The source scaled to width x height (after auto-rotation), or to cover it and cut a window (crop 1 or 2):
        // a JPEG or an opaque PNG goes through a decoded level kept for its other variants (PixelCache.swift): its
        // whole decode when that fits the cache's whole-source share (an opaque PNG's deeper levels are then box
        // averages of it), else the level a result at least 4 times smaller is made from; anything else through
        // libvips's thumbnail with shrink-on-load. The bytes of a result never depend on which of these made it.
        var digest: String?
        func kept(_ level: Int, make: () throws -> VipsImage) throws -> VipsImage {
            guard let cache = spec.pixelCache else { return try make() }
            let name = digest ?? ContentHash.sha256Base64(bytes: raw)
            digest = name
            return try cache.level(PixelCache.Key(digest: name, level: level), deadline: deadline, make: make)
        }
        func scaled(width: Int, height: Int, crop: Int32) throws -> VipsImage {
            let kind: PixelCache.Kind? = animate ? nil : probe.loader.hasPrefix("jpegload") ? .shrinkOnLoad
                : probe.loader.hasPrefix("pngload") && !hasAlpha ? .boxAverage : nil
            if let kind {
                let (stored, storedHeight) = swaps ? (height, width) : (width, height)
                var scaleX = Double(stored) / Double(frameWidth), scaleY = Double(storedHeight) / Double(frameHeight)
                if crop != 0 { (scaleX, scaleY) = (max(scaleX, scaleY), max(scaleX, scaleY)) }
                let k = PixelCache.level(sourceWidth: frameWidth, sourceHeight: frameHeight, scaleX: scaleX, scaleY: scaleY, kind: kind)
                let whole = spec.pixelCache.map { probe.pixelBytes <= $0.wholeSourceLimitBytes } ?? false
                if whole, k == 0 || kind == .boxAverage {
                    let decoded = try kept(0) { try VipsImage.load(raw, deadline: deadline).shareable() }
                    let level = k == 0 ? decoded : try decoded.shrink(by: 1 << k, deadline: deadline)
                    return try level.thumbnail(width: width, height: height, crop: crop, autoRotate: options.autoRotate, deadline: deadline)
                }
                if k > 0 {
                    let level = try kept(k) {
                        switch kind {
                        case .boxAverage: try VipsImage.load(raw, deadline: deadline).shrink(by: 1 << k, deadline: deadline).shareable()
                        case .shrinkOnLoad: try VipsImage.loadJPEG(raw, shrink: 1 << k, deadline: deadline).shareable()
                        }
                    }
                    return try level.thumbnail(width: width, height: height, crop: crop, autoRotate: options.autoRotate, deadline: deadline)
                }
            }
            return try VipsImage.thumbnail(raw, width: width, height: height, crop: crop, allPages: animate && crop == 0,
                                           autoRotate: options.autoRotate, deadline: deadline)
        }

        // 2. Pixels: crop and trim need the whole decoded source; otherwise shrink-on-load straight to the scaled size.
        var image: VipsImage
        var plan: ResizePlan
        if options.crop != nil || options.trim != nil {
            // Random access: crop by attention and trim read the image before cutting it (decoded whole, within
            // transform-max-megapixels).
            try checkFilterWork(svg, pixels: frameWidth * frameHeight, limits)
            image = try VipsImage.load(raw, random: true, deadline: deadline).toSRGB()
            if options.autoRotate { image = try image.autorot() }
            if options.rotate != 0 { image = try image.rotate(options.rotate) }
            if let crop = options.crop {
                let cw = crop.width == 0 ? width : (crop.width < 1 ? Int((crop.width * Double(width)).rounded()) : Int(crop.width))
                let ch = crop.height == 0 ? height : (crop.height < 1 ? Int((crop.height * Double(height)).rounded()) : Int(crop.height))
                let w = max(1, min(cw, width)), h = max(1, min(ch, height))
                if w < width || h < height {
                    let gravity = crop.gravity ?? options.gravity
                    if gravity == .smart {
                        image = try image.smartcrop(width: w, height: h)
                    } else {
                        let (left, top) = ResizePlan.place(w, h, in: width, height, gravity: gravity)
                        image = try image.extract(left: left, top: top, width: w, height: h)
                    }
                    width = w
                    height = h
                }
            }
            if let trim = options.trim {
                // imgproxy's default: the top-left pixel's colour (alpha left out: find_trim flattens it).
                let bands = image.hasAlpha ? image.bands - 1 : image.bands
                let colour = try trim.colour ?? image.pixel(x: 0, y: 0)
                let background = Array(colour.prefix(bands))
                let box = try image.findTrim(threshold: trim.threshold, background: background)
                if box.width > 0, box.height > 0, box.width < width || box.height < height {
                    image = try image.extract(left: box.left, top: box.top, width: box.width, height: box.height)
                    width = box.width
                    height = box.height
                }
            }
            plan = ResizePlan.make(width: width, height: height, options: options)
            try checkResult(plan, options, limits, frames: animate ? frames : 1)
            if plan.scaledWidth != width || plan.scaledHeight != height {
                image = try image.resize(Double(plan.scaledWidth) / Double(width), Double(plan.scaledHeight) / Double(height))
            }
        } else {
            plan = ResizePlan.make(width: width, height: height, options: options)
            try checkResult(plan, options, limits, frames: animate ? frames : 1)
            // An SVG is rendered at the scaled size (libvips's thumbnail scales it on load).
            try checkFilterWork(svg, pixels: plan.scaledWidth * plan.scaledHeight, limits)
            if let window = plan.window, animate {
                // Every frame scaled (shrink-on-load), then the same window cut out of each: at the plan's gravity,
                // or for smart where libvips's attention strategy centres it on the first frame.
                let scaled = try VipsImage.thumbnail(raw, width: plan.scaledWidth, height: plan.scaledHeight, crop: 0,
                                                     allPages: true, autoRotate: options.autoRotate, deadline: deadline)
                var (left, top) = (window.left, window.top)
                if window.smart {
                    let first = try scaled.copyMemory().extract(left: 0, top: 0, width: plan.scaledWidth, height: scaled.pageHeight)
                    let centre = try first.attention(width: window.width, height: window.height)
                    left = min(max(0, centre.x - window.width / 2), plan.scaledWidth - window.width)
                    top = min(max(0, centre.y - window.height / 2), scaled.pageHeight - window.height)
                }
                image = try scaled.cropFrames(pageHeight: scaled.pageHeight, left: left, top: top, width: window.width, height: window.height)
                plan.window = nil
            } else if let window = plan.window, window.smart {
                // libvips scales to cover the window and cuts the most interesting part: shrink-on-load and a smart
                // crop in one pass (in the source's orientation: the window turned back by `rotate`).
                image = try scaled(width: quarterTurn ? window.height : window.width,
                                   height: quarterTurn ? window.width : window.height, crop: 2)
                plan.window = nil
            } else {
                image = try scaled(width: quarterTurn ? plan.scaledHeight : plan.scaledWidth,
                                   height: quarterTurn ? plan.scaledWidth : plan.scaledHeight, crop: 0)
            }
            image = try image.toSRGB()
            // Turned now, so that the window, the gravity and the canvas are those of the final orientation. A
            // quarter turn reads the image by columns: it is evaluated into memory first (the scaled size, bounded
            // by transform-max-dimension).
            if options.rotate != 0 { image = try (quarterTurn ? image.copyMemory() : image).rotate(options.rotate) }
        }

        // 3. The window, then the per-pixel options, then the canvas (rotate was applied with the pixels).
        if let window = plan.window {
            image = window.smart ? try image.smartcrop(width: window.width, height: window.height)
                : try image.extract(left: window.left, top: window.top, width: window.width, height: window.height)
        }
        if options.blur > 0 { image = try image.blur(options.blur) }
        if options.sharpen > 0 { image = try image.sharpen(options.sharpen) }
        if image.hasAlpha, !output.hasAlpha || options.background != nil {
            image = try image.flatten(options.background ?? [255, 255, 255])
        }
        let padding = options.targetPadding
        if plan.canvas != nil || padding != [0, 0, 0, 0] {
            // Transparent where the output keeps alpha and no background is asked for, else the background (white).
            if output.hasAlpha && options.background == nil && !image.hasAlpha { image = try image.addAlpha() }
            func fill() -> [Double] {
                let rgb = options.background ?? [255, 255, 255]
                switch image.bands {
                case 1: return [rgb[0]]
                case 2: return image.hasAlpha ? [rgb[0], 0] : [rgb[0], rgb[1]]
                case 3: return rgb
                default: return image.hasAlpha && options.background == nil ? [0, 0, 0, 0] : rgb + [255]
                }
            }
            if let canvas = plan.canvas {
                image = try image.embed(x: canvas.x, y: canvas.y, width: canvas.width, height: canvas.height, background: fill())
            }
            if padding != [0, 0, 0, 0] {
                image = try image.embed(x: padding[3], y: padding[0], width: image.width + padding[1] + padding[3],
                                        height: image.height + padding[0] + padding[2], background: fill())
            }
        }

        // 4. Encode (decoding happens here: the time limit covers it).
        let effort = output == .avif ? spec.avifEffort : spec.webpEffort
        let bytes = try image.save(output, quality: options.quality(for: output, defaults: spec.defaultQuality),
                                   strip: options.stripMetadata, effort: effort)
        let outFrames = animate ? image.pages : 1
        return TransformedImage(bytes: bytes, format: output, width: image.width,
                                height: animate ? image.pageHeight : image.height, frames: outFrames)
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
