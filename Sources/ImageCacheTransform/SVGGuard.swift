// SVGGuard: what an SVG source must be before librsvg sees it. A pure function over the source's bytes: it reads the
// XML the way a strict parser would and refuses, with a one-line reason, anything librsvg could be made to fetch,
// expand or grind on. Transformer answers a refusal 422 (label "svg"); nothing of a refused source reaches libvips.
//
// WHICH SOURCES: those libvips's SVG loader would claim (`isCandidate`): gzip's magic bytes (SVGZ), or "<svg", any
// case, within the first 1024 bytes with valid UTF-8 before it (libvips 8.14 looks within 1000).
//
// POLICY (each limit is a field of `SVGLimits`, default in brackets; all are documented in docs/transforms.md)
//   size          at most maxBytes [1 MiB] of UTF-8 text; a gzip-compressed source (SVGZ) is refused
//   declarations  no <!DOCTYPE, <!ENTITY or any other <!...> declaration (billion laughs, external entities);
//                 comments and CDATA sections only. Only the five predefined entities and character references.
//   instructions  no processing instruction but the leading <?xml ...?> declaration (<?xml-stylesheet ...?>)
//   structure     well-formed tags, one root element, nesting at most maxDepth [64], at most maxElements [10,000]
//   references    every href and src attribute (any namespace prefix; <a> links are never loaded and not checked) is
//                 a same-document fragment "#id", or, on <image> and <feImage>, a base64 data: URI of a PNG, JPEG or
//                 GIF whose header declares at most transform-max-megapixels of pixels. Every url(...) in an
//                 attribute or in a <style> is "#id". No @import, and no backslash (a CSS escape could spell either),
//                 in a <style> or a style attribute. (file:, http:, relative paths and nested SVG documents are
//                 refused: librsvg refuses most of them itself with no base URL, but this does not rely on it.)
//   instancing    at most maxUses [256] <use> elements, and at most maxInstances [100,000] elements once every
//                 reference (<use>, any href="#id", any url(#id)) is expanded into what it references, recursively
//                 (the use bomb: <use> of groups of <use>); a reference cycle is refused
//   filters       at most maxFilterPrimitives [32] fe* primitives; in user units, stdDeviation of feGaussianBlur and
//                 feDropShadow at most maxBlurDeviation [100], feMorphology radius at most maxMorphologyRadius [16],
//                 feConvolveMatrix order at most maxConvolveOrder [5], feTurbulence numOctaves at most
//                 maxTurbulenceOctaves [8]; no filter property in a <style> (what a selector applies it to is not
//                 counted). The guard counts the filter passes, every primitive once per reference that reaches it
//                 (SVGFindings.filterPasses); Transformer refuses the source when passes x the pixels libvips will
//                 ask librsvg for is over maxFilterWork [4,000,000] (`checkFilterWork`).
// Why the filter work is bounded up front: libvips asks librsvg for the image strip by strip, and librsvg runs every
// filter over its whole region for each strip, in one call nothing interrupts. transform-timeout is checked between
// strips, so one call must stay short: a blur pass costs about 150 ns a pixel on one core, so maxFilterWork keeps a
// call under about a second on an idle core (a loaded machine stretches it). The declared size is checked from
// libvips's header read against transform-max-megapixels.

internal import Foundation

/// What the guard found in a document it passed.
struct SVGFindings: Equatable {
    /// Filter primitives run, each counted once per reference that reaches it (through <use> and url(#id)).
    var filterPasses: Int
}

/// The SVG limits (see the policy above); defaults are the documented constants.
public struct SVGLimits: Sendable, Equatable {
    public var maxBytes = 1 << 20
    public var maxDepth = 64
    public var maxElements = 10_000
    public var maxUses = 256
    public var maxInstances = 100_000
    public var maxFilterPrimitives = 32
    public var maxBlurDeviation = 100.0
    public var maxMorphologyRadius = 16.0
    public var maxConvolveOrder = 5.0
    public var maxTurbulenceOctaves = 8.0
    /// Filter passes x rendered pixels.
    public var maxFilterWork = 4_000_000
    public init() {}
}

