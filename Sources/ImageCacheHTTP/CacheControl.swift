// Cache-Control (RFC 9111 section 5.2), request and response directives in one value; and the targeted fields
// (RFC 9213), read as the Structured Fields Dictionaries they are (`init(targeted:)`).
//
// Parsing policy:
//   - Every Cache-Control field of the message is read, as one comma-separated list (RFC 9110 section 5.3).
//     Commas inside quoted strings do not split (no-cache="Set-Cookie, X-Foo" is one directive).
//   - Directive names are case-insensitive; values may be tokens or quoted strings (section 5.2: recipients accept both).
//   - delta-seconds larger than 2^31 are taken as 2^31 (RFC 9111 section 1.2.2).
//   - max-age / s-maxage with a missing or invalid value count as 0: the response is stale (RFC 9111 section 4.2.1).
//     Other directives with invalid values (stale-while-revalidate, stale-if-error, max-stale=, min-fresh) are ignored,
//     which never serves more stale content than the sender asked for.
//   - Qualified private="A, B" (RFC 9111 5.2.2.7) names the fields meant for one user: `privateFields` (lower-cased);
//     the response stays shareable and storable without them. An unqualified private (or an empty list) wins.
//   - Qualified no-cache="..." is treated as unqualified: every use is revalidated, so the named fields are never
//     sent without a successful revalidation (5.2.2.4, more strictly than it asks).
//   - Duplicates: the most restrictive value wins (smallest max-age, s-maxage, max-stale, stale-*; largest min-fresh).
//   - Unknown directives are ignored (RFC 9111 section 5.2.3).
//   - With no Cache-Control field at all, `Pragma: no-cache` means no-cache (RFC 9111 section 5.4).
// Pure, no I/O.

internal import RawStructuredFieldValues

/// The Cache-Control directives of one request or response.
public struct CacheControl: Sendable, Equatable {
    /// The request's max-stale: any staleness, or at most this many seconds.
    public enum MaxStale: Sendable, Equatable {
        case any
        case seconds(Int)
    }

    public var maxAge: Int?
    public var sMaxAge: Int?
    public var noCache: Bool = false
    public var noStore: Bool = false
    /// Unqualified private: for one user only.
    public var isPrivate: Bool = false
    /// Qualified private="...": these fields (lower-cased) are for one user; the rest may be stored and shared.
    public var privateFields: [String] = []
    public var isPublic: Bool = false
    public var mustRevalidate: Bool = false
    public var proxyRevalidate: Bool = false
    public var noTransform: Bool = false
    public var immutable: Bool = false
    public var staleWhileRevalidate: Int?
    public var staleIfError: Int?
    // Request directives.
    public var maxStale: MaxStale?
    public var minFresh: Int?
    public var onlyIfCached: Bool = false

    public init() {}

    /// The directives of every Cache-Control field in `headers` (or `Pragma: no-cache` when there is none).
    public init(_ headers: HTTPHeaders) {
        // Most requests carry neither field: no allocation for them (this runs on the hit path).
        guard headers.contains("Cache-Control") || headers.contains("Pragma") else { return }
        let fields = headers.values("Cache-Control")
        if fields.isEmpty {
            noCache = headers.tokens("Pragma").contains { String($0).equalsIgnoringASCIICase("no-cache") }
            return
        }
        for field in fields {
            CacheControl.forEachDirective(in: field) { name, value in apply(name: name, value: value) }
        }
    }

    /// The directives of a targeted cache-control field (RFC 9213 2.1), its lines `fields`: a Structured Fields
    /// Dictionary (RFC 9651). nil when it is not a valid one: the field is then ignored, as if absent. A directive
    /// whose value has the wrong type (max-age="10") is ignored; so are parameters, inner lists and directives this
    /// cache does not know. The restrictive ones err on the safe side: `private="X-User"` names its fields (a String,
    /// RFC 9213 2.1), `no-cache="..."` is `no-cache`, and `no-store`, `private`, `no-cache` hold with any value but
    /// false (`?0`).
    public init?(targeted fields: [String]) {
        var parser = StructuredFieldValueParser(Array(fields.joined(separator: ", ").utf8))
        guard let dictionary = try? parser.parseDictionaryFieldValue() else { return nil }
        for (name, member) in dictionary {
            guard case let .item(item) = member else { continue }
            switch (name, item.rfc9651BareItem) {
            case let ("max-age", .integer(seconds)), let ("s-maxage", .integer(seconds)),
                 let ("stale-while-revalidate", .integer(seconds)), let ("stale-if-error", .integer(seconds)):
                if seconds >= 0 { apply(name: name, value: String(min(seconds, Int64(Self.deltaSecondsCap)))) }
            case ("no-store", .bool(false)), ("no-cache", .bool(false)), ("private", .bool(false)):
                continue
            case let ("private", .string(fields)):
                apply(name: name, value: fields)
            case ("no-store", _), ("no-cache", _), ("private", _):
                apply(name: name, value: nil)
            case ("public", .bool(true)), ("must-revalidate", .bool(true)), ("proxy-revalidate", .bool(true)),
                 ("no-transform", .bool(true)), ("immutable", .bool(true)):
                apply(name: name, value: nil)
            default:
                continue
            }
        }
    }

