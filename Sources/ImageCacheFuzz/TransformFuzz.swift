// Fuzz targets of imgproxy URLs and options, and of the configuration loader.

internal import ImageCacheHTTP
internal import ImageCacheConfig
internal import ImageCacheTransform
internal import ImageCacheCore

enum TransformFuzz {
    static let presets: [String: [String]] = ["small": ["rs:fit:100:100"], "sharp": ["sh:1", "q:90", "pr:small"],
                                              "loop": ["pr:loop"], "default": ["q:80"]]

    /// First line a transform path (after the prefix), the rest an Accept field. Checks: the signed part is the path
    /// from its first "/"; options parse the same every time (presets or not, the canonical text is visible ASCII);
    /// every size is within the limit; a format the URL names is one the Accept negotiation keeps.
    static func transformOptions(_ bytes: [UInt8]) {
        let lines = bytes.lines
        let text = lines.first ?? ""
        let accept = lines.dropFirst().joined(separator: ",")
        _ = FormatNegotiation.choose(.auto, accept: accept, autoAVIF: true, autoWebP: true)
        if let path = try? TransformPath.parse(Substring(text)) {
            expect(path.signed.hasPrefix("/") && text.hasSuffix(path.signed) && !path.signature.isEmpty,
                   "signature \(path.signature.debugDescription) and signed \(path.signed.debugDescription) of \(text.debugDescription)")
            expect(!path.source.isEmpty, "an empty source")
            options(path.options)
        }
        // The options alone, segment by segment: "/"-separated, as in a URL.
        options(text.split(separator: "/", omittingEmptySubsequences: false))
    }

    static func options(_ segments: [Substring]) {
        for (presets, max) in [([String: [String]](), 16384), (presets, 100)] {
            guard let options = try? TransformOptions.parse(segments, presets: presets, maxDimension: max) else { continue }
            let again = try? TransformOptions.parse(segments, presets: presets, maxDimension: max)
            expect(again == options, "options parse differently twice")
            let canonical = options.canonical
            expect(!canonical.isEmpty && canonical.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F }, "canonical \(canonical.debugDescription)")
            expect((0...max).contains(options.width) && (0...max).contains(options.height), "size \(options.width)x\(options.height) over \(max)")
            expect(options.padding.count == 4 && options.padding.allSatisfy { (0...max).contains($0) }, "padding \(options.padding)")
            expect((1...8).contains(options.dpr) && [0, 90, 180, 270].contains(options.rotate), "dpr \(options.dpr), rotate \(options.rotate)")
            expect((0...100).contains(options.quality), "quality \(options.quality)")
            for format in ImageOutputFormat.allCases {
                let quality = options.quality(for: format, defaults: [:])
                expect((1...100).contains(quality), "quality \(quality) for \(format)")
            }
            if let crop = options.crop { expect(crop.width >= 0 && crop.height >= 0 && crop.width.isFinite && crop.height.isFinite, "crop \(crop)") }
            let choice = FormatNegotiation.choose(options.format, accept: "image/avif,image/webp", autoAVIF: true, autoWebP: true)
            if case let .explicit(format) = options.format { expect(choice.format == format && !choice.variesOnAccept, "format \(format)") }
        }
        // Presets only: an option other than a preset is refused.
        if let options = try? TransformOptions.parse(segments, presets: presets, onlyPresets: true) {
            expect(segments.allSatisfy { $0.isEmpty || $0.hasPrefix("pr:") || $0.hasPrefix("preset:") }, "onlyPresets took \(segments)")
            _ = options.canonical
        }
    }
}

enum ConfigFuzz {
    /// The bytes as a configuration file; and their lines as the daemon's arguments, and as environment variables
    /// (NAME=VALUE). Keys naming a file to read (`*-file`) are left out: the fuzzer must not read /dev/zero. Checks:
    /// loading is deterministic (the same settings load to the same configuration, or to the same error), and a loaded
    /// configuration passes its own validation and builds its routing.
    static func config(_ bytes: [UInt8]) {
        let text = bytes.text
        let lines = bytes.lines
        var settings: [ConfigSetting] = []
        if let file = try? Configuration.settings(fromYAML: text, name: "fuzz.yaml") {
            settings += file
        }
        if case let .run(_, flags)? = try? DaemonCommandLine.parse(lines.filter { !$0.isEmpty }) {
            settings += flags
        }
        var environment: [String: String] = [:]
        for line in lines {
            guard let equals = line.firstIndex(of: "="), line.hasPrefix("IMAGECACHED_") || line.hasPrefix("IMGPROXY_") else { continue }
            environment[String(line[..<equals])] = String(line[line.index(after: equals)...])
        }
        settings.removeAll { $0.key.hasSuffix("-file") }
        environment = environment.filter { !$0.key.hasSuffix("_FILE") }
        let first = Result { () throws(ConfigError) in try Configuration.load(file: nil, environment: environment, flags: settings) }
        let second = Result { () throws(ConfigError) in try Configuration.load(file: nil, environment: environment, flags: settings) }
        switch (first, second) {
        case let (.success(a), .success(b)):
            expect(a == b, "the same settings load to two configurations")
            do { try a.validate() } catch { fatalError("fuzz check failed: a loaded configuration fails validation: \(error)") }
            _ = a.transform.signing
            _ = a.effectiveContentTypes
            _ = TransformRouting(a)
        case let (.failure(a), .failure(b)):
            expect(a == b, "the same settings fail two ways: \(a), \(b)")
        default:
            fatalError("fuzz check failed: the same settings load once and fail once")
        }
    }
}