/// Why an SVG source is refused: one line.
struct SVGRefusal: Error, Equatable, CustomStringConvertible {
    var reason: String
    init(_ reason: String) { self.reason = reason }
    var description: String { reason }
}

enum SVGGuard {
    /// Whether libvips's SVG loader would claim these bytes (a superset of its own test).
    static func isCandidate(_ bytes: UnsafeRawBufferPointer) -> Bool {
        if bytes.count >= 2 && bytes[0] == 0x1F && bytes[1] == 0x8B { return true }
        let window = min(bytes.count, 1024)
        guard window >= 4 else { return false }
        for i in 0...(window - 4) where bytes[i] == UInt8(ascii: "<") && lower(bytes[i + 1]) == UInt8(ascii: "s")
            && lower(bytes[i + 2]) == UInt8(ascii: "v") && lower(bytes[i + 3]) == UInt8(ascii: "g") {
            return String(validating: UnsafeRawBufferPointer(rebasing: bytes[0..<i]), as: UTF8.self) != nil
        }
        return false
    }

    /// Refuses `bytes` with the first rule it breaks, or returns. `maxEmbeddedPixels`: width x height an embedded
    /// data: image may declare (transform-max-megapixels).
    static func check(_ bytes: UnsafeRawBufferPointer, limits: SVGLimits = SVGLimits(),
                      maxEmbeddedPixels: Int = 50_000_000) throws(SVGRefusal) -> SVGFindings {
        if bytes.count > limits.maxBytes {
            throw SVGRefusal("the SVG is \(bytes.count) bytes, over the SVG limit of \(limits.maxBytes) bytes")
        }
        if bytes.count >= 2 && bytes[0] == 0x1F && bytes[1] == 0x8B {
            throw SVGRefusal("the SVG is gzip-compressed (SVGZ is refused)")
        }
        guard String(validating: bytes, as: UTF8.self) != nil else { throw SVGRefusal("the SVG is not UTF-8 text") }
        var document = Document(bytes: Array(bytes), limits: limits, maxEmbeddedPixels: maxEmbeddedPixels)
        try document.read()
        return try document.expand()
    }

    /// Refuses a render of `pixels` when `findings`' filter passes over them are over maxFilterWork.
    static func checkFilterWork(_ findings: SVGFindings, pixels: Int, limits: SVGLimits = SVGLimits()) throws(SVGRefusal) {
        let (work, overflow) = findings.filterPasses.multipliedReportingOverflow(by: pixels)
        if overflow || work > limits.maxFilterWork {
            throw SVGRefusal("the SVG's \(findings.filterPasses) filter passes over \(pixels) pixels are over the SVG filter limit of \(limits.maxFilterWork) pixel passes")
        }
    }

    static func lower(_ byte: UInt8) -> UInt8 { byte >= 65 && byte <= 90 ? byte + 32 : byte }
}

/// One pass over the document: tags, attributes and text, checked as they are read.
private struct Document {
    let bytes: [UInt8]
    let limits: SVGLimits
    let maxEmbeddedPixels: Int
    var at = 0

    /// Every element in document order: its parent, the fragments it references, whether it is a filter primitive or
    /// a <filter>.
    var parents: [Int] = []
    var references: [Int: [String]] = [:]
    var primitiveElements: Set<Int> = []
    var filterElements: Set<Int> = []
    var ids: [String: Int] = [:]
    var open: [(name: String, index: Int)] = []
    var rootClosed = false
    var uses = 0
    var primitives = 0

    init(bytes: [UInt8], limits: SVGLimits, maxEmbeddedPixels: Int) {
        self.bytes = bytes
        self.limits = limits
        self.maxEmbeddedPixels = maxEmbeddedPixels
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { at = 3 }
    }

    static let primitiveNames: Set<String> = [
        "feblend", "fecolormatrix", "fecomponenttransfer", "fecomposite", "feconvolvematrix", "fediffuselighting",
        "fedisplacementmap", "fedropshadow", "feflood", "fegaussianblur", "feimage", "femerge", "femorphology", "feoffset",
        "fespecularlighting", "fetile", "feturbulence",
    ]

