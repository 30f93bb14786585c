// Processing options in imgproxy's URL syntax, parsed and made canonical. Pure: text in, a value out; no I/O.
//
// RULES
//   Syntax: options are path segments "name:arg1:arg2..." (imgproxy's), names in full or short form (one row each
//   in `optionParsers`, with the function that parses its arguments):
//     resize/rs:TYPE:W:H:ENLARGE:EXTEND   size/s:W:H:ENLARGE:EXTEND   resizing_type/rt:TYPE   width/w:W   height/h:H
//     dpr:N   enlarge/el:B   extend/ex:B[:GRAVITY]   gravity/g:TYPE[:X:Y] (no so ea we noea nowe soea sowe ce, sm,
//     fp:X:Y)   crop/c:W:H[:GRAVITY...]   trim/t:THRESHOLD[:HEXCOLOR]   padding/pd:T[:R[:B[:L]]]
//     background/bg:R:G:B or bg:HEX   rotate/rot:0|90|180|270   auto_rotate/ar:B   blur/bl:SIGMA   sharpen/sh:SIGMA
//     quality/q:N   format_quality/fq:FORMAT:N[:FORMAT:N...]   format/f/ext:jpeg|jpg|png|webp|avif|gif|auto
//     strip_metadata/sm:B   preset/pr:NAME[:NAME...]   cachebuster/cb:TEXT
//   Booleans are 1/t/true or 0/f/false. An empty argument keeps the current value (imgproxy: "rs:fill::200").
//   Later options override earlier ones; a preset's options apply where the preset is named; the preset "default"
//   applies first to every request. An unknown option, a malformed argument or an out-of-range value is an error
//   (the request gets 400 naming it), never ignored.
//   Ranges: width, height, crop, padding 0...max-result-dimension pixels; dpr 1...8; quality 0...100 (0: the
//   format's default); blur and sharpen sigma 0...100; trim threshold 0...255.
//
//   Canonical form (the variant's identity, part of its cache key): defaults applied, presets expanded, dpr folded
//   into the pixel sizes, every field written in one fixed order with one spelling, fields at their default left out.
//   So "rs:fill:300:200", "resize:fill:300:200/q:0", "w:300/h:200/rt:fill" and "w:150/h:100/rt:fill/dpr:2" name one
//   variant. The output format is not part of the options' canonical text: it is resolved per request (explicit, or
//   negotiated from Accept) and added by the caller as a format class.

internal import Foundation
internal import ImageCacheHTTP

/// Where a crop or a fill takes its window from.
public enum Gravity: Sendable, Equatable {
    /// A compass point: x -1 west, 0 centre, 1 east; y -1 north, 0 centre, 1 south; offsets in pixels.
    case compass(x: Int, y: Int, offsetX: Double, offsetY: Double)
    /// libvips's attention strategy (imgproxy "sm").
    case smart
    /// A focal point, 0...1 of the width and height.
    case focus(x: Double, y: Double)

    public static let centre = Gravity.compass(x: 0, y: 0, offsetX: 0, offsetY: 0)

    var canonical: String {
        switch self {
        case let .compass(x, y, ox, oy):
            let names = [["nowe", "no", "noea"], ["we", "ce", "ea"], ["sowe", "so", "soea"]]
            let name = names[y + 1][x + 1]
            return ox == 0 && oy == 0 ? name : "\(name):\(number(ox)):\(number(oy))"
        case .smart: return "sm"
        case let .focus(x, y): return "fp:\(number(x)):\(number(y))"
        }
    }
}

/// An output format.
public enum ImageOutputFormat: String, Sendable, CaseIterable {
    case jpeg, png, webp, avif, gif

    public var mediaType: String {
        switch self {
        case .jpeg: return "image/jpeg"
        case .png: return "image/png"
        case .webp: return "image/webp"
        case .avif: return "image/avif"
        case .gif: return "image/gif"
        }
    }

    /// Whether the format keeps several frames (animation).
    public var animates: Bool { self == .webp || self == .gif }
    /// Whether the format keeps an alpha band.
    public var hasAlpha: Bool { self != .jpeg }

    /// The format a name in a URL gives ("jpg" is "jpeg"); nil for an unknown name.
    public init?(name: String) {
        switch name.lowercased() {
        case "jpg", "jpeg": self = .jpeg
        case "png": self = .png
        case "webp": self = .webp
        case "avif": self = .avif
        case "gif": self = .gif
        default: return nil
        }
    }
}

