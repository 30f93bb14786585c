import Testing
@testable import ImageCacheTransform

/// Parses "a:b/c:d" as the option segments of a transform URL.
func parseOptions(_ text: String, presets: [String: [String]] = [:], onlyPresets: Bool = false,
                  maxDimension: Int = 16384) throws(TransformOptions.Failure) -> TransformOptions {
    try TransformOptions.parse(text.split(separator: "/", omittingEmptySubsequences: false), presets: presets,
                               onlyPresets: onlyPresets, maxDimension: maxDimension)
}

/// The reason `text` is refused, or nil when it parses.
func optionsRefusal(_ text: String, presets: [String: [String]] = [:], onlyPresets: Bool = false,
                    maxDimension: Int = 16384) -> String? {
    do {
        _ = try parseOptions(text, presets: presets, onlyPresets: onlyPresets, maxDimension: maxDimension)
        return nil
    } catch {
        return error.reason
    }
}

@Suite("TransformOptions: imgproxy's processing options, parsed and made canonical", .timeLimit(.minutes(1)))
struct TransformOptionsTests {
    // MARK: - Each option, in its full and short name

    @Test("resize/rs sets type, width, height, enlarge and extend", arguments: ["resize", "rs"])
    func resize(name: String) throws {
        // When
        let options = try parseOptions("\(name):fill:300:200:1:1")
        // Then
        #expect(options.resizeType == .fill)
        #expect(options.width == 300 && options.height == 200)
        #expect(options.enlarge && options.extend)
    }

    @Test("an empty resize argument keeps the current value (rs:fill::200)")
    func resizeEmptyArgument() throws {
        let options = try parseOptions("w:120/rs:fill::200")
        #expect(options.resizeType == .fill && options.width == 120 && options.height == 200)
    }

    @Test("size/s sets width, height, enlarge and extend, not the type", arguments: ["size", "s"])
    func size(name: String) throws {
        let options = try parseOptions("rt:force/\(name):300:200:t:true")
        #expect(options.resizeType == .force)
        #expect(options.width == 300 && options.height == 200)
        #expect(options.enlarge && options.extend)
    }

    @Test("resizing_type/rt takes every resizing type", arguments: ["resizing_type", "rt"],
          [("fit", TransformOptions.ResizeType.fit), ("fill", .fill), ("fill-down", .fillDown), ("force", .force), ("auto", .auto)])
    func resizingType(name: String, type: (String, TransformOptions.ResizeType)) throws {
        #expect(try parseOptions("\(name):\(type.0)").resizeType == type.1)
    }

    @Test("width/w and height/h", arguments: [("width", "height"), ("w", "h")])
    func widthHeight(names: (String, String)) throws {
        let options = try parseOptions("\(names.0):640/\(names.1):480")
        #expect(options.width == 640 && options.height == 480)
    }

    @Test("dpr multiplies the pixel sizes and padding")
    func dpr() throws {
        let options = try parseOptions("w:100/h:50/pd:3/dpr:1.5")
        #expect(options.dpr == 1.5)
        #expect(options.targetWidth == 150 && options.targetHeight == 75)
        #expect(options.targetPadding == [5, 5, 5, 5])  // 4.5 rounds away from zero
    }

    @Test("booleans are 1/t/true or 0/f/false (enlarge/el, auto_rotate/ar, strip_metadata/sm)", arguments: [
        ("1", true), ("t", true), ("true", true), ("TRUE", true), ("0", false), ("f", false), ("false", false),
    ])
    func booleans(text: String, value: Bool) throws {
        #expect(try parseOptions("enlarge:\(text)").enlarge == value)
        #expect(try parseOptions("el:\(text)").enlarge == value)
        #expect(try parseOptions("auto_rotate:\(text)").autoRotate == value)
        #expect(try parseOptions("ar:\(text)").autoRotate == value)
        #expect(try parseOptions("strip_metadata:\(text)").stripMetadata == value)
        #expect(try parseOptions("sm:\(text)").stripMetadata == value)
    }

    @Test("extend/ex takes a boolean and an optional gravity with offsets", arguments: ["extend", "ex"])
    func extend(name: String) throws {
        let plain = try parseOptions("\(name):1")
        #expect(plain.extend && plain.extendGravity == .centre)
        let south = try parseOptions("\(name):t:so")
        #expect(south.extend && south.extendGravity == .compass(x: 0, y: 1, offsetX: 0, offsetY: 0))
        let offset = try parseOptions("\(name):1:noea:5:6")
        #expect(offset.extendGravity == .compass(x: 1, y: -1, offsetX: 5, offsetY: 6))
    }

