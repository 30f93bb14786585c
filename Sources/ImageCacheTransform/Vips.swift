// libvips behind Swift types: one owner per image (`VipsImage` unrefs it when it goes), errors as thrown values, and
// every image of a job watched by the job's `Deadline` (its evaluation is killed once the deadline passes: decoding,
// smart crop, trim, copies and encoding alike). The only code that calls the C shim (CVipsShim).

internal import CVipsShim
internal import Foundation
internal import Synchronization
internal import ImageCacheSystem

/// A libvips failure: the operation and libvips's first line of error text.
struct VipsError: Error, CustomStringConvertible {
    var operation: String
    var message: String
    var description: String { message.isEmpty ? "\(operation) failed" : "\(operation): \(message)" }

    /// The text libvips collected since the last take (its buffer is process-wide: under concurrent failures a
    /// message may name another job's file; statuses and labels never depend on it).
    static func take(_ operation: String) -> VipsError {
        let raw = icv_error_take()
        defer { icv_free(raw) }
        let text = String(cString: raw).split(whereSeparator: \.isNewline).first.map(String.init) ?? ""
        return VipsError(operation: operation, message: text)
    }
}

/// A job's time limit, shared by every image of the job; freed when the last of them goes.
final class Deadline: @unchecked Sendable {
    let pointer: OpaquePointer
    init(seconds: Double) { pointer = icv_deadline_new(seconds > 0 ? seconds : 1e9) }
    deinit { icv_deadline_free(pointer) }
    var passed: Bool { icv_deadline_passed(pointer) != 0 }
    /// Seconds left (negative once passed).
    var remaining: Double { icv_deadline_remaining(pointer) }
}

/// One libvips image, owned: released when this goes. It keeps its job's deadline alive.
final class VipsImage: @unchecked Sendable {
    let pointer: OpaquePointer
    let deadline: Deadline

    private init(_ pointer: OpaquePointer, deadline: Deadline) {
        self.pointer = pointer
        self.deadline = deadline
        icv_watch(pointer, deadline.pointer)
    }
    deinit { icv_unref(pointer) }

    private static func wrap(_ pointer: OpaquePointer?, _ operation: String, _ deadline: Deadline) throws(VipsError) -> VipsImage {
        guard let pointer else { throw VipsError.take(operation) }
        return VipsImage(pointer, deadline: deadline)
    }

    private func derive(_ pointer: OpaquePointer?, _ operation: String) throws(VipsError) -> VipsImage {
        try VipsImage.wrap(pointer, operation, deadline)
    }

    var width: Int { Int(icv_width(pointer)) }
    var height: Int { Int(icv_height(pointer)) }
    var bands: Int { Int(icv_bands(pointer)) }
    var hasAlpha: Bool { icv_has_alpha(pointer) != 0 }
    var pages: Int { max(1, Int(icv_n_pages(pointer))) }
    var pageHeight: Int { Int(icv_page_height(pointer)) }
    var orientation: Int { Int(icv_orientation(pointer)) }
    var loader: String { String(cString: icv_loader(pointer)) }
    /// libvips's nickname of the interpretation: "srgb", "b-w", "cmyk", "rgb16", "grey16", "lab", ...
    var interpretation: String { String(cString: icv_interpretation(pointer)) }
    var isUchar: Bool { icv_is_uchar(pointer) != 0 }

    /// The image evaluated into memory (random access from here on).
    func copyMemory() throws(VipsError) -> VipsImage { try derive(icv_copy_memory(pointer), "copy_memory") }
    func autorot() throws(VipsError) -> VipsImage { try derive(icv_autorot(pointer), "autorot") }
    func extract(left: Int, top: Int, width: Int, height: Int) throws(VipsError) -> VipsImage {
        try derive(icv_extract_area(pointer, Int32(left), Int32(top), Int32(width), Int32(height)), "extract_area")
    }
    func smartcrop(width: Int, height: Int) throws(VipsError) -> VipsImage {
        try derive(icv_smartcrop(pointer, Int32(width), Int32(height)), "smartcrop")
    }
    /// Where libvips's attention strategy centres a `width` x `height` window (vips_smartcrop's attention point).
    func attention(width: Int, height: Int) throws(VipsError) -> (x: Int, y: Int) {
        var x: Int32 = 0, y: Int32 = 0
        guard icv_attention(pointer, Int32(width), Int32(height), &x, &y) == 0 else { throw VipsError.take("smartcrop") }
        return (Int(x), Int(y))
    }
    func resize(_ h: Double, _ v: Double) throws(VipsError) -> VipsImage { try derive(icv_resize(pointer, h, v), "resize") }
    /// Box-averages `factor` x `factor` pixels into one, the result watched by `deadline`: the job's (a shared
    /// level's own deadline is the job's that made it, which another job must never be killed by).
    func shrink(by factor: Int, deadline: Deadline) throws(VipsError) -> VipsImage {
        try VipsImage.wrap(icv_shrink(pointer, Double(factor), Double(factor)), "shrink", deadline)
    }