/// What the URL asks of the output format.
public enum FormatRequest: Sendable, Equatable {
    /// The source's format (imgproxy's default), subject to the configured automatic WebP/AVIF.
    case source
    /// Negotiated from Accept: AVIF, then WebP, then the source's format.
    case auto
    case explicit(ImageOutputFormat)
}

/// The processing options of one transform request, canonical once parsed.
public struct TransformOptions: Sendable, Equatable {
    public enum ResizeType: String, Sendable, CaseIterable {
        case fit, fill, fillDown = "fill-down", force, auto
    }

    public struct Crop: Sendable, Equatable {
        /// Pixels (>= 1) or a fraction of the source (< 1); 0: the source's whole extent.
        public var width: Double
        public var height: Double
        /// nil: the request's gravity.
        public var gravity: Gravity?
    }

    public struct Trim: Sendable, Equatable {
        public var threshold: Double
        /// nil: the top-left pixel's colour.
        public var colour: [Double]?
    }

    public var resizeType: ResizeType = .fit
    public var width = 0
    public var height = 0
    public var dpr: Double = 1
    public var enlarge = false
    public var extend = false
    public var extendGravity: Gravity = .centre
    public var gravity: Gravity = .centre
    public var crop: Crop?
    public var trim: Trim?
    /// top, right, bottom, left.
    public var padding: [Int] = [0, 0, 0, 0]
    /// RGB 0...255; nil: white under JPEG, transparent otherwise.
    public var background: [Double]?
    public var rotate = 0
    public var autoRotate = true
    public var blur: Double = 0
    public var sharpen: Double = 0
    /// 0: the format's default.
    public var quality = 0
    public var formatQuality: [ImageOutputFormat: Int] = [:]
    public var format: FormatRequest = .source
    public var stripMetadata = true
    public var cacheBuster = ""

    public init() {}

    /// Why options are refused: the request gets 400 with this reason.
    public struct Failure: Error, Equatable, CustomStringConvertible {
        public var reason: String
        public init(_ reason: String) { self.reason = reason }
        public var description: String { reason }
    }

    /// Parses option segments in order. `presets`: name -> segments (already split); `onlyPresets`: any option other
    /// than a preset is refused; `maxDimension`: the largest width, height, crop or padding accepted.
    public static func parse(_ segments: [Substring], presets: [String: [String]] = [:], onlyPresets: Bool = false,
                             maxDimension: Int = 16384) throws(Failure) -> TransformOptions {
        var options = TransformOptions()
        var depth = 0
        if let defaults = presets["default"] {
            try options.apply(defaults.map { Substring($0) }, presets: presets, onlyPresets: false, max: maxDimension, depth: &depth)
        }
        try options.apply(segments, presets: presets, onlyPresets: onlyPresets, max: maxDimension, depth: &depth)
        return options
    }

    private mutating func apply(_ segments: [Substring], presets: [String: [String]], onlyPresets: Bool, max: Int,
                                depth: inout Int) throws(Failure) {
        for segment in segments where !segment.isEmpty {
            let parts = segment.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
            let name = parts[0]
            let args = Array(parts.dropFirst())
            if name == "preset" || name == "pr" {
                guard !args.isEmpty else { throw Failure("option \(name) needs a preset name") }
                for preset in args {
                    guard let options = presets[preset] else { throw Failure("unknown preset '\(preset.prefix(64))'") }
                    depth += 1
                    guard depth <= 16 else { throw Failure("presets nest too deep (more than 16)") }
                    try apply(options.map { Substring($0) }, presets: presets, onlyPresets: false, max: max, depth: &depth)
                    depth -= 1
                }
                continue
            }
            if onlyPresets {
                throw Failure("this daemon takes presets only (transform-only-presets): option '\(name.prefix(32))' is not allowed")
            }
            try applyOption(name, args, max: max)
        }
    }

    private mutating func applyOption(_ name: String, _ args: [String], max: Int) throws(Failure) {
        guard let parse = Self.optionParsers[name] else { throw Failure("unknown processing option '\(name.prefix(32))'") }
        try parse(&self, Arguments(name: name, values: args, maxDimension: max))
    }

