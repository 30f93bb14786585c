// Data model: a `VaryKey` records, for a stored response that has a Vary field, the request field values it was
// selected with (RFC 9111 section 4.1). An immutable value kept inside its `CacheEntry`; no owner, no lock.
//
// Variant identity: a URL (the primary key, `CacheKey`) holds several stored responses, its variants; each is named
// by its `VariantID`: "" for a response without Vary, else the canonical text of its VaryKey, one line per nominated
// field in name order, "name:value" or "name" when the request had no such field ("*" for Vary: *). Field names hold
// no ":" and normalised values no line break, so the text is unambiguous and `VaryKey(id:)` reads it back (the disk
// format stores it). The id is an open string on purpose: a later derived rendition of a source (a resized or
// re-encoded image) becomes one more variant of the same URL by extending it, so a purge of the URL takes it too.
//
// Matching policy:
//   - Vary names are compared ignoring case; duplicates are listed once; the fields are kept in name order (the
//     order a Vary lists them in does not split variants).
//   - Values are normalised before comparing: every field of that name combined with ", ", runs of white space folded
//     to one space, white space around commas removed, leading and trailing white space dropped. A field that is
//     absent only matches an absent field (not an empty one).
//   - Vary: * (alone or in the list) never matches: each such response must be revalidated (Storability refuses to
//     store them anyway).

/// The request field values a Vary-ing response was stored under.
public import ImageCacheHTTP

public struct VaryKey: Sendable, Equatable {
    /// One nominated request field and its normalised value (nil: the request had no such field).
    public struct Field: Sendable, Equatable {
        /// Lower-cased field name.
        public var name: String
        public var value: String?
        public init(name: String, value: String?) {
            self.name = name
            self.value = value
        }
    }

    /// The nominated fields, in name order.
    public let fields: [Field]
    /// True for Vary: *.
    public let matchesNothing: Bool

    /// For rebuilding a stored key (e.g. from disk).
    public init(fields: [Field], matchesNothing: Bool) {
        self.fields = fields
        self.matchesNothing = matchesNothing
    }

    /// nil when the response has no Vary field (or an empty one).
    public static func make(response: HTTPResponseHead, request: HTTPHeaders) -> VaryKey? {
        let names = response.headers.tokens("Vary")
        if names.isEmpty { return nil }
        if names.contains("*") { return VaryKey(fields: [], matchesNothing: true) }
        var fields: [Field] = []
        for raw in names {
            let name = raw.lowercased()
            if fields.contains(where: { $0.name == name }) { continue }
            fields.append(Field(name: name, value: normalisedValue(name, in: request)))
        }
        fields.sort { $0.name < $1.name }
        return VaryKey(fields: fields, matchesNothing: false)
    }

    /// The variant's identity text (see the top); never empty.
    public var id: String {
        if matchesNothing { return "*" }
        var text = ""
        for (n, field) in fields.enumerated() {
            if n > 0 { text += "\n" }
            text += field.name
            if let value = field.value { text += ":" + value }
        }
        return text
    }

    /// The key an `id` was made from; nil for "" (no Vary).
    public init?(id: String) {
        if id.isEmpty { return nil }
        if id == "*" {
            self.init(fields: [], matchesNothing: true)
            return
        }
        let fields = id.split(separator: "\n", omittingEmptySubsequences: false).map { line -> Field in
            guard let colon = line.firstIndex(of: ":") else { return Field(name: String(line), value: nil) }
            return Field(name: String(line[..<colon]), value: String(line[line.index(after: colon)...]))
        }
        self.init(fields: fields, matchesNothing: false)
    }

    /// The nominated field names (lower-cased, in name order): all variants of a URL share them.
    public var names: [String] { matchesNothing ? ["*"] : fields.map(\.name) }

    /// Whether `request` nominates the same stored response (Vary: * never does).
    public func matches(_ request: HTTPHeaders) -> Bool {
        if matchesNothing { return false }
        return fields.allSatisfy { $0.value == VaryKey.normalisedValue($0.name, in: request) }
    }

    static func normalisedValue(_ name: String, in headers: HTTPHeaders) -> String? {
        let values = headers.values(name)
        if values.isEmpty { return nil }
        var out: [UInt8] = []
        var pendingSpace = false
        for (n, value) in values.enumerated() {
            if n > 0 {
                out.append(0x2C)
                pendingSpace = false
            }
            for b in value.utf8 {
                if b == 0x20 || b == 0x09 || b == 0x0D || b == 0x0A {
                    pendingSpace = true
                    continue
                }
                if b == 0x2C {
                    while out.last == 0x20 { out.removeLast() }
                    out.append(0x2C)
                    pendingSpace = false
                    continue
                }
                if pendingSpace, let last = out.last, last != 0x2C { out.append(0x20) }
                pendingSpace = false
                out.append(b)
            }
        }
        // Commas are followed by one space in the canonical form.
        var result: [UInt8] = []
        result.reserveCapacity(out.count + 8)
        for b in out {
            result.append(b)
            if b == 0x2C { result.append(0x20) }
        }
        while result.last == 0x20 { result.removeLast() }
        return String(decoding: result, as: UTF8.self)
    }
}