    @Test("gravity/g takes every compass point", arguments: ["gravity", "g"], [
        ("no", 0, -1), ("so", 0, 1), ("ea", 1, 0), ("we", -1, 0), ("noea", 1, -1), ("nowe", -1, -1),
        ("soea", 1, 1), ("sowe", -1, 1), ("ce", 0, 0),
    ])
    func compass(name: String, point: (String, Int, Int)) throws {
        #expect(try parseOptions("\(name):\(point.0)").gravity == .compass(x: point.1, y: point.2, offsetX: 0, offsetY: 0))
    }

    @Test("gravity/g takes offsets, sm (smart) and fp:x:y (focus point)", arguments: ["gravity", "g"])
    func gravityKinds(name: String) throws {
        #expect(try parseOptions("\(name):we:10:-20.5").gravity == .compass(x: -1, y: 0, offsetX: 10, offsetY: -20.5))
        #expect(try parseOptions("\(name):sm").gravity == .smart)
        #expect(try parseOptions("\(name):fp:0.25:0.75").gravity == .focus(x: 0.25, y: 0.75))
    }

    @Test("crop/c takes pixels or fractions and an optional gravity; 0:0 is no crop", arguments: ["crop", "c"])
    func crop(name: String) throws {
        #expect(try parseOptions("\(name):100:50").crop == TransformOptions.Crop(width: 100, height: 50, gravity: nil))
        #expect(try parseOptions("\(name):0.5:0.25:sm").crop == TransformOptions.Crop(width: 0.5, height: 0.25, gravity: .smart))
        #expect(try parseOptions("\(name):100:50:fp:0.1:0.9").crop?.gravity == .focus(x: 0.1, y: 0.9))
        #expect(try parseOptions("\(name):100:50/\(name):0:0").crop == nil)
    }

    @Test("trim/t takes a threshold and an optional hex colour", arguments: ["trim", "t"])
    func trim(name: String) throws {
        #expect(try parseOptions("\(name):10").trim == TransformOptions.Trim(threshold: 10, colour: nil))
        #expect(try parseOptions("\(name):12.5:FF8000").trim == TransformOptions.Trim(threshold: 12.5, colour: [255, 128, 0]))
    }

    @Test("padding/pd follows the CSS shorthand: top [right [bottom [left]]]", arguments: ["padding", "pd"], [
        ("10", [10, 10, 10, 10]),
        ("10:20", [10, 20, 10, 20]),
        ("10:20:30", [10, 20, 30, 20]),
        ("10:20:30:40", [10, 20, 30, 40]),
        ("10::30", [10, 0, 30, 0]),
    ])
    func padding(name: String, shorthand: (String, [Int])) throws {
        #expect(try parseOptions("\(name):\(shorthand.0)").padding == shorthand.1)
    }

    @Test("background/bg takes R:G:B or a hex colour", arguments: ["background", "bg"])
    func background(name: String) throws {
        #expect(try parseOptions("\(name):255:0:10").background == [255, 0, 10])
        #expect(try parseOptions("\(name):00ff80").background == [0, 255, 128])
        #expect(try parseOptions("\(name):00FF80").background == [0, 255, 128])
    }

    @Test("rotate/rot takes multiples of 90, folded into 0..<360", arguments: ["rotate", "rot"], [
        (0, 0), (90, 90), (180, 180), (270, 270), (360, 0), (450, 90), (-90, 270),
    ])
    func rotate(name: String, degrees: (Int, Int)) throws {
        #expect(try parseOptions("\(name):\(degrees.0)").rotate == degrees.1)
    }

    @Test("blur/bl and sharpen/sh take a sigma", arguments: [("blur", "sharpen"), ("bl", "sh")])
    func blurSharpen(names: (String, String)) throws {
        let options = try parseOptions("\(names.0):2.5/\(names.1):0.75")
        #expect(options.blur == 2.5 && options.sharpen == 0.75)
    }

    @Test("quality/q takes 0...100", arguments: ["quality", "q"])
    func quality(name: String) throws {
        #expect(try parseOptions("\(name):85").quality == 85)
        #expect(try parseOptions("\(name):0").quality == 0)
    }

    @Test("format_quality/fq takes FORMAT:QUALITY pairs", arguments: ["format_quality", "fq"])
    func formatQuality(name: String) throws {
        let options = try parseOptions("\(name):webp:70:jpg:90/\(name):avif:50")
        #expect(options.formatQuality == [.webp: 70, .jpeg: 90, .avif: 50])
    }