    mutating func read() throws(SVGRefusal) {
        while at < bytes.count {
            if bytes[at] != UInt8(ascii: "<") {
                try text()
            } else if has("<!--") {
                at = try index(after: "-->", from: at + 4, what: "comment")
            } else if has("<![CDATA[") {
                guard !open.isEmpty else { throw malformed("a CDATA section outside the root element") }
                let start = at + 9
                let end = try index(after: "]]>", from: start, what: "CDATA section")
                try content(String(decoding: bytes[start..<(end - 3)], as: UTF8.self))
                at = end
            } else if has("<!") {
                throw SVGRefusal("the SVG has a <!\(name(from: at + 2).prefix(40)) declaration (DTDs and entities are refused)")
            } else if has("<?") {
                let target = name(from: at + 2)
                guard target == "xml" && parents.isEmpty && isBlank(0..<at) else {
                    throw SVGRefusal("the SVG has a processing instruction (<?\(target.prefix(40)) ...?>)")
                }
                at = try index(after: "?>", from: at + 2, what: "XML declaration")
            } else if has("</") {
                try endTag()
            } else {
                try startTag()
            }
        }
        if let unclosed = open.last { throw malformed("<\(unclosed.name)> is not closed") }
        if parents.isEmpty { throw malformed("no root element") }
    }

    // MARK: tags

    mutating func startTag() throws(SVGRefusal) {
        let element = name(from: at + 1)
        guard !element.isEmpty else { throw malformed("a '<' that starts no tag") }
        guard !rootClosed else { throw malformed("<\(element.prefix(40))> after the root element") }
        at += 1 + element.utf8.count
        let index = parents.count
        parents.append(open.last?.index ?? -1)
        if parents.count > limits.maxElements {
            throw SVGRefusal("the SVG has more than \(limits.maxElements) elements")
        }
        if open.count + 1 > limits.maxDepth {
            throw SVGRefusal("the SVG nests elements more than \(limits.maxDepth) deep")
        }
        let local = localName(element)
        if local == "use" {
            uses += 1
            if uses > limits.maxUses { throw SVGRefusal("the SVG has more than \(limits.maxUses) <use> elements") }
        }
        if local == "filter" { filterElements.insert(index) }
        if Self.primitiveNames.contains(local) {
            primitiveElements.insert(index)
            primitives += 1
            if primitives > limits.maxFilterPrimitives {
                throw SVGRefusal("the SVG has more than \(limits.maxFilterPrimitives) filter primitives")
            }
        }
        while true {
            skipSpace()
            guard at < bytes.count else { throw malformed("<\(element.prefix(40))> is cut short") }
            if has("/>") {
                at += 2
                if open.isEmpty { rootClosed = true }
                return
            }
            if bytes[at] == UInt8(ascii: ">") {
                at += 1
                open.append((element, index))
                return
            }
            let (attribute, value) = try self.attribute(of: element)
            try check(attribute: attribute, value: value, element: local, index: index)
        }
    }

    mutating func endTag() throws(SVGRefusal) {
        let element = name(from: at + 2)
        at += 2 + element.utf8.count
        skipSpace()
        guard at < bytes.count, bytes[at] == UInt8(ascii: ">") else { throw malformed("</\(element.prefix(40))> is cut short") }
        at += 1
        let top = open.popLast()
        guard let top, top.name == element else {
            throw malformed("</\(element.prefix(40))> closes \(top.map { "<\($0.name.prefix(40))>" } ?? "nothing")")
        }
        if open.isEmpty { rootClosed = true }
    }

    mutating func attribute(of element: String) throws(SVGRefusal) -> (String, String) {
        let attribute = name(from: at)
        guard !attribute.isEmpty else { throw malformed("<\(element.prefix(40))> has a malformed attribute") }
        at += attribute.utf8.count
        skipSpace()
        guard at < bytes.count, bytes[at] == UInt8(ascii: "=") else { throw malformed("attribute \(attribute.prefix(40)) has no value") }
        at += 1
        skipSpace()
        guard at < bytes.count, bytes[at] == UInt8(ascii: "\"") || bytes[at] == UInt8(ascii: "'") else {
            throw malformed("attribute \(attribute.prefix(40)) is not quoted")
        }
        let quote = bytes[at]
        let start = at + 1
        guard let end = bytes[start...].firstIndex(of: quote) else { throw malformed("attribute \(attribute.prefix(40)) is not closed") }
        if bytes[start..<end].contains(UInt8(ascii: "<")) { throw malformed("a '<' in attribute \(attribute.prefix(40))") }
        at = end + 1
        return (attribute, try decode(start..<end))
    }

