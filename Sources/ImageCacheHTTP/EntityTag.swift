// Entity tags (RFC 9110 section 8.8.3) and If-None-Match evaluation (section 13.1.2). Pure, no I/O.
//
//   entity-tag = [ "W/" ] opaque-tag      opaque-tag = DQUOTE *etagc DQUOTE
//   etagc      = %x21 / %x23-7E / obs-text
//
// Strong comparison: both strong and the opaque tags are identical. Weak comparison: the opaque tags are identical.
// Lists are parsed leniently: white space around elements and empty elements are skipped, an element that is not
// an entity tag is dropped (it can never match), and commas inside quotes belong to the tag.

/// One entity tag, e.g. `W/"v1"`.
public struct EntityTag: Sendable, Equatable, CustomStringConvertible {
    public var isWeak: Bool
    /// The opaque tag with its quotes, e.g. `"v1"`.
    public var opaque: String

    public init(isWeak: Bool = false, opaque: String) {
        self.isWeak = isWeak
        self.opaque = opaque
    }

    /// The field-value form: `W/"v1"` or `"v1"`.
    public var description: String { isWeak ? "W/" + opaque : opaque }

    /// One entity tag, surrounding white space allowed; nil when it is not one.
    public static func parse(_ text: some StringProtocol) -> EntityTag? {
        let bytes = Array(text.utf8)
        var i = 0
        let tag = scan(bytes, &i)
        while i < bytes.count, bytes[i] == 0x20 || bytes[i] == 0x09 { i += 1 }
        return i == bytes.count ? tag : nil
    }

    /// The entity tags of a comma-separated list (If-None-Match, If-Match). "*" is not a tag and is not returned.
    public static func parseList(_ text: String) -> [EntityTag] {
        let bytes = Array(text.utf8)
        var tags: [EntityTag] = []
        var i = 0
        while i < bytes.count {
            if let tag = scan(bytes, &i) { tags.append(tag) }
            // Skip to past the next comma (after a tag: only white space; after junk: whatever it was).
            while i < bytes.count, bytes[i] != 0x2C { i += 1 }
            i += 1
        }
        return tags
    }

    public func weakMatches(_ other: EntityTag) -> Bool {
        opaque == other.opaque
    }

    public func strongMatches(_ other: EntityTag) -> Bool {
        !isWeak && !other.isWeak && opaque == other.opaque
    }

    /// If-None-Match evaluation (RFC 9110 section 13.1.2) against a stored representation whose ETag field is `etag`:
    /// true when the condition is false, i.e. a tag in the list weakly matches (answer 304), or the field is "*"
    /// (there is a current representation: the caller only asks about one it holds).
    public static func ifNoneMatch(_ fieldValue: String, matches etag: String?) -> Bool {
        if fieldValue.trimmingOWS() == "*" { return true }
        guard let etag, let current = parse(etag) else { return false }
        return parseList(fieldValue).contains { $0.weakMatches(current) }
    }

    /// Scans optional white space and one entity tag from `i`; on failure `i` stops where scanning gave up.
    private static func scan(_ bytes: [UInt8], _ i: inout Int) -> EntityTag? {
        while i < bytes.count, bytes[i] == 0x20 || bytes[i] == 0x09 { i += 1 }
        var weak = false
        if i + 1 < bytes.count, bytes[i] == 0x57, bytes[i + 1] == 0x2F {  // "W/"
            weak = true
            i += 2
        }
        guard i < bytes.count, bytes[i] == 0x22 else { return nil }
        let start = i
        i += 1
        while i < bytes.count, bytes[i] != 0x22 {
            let b = bytes[i]
            guard b == 0x21 || b >= 0x23 && b != 0x7F else { return nil }
            i += 1
        }
        guard i < bytes.count else { return nil }
        i += 1
        return EntityTag(isWeak: weak, opaque: String(decoding: bytes[start..<i], as: UTF8.self))
    }
}