    @Test("format/f/ext names an output format or auto", arguments: ["format", "f", "ext"], [
        ("jpeg", FormatRequest.explicit(.jpeg)), ("jpg", .explicit(.jpeg)), ("png", .explicit(.png)),
        ("webp", .explicit(.webp)), ("avif", .explicit(.avif)), ("gif", .explicit(.gif)), ("auto", .auto),
    ])
    func format(name: String, format: (String, FormatRequest)) throws {
        #expect(try parseOptions("\(name):\(format.0)").format == format.1)
    }

    @Test("no format option asks for the source's format")
    func formatDefault() throws {
        #expect(try parseOptions("w:10").format == .source)
    }

    @Test("cachebuster/cb is kept as text and is part of the identity", arguments: ["cachebuster", "cb"])
    func cacheBuster(name: String) throws {
        let options = try parseOptions("w:10/\(name):v2")
        #expect(options.cacheBuster == "v2")
        #expect(options.canonical.hasSuffix("/cb:v2"))
    }

    // MARK: - Presets

    static let presets: [String: [String]] = [
        "thumb": ["rs:fill:100:100", "q:70"],
        "sharp": ["sh:1"],
        "nested": ["pr:thumb", "g:no"],
    ]

    @Test("preset/pr applies a preset's options where it is named; later options override", arguments: ["preset", "pr"])
    func preset(name: String) throws {
        let options = try parseOptions("\(name):thumb", presets: Self.presets)
        #expect(options.resizeType == .fill && options.width == 100 && options.quality == 70)
        // Later options override the preset's, and the preset's override earlier ones.
        #expect(try parseOptions("\(name):thumb/q:90", presets: Self.presets).quality == 90)
        #expect(try parseOptions("q:90/\(name):thumb", presets: Self.presets).quality == 70)
    }

    @Test("several presets in one option, and presets naming presets")
    func severalAndNested() throws {
        let both = try parseOptions("pr:thumb:sharp", presets: Self.presets)
        #expect(both.width == 100 && both.sharpen == 1)
        let nested = try parseOptions("pr:nested", presets: Self.presets)
        #expect(nested.width == 100 && nested.gravity == .compass(x: 0, y: -1, offsetX: 0, offsetY: 0))
    }

    @Test("the preset \"default\" applies first to every request")
    func defaultPreset() throws {
        // Given
        let presets = ["default": ["q:60", "ar:0"], "thumb": ["w:100"]]
        // Then
        let none = try parseOptions("", presets: presets)
        #expect(none.quality == 60 && !none.autoRotate)
        let overridden = try parseOptions("q:90", presets: presets)
        #expect(overridden.quality == 90 && !overridden.autoRotate)
        #expect(try parseOptions("", presets: presets).canonical == parseOptions("q:60/ar:0").canonical)
    }

    @Test("only-presets mode takes presets (and the default preset) and refuses any other option")
    func onlyPresets() throws {
        // Given
        let presets = ["default": ["q:60"], "thumb": ["rs:fill:100:100"]]
        // Then: presets, whose own options are fine
        let options = try parseOptions("pr:thumb", presets: presets, onlyPresets: true)
        #expect(options.width == 100 && options.quality == 60)
        // and any option outside a preset is refused with a reason
        let reason = optionsRefusal("pr:thumb/w:200", presets: presets, onlyPresets: true)
        #expect(reason?.contains("presets only") == true, "\(reason ?? "accepted")")
        #expect(reason?.contains("'w'") == true)
        // Without the mode the same option is accepted.
        #expect(try parseOptions("pr:thumb/w:200", presets: presets).width == 200)
    }

    @Test("presets nest at most 16 deep; a preset naming itself is refused, not looped")
    func nestingDepth() throws {
        // Given: p1 names p2 ... names pN, which sets a width
        func chain(_ depth: Int) -> [String: [String]] {
            var presets: [String: [String]] = ["p\(depth)": ["w:7"]]
            for n in 1..<depth { presets["p\(n)"] = ["pr:p\(n + 1)"] }
            return presets
        }
        // Then
        #expect(try parseOptions("pr:p1", presets: chain(16)).width == 7)
        #expect(optionsRefusal("pr:p1", presets: chain(17))?.contains("nest too deep") == true)
        #expect(optionsRefusal("pr:loop", presets: ["loop": ["pr:loop"]])?.contains("nest too deep") == true)
        // Siblings do not add up: sixteen presets side by side are not nesting.
        let wide = Dictionary(uniqueKeysWithValues: (1...20).map { ("s\($0)", ["w:\($0)"]) })
        #expect(try parseOptions((1...20).map { "pr:s\($0)" }.joined(separator: "/"), presets: wide).width == 20)
    }