    // MARK: the rules

    mutating func check(attribute: String, value: String, element: String, index: Int) throws(SVGRefusal) {
        let name = localName(attribute)
        switch name {
        case "href", "src":
            if element != "a" {
                try reference(value, element: element)
                let target = value.trimmingCharacters(in: .whitespacesAndNewlines)
                if target.hasPrefix("#") { references[index, default: []].append(String(target.dropFirst())) }
            }
        case "id":
            ids[value] = index
        case "style":
            try css(value)
        default:
            break
        }
        for target in try urls(in: value) { references[index, default: []].append(target) }
        switch (element, name) {
        case ("fegaussianblur", "stddeviation"):
            try numbers(value, atMost: limits.maxBlurDeviation, "stdDeviation of <feGaussianBlur>")
        case ("fedropshadow", "stddeviation"):
            try numbers(value, atMost: limits.maxBlurDeviation, "stdDeviation of <feDropShadow>")
        case ("femorphology", "radius"):
            try numbers(value, atMost: limits.maxMorphologyRadius, "radius of <feMorphology>")
        case ("feconvolvematrix", "order"):
            try numbers(value, atMost: limits.maxConvolveOrder, "order of <feConvolveMatrix>")
        case ("feturbulence", "numoctaves"):
            try numbers(value, atMost: limits.maxTurbulenceOctaves, "numOctaves of <feTurbulence>")
        default:
            break
        }
    }

    /// An href or src: "#id", or a data: image on <image> / <feImage>.
    func reference(_ raw: String, element: String) throws(SVGRefusal) {
        let value = raw.trimmingCharacters(in: .whitespacesAndNewlines)
        if value.hasPrefix("#") { return }
        guard value.lowercased().hasPrefix("data:"), element == "image" || element == "feimage" else {
            throw SVGRefusal("the SVG references \(quoted(value)) (only #fragments and data: images are read)")
        }
        try EmbeddedImage.check(value, maxPixels: maxEmbeddedPixels)
    }

    /// Every url(...) in `value` references "#id": the ids.
    func urls(in value: String) throws(SVGRefusal) -> [String] {
        var ids: [String] = []
        var rest = Substring(value)
        while let open = rest.range(of: "url(", options: .caseInsensitive) {
            rest = rest[open.upperBound...]
            let close = rest.firstIndex(of: ")") ?? rest.endIndex
            var target = rest[..<close].trimmingCharacters(in: .whitespacesAndNewlines)
            if let first = target.first, first == "\"" || first == "'" {
                target = String(target.dropFirst().prefix { $0 != first })
            }
            if !target.hasPrefix("#") { throw SVGRefusal("the SVG references \(quoted(target)) in url() (only #fragments are read)") }
            ids.append(String(target.dropFirst()))
            rest = rest[close...]
        }
        return ids
    }

    func css(_ text: String) throws(SVGRefusal) {
        if text.contains("\\") { throw SVGRefusal("the SVG's CSS has an escape (\\), refused") }
        if text.range(of: "@import", options: .caseInsensitive) != nil { throw SVGRefusal("the SVG's CSS has an @import") }
    }

    func numbers(_ value: String, atMost limit: Double, _ what: String) throws(SVGRefusal) {
        for token in value.split(whereSeparator: { $0 == "," || $0.isWhitespace }) {
            guard let parsed = Double(token), parsed <= limit else {
                throw SVGRefusal("the SVG's \(what) is \(token.prefix(40)), over \(number(limit))")
            }
        }
    }

