// Data model: a `CacheEntry` is one stored response: its key, status and end-to-end fields, the whole body, the
// request/response times it was received at, the Vary key it was selected with, and what is derived from them once
// (parsed Cache-Control, freshness lifetime, corrected initial age, cost). An immutable Sendable object: it is never
// changed in place by anyone; a 304 produces a new entry (`refreshed`) that the owner of the map (MemoryCache's
// lock, the disk queue) swaps in. A class and not a struct: a hit hands the entry out of the cache's lock and down
// to the connection, and a reference is one retain where a struct of a dozen fields was a dozen (the copies showed
// in profiles of the memory-hit path). The body array is shared, never copied, between entries.
//
// What is derived once per entry also includes the wire form of the stored head (`serializedHead`: status line and
// fields, hop-by-hop, Content-Length, Age, Cache-Status and X-Cache left out), so a hit writes those bytes as they are
// and adds only Age, Cache-Status, X-Cache and the framing fields; a refresh renders them again.
//
// 304 merging (RFC 9111 sections 3.2 and 4.3.4), cf. Varnish vbf_304_logic:
//   - every field of the 304 replaces the stored fields of that name, and fields the 304 lacks are kept,
//   - except the fields describing the stored body, which stay as stored: Content-Length, Content-Encoding,
//     Content-Type, Content-Range, Transfer-Encoding (and hop-by-hop fields, never stored);
//   - a 304 without Date gets the time of receipt as Date (RFC 9110 section 6.6.1), and a stored Age the 304 does not
//     repeat is dropped: both described the old response and would otherwise age the refreshed one;
//   - times are those of the revalidation exchange; lifetime and age are recomputed.

public import ImageCacheHTTP
public import Foundation

/// One stored response.
public final class CacheEntry: Sendable {
    public let key: CacheKey
    /// Stored status and fields (hop-by-hop fields already removed by the caller).
    public let head: HTTPResponseHead
    public let body: [UInt8]
    public let requestTime: Date
    public let responseTime: Date
    /// The request field values it was selected with; nil when the response has no Vary.
    public let vary: VaryKey?
    /// Which variant of its URL it is: `vary?.id`, "" without Vary (see Vary.swift), made once.
    public let variantID: String
    /// Parsed once from `head`.
    public let cacheControl: CacheControl
    /// Seconds; computed at store / refresh.
    public let freshnessLifetime: Double
    /// Seconds; computed at store / refresh.
    public let correctedInitialAge: Double
    /// Bytes charged against the memory budget: body + approximate header bytes (counted twice: the fields and
    /// their serialised form) + fixed overhead.
    public let cost: Int
    /// The stored head as sent on a hit, rendered once (see above).
    public let serializedHead: SerializedResponseHead
    /// The origin's own Cache-Status (all its fields combined), to which ours is appended; nil when it sent none.
    public let upstreamCacheStatus: String?
    /// The stored head carries `UntrustedResponse`'s fields (stored from an untrusted fetch): an untrusted client's
    /// hit needs nothing added.
    public let guardsUntrusted: Bool

    /// Fields left out of `serializedHead`: they change with every response and are sent with it.
    public static let perResponseFields = ["Age", "Cache-Status", "X-Cache"]

    /// Per-entry bookkeeping bytes counted in `cost`.
    public static let fixedOverheadBytes = 256

    /// A newly fetched response; the Vary key is taken from the request fields it was fetched with.
    public convenience init(key: CacheKey, head: HTTPResponseHead, body: [UInt8], requestTime: Date, responseTime: Date,
                            requestHeaders: HTTPHeaders, policy: FreshnessPolicy) {
        self.init(key: key, head: head, body: body, requestTime: requestTime, responseTime: responseTime,
                  vary: VaryKey.make(response: head, request: requestHeaders), policy: policy)
    }

    /// A stored response rebuilt with a known Vary key (e.g. loaded from disk); what is derived from the head is
    /// derived here, the one place (a refresh after a 304 comes through here too).
    public convenience init(key: CacheKey, head given: HTTPResponseHead, body: [UInt8], requestTime: Date, responseTime: Date,
                            vary: VaryKey?, policy: FreshnessPolicy) {
        // A response from a configured origin (one the untrusted treatment was not applied to) follows its targeted
        // cache-control field when it has one (RFC 9213).
        let guardsUntrusted = UntrustedResponse.isApplied(given.headers)
        let cacheControl = policy.cacheControl(given.headers, trusted: !guardsUntrusted)
        // The fields a qualified private names are one user's: never stored (RFC 9111 5.2.2.7).
        var head = given
        if !cacheControl.privateFields.isEmpty {
            head.headers.removeAll { field in cacheControl.privateFields.contains(field.name.lowercased()) }
        }
        let serializedHead = SerializedResponseHead(head, excluding: CacheEntry.perResponseFields
                                                        + (policy.stripsTargetedFields ? policy.targetedFields : []))
        let variantID = vary?.id ?? ""
        self.init(key: key, head: head, body: body, requestTime: requestTime, responseTime: responseTime, vary: vary,
                  variantID: variantID, cacheControl: cacheControl,
                  freshnessLifetime: Freshness.lifetime(of: head, cacheControl: cacheControl, responseTime: responseTime, policy: policy),
                  correctedInitialAge: Freshness.correctedInitialAge(of: head, requestTime: requestTime, responseTime: responseTime),
                  // The Vary values are held twice (the key's fields and the id): a client's long field values count.
                  cost: CacheEntry.cost(head: head, bodyCount: body.count) + serializedHead.bytes.count
                      + 2 * variantID.utf8.count,
                  serializedHead: serializedHead, upstreamCacheStatus: head.headers.combined("Cache-Status"),
                  guardsUntrusted: guardsUntrusted)
    }