    @Test("an unknown preset, or pr without a name, is refused")
    func unknownPreset() {
        #expect(optionsRefusal("pr:missing", presets: Self.presets)?.contains("unknown preset 'missing'") == true)
        #expect(optionsRefusal("pr", presets: Self.presets)?.contains("needs a preset name") == true)
    }

    // MARK: - Refusals

    @Test("malformed or out-of-range options are refused with a reason naming them", arguments: [
        ("foo:1", "unknown processing option 'foo'"),
        ("el:yes", "'yes' is not a boolean"),
        ("sm:2", "'2' is not a boolean"),
        ("w:16385", "'16385' is not a size in 0...16384"),
        ("h:-1", "is not a size"),
        ("rs:fit:20000:10", "'20000' is not a size"),
        ("pd:1:2:3:4:5", "at most 4 arguments"),
        ("rot:45", "'45' is not a multiple of 90"),
        ("rot:ninety", "is not a multiple of 90"),
        ("g:up", "'up' is not a gravity"),
        ("g:fp:1.5:0.5", "fp needs X:Y, each 0...1"),
        ("g:fp:0.5", "fp needs X:Y"),
        ("g:sm:1", "sm takes no offsets"),
        ("ex:1:sm", "'sm' is not a gravity"),
        ("rt:squash", "'squash' is not a resizing type"),
        ("dpr:9", "not a number in 1...8"),
        ("dpr:0.5", "not a number in 1...8"),
        ("q:101", "not a number in 0...100"),
        ("bl:-1", "not a number in 0...100"),
        ("t:300", "not a number in 0...255"),
        ("t:10:red", "'red' is not a hex colour"),
        ("bg:1:2", "give R:G:B"),
        ("bg:gg0000", "give R:G:B"),
        ("fq:webp", "needs 2 argument(s)"),
        ("fq:webp:50:png", "FORMAT:QUALITY pairs"),
        ("fq:bmp:50", "'bmp' is not a format"),
        ("f:bmp", "'bmp' is not an output format"),
        ("c:0.5:1.5", "neither whole pixels nor a fraction below 1"),
        ("rs:fit:1:2:0:0:9", "at most 5 arguments"),
        ("w", "needs 1 argument(s)"),
        ("cb:" + String(repeating: "x", count: 65), "at most 64 visible ASCII characters"),
        ("cb:a b", "at most 64 visible ASCII characters"),
    ])
    func refusals(text: String, reason: String) {
        let got = optionsRefusal(text)
        #expect(got?.contains(reason) == true, "\(text): \(got ?? "accepted")")
    }