    /// As `thumbnail(bytes...)`, from this image (a decoded level of a source), under `deadline`: the job's, which may
    /// not be the one this image was made under.
    func thumbnail(width: Int, height: Int, crop: Int32, autoRotate: Bool, deadline: Deadline) throws(VipsError) -> VipsImage {
        try VipsImage.wrap(icv_thumbnail_image(pointer, Int32(width), Int32(height), crop == 0 ? 1 : 0, crop, autoRotate ? 0 : 1),
                           "thumbnail", deadline)
    }

    /// This image, evaluated into memory, unwatched: to be shared by jobs (PixelCache). No deadline kills it (a job's
    /// deadline that passes kills that job's images, never a shared one) and images made from it report their
    /// progress to their own job's deadline only.
    func shareable() throws(VipsError) -> VipsImage {
        // (vips_image_copy_memory hands back the same object for an image already in memory: it would still be
        // watched by its job. Levels are made from a shrink or a decoder, never from a memory image.)
        let memory = try copyMemory()
        precondition(memory.pointer != pointer, "a shareable level is made from an image not yet in memory")
        icv_unwatch(memory.pointer, memory.deadline.pointer)
        return memory
    }

    /// Bytes of its pixels (a memory image's size).
    var pixelBytes: Int { Int(icv_pixel_bytes(pointer)) }
    /// Bytes of its pixels and of every metadata blob and string it carries (a source's ICC profile can be megabytes).
    var retainedBytes: Int { Int(icv_retained_bytes(pointer)) }
    /// Turns clockwise by 90, 180 or 270 degrees.
    func rotate(_ degrees: Int) throws(VipsError) -> VipsImage { try derive(icv_rot(pointer, Int32(degrees / 90)), "rot") }
    func blur(_ sigma: Double) throws(VipsError) -> VipsImage { try derive(icv_gaussblur(pointer, sigma), "gaussblur") }
    func sharpen(_ sigma: Double) throws(VipsError) -> VipsImage { try derive(icv_sharpen(pointer, sigma), "sharpen") }
    func embed(x: Int, y: Int, width: Int, height: Int, background: [Double]) throws(VipsError) -> VipsImage {
        try derive(icv_embed(pointer, Int32(x), Int32(y), Int32(width), Int32(height), background, Int32(background.count)), "embed")
    }
    func flatten(_ rgb: [Double]) throws(VipsError) -> VipsImage { try derive(icv_flatten(pointer, rgb), "flatten") }
    func addAlpha() throws(VipsError) -> VipsImage { try derive(icv_add_alpha(pointer), "addalpha") }

    /// 8-bit sRGB, or 8-bit grey for a grey source (CMYK, 16-bit, LAB, ... converted); the image itself when it is
    /// one already.
    func toSRGB() throws(VipsError) -> VipsImage {
        let kind = interpretation
        if (kind == "srgb" || kind == "b-w") && isUchar { return self }
        var image = try derive(icv_colourspace(pointer, kind == "b-w" || kind == "grey16" ? 1 : 0), "colourspace")
        if !image.isUchar { image = try image.derive(icv_cast_uchar(image.pointer), "cast") }
        return image
    }

    /// Cuts the same window out of every frame of an animation (`pageHeight` each) and stacks them again.
    func cropFrames(pageHeight: Int, left: Int, top: Int, width: Int, height: Int) throws(VipsError) -> VipsImage {
        let whole = try copyMemory()
        var frames: [VipsImage] = []
        for page in 0..<max(1, whole.height / max(1, pageHeight)) {
            frames.append(try whole.extract(left: left, top: page * pageHeight + top, width: width, height: height))
        }
        let pointers: [OpaquePointer?] = frames.map { $0.pointer }
        let joined = pointers.withUnsafeBufferPointer { buffer in
            icv_join_frames(UnsafeRawPointer(buffer.baseAddress!).assumingMemoryBound(to: OpaquePointer.self), Int32(frames.count), Int32(height))
        }
        return try derive(joined, "arrayjoin")
    }

    /// The band values of one pixel.
    func pixel(x: Int, y: Int) throws(VipsError) -> [Double] {
        var values = [Double](repeating: 0, count: 8)
        let count = icv_getpoint(pointer, Int32(x), Int32(y), &values, 8)
        guard count > 0 else { throw VipsError.take("getpoint") }
        return Array(values.prefix(Int(count)))
    }

    /// The box of what is not background (vips_find_trim).
    func findTrim(threshold: Double, background: [Double]) throws(VipsError) -> (left: Int, top: Int, width: Int, height: Int) {
        var l: Int32 = 0, t: Int32 = 0, w: Int32 = 0, h: Int32 = 0
        guard icv_find_trim(pointer, threshold, background, Int32(background.count), &l, &t, &w, &h) == 0 else {
            throw VipsError.take("find_trim")
        }
        return (Int(l), Int(t), Int(w), Int(h))
    }