    // MARK: - The options, by name

    /// Parses one option's arguments into the options.
    typealias OptionParser = @Sendable (inout TransformOptions, Arguments) throws(Failure) -> Void

    /// Every option under each of its names (imgproxy's full and short ones), with its parser; the syntax is at the
    /// top of this file. preset/pr is not here: `apply` expands it.
    static let optionParsers: [String: OptionParser] = {
        let rows: [(names: [String], parse: OptionParser)] = [
            (["resize", "rs"], { options, args throws(Failure) in try options.setSize(args, withType: true) }),
            (["size", "s"], { options, args throws(Failure) in try options.setSize(args, withType: false) }),
            (["resizing_type", "rt"], { options, args throws(Failure) in options.resizeType = try args.single(args.resizeType) }),
            (["width", "w"], { options, args throws(Failure) in options.width = try args.single(args.size) }),
            (["height", "h"], { options, args throws(Failure) in options.height = try args.single(args.size) }),
            (["dpr"], { options, args throws(Failure) in options.dpr = try args.single(args.decimal(in: 1...8)) }),
            (["enlarge", "el"], { options, args throws(Failure) in options.enlarge = try args.single(args.boolean) }),
            (["extend", "ex"], { options, args throws(Failure) in try options.setExtend(args) }),
            (["gravity", "g"], { options, args throws(Failure) in
                try args.need(1)
                options.gravity = try args.gravity(from: 0, allowSmart: true)
            }),
            (["crop", "c"], { options, args throws(Failure) in try options.setCrop(args) }),
            (["trim", "t"], { options, args throws(Failure) in try options.setTrim(args) }),
            (["padding", "pd"], { options, args throws(Failure) in try options.setPadding(args) }),
            (["background", "bg"], { options, args throws(Failure) in try options.setBackground(args) }),
            (["rotate", "rot"], { options, args throws(Failure) in try options.setRotate(args) }),
            (["auto_rotate", "ar"], { options, args throws(Failure) in options.autoRotate = try args.single(args.boolean) }),
            (["blur", "bl"], { options, args throws(Failure) in options.blur = try args.single(args.decimal(in: 0...100)) }),
            (["sharpen", "sh"], { options, args throws(Failure) in options.sharpen = try args.single(args.decimal(in: 0...100)) }),
            (["quality", "q"], { options, args throws(Failure) in options.quality = Int(try args.single(args.decimal(in: 0...100)).rounded()) }),
            (["format_quality", "fq"], { options, args throws(Failure) in try options.setFormatQuality(args) }),
            (["format", "f", "ext"], { options, args throws(Failure) in try options.setFormat(args) }),
            (["strip_metadata", "sm"], { options, args throws(Failure) in options.stripMetadata = try args.single(args.boolean) }),
            (["cachebuster", "cb"], { options, args throws(Failure) in try options.setCacheBuster(args) }),
        ]
        var table: [String: OptionParser] = [:]
        for row in rows {
            for name in row.names {
                precondition(table[name] == nil, "option name \(name) is in the table twice")
                table[name] = row.parse
            }
        }
        return table
    }()

    /// resize/rs:TYPE:W:H:ENLARGE:EXTEND, or size/s:W:H:ENLARGE:EXTEND; an empty argument keeps the current value.
    private mutating func setSize(_ args: Arguments, withType: Bool) throws(Failure) {
        try args.need(1)
        try args.most(withType ? 5 : 4)
        var n = 0
        if withType {
            if let text = args.at(0) { resizeType = try args.resizeType(text) }
            n = 1
        }
        if let text = args.at(n) { width = try args.size(text) }
        if let text = args.at(n + 1) { height = try args.size(text) }
        if let text = args.at(n + 2) { enlarge = try args.boolean(text) }
        if let text = args.at(n + 3) { extend = try args.boolean(text) }
    }

    /// extend/ex:B[:GRAVITY[:X:Y]]
    private mutating func setExtend(_ args: Arguments) throws(Failure) {
        try args.need(1)
        extend = try args.boolean(args.values[0])
        if args.values.count > 1 { extendGravity = try args.gravity(from: 1, allowSmart: false) }
    }