    /// Each option's refusals and edge forms, pinned when the options became a table: every reason word for word
    /// (users and logs read them), and for an accepted form its canonical text and output format.
    static let pinnedForms: [(text: String, outcome: String)] = [
        ("w", "refused: option w needs 1 argument(s)"),
        ("width:", "refused: option width: '' is not a size in 0...16384"),
        ("h:1:2", "refused: option h takes at most 1 arguments"),
        ("w:12345678901234567890", "refused: option w: '1234567890123456' is not a size in 0...16384"),
        ("rs", "refused: option rs needs 1 argument(s)"),
        ("rs:", "rs:fit:0:0:0:0 source"),
        ("resize:fill:1:2:t:f:x", "refused: option resize takes at most 5 arguments"),
        ("s:1:2:3:4:5", "refused: option s takes at most 4 arguments"),
        ("size::7", "rs:fit:0:7:0:0 source"),
        ("rt", "refused: option rt needs 1 argument(s)"),
        ("rt:fit:fill", "refused: option rt takes at most 1 arguments"),
        ("resizing_type:Fill", "refused: option resizing_type: 'Fill' is not a resizing type (fit, fill, fill-down, force, auto)"),
        ("rs:fillDown", "refused: option rs: 'fillDown' is not a resizing type (fit, fill, fill-down, force, auto)"),
        ("rs:fit:1:1:maybe", "refused: option rs: 'maybe' is not a boolean (1, t, true, 0, f, false)"),
        ("dpr", "refused: option dpr needs 1 argument(s)"),
        ("dpr:1:2", "refused: option dpr takes at most 1 arguments"),
        ("dpr:abc", "refused: option dpr: 'abc' is not a number in 1...8"),
        ("dpr:inf", "refused: option dpr: 'inf' is not a number in 1...8"),
        ("dpr:nan", "refused: option dpr: 'nan' is not a number in 1...8"),
        ("dpr:1.23456", "rs:fit:0:0:0:0 source"),
        ("dpr:8.00004", "refused: option dpr: '8.00004' is not a number in 1...8"),
        ("el", "refused: option el needs 1 argument(s)"),
        ("enlarge:1:1", "refused: option enlarge takes at most 1 arguments"),
        ("el:yes", "refused: option el: 'yes' is not a boolean (1, t, true, 0, f, false)"),
        ("el:", "refused: option el: '' is not a boolean (1, t, true, 0, f, false)"),
        ("ex", "refused: option ex needs 1 argument(s)"),
        ("extend:maybe", "refused: option extend: 'maybe' is not a boolean (1, t, true, 0, f, false)"),
        ("ex:1:", "refused: option ex: '' is not a gravity (no, so, ea, we, noea, nowe, soea, sowe, ce, fp:X:Y)"),
        ("ex:1:so:1:2:3", "refused: option ex takes a gravity and two offsets at most"),
        ("ex:1:fp:0.5:0.5", "rs:fit:0:0:0:1/exg:fp:0.5:0.5 source"),
        ("ex:0:sm", "refused: option ex: 'sm' is not a gravity (no, so, ea, we, noea, nowe, soea, sowe, ce, fp:X:Y)"),
        ("g", "refused: option g needs 1 argument(s)"),
        ("g:", "refused: option g: '' is not a gravity (no, so, ea, we, noea, nowe, soea, sowe, ce, sm, fp:X:Y)"),
        ("gravity:SO", "refused: option gravity: 'SO' is not a gravity (no, so, ea, we, noea, nowe, soea, sowe, ce, sm, fp:X:Y)"),
        ("g:no:1:2:3", "refused: option g takes a gravity and two offsets at most"),
        ("g:no:x", "refused: option g: 'x' is not an offset"),
        ("g:no::7", "rs:fit:0:0:0:0/g:no:0:7 source"),
        ("g:no:1000001", "refused: option g: '1000001' is not an offset"),
        ("g:no:-1000000", "rs:fit:0:0:0:0/g:no:-1000000:0 source"),
        ("g:sm:", "refused: option g: sm takes no offsets"),
        ("g:fp", "refused: option g: fp needs X:Y, each 0...1"),
        ("g:fp:a:b", "refused: option g: fp needs X:Y, each 0...1"),
        ("g:fp:0.123456:1", "rs:fit:0:0:0:0/g:fp:0.1235:1 source"),
        ("g:ce:1.00005:0", "rs:fit:0:0:0:0/g:ce:1.0001:0 source"),
        ("c", "refused: option c needs 2 argument(s)"),
        ("c:1", "refused: option c needs 2 argument(s)"),
        ("crop:1:2:3:4:5", "refused: option crop: '3' is not a gravity (no, so, ea, we, noea, nowe, soea, sowe, ce, sm, fp:X:Y)"),
        ("c:abc:1", "refused: option c: 'abc' is not a number in 0...16384"),
        ("c:20000:1", "refused: option c: '20000' is not a number in 0...16384"),
        ("c:0.5:1.5", "refused: option c: '1.5' is neither whole pixels nor a fraction below 1"),
        ("c:0.99999:0", "rs:fit:0:0:0:0/c:1:0 source"),
        ("c:10:10:", "refused: option c: '' is not a gravity (no, so, ea, we, noea, nowe, soea, sowe, ce, sm, fp:X:Y)"),
        ("c:10:10:sm:1", "refused: option c: sm takes no offsets"),
        ("c:0:0:so", "rs:fit:0:0:0:0 source"),
        ("c::5", "refused: option c: '' is not a number in 0...16384"),
        ("t", "refused: option t needs 1 argument(s)"),
        ("t:1:ffffff:x", "refused: option t takes at most 2 arguments"),
        ("trim:abc", "refused: option trim: 'abc' is not a number in 0...255"),
        ("t:10:", "rs:fit:0:0:0:0/t:10 source"),
        ("t:10:ff", "refused: option t: 'ff' is not a hex colour"),
        ("t:-0.00001", "refused: option t: '-0.00001' is not a number in 0...255"),
        ("t:255", "rs:fit:0:0:0:0/t:255 source"),
        ("pd", "refused: option pd needs 1 argument(s)"),
        ("pd:1:2:3:4:5", "refused: option pd takes at most 4 arguments"),
        ("padding:x", "refused: option padding: 'x' is not a size in 0...16384"),
        ("pd:16385", "refused: option pd: '16385' is not a size in 0...16384"),
        ("pd::", "rs:fit:0:0:0:0 source"),
        ("pd:1:2:3", "rs:fit:0:0:0:0/pd:1:2:3:2 source"),
        ("pd:0:0:0:1", "rs:fit:0:0:0:0/pd:0:0:0:1 source"),
        ("bg", "refused: option bg needs 1 argument(s)"),
        ("bg:", "refused: option bg: give R:G:B (0-255) or a hex colour"),
        ("bg:1:2", "refused: option bg: give R:G:B (0-255) or a hex colour"),
        ("bg:1:2:3:4", "refused: option bg takes at most 3 arguments"),
        ("bg:256:0:0", "refused: option bg: '256' is not a number in 0...255"),
        ("bg:1.4:2.5:3.6", "rs:fit:0:0:0:0/bg:1:3:4 source"),
        ("background:ABCDEF", "rs:fit:0:0:0:0/bg:171:205:239 source"),
        ("bg:abcdeg", "refused: option bg: give R:G:B (0-255) or a hex colour"),
        ("rot", "refused: option rot needs 1 argument(s)"),
        ("rot:1:2", "refused: option rot takes at most 1 arguments"),
        ("rotate:45", "refused: option rotate: '45' is not a multiple of 90"),
        ("rot:-450", "rs:fit:0:0:0:0/rot:270 source"),
        ("rot:", "refused: option rot: '' is not a multiple of 90"),
        ("rot:9e9", "refused: option rot: '9e9' is not a multiple of 90"),
        ("ar", "refused: option ar needs 1 argument(s)"),
        ("auto_rotate:nope", "refused: option auto_rotate: 'nope' is not a boolean (1, t, true, 0, f, false)"),
        ("ar:F", "rs:fit:0:0:0:0/ar:0 source"),
        ("bl", "refused: option bl needs 1 argument(s)"),
        ("bl:101", "refused: option bl: '101' is not a number in 0...100"),
        ("blur:0.00004", "rs:fit:0:0:0:0 source"),
        ("sh:x", "refused: option sh: 'x' is not a number in 0...100"),
        ("sharpen:100", "rs:fit:0:0:0:0/sh:100 source"),
        ("q", "refused: option q needs 1 argument(s)"),
        ("q:1:2", "refused: option q takes at most 1 arguments"),
        ("q:50.4", "rs:fit:0:0:0:0/q:50 source"),
        ("q:50.5", "rs:fit:0:0:0:0/q:51 source"),
        ("quality:-1", "refused: option quality: '-1' is not a number in 0...100"),
        ("q:x", "refused: option q: 'x' is not a number in 0...100"),
        ("fq", "refused: option fq needs 2 argument(s)"),
        ("fq:webp", "refused: option fq needs 2 argument(s)"),
        ("fq:webp:50:png", "refused: option fq takes FORMAT:QUALITY pairs"),
        ("format_quality:bmp:50", "refused: option format_quality: 'bmp' is not a format (jpeg, png, webp, avif, gif)"),
        ("fq:webp:x", "refused: option fq: 'x' is not a number in 0...100"),
        ("fq:jpg:101", "refused: option fq: '101' is not a number in 0...100"),
        ("fq:WEBP:10:avif:0", "rs:fit:0:0:0:0/fq:webp:10 source"),
        ("f", "refused: option f needs 1 argument(s)"),
        ("f:a:b", "refused: option f takes at most 1 arguments"),
        ("format:bmp", "refused: option format: 'bmp' is not an output format (jpeg, png, webp, avif, gif, auto)"),
        ("f:best", "rs:fit:0:0:0:0 auto"),
        ("f:AUTO", "refused: option f: 'AUTO' is not an output format (jpeg, png, webp, avif, gif, auto)"),
        ("f:JPG", "rs:fit:0:0:0:0 explicit(ImageCacheTransform.ImageOutputFormat.jpeg)"),
        ("ext:auto", "rs:fit:0:0:0:0 auto"),
        ("ext:", "refused: option ext: '' is not an output format (jpeg, png, webp, avif, gif, auto)"),
        ("sm", "refused: option sm needs 1 argument(s)"),
        ("strip_metadata:2", "refused: option strip_metadata: '2' is not a boolean (1, t, true, 0, f, false)"),
        ("sm:0", "rs:fit:0:0:0:0/sm:0 source"),
        ("cb", "rs:fit:0:0:0:0 source"),
        ("cb:", "rs:fit:0:0:0:0 source"),
        ("cb:a:b", "refused: option cb takes at most 1 arguments"),
        ("cachebuster:v-1_2", "rs:fit:0:0:0:0/cb:v-1_2 source"),
        ("cb:" + String(repeating: "x", count: 64), "rs:fit:0:0:0:0/cb:" + String(repeating: "x", count: 64) + " source"),
        ("cb:" + String(repeating: "x", count: 65), "refused: option cb: the cache buster must be at most 64 visible ASCII characters"),
        ("cb:a b", "refused: option cb: the cache buster must be at most 64 visible ASCII characters"),
        ("cb:é", "refused: option cb: the cache buster must be at most 64 visible ASCII characters"),
        ("foo", "refused: unknown processing option 'foo'"),
        ("foo:1", "refused: unknown processing option 'foo'"),
        (String(repeating: "x", count: 40) + ":1", "refused: unknown processing option '" + String(repeating: "x", count: 32) + "'"),
        ("Width:10", "refused: unknown processing option 'Width'"),
        ("", "rs:fit:0:0:0:0 source"),
        ("w:10//h:5", "rs:fit:10:5:0:0 source"),
        ("pr:thumb/w:1", "rs:fill:1:100:0:0 source"),
    ]