    /// Following every reference into what it references: at most maxInstances elements, no cycle, and the filter
    /// passes (a primitive counts once per reference reaching it; a <filter>'s place in the tree runs nothing).
    func expand() throws(SVGRefusal) -> SVGFindings {
        var children = [[Int]](repeating: [], count: parents.count)
        for (child, parent) in parents.enumerated() where parent >= 0 { children[parent].append(child) }
        func referenced(_ element: Int) -> [Int] { (references[element] ?? []).compactMap { ids[$0] } }
        // Post-order over the graph, iteratively (a chain of references can be deeper than a thread's stack allows).
        let cap = limits.maxInstances + 1
        var instances = [Int](repeating: 0, count: parents.count)
        var passes = [Int](repeating: 0, count: parents.count)
        var state = [UInt8](repeating: 0, count: parents.count)  // 0 unseen, 1 on the path, 2 done
        var stack: [(element: Int, expanded: Bool)] = [(0, false)]
        while let (element, expanded) = stack.popLast() {
            let edges = children[element] + referenced(element)
            if expanded {
                instances[element] = edges.reduce(1) { min(cap, $0 + instances[$1]) }
                let reached = children[element].filter { !filterElements.contains($0) } + referenced(element)
                passes[element] = reached.reduce(primitiveElements.contains(element) ? 1 : 0) { min(Int(UInt32.max), $0 + passes[$1]) }
                state[element] = 2
                continue
            }
            guard state[element] == 0 else { continue }
            state[element] = 1
            stack.append((element, true))
            for next in edges {
                if state[next] == 1 { throw SVGRefusal("the SVG has a reference cycle (an element that references itself or an element around it)") }
                if state[next] == 0 { stack.append((next, false)) }
            }
        }
        if instances[0] > limits.maxInstances {
            throw SVGRefusal("the SVG expands to more than \(limits.maxInstances) elements through its references (<use>, href, url())")
        }
        return SVGFindings(filterPasses: passes[0])
    }

    // MARK: text

    mutating func text() throws(SVGRefusal) {
        let start = at
        at = bytes[at...].firstIndex(of: UInt8(ascii: "<")) ?? bytes.count
        if open.isEmpty {
            guard isBlank(start..<at) else { throw malformed("text outside the root element") }
            return
        }
        try content(try decode(start..<at))
    }

    /// Text inside an element: a <style>'s is CSS.
    func content(_ text: String) throws(SVGRefusal) {
        guard let element = open.last, localName(element.name) == "style" else { return }
        try css(text)
        _ = try urls(in: text)
        if text.range(of: "filter", options: .caseInsensitive) != nil {
            throw SVGRefusal("the SVG's <style> sets a filter (only filter attributes are counted)")
        }
    }

    /// Text with its entity and character references replaced; an undeclared entity is refused.
    func decode(_ range: Range<Int>) throws(SVGRefusal) -> String {
        let raw = String(decoding: bytes[range], as: UTF8.self)
        guard raw.contains("&") else { return raw }
        var out = ""
        var rest = Substring(raw)
        while let amp = rest.firstIndex(of: "&") {
            out += rest[..<amp]
            guard let semicolon = rest[amp...].firstIndex(of: ";") else { throw malformed("an '&' that starts no reference") }
            let name = rest[rest.index(after: amp)..<semicolon]
            switch name {
            case "lt": out += "<"
            case "gt": out += ">"
            case "amp": out += "&"
            case "quot": out += "\""
            case "apos": out += "'"
            default:
                let hex = name.hasPrefix("#x") || name.hasPrefix("#X")
                guard name.hasPrefix("#"), let code = UInt32(name.dropFirst(hex ? 2 : 1), radix: hex ? 16 : 10),
                      let scalar = Unicode.Scalar(code) else {
                    throw SVGRefusal("the SVG uses an entity it cannot declare (&\(name.prefix(40));)")
                }
                out.unicodeScalars.append(scalar)
            }
            rest = rest[rest.index(after: semicolon)...]
        }
        return out + rest
    }

    // MARK: bytes

    func has(_ literal: String) -> Bool {
        let utf8 = Array(literal.utf8)
        return at + utf8.count <= bytes.count && bytes[at..<(at + utf8.count)].elementsEqual(utf8)
    }