    /// Every field given (the initialiser above, `withBody`).
    private init(key: CacheKey, head: HTTPResponseHead, body: [UInt8], requestTime: Date, responseTime: Date, vary: VaryKey?,
                 variantID: String, cacheControl: CacheControl, freshnessLifetime: Double, correctedInitialAge: Double, cost: Int,
                 serializedHead: SerializedResponseHead, upstreamCacheStatus: String?, guardsUntrusted: Bool) {
        self.key = key
        self.head = head
        self.body = body
        self.requestTime = requestTime
        self.responseTime = responseTime
        self.vary = vary
        self.variantID = variantID
        self.cacheControl = cacheControl
        self.freshnessLifetime = freshnessLifetime
        self.correctedInitialAge = correctedInitialAge
        self.cost = cost
        self.serializedHead = serializedHead
        self.upstreamCacheStatus = upstreamCacheStatus
        self.guardsUntrusted = guardsUntrusted
    }

    /// The same response with another body (the disk tier keeps decoded heads without one): cost follows the body.
    func withBody(_ body: [UInt8]) -> CacheEntry {
        CacheEntry(key: key, head: head, body: body, requestTime: requestTime, responseTime: responseTime, vary: vary,
                   variantID: variantID, cacheControl: cacheControl, freshnessLifetime: freshnessLifetime, correctedInitialAge: correctedInitialAge,
                   cost: cost + body.count - self.body.count, serializedHead: serializedHead,
                   upstreamCacheStatus: upstreamCacheStatus, guardsUntrusted: guardsUntrusted)
    }

    public var etag: String? { head.headers["ETag"] }
    public var lastModified: String? { head.headers["Last-Modified"] }
    /// Its version's name: ETag, else Last-Modified (HTTPHeaders.validator).
    public var validator: String? { head.headers.validator }

    /// Fields of the stored response that a 304 does not update: they describe the stored body.
    public static let fieldsKeptOn304 = ["Content-Length", "Content-Encoding", "Content-Type", "Content-Range", "Transfer-Encoding"]

    /// The entry after a 304 Not Modified for it (see the merge rules above).
    public func refreshed(with notModified: HTTPResponseHead, requestTime: Date, responseTime: Date,
                          policy: FreshnessPolicy) -> CacheEntry {
        var headers = head.headers
        var incoming = notModified.headers
        HopByHop.strip(&incoming)
        incoming.removeAll { field in CacheEntry.fieldsKeptOn304.contains { $0.equalsIgnoringASCIICase(field.name) } }
        var replaced: [String] = []
        for field in incoming where !replaced.contains(where: { $0.equalsIgnoringASCIICase(field.name) }) {
            replaced.append(field.name)
            headers.remove(field.name)
        }
        for field in incoming { headers.add(field.name, field.value) }
        if !incoming.contains("Date") { headers.set("Date", HTTPDate.format(responseTime)) }
        if !incoming.contains("Age") { headers.remove("Age") }

        var head = self.head
        head.headers = headers
        return CacheEntry(key: key, head: head, body: body, requestTime: requestTime, responseTime: responseTime, vary: vary,
                          policy: policy)
    }

    /// Whether a 304 identifies this stored response for update (RFC 9111 section 4.3.4): by a strong ETag equal to
    /// ours, else by a weak ETag equal to ours, else by a Last-Modified equal to ours. A 304 naming another
    /// validator must not refresh us. A 304 with no validator at all selects us: we sent the conditional request
    /// for this one stored variant ourselves, with its validators (many origins, Python's http.server among them, send
    /// bare 304s; Varnish and nginx refresh on them too), which is stricter reading of 4.3.4's third case relaxed.
    public func isSelected(by notModified: HTTPResponseHead) -> Bool {
        if let theirs = notModified.headers["ETag"].flatMap({ EntityTag.parse($0) }) {
            guard let ours = etag.flatMap({ EntityTag.parse($0) }) else { return false }
            return theirs.isWeak ? theirs.weakMatches(ours) : theirs.strongMatches(ours)
        }
        if let theirs = notModified.headers["Last-Modified"] {
            return lastModified.map { HTTPDate.parse($0) == HTTPDate.parse(theirs) && HTTPDate.parse($0) != nil } ?? false
        }
        return true
    }

    /// Conditional request fields that revalidate this entry: If-None-Match with its ETag, If-Modified-Since with
    /// its Last-Modified (RFC 9111 section 4.3.1). Empty when it has no validator.
    public var conditionalHeaders: HTTPHeaders {
        var headers = HTTPHeaders()
        if let etag { headers.add("If-None-Match", etag) }
        if let lastModified { headers.add("If-Modified-Since", lastModified) }
        return headers
    }

    static func cost(head: HTTPResponseHead, bodyCount: Int) -> Int {
        var headerBytes = 16 + head.reason.utf8.count
        for field in head.headers { headerBytes += field.name.utf8.count + field.value.utf8.count + 4 }
        return bodyCount + headerBytes + fixedOverheadBytes
    }
}