    @Test("every refusal's reason, word for word, and every edge form's canonical text")
    func pinned() {
        // Given each form; When it is parsed (with the preset "thumb")
        let presets = ["thumb": ["rs:fill:100:100"]]
        let outcomes = Self.pinnedForms.map { form in
            optionsRefusal(form.text, presets: presets).map { "refused: \($0)" }
                ?? (try? parseOptions(form.text, presets: presets)).map { "\($0.canonical) \($0.format)" } ?? "?"
        }
        // Then each outcome is the pinned one
        for (form, outcome) in zip(Self.pinnedForms, outcomes) {
            #expect(outcome == form.outcome, "\(form.text)")
        }
    }

    @Test("the largest size follows maxDimension")
    func maxDimension() throws {
        #expect(try parseOptions("w:500/pd:500", maxDimension: 500).width == 500)
        #expect(optionsRefusal("w:501", maxDimension: 500)?.contains("not a size in 0...500") == true)
        #expect(optionsRefusal("pd:501", maxDimension: 500)?.contains("not a size in 0...500") == true)
        #expect(optionsRefusal("c:501:10", maxDimension: 500)?.contains("0...500") == true)
    }

    // MARK: - Canonical form

    @Test("equivalent spellings give one canonical text", arguments: [
        "rs:fill:300:200", "resize:fill:300:200/q:0", "w:300/h:200/rt:fill", "w:150/h:100/rt:fill/dpr:2",
        "rt:fill/s:300:200:0:0", "resizing_type:fill/width:300/height:200/enlarge:false/extend:f",
        "w:999/rs:fill:300:200/g:ce", "rs:fill:300:200/g:ce:0:0/ex:0:so/f:webp", "rs:fill:300:200/rot:360/ar:1/sm:1",
    ])
    func canonicalEquivalents(text: String) throws {
        #expect(try parseOptions(text).canonical == "rs:fill:300:200:0:0")
    }