    /// The XML name starting at `from` (up to white space, '/', '>', '=', '<', '?' or the end).
    func name(from start: Int) -> String {
        var end = start
        while end < bytes.count {
            let byte = bytes[end]
            if byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D || byte == UInt8(ascii: "/") || byte == UInt8(ascii: ">")
                || byte == UInt8(ascii: "=") || byte == UInt8(ascii: "<") || byte == UInt8(ascii: "?") || byte == UInt8(ascii: "[")
                || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "'") { break }
            end += 1
        }
        return String(decoding: bytes[min(start, end)..<end], as: UTF8.self)
    }

    func localName(_ name: String) -> String { String(name.split(separator: ":").last ?? "").lowercased() }

    mutating func skipSpace() {
        while at < bytes.count, bytes[at] == 0x20 || bytes[at] == 0x09 || bytes[at] == 0x0A || bytes[at] == 0x0D { at += 1 }
    }

    func isBlank(_ range: Range<Int>) -> Bool {
        bytes[range].allSatisfy { $0 == 0x20 || $0 == 0x09 || $0 == 0x0A || $0 == 0x0D || $0 == 0xEF || $0 == 0xBB || $0 == 0xBF }
    }

    func index(after terminator: String, from start: Int, what: String) throws(SVGRefusal) -> Int {
        let end = Array(terminator.utf8)
        var i = start
        while i + end.count <= bytes.count {
            if bytes[i] == end[0] && bytes[i..<(i + end.count)].elementsEqual(end) { return i + end.count }
            i += 1
        }
        throw malformed("a \(what) is not closed")
    }

    func malformed(_ what: String) -> SVGRefusal { SVGRefusal("the SVG is not well-formed XML: \(what)") }
    func quoted(_ value: String) -> String { "\"\(value.prefix(80))\(value.count > 80 ? "..." : "")\"" }
}

/// A data: image in an SVG: base64 PNG, JPEG or GIF whose header declares at most `maxPixels`.
enum EmbeddedImage {
    static func check(_ uri: String, maxPixels: Int) throws(SVGRefusal) {
        guard let comma = uri.firstIndex(of: ",") else { throw SVGRefusal("the SVG has a malformed data: URI") }
        let header = uri[uri.index(uri.startIndex, offsetBy: 5)..<comma].lowercased().replacingOccurrences(of: " ", with: "")
        let parts = header.split(separator: ";")
        guard let type = parts.first, ["image/png", "image/jpeg", "image/gif"].contains(String(type)), parts.last == "base64" else {
            throw SVGRefusal("the SVG embeds a data: URI that is not a base64 PNG, JPEG or GIF (\(header.prefix(40)))")
        }
        guard let data = Data(base64Encoded: String(uri[uri.index(after: comma)...]), options: .ignoreUnknownCharacters),
              let (width, height) = size(Array(data)) else {
            throw SVGRefusal("the SVG embeds an unreadable \(type) image")
        }
        if width * height > maxPixels {
            throw SVGRefusal("the SVG embeds a \(width)x\(height) image, over \(maxPixels) pixels (transform-max-megapixels)")
        }
    }

    /// The declared size: PNG's IHDR, GIF's logical screen, JPEG's first start-of-frame.
    static func size(_ b: [UInt8]) -> (Int, Int)? {
        func be16(_ i: Int) -> Int { Int(b[i]) << 8 | Int(b[i + 1]) }
        if b.count >= 24, b.starts(with: [0x89, 0x50, 0x4E, 0x47]), b[12..<16].elementsEqual("IHDR".utf8) {
            return (be16(16) << 16 | be16(18), be16(20) << 16 | be16(22))
        }
        if b.count >= 10, b.starts(with: Array("GIF8".utf8)) {
            return (Int(b[6]) | Int(b[7]) << 8, Int(b[8]) | Int(b[9]) << 8)
        }
        guard b.count >= 4, b[0] == 0xFF, b[1] == 0xD8 else { return nil }
        var i = 2
        while i + 9 <= b.count, b[i] == 0xFF {
            let marker = b[i + 1]
            if marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC {
                return (be16(i + 7), be16(i + 5))
            }
            i += 2 + be16(i + 2)
        }
        return nil
    }
}
