// libvips behind Swift types: one owner per image (`VipsImage` unrefs it when it goes), errors as thrown values.
// The only code that calls the C shim (CVipsShim); everything else in the transform layer sees these types.

internal import CVipsShim
internal import Foundation
internal import Synchronization

/// A libvips failure: the operation and libvips's first line of error text.
struct VipsError: Error, CustomStringConvertible {
    var operation: String
    var message: String
    var description: String { message.isEmpty ? "\(operation) failed" : "\(operation): \(message)" }

    /// The text libvips collected since the last take (its buffer is process-wide: under concurrent failures a
    /// message may name another job's file; the status and the limit checks never depend on it).
    static func take(_ operation: String) -> VipsError {
        let raw = icv_error_take()
        defer { icv_free(raw) }
        let text = String(cString: raw).split(whereSeparator: \.isNewline).first.map(String.init) ?? ""
        return VipsError(operation: operation, message: text)
    }
}

/// One libvips image, owned: released when this goes.
final class VipsImage: @unchecked Sendable {
    let pointer: OpaquePointer
    init(_ pointer: OpaquePointer) { self.pointer = pointer }
    deinit { icv_unref(pointer) }

    static func wrap(_ pointer: OpaquePointer?, _ operation: String) throws(VipsError) -> VipsImage {
        guard let pointer else { throw VipsError.take(operation) }
        return VipsImage(pointer)
    }

    var width: Int { Int(icv_width(pointer)) }
    var height: Int { Int(icv_height(pointer)) }
    var bands: Int { Int(icv_bands(pointer)) }
    var hasAlpha: Bool { icv_has_alpha(pointer) != 0 }
    var pages: Int { max(1, Int(icv_n_pages(pointer))) }
    var pageHeight: Int { Int(icv_page_height(pointer)) }
    var orientation: Int { Int(icv_orientation(pointer)) }
    var loader: String { String(cString: icv_loader(pointer)) }

    /// The image evaluated into memory (random access from here on).
    func copyMemory() throws(VipsError) -> VipsImage { try .wrap(icv_copy_memory(pointer), "copy_memory") }
    func autorot() throws(VipsError) -> VipsImage { try .wrap(icv_autorot(pointer), "autorot") }
    func extract(left: Int, top: Int, width: Int, height: Int) throws(VipsError) -> VipsImage {
        try .wrap(icv_extract_area(pointer, Int32(left), Int32(top), Int32(width), Int32(height)), "extract_area")
    }
    func smartcrop(width: Int, height: Int) throws(VipsError) -> VipsImage {
        try .wrap(icv_smartcrop(pointer, Int32(width), Int32(height)), "smartcrop")
    }
    func resize(_ h: Double, _ v: Double) throws(VipsError) -> VipsImage { try .wrap(icv_resize(pointer, h, v), "resize") }
    func rotate(_ degrees: Int) throws(VipsError) -> VipsImage { try .wrap(icv_rot(pointer, Int32(degrees)), "rot") }
    func blur(_ sigma: Double) throws(VipsError) -> VipsImage { try .wrap(icv_gaussblur(pointer, sigma), "gaussblur") }
    func sharpen(_ sigma: Double) throws(VipsError) -> VipsImage { try .wrap(icv_sharpen(pointer, sigma), "sharpen") }
    func embed(x: Int, y: Int, width: Int, height: Int, background: [Double]) throws(VipsError) -> VipsImage {
        try .wrap(icv_embed(pointer, Int32(x), Int32(y), Int32(width), Int32(height), background, Int32(background.count)), "embed")
    }
    func flatten(_ rgb: [Double]) throws(VipsError) -> VipsImage { try .wrap(icv_flatten(pointer, rgb), "flatten") }
    func addAlpha() throws(VipsError) -> VipsImage { try .wrap(icv_add_alpha(pointer), "addalpha") }
    func toSRGB() throws(VipsError) -> VipsImage { try .wrap(icv_to_srgb(pointer), "colourspace") }

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
        return try .wrap(joined, "arrayjoin")
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

    /// Encodes; evaluation (decoding included: the pipeline is lazy) is killed past `seconds`.
    func save(_ format: ImageOutputFormat, quality: Int, strip: Bool, effort: Int, seconds: Double) throws(VipsError) -> [UInt8] {
        var out: UnsafeMutableRawPointer?
        var length = 0
        let code: Int32
        switch format {
        case .jpeg: code = 0
        case .png: code = 1
        case .webp: code = 2
        case .avif: code = 3
        case .gif: code = 4
        }
        guard icv_save(pointer, code, Int32(quality), strip ? 1 : 0, Int32(effort), seconds, &out, &length) == 0, let out else {
            throw VipsError.take("decoding, processing or \(format.rawValue) encoding")
        }
        defer { icv_free(out) }
        return Array(UnsafeRawBufferPointer(start: out, count: length))
    }

    /// An image over `bytes`' memory, header read only; the caller keeps the memory alive while the image lives.
    static func load(_ bytes: UnsafeRawBufferPointer, allPages: Bool, random: Bool = false) throws(VipsError) -> VipsImage {
        try .wrap(icv_load_buffer(bytes.baseAddress!, bytes.count, allPages ? -1 : 1, 1, random ? 1 : 0), "load")
    }

    /// Decode with shrink-on-load to exactly `width` x `height` (crop 0), or to cover it and cut the centre (1) or
    /// the most interesting window (2).
    static func thumbnail(_ bytes: UnsafeRawBufferPointer, width: Int, height: Int, crop: Int32, allPages: Bool,
                          autoRotate: Bool) throws(VipsError) -> VipsImage {
        try .wrap(icv_thumbnail_buffer(bytes.baseAddress!, bytes.count, Int32(width), Int32(height), crop,
                                       allPages ? -1 : 1, autoRotate ? 0 : 1, 1), "thumbnail")
    }
}

/// libvips, started once per process.
public enum VipsRuntime {
    private static let started = Mutex<String?>(nil)

    /// Starts libvips (operation cache off, untrusted loaders blocked, `threadsPerImage` threads per image); SVG
    /// stays blocked unless `allowSVG`. Later calls change nothing but the SVG switch. Throws with libvips's reason.
    public static func start(threadsPerImage: Int, allowSVG: Bool) throws {
        try started.withLock { state throws in
            if state == nil {
                guard icv_init(CommandLine.arguments.first ?? "imagecached", Int32(threadsPerImage)) == 0 else {
                    throw VipsError.take("libvips start")
                }
                state = "started"
            }
            // Untrusted loaders (ImageMagick, PDF, SVG, ...) are blocked by vips_block_untrusted_set; SVG may come back.
            _ = icv_block_operation("VipsForeignLoadSvg", allowSVG ? 0 : 1)
        }
    }
}
