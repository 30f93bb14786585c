// HTTP header fields: an ordered list of (name, value) pairs with case-insensitive lookup.
// Pure value type, no I/O. Names keep the spelling they arrived with; comparisons ignore ASCII case.

/// An ordered list of HTTP header fields. Lookups ignore the case of names (RFC 9110 section 5.1).
public struct HTTPHeaders: Sendable, Equatable, Sequence, ExpressibleByDictionaryLiteral {
    public struct Field: Sendable, Equatable {
        public var name: String
        public var value: String
        public init(name: String, value: String) {
            self.name = name
            self.value = value
        }
    }

    public private(set) var fields: [Field]

    public init() { fields = [] }

    public init(_ pairs: [(String, String)]) {
        fields = pairs.map { Field(name: $0.0, value: $0.1) }
    }

    public init(dictionaryLiteral elements: (String, String)...) {
        self.init(elements)
    }

    public var count: Int { fields.count }
    public var isEmpty: Bool { fields.isEmpty }

    public func makeIterator() -> IndexingIterator<[Field]> { fields.makeIterator() }

    /// The first value of `name`, or nil.
    /// What names a response's version: its ETag, else its Last-Modified (nil: neither). The one rule for telling
    /// a changed source (renditions made from another version are outdated).
    public var validator: String? { self["ETag"] ?? self["Last-Modified"] }

    public subscript(name: String) -> String? {
        for field in fields where field.name.equalsIgnoringASCIICase(name) { return field.value }
        return nil
    }

    /// Every value of `name`, in order.
    public func values(_ name: String) -> [String] {
        fields.compactMap { $0.name.equalsIgnoringASCIICase(name) ? $0.value : nil }
    }

    /// Every value of `name` joined as one comma-separated list (RFC 9110 section 5.3), or nil when absent.
    public func combined(_ name: String) -> String? {
        // No allocation when the field is absent or appears once (the common cases, on the hit path).
        var first: String?
        var more = false
        for field in fields where field.name.equalsIgnoringASCIICase(name) {
            if first == nil { first = field.value } else { more = true; break }
        }
        guard more else { return first }
        return values(name).joined(separator: ", ")
    }

    /// The comma-separated list elements of every `name` field, trimmed, empty elements dropped.
    public func tokens(_ name: String) -> [Substring] {
        values(name).flatMap { $0.split(separator: ",") }.map { $0.trimmingOWS() }.filter { !$0.isEmpty }
    }

    public func contains(_ name: String) -> Bool { self[name] != nil }

    public mutating func add(_ name: String, _ value: String) {
        fields.append(Field(name: name, value: value))
    }

    /// Replaces every `name` field with one field holding `value`.
    public mutating func set(_ name: String, _ value: String) {
        remove(name)
        add(name, value)
    }

    public mutating func remove(_ name: String) {
        fields.removeAll { $0.name.equalsIgnoringASCIICase(name) }
    }

    public mutating func removeAll(where predicate: (Field) -> Bool) {
        fields.removeAll(where: predicate)
    }
}

extension String {
    /// ASCII case-insensitive comparison, as header names and tokens need; no allocation. Lengths are compared
    /// first (O(1) for native strings), so most non-matching names cost no byte loop.
    @inlinable
    public func equalsIgnoringASCIICase(_ other: String) -> Bool {
        guard utf8.count == other.utf8.count else { return false }
        var a = utf8.makeIterator()
        var b = other.utf8.makeIterator()
        while true {
            switch (a.next(), b.next()) {
            case (nil, nil): return true
            case let (x?, y?):
                if x == y { continue }
                let lx = (x >= 65 && x <= 90) ? x | 0x20 : x
                let ly = (y >= 65 && y <= 90) ? y | 0x20 : y
                if lx != ly { return false }
            default: return false
            }
        }
    }
}

extension Substring {
    /// Drops leading and trailing optional white space (SP and HTAB, RFC 9110 section 5.6.3).
    /// Without leading and trailing SP and HTAB. By Unicode scalars, not Characters: a space followed by a combining
    /// mark is one Character, and a value that begins with a combining mark must come back the same once serialised
    /// after ": " and parsed again.
    public func trimmingOWS() -> Substring {
        let scalars = unicodeScalars
        var start = scalars.startIndex, end = scalars.endIndex
        while start < end, scalars[start] == " " || scalars[start] == "\t" { start = scalars.index(after: start) }
        while end > start {
            let last = scalars.index(before: end)
            guard scalars[last] == " " || scalars[last] == "\t" else { break }
            end = last
        }
        return self[start..<end]
    }
}

extension String {
    public func trimmingOWS() -> Substring { self[...].trimmingOWS() }
}