    @Test("the defaults alone are the resize field only")
    func canonicalDefaults() throws {
        #expect(TransformOptions().canonical == "rs:fit:0:0:0:0")
        #expect(try parseOptions("").canonical == "rs:fit:0:0:0:0")
    }

    @Test("with a fixed output format only the quality it is encoded with counts in the canonical text, and none for PNG and GIF")
    func canonicalQualityForFixedFormat() throws {
        #expect(try parseOptions("f:webp/q:70").canonical == parseOptions("f:webp/fq:webp:70/fq:avif:40").canonical)
        #expect(try parseOptions("f:webp/q:70/fq:webp:60").canonical.hasSuffix("/q:60"))
        #expect(try parseOptions("f:png/q:50").canonical == parseOptions("f:png").canonical)
        #expect(try parseOptions("f:gif/fq:gif:30").canonical == parseOptions("f:gif").canonical)
        #expect(try parseOptions("f:jpeg/q:50").canonical != parseOptions("f:jpeg").canonical)
        // The source's format (or f:auto): every quality stays, the output being known only once the source is
        #expect(try parseOptions("q:50").canonical != parseOptions("").canonical)
        #expect(try parseOptions("fq:png:50").canonical.hasSuffix("/fq:png:50"))
    }

    @Test("the canonical text has one order whatever the URL's order, and one spelling for colours and padding")
    func canonicalOrder() throws {
        let a = try parseOptions("q:80/g:no/w:10/bg:ff0000/pd:5")
        let b = try parseOptions("pd:5:5:5:5/background:255:0:0/width:10/gravity:no/quality:80")
        #expect(a.canonical == b.canonical)
        #expect(a.canonical == "rs:fit:10:0:0:0/g:no/pd:5:5:5:5/bg:255:0:0/q:80")
        #expect(try parseOptions("pd:10/dpr:2").canonical == parseOptions("pd:20").canonical)
        #expect(try parseOptions("fq:webp:50:avif:40").canonical == parseOptions("fq:avif:40/fq:webp:50").canonical)
    }