    /// Largest delta-seconds we represent (RFC 9111 section 1.2.2).
    public static let deltaSecondsCap = 2_147_483_648

    // MARK: - Parsing

    private mutating func apply(name: String, value: String?) {
        switch name {
        case "max-age": maxAge = Self.restrictive(maxAge, Self.deltaSeconds(value) ?? 0, by: min)
        case "s-maxage": sMaxAge = Self.restrictive(sMaxAge, Self.deltaSeconds(value) ?? 0, by: min)
        case "no-cache": noCache = true
        case "no-store": noStore = true
        case "private":
            let names = (value ?? "").split(separator: ",").map { $0.trimmingOWS().lowercased() }.filter { !$0.isEmpty }
            if names.isEmpty {
                isPrivate = true
            } else {
                for name in names where !privateFields.contains(name) { privateFields.append(name) }
            }
        case "public": isPublic = true
        case "must-revalidate": mustRevalidate = true
        case "proxy-revalidate": proxyRevalidate = true
        case "no-transform": noTransform = true
        case "immutable": immutable = true
        case "only-if-cached": onlyIfCached = true
        case "stale-while-revalidate":
            if let v = Self.deltaSeconds(value) { staleWhileRevalidate = Self.restrictive(staleWhileRevalidate, v, by: min) }
        case "stale-if-error":
            if let v = Self.deltaSeconds(value) { staleIfError = Self.restrictive(staleIfError, v, by: min) }
        case "min-fresh":
            if let v = Self.deltaSeconds(value) { minFresh = Self.restrictive(minFresh, v, by: max) }
        case "max-stale":
            if value == nil {
                if maxStale == nil { maxStale = .any }
            } else if let v = Self.deltaSeconds(value) {
                switch maxStale {
                case let .seconds(old): maxStale = .seconds(min(old, v))
                case .any, nil: maxStale = .seconds(v)
                }
            }
        default: break
        }
    }

    private static func restrictive(_ old: Int?, _ new: Int, by pick: (Int, Int) -> Int) -> Int {
        old.map { pick($0, new) } ?? new
    }

    /// delta-seconds = 1*DIGIT, capped at 2^31; nil when missing or not all digits.
    package static func deltaSeconds(_ text: String?) -> Int? {
        guard let text, !text.isEmpty else { return nil }
        var value = 0
        for b in text.utf8 {
            guard b >= 0x30 && b <= 0x39 else { return nil }
            value = min(value * 10 + Int(b - 0x30), deltaSecondsCap)
        }
        return value
    }

    /// Calls `body` with each directive's lower-cased name and its value (unquoted), or nil when it has none.
    static func forEachDirective(in field: String, _ body: (String, String?) -> Void) {
        let bytes = Array(field.utf8)
        var i = 0
        func skipOWS() { while i < bytes.count, bytes[i] == 0x20 || bytes[i] == 0x09 { i += 1 } }
        while i < bytes.count {
            skipOWS()
            // Name: up to '=', ',' or white space.
            let nameStart = i
            while i < bytes.count, bytes[i] != 0x3D, bytes[i] != 0x2C, bytes[i] != 0x20, bytes[i] != 0x09 { i += 1 }
            let name = String(decoding: bytes[nameStart..<i].map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }, as: UTF8.self)
            skipOWS()
            var value: String?
            if i < bytes.count, bytes[i] == 0x3D {
                i += 1
                skipOWS()
                if i < bytes.count, bytes[i] == 0x22 {
                    // quoted-string with quoted-pairs
                    i += 1
                    var unquoted: [UInt8] = []
                    while i < bytes.count, bytes[i] != 0x22 {
                        if bytes[i] == 0x5C, i + 1 < bytes.count { i += 1 }
                        unquoted.append(bytes[i])
                        i += 1
                    }
                    if i < bytes.count { i += 1 }  // closing quote
                    value = String(decoding: unquoted, as: UTF8.self)
                } else {
                    let valueStart = i
                    while i < bytes.count, bytes[i] != 0x2C, bytes[i] != 0x20, bytes[i] != 0x09 { i += 1 }
                    value = String(decoding: bytes[valueStart..<i], as: UTF8.self)
                }
            }
            // Anything else up to the next comma is junk; skip it.
            while i < bytes.count, bytes[i] != 0x2C { i += 1 }
            i += 1
            if !name.isEmpty { body(name, value) }
        }
    }
}