    /// Encodes (decoding happens here too: the pipeline is lazy; the deadline applies to the evaluation, not to the
    /// encoder's own last pass, which libaom and libwebp run uninterrupted on the pixels they were given).
    func save(_ format: ImageOutputFormat, quality: Int, strip: Bool, effort: Int) throws(VipsError) -> [UInt8] {
        var out: UnsafeMutableRawPointer?
        var length = 0
        let q = Int32(quality), s: Int32 = strip ? 1 : 0, e = Int32(effort)
        let code: Int32
        switch format {
        case .jpeg: code = icv_jpegsave(pointer, q, s, &out, &length)
        case .png: code = icv_pngsave(pointer, s, &out, &length)
        case .webp: code = icv_webpsave(pointer, q, s, e, &out, &length)
        case .avif: code = icv_avifsave(pointer, q, s, e, &out, &length)
        case .gif: code = icv_gifsave(pointer, s, &out, &length)
        }
        guard code == 0, let out else {
            icv_free(out)
            throw VipsError.take("decoding, processing or \(format.rawValue) encoding")
        }
        defer { icv_free(out) }
        return Array(UnsafeRawBufferPointer(start: out, count: length))
    }

    /// An image over `bytes`' memory, header read only; the caller keeps the memory alive while the image lives.
    /// `allPages` only for the multi-frame loaders (GIF, WebP).
    static func load(_ bytes: UnsafeRawBufferPointer, allPages: Bool = false, random: Bool = false, deadline: Deadline) throws(VipsError) -> VipsImage {
        let pointer = allPages ? icv_load_buffer_pages(bytes.baseAddress!, bytes.count, -1, 1, random ? 1 : 0)
            : icv_load_buffer(bytes.baseAddress!, bytes.count, 1, random ? 1 : 0)
        return try wrap(pointer, "load", deadline)
    }

    /// A JPEG decoded `factor` (2, 4 or 8) times smaller by the decoder itself (shrink-on-load).
    static func loadJPEG(_ bytes: UnsafeRawBufferPointer, shrink factor: Int, deadline: Deadline) throws(VipsError) -> VipsImage {
        try wrap(icv_load_buffer_shrink(bytes.baseAddress!, bytes.count, Int32(factor)), "jpegload", deadline)
    }

    /// Decode with shrink-on-load to exactly `width` x `height` (crop 0), or to cover it and cut the centre (1) or
    /// the most interesting window (2). `allPages` only for the multi-frame loaders.
    static func thumbnail(_ bytes: UnsafeRawBufferPointer, width: Int, height: Int, crop: Int32, allPages: Bool,
                          autoRotate: Bool, deadline: Deadline) throws(VipsError) -> VipsImage {
        let options = allPages ? "fail_on=error,n=-1" : "fail_on=error"
        return try wrap(icv_thumbnail_buffer(bytes.baseAddress!, bytes.count, Int32(width), Int32(height), crop == 0 ? 1 : 0,
                                             crop, autoRotate ? 0 : 1, options), "thumbnail", deadline)
    }
}

/// libvips, started once per process.
public enum VipsRuntime {
    private static let started = Locked<Bool>(false)

    /// The loaders hostile bytes may reach: every other libvips loader is blocked (ImageMagick, PDF, JPEG 2000,
    /// JPEG XL, FITS, OpenEXR, CSV, matrix, raw, vips, ...), so a source is never parsed by code the daemon does not
    /// need. SVG (librsvg) only with `transform-allow-svg`.
    static let allowedLoaders = ["VipsForeignLoadJpeg", "VipsForeignLoadPng", "VipsForeignLoadWebp", "VipsForeignLoadNsgif",
                                 "VipsForeignLoadHeif", "VipsForeignLoadTiff"]

    /// Starts libvips (operation cache off, `threadsPerImage` threads per image, loaders limited as above). Later
    /// calls change nothing but the SVG switch, which only opens: once a configuration of this process allowed SVG,
    /// libvips's SVG loader stays allowed and each job's own `TransformLimits.allowSVG` decides (Transformer refuses
    /// an SVG source before libvips sees it). Throws with libvips's reason, or when a loader class is not there.
    public static func start(threadsPerImage: Int, allowSVG: Bool) throws {
        try started.withLock { state throws in
            if !state {
                guard icv_init(CommandLine.arguments.first ?? "imagecached", Int32(threadsPerImage)) == 0 else {
                    throw VipsError.take("libvips start")
                }
                // Untrusted first (libvips 8.14 marks SVG untrusted), then every loader, then the allowed ones back:
                // each call sets the flag of a class and all its subclasses, so the last word on a class wins.
                icv_block_untrusted(1)
                try block("VipsForeignLoad", true)
                // A loader libvips was built without is simply not there (HEIF, say): nothing to allow.
                for loader in allowedLoaders { _ = icv_block_operation(loader, 0) }
                state = true
            }
            if allowSVG { try block("VipsForeignLoadSvg", false) }
        }
    }

    private static func block(_ name: String, _ blocked: Bool) throws(VipsError) {
        guard icv_block_operation(name, blocked ? 1 : 0) == 0 else {
            throw VipsError(operation: "libvips start", message: "libvips has no \(name) (built without it?)")
        }
    }
}