    /// crop/c:W:H[:GRAVITY...], each of W and H whole pixels or a fraction below 1; 0:0 is no crop.
    private mutating func setCrop(_ args: Arguments) throws(Failure) {
        try args.need(2)
        func part(_ text: String) throws(Failure) -> Double {
            let value = try args.decimal(text, 0...Double(args.maxDimension))
            guard value < 1 || value == value.rounded() else {
                throw Failure("option \(args.name): '\(text.prefix(16))' is neither whole pixels nor a fraction below 1")
            }
            return value
        }
        var crop = Crop(width: try part(args.values[0]), height: try part(args.values[1]), gravity: nil)
        if args.values.count > 2 { crop.gravity = try args.gravity(from: 2, allowSmart: true) }
        self.crop = (crop.width == 0 && crop.height == 0) ? nil : crop
    }

    /// trim/t:THRESHOLD[:HEXCOLOR]
    private mutating func setTrim(_ args: Arguments) throws(Failure) {
        try args.need(1)
        try args.most(2)
        let threshold = try args.decimal(args.values[0], 0...255)
        var colour: [Double]?
        if let text = args.at(1) {
            guard let rgb = Self.hexColour(text) else { throw Failure("option \(args.name): '\(text.prefix(16))' is not a hex colour") }
            colour = rgb
        }
        trim = Trim(threshold: threshold, colour: colour)
    }

    /// padding/pd:T[:R[:B[:L]]], the CSS shorthand; an empty argument is 0.
    private mutating func setPadding(_ args: Arguments) throws(Failure) {
        try args.need(1)
        try args.most(4)
        var values: [Int] = []
        for n in 0..<args.values.count { values.append(try args.at(n).map { text throws(Failure) in try args.size(text) } ?? 0) }
        switch values.count {
        case 1: padding = [values[0], values[0], values[0], values[0]]
        case 2: padding = [values[0], values[1], values[0], values[1]]
        case 3: padding = [values[0], values[1], values[2], values[1]]
        default: padding = values
        }
    }

    /// background/bg:R:G:B or bg:HEX
    private mutating func setBackground(_ args: Arguments) throws(Failure) {
        try args.need(1)
        try args.most(3)
        if args.values.count == 3 {
            background = try args.values.map { text throws(Failure) in try args.decimal(text, 0...255).rounded() }
        } else if args.values.count == 1, let rgb = Self.hexColour(args.values[0]) {
            background = rgb
        } else {
            throw Failure("option \(args.name): give R:G:B (0-255) or a hex colour")
        }
    }

    /// rotate/rot:DEGREES, a multiple of 90, folded into 0..<360.
    private mutating func setRotate(_ args: Arguments) throws(Failure) {
        let text = try args.single { $0 }
        guard let degrees = Int(text), degrees % 90 == 0 else {
            throw Failure("option \(args.name): '\(text.prefix(16))' is not a multiple of 90")
        }
        rotate = ((degrees % 360) + 360) % 360
    }

    /// format_quality/fq:FORMAT:N[:FORMAT:N...]
    private mutating func setFormatQuality(_ args: Arguments) throws(Failure) {
        try args.need(2)
        guard args.values.count % 2 == 0 else { throw Failure("option \(args.name) takes FORMAT:QUALITY pairs") }
        for n in stride(from: 0, to: args.values.count, by: 2) {
            guard let format = ImageOutputFormat(name: args.values[n]) else {
                throw Failure("option \(args.name): '\(args.values[n].prefix(16))' is not a format (jpeg, png, webp, avif, gif)")
            }
            formatQuality[format] = Int(try args.decimal(args.values[n + 1], 0...100).rounded())
        }
    }

    /// format/f/ext:jpeg|jpg|png|webp|avif|gif|auto (best: auto)
    private mutating func setFormat(_ args: Arguments) throws(Failure) {
        let text = try args.single { $0 }
        if text == "auto" || text == "best" {
            format = .auto
        } else if let explicit = ImageOutputFormat(name: text) {
            format = .explicit(explicit)
        } else {
            throw Failure("option \(args.name): '\(text.prefix(16))' is not an output format (jpeg, png, webp, avif, gif, auto)")
        }
    }