    @Test("every option that changes the result changes the canonical text")
    func canonicalDistinct() throws {
        // Given
        let texts = [
            "rs:fill:300:200", "rs:fit:300:200", "rs:fill-down:300:200", "rs:force:300:200", "rs:auto:300:200",
            "rs:fill:301:200", "rs:fill:300:201", "rs:fill:300:200:1", "rs:fill:300:200:0:1", "rs:fill:300:200:0:1/ex:1:so",
            "rs:fill:300:200/dpr:2", "rs:fill:300:200/g:no", "rs:fill:300:200/g:no:5:0", "rs:fill:300:200/g:sm",
            "rs:fill:300:200/g:fp:0.5:0.25", "rs:fill:300:200/c:100:100", "rs:fill:300:200/c:100:100:so",
            "rs:fill:300:200/c:0.5:0.5", "rs:fill:300:200/t:10", "rs:fill:300:200/t:10:ffffff", "rs:fill:300:200/pd:5",
            "rs:fill:300:200/pd:5:6", "rs:fill:300:200/bg:ffffff", "rs:fill:300:200/bg:000000", "rs:fill:300:200/rot:90",
            "rs:fill:300:200/rot:270", "rs:fill:300:200/ar:0", "rs:fill:300:200/bl:1", "rs:fill:300:200/sh:1",
            "rs:fill:300:200/q:50", "rs:fill:300:200/fq:webp:50", "rs:fill:300:200/fq:avif:50", "rs:fill:300:200/sm:0",
            "rs:fill:300:200/cb:x", "rs:fill:300:200/cb:y",
        ]
        // When
        let canonical = try texts.map { text throws(TransformOptions.Failure) in try parseOptions(text).canonical }
        // Then
        #expect(Set(canonical).count == texts.count, "\(canonical)")
    }

    @Test("the output format is not in the options' canonical text")
    func canonicalWithoutFormat() throws {
        #expect(try parseOptions("w:10/f:webp").canonical == parseOptions("w:10").canonical)
        #expect(try parseOptions("w:10/ext:auto").canonical == parseOptions("w:10").canonical)
    }

    @Test("the canonical text holds no space or line break (it is part of a CacheKey)")
    func canonicalSpaceFree() throws {
        let text = try parseOptions("rs:fill:300:200/g:fp:0.33333:0.5/bl:0.1234/t:3:abcdef/cb:a-b_c").canonical
        #expect(!text.contains(" ") && !text.contains("\n"))
        #expect(text.contains("g:fp:0.3333:0.5") && text.contains("bl:0.1234") && text.contains("t:3:171,205,239"))
    }

    @Test("a fraction that rounds to a whole number at 4 decimals is written as that number, without a trailing dot")
    func canonicalNumbers() throws {
        #expect(number(1.99999) == "2")
        #expect(number(0.00001) == "0")
        #expect(try parseOptions("bl:2").canonical == parseOptions("bl:1.99999").canonical)
    }

    // MARK: - Quality

    @Test("quality(for:defaults:): format_quality, then quality, then the format's default, then 80")
    func qualityPrecedence() throws {
        let defaults = TransformSpec.imgproxyQuality
        // Only defaults
        let none = try parseOptions("")
        #expect(none.quality(for: .webp, defaults: defaults) == 79)
        #expect(none.quality(for: .avif, defaults: defaults) == 63)
        #expect(none.quality(for: .jpeg, defaults: [.png: 5]) == 80)
        // quality over the defaults
        let q = try parseOptions("q:90")
        #expect(q.quality(for: .webp, defaults: defaults) == 90)
        // format_quality over quality, for its format only
        let fq = try parseOptions("q:90/fq:webp:70")
        #expect(fq.quality(for: .webp, defaults: defaults) == 70)
        #expect(fq.quality(for: .jpeg, defaults: defaults) == 90)
        // a format_quality of 0 means "not set"
        #expect(try parseOptions("fq:webp:0").quality(for: .webp, defaults: defaults) == 79)
    }
}
