// Data model: a `VaryKey` records, for a stored response that has a Vary field, the request field values it was
// selected with (RFC 9111 section 4.1). An immutable value kept inside its `CacheEntry`; no owner, no lock.
//
// Matching policy:
//   - Vary names are compared ignoring case; duplicates are listed once.
//   - Values are normalised before comparing: every field of that name combined with ", ", runs of white space folded
//     to one space, white space around commas removed, leading and trailing white space dropped. A field that is
//     absent only matches an absent field (not an empty one).
//   - Vary: * (alone or in the list) never matches: each such response must be revalidated (Storability refuses to
//     store them anyway).

/// The request field values a Vary-ing response was stored under.
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

    /// The nominated fields, in Vary order.
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
        return VaryKey(fields: fields, matchesNothing: false)
    }

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