    /// cachebuster/cb[:TEXT]: it becomes part of the cache key's text, which holds visible ASCII only (no space, no
    /// line break).
    private mutating func setCacheBuster(_ args: Arguments) throws(Failure) {
        try args.most(1)
        cacheBuster = args.values.first ?? ""
        guard cacheBuster.utf8.count <= 64, cacheBuster.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw Failure("option \(args.name): the cache buster must be at most 64 visible ASCII characters")
        }
    }

    /// One option's arguments as the URL wrote them, with the checks and value parsers the options share; every
    /// reason names the option as the URL did (full or short name).
    struct Arguments: Sendable {
        let name: String
        let values: [String]
        /// The largest width, height, crop or padding accepted.
        let maxDimension: Int

        /// The `n`th argument; nil when it is absent or empty (an empty argument keeps the current value).
        func at(_ n: Int) -> String? { n < values.count && !values[n].isEmpty ? values[n] : nil }

        func need(_ count: Int) throws(Failure) {
            guard values.count >= count, values.count > 0 else { throw Failure("option \(name) needs \(count) argument(s)") }
        }

        func most(_ count: Int) throws(Failure) {
            guard values.count <= count else { throw Failure("option \(name) takes at most \(count) arguments") }
        }

        /// The one argument (refused when there is none, or more than one), parsed.
        func single<Value>(_ parse: (String) throws(Failure) -> Value) throws(Failure) -> Value {
            try need(1)
            try most(1)
            return try parse(values[0])
        }

        func size(_ text: String) throws(Failure) -> Int {
            guard let value = Int(text), value >= 0, value <= maxDimension else {
                throw Failure("option \(name): '\(text.prefix(16))' is not a size in 0...\(maxDimension)")
            }
            return value
        }

        func boolean(_ text: String) throws(Failure) -> Bool {
            switch text.lowercased() {
            case "1", "t", "true": return true
            case "0", "f", "false": return false
            default: throw Failure("option \(name): '\(text.prefix(16))' is not a boolean (1, t, true, 0, f, false)")
            }
        }

        /// A number within `range`, kept to 4 decimals, as the canonical text writes it: what is transformed is what
        /// the key names.
        func decimal(_ text: String, _ range: ClosedRange<Double>) throws(Failure) -> Double {
            guard let value = Double(text), value.isFinite, range.contains(value) else {
                throw Failure("option \(name): '\(text.prefix(16))' is not a number in \(number(range.lowerBound))...\(number(range.upperBound))")
            }
            return (value * 10_000).rounded() / 10_000
        }

        /// `decimal` within `range`, as a parser of one argument.
        func decimal(in range: ClosedRange<Double>) -> (String) throws(Failure) -> Double {
            { text throws(Failure) in try decimal(text, range) }
        }

        func resizeType(_ text: String) throws(Failure) -> ResizeType {
            guard let type = ResizeType(rawValue: text) else {
                throw Failure("option \(name): '\(text.prefix(16))' is not a resizing type (fit, fill, fill-down, force, auto)")
            }
            return type
        }

        /// The gravity written from the `n`th argument on.
        func gravity(from n: Int, allowSmart: Bool) throws(Failure) -> Gravity {
            try TransformOptions.gravity(Array(values.dropFirst(n)), option: name, allowSmart: allowSmart)
        }
    }

    static func gravity(_ args: [String], option: String, allowSmart: Bool) throws(Failure) -> Gravity {
        let compass: [String: (Int, Int)] = ["no": (0, -1), "so": (0, 1), "ea": (1, 0), "we": (-1, 0), "noea": (1, -1),
                                             "nowe": (-1, -1), "soea": (1, 1), "sowe": (-1, 1), "ce": (0, 0)]
        func offset(_ n: Int) throws(Failure) -> Double {
            guard n < args.count, !args[n].isEmpty else { return 0 }
            guard let value = Double(args[n]), value.isFinite, abs(value) <= 1_000_000 else {
                throw Failure("option \(option): '\(args[n].prefix(16))' is not an offset")
            }
            return (value * 10_000).rounded() / 10_000
        }
        switch args[0] {
        case "sm" where allowSmart:
            guard args.count == 1 else { throw Failure("option \(option): sm takes no offsets") }
            return .smart
        case "fp":
            guard args.count == 3, let x = Double(args[1]), let y = Double(args[2]), (0...1).contains(x), (0...1).contains(y) else {
                throw Failure("option \(option): fp needs X:Y, each 0...1")
            }
            return .focus(x: (x * 10_000).rounded() / 10_000, y: (y * 10_000).rounded() / 10_000)
        default:
            guard let (x, y) = compass[args[0]] else {
                throw Failure("option \(option): '\(args[0].prefix(16))' is not a gravity (no, so, ea, we, noea, nowe, soea, sowe, ce\(allowSmart ? ", sm" : ""), fp:X:Y)")
            }
            guard args.count <= 3 else { throw Failure("option \(option) takes a gravity and two offsets at most") }
            return .compass(x: x, y: y, offsetX: try offset(1), offsetY: try offset(2))
        }
    }

    static func hexColour(_ text: String) -> [Double]? {
        guard let bytes = URLSigning.hexDecode(Substring(text)), bytes.count == 3 else { return nil }
        return bytes.map(Double.init)
    }

    // MARK: - Canonical form

    /// The pixel width and height asked for, dpr applied (0: follows the other).
    public var targetWidth: Int { Int((Double(width) * dpr).rounded()) }
    public var targetHeight: Int { Int((Double(height) * dpr).rounded()) }
    public var targetPadding: [Int] { padding.map { Int((Double($0) * dpr).rounded()) } }

    /// The canonical text (see the top), without the output format.
    public var canonical: String {
        var parts = ["rs:\(resizeType.rawValue):\(targetWidth):\(targetHeight):\(enlarge ? 1 : 0):\(extend ? 1 : 0)"]
        if extend && extendGravity != .centre { parts.append("exg:\(extendGravity.canonical)") }
        if gravity != .centre { parts.append("g:\(gravity.canonical)") }
        if let crop {
            parts.append("c:\(number(crop.width)):\(number(crop.height))" + (crop.gravity.map { ":" + $0.canonical } ?? ""))
        }
        if let trim {
            parts.append("t:\(number(trim.threshold))" + (trim.colour.map { ":" + $0.map { number($0) }.joined(separator: ",") } ?? ""))
        }
        if targetPadding != [0, 0, 0, 0] { parts.append("pd:" + targetPadding.map(String.init).joined(separator: ":")) }
        if let background { parts.append("bg:" + background.map { number($0) }.joined(separator: ":")) }
        if rotate != 0 { parts.append("rot:\(rotate)") }
        if !autoRotate { parts.append("ar:0") }
        if blur > 0 { parts.append("bl:\(number(blur))") }
        if sharpen > 0 { parts.append("sh:\(number(sharpen))") }
        if case let .explicit(output) = format {
            // A fixed output format: only the quality it is encoded with counts (format_quality, then quality), and
            // none for PNG and GIF, whose encoders take none: f:png/q:50 is f:png.
            if let q = explicitQuality(for: output), output != .png && output != .gif { parts.append("q:\(q)") }
        } else {
            if quality > 0 { parts.append("q:\(quality)") }
            for format in ImageOutputFormat.allCases { if let q = formatQuality[format], q > 0 { parts.append("fq:\(format.rawValue):\(q)") } }
        }
        if !stripMetadata { parts.append("sm:0") }
        if !cacheBuster.isEmpty { parts.append("cb:\(cacheBuster)") }
        return parts.joined(separator: "/")
    }

    /// The quality to encode `format` with: the URL's (`explicitQuality`), else `defaults`.
    public func quality(for format: ImageOutputFormat, defaults: [ImageOutputFormat: Int]) -> Int {
        explicitQuality(for: format) ?? defaults[format] ?? 80
    }

    /// The quality the URL asks for `format`: format_quality, then quality; nil: the configured default. The one
    /// rule for both the encoder and the canonical text.
    func explicitQuality(for format: ImageOutputFormat) -> Int? {
        if let q = formatQuality[format], q > 0 { return q }
        return quality > 0 ? quality : nil
    }
}

/// A number as the canonical text writes it: rounded to 4 decimals (as the parser keeps it), integers without a
/// fraction, others without trailing zeros.
func number(_ value: Double) -> String {
    let rounded = (value * 10_000).rounded() / 10_000
    if rounded == rounded.rounded(), abs(rounded) < 1e15 { return String(Int(rounded)) }
    var text = String(format: "%.4f", rounded)
    while text.hasSuffix("0") { text.removeLast() }
    if text.hasSuffix(".") { text.removeLast() }
    return text
}
