// FleetEnvelope: an entry as the fleet tier holds it. A value read back is the same response, verified whole; a
// damaged, truncated or foreign one, or one whose variant disagrees with its Vary, is refused (never served); a varied
// one keeps its variant; only what has freshness left is shared, for as long as it has.

import Foundation
import ImageCacheTestSupport
import Testing
@testable import ImageCacheHTTP
@testable import ImageCacheStore

@Suite("FleetEnvelope: entries in the fleet tier", .timeLimit(.minutes(1)))
struct FleetEnvelopeTests {
    static let body: [UInt8] = [0x89, 0x50, 0x4E, 0x47] + (0..<4000).map { UInt8($0 % 251) }

    static func entry(key: CacheKey = Fixture.key(), cacheControl: String = "max-age=300", age: Double = 0,
                      extra: [(String, String)] = [], requestHeaders: HTTPHeaders = [:]) -> CacheEntry {
        Fixture.entry([("Content-Type", "image/png"), ("Cache-Control", cacheControl), ("ETag", "\"e1\"")] + extra,
                      key: key, body: body, requestTime: Fixture.t0.addingTimeInterval(-age),
                      responseTime: Fixture.t0.addingTimeInterval(-age), requestHeaders: requestHeaders)
    }

    @Test("a value read back is the same response: head, body, times (so its age counts from the first fetch)")
    func roundTrip() throws {
        let entry = Self.entry(age: 30)
        let decoded = try FleetEnvelope.decode(FleetEnvelope.encode(entry), for: entry.key, policy: FreshnessPolicy())
        #expect(decoded.body == entry.body)
        #expect(decoded.head.headers["ETag"] == "\"e1\"")
        #expect(decoded.responseTime == entry.responseTime)
        #expect(Freshness.currentAge(decoded, now: Fixture.t0) == 30)
    }

    @Test("a flipped byte anywhere, a truncated value or extra bytes are refused")
    func damage() {
        let entry = Self.entry()
        let value = FleetEnvelope.encode(entry)
        for index in stride(from: 0, to: value.count, by: 97) {
            var damaged = value
            damaged[index] ^= 0x40
            #expect(throws: FleetEnvelope.Refusal.self) { try FleetEnvelope.decode(damaged, for: entry.key, policy: FreshnessPolicy()) }
        }
        #expect(throws: FleetEnvelope.Refusal.self) { try FleetEnvelope.decode(Array(value.dropLast()), for: entry.key, policy: FreshnessPolicy()) }
        #expect(throws: FleetEnvelope.Refusal.self) { try FleetEnvelope.decode(value + [0], for: entry.key, policy: FreshnessPolicy()) }
        #expect(throws: FleetEnvelope.Refusal.self) { try FleetEnvelope.decode(Array("pass".utf8), for: entry.key, policy: FreshnessPolicy()) }
    }

    @Test("another URL's value under this key (a collision, a stray write) is refused: the key field is the full URL")
    func foreign() {
        let other = Self.entry(key: Fixture.key("http://origin.test/other.png"))
        #expect(throws: FleetEnvelope.Refusal.self) {
            try FleetEnvelope.decode(FleetEnvelope.encode(other), for: Fixture.key(), policy: FreshnessPolicy())
        }
    }

    @Test("keys: ic1: and the disk name, under memcached's 250 bytes, printable, and distinct for a rendition")
    func keys() {
        let key = FleetEnvelope.key(for: Fixture.key())
        #expect(key.hasPrefix("ic1:") && key.utf8.count == 68)
        #expect(key.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F })
        let rendition = FleetEnvelope.key(for: CacheKey(Fixture.key().url, rendition: "rs:fill:300:200/f:webp"))
        #expect(rendition.hasPrefix(key + "~") && rendition.utf8.count <= 250)
    }

    @Test("shared for the freshness it has left, at most a day, with its variant when it varies; not at all when stale or Vary: *")
    func sharedTTL() {
        #expect(FleetEnvelope.sharedTTL(of: Self.entry(age: 100), now: Fixture.t0) == 200)
        #expect(FleetEnvelope.sharedTTL(of: Self.entry(age: 299.5), now: Fixture.t0) == nil)
        #expect(FleetEnvelope.sharedTTL(of: Self.entry(cacheControl: "no-cache"), now: Fixture.t0) == nil)
        let varied = Self.entry(extra: [("Vary", "Accept")], requestHeaders: ["Accept": "image/webp"])
        #expect(FleetEnvelope.sharedTTL(of: varied, now: Fixture.t0) == 300)
        let everything = Self.entry(extra: [("Vary", "*")])
        #expect(FleetEnvelope.sharedTTL(of: everything, now: Fixture.t0) == nil)
        // At most a day: no value outlives the hosts' memory of a purge (FleetPurges keeps it an hour longer).
        #expect(FleetEnvelope.sharedTTL(of: Self.entry(cacheControl: "max-age=31536000"), now: Fixture.t0) == 86_400)
    }

    @Test("a varied response travels with its variant: read back, it selects the requests its own did, and no other")
    func variantRoundTrip() throws {
        let varied = Self.entry(extra: [("Vary", "Origin, Accept")], requestHeaders: ["Accept": "image/webp"])
        let decoded = try FleetEnvelope.decode(FleetEnvelope.encode(varied), for: varied.key, policy: FreshnessPolicy())
        #expect(decoded.variantID == varied.variantID && !decoded.variantID.isEmpty)
        #expect(decoded.vary?.matches(["Accept": "image/webp"]) == true)
        #expect(decoded.vary?.matches(["Accept": "image/avif"]) == false)
        #expect(decoded.vary?.matches(["Accept": "image/webp", "Origin": "https://site.test"]) == false)
    }

    @Test("a value whose variant disagrees with its head's Vary is refused (not one this daemon wrote)")
    func variantMismatch() {
        // Vary names Accept; the variant was made for Origin.
        let varied = Self.entry(extra: [("Vary", "Origin")], requestHeaders: ["Origin": "https://a.test"])
        var head = varied.head
        head.headers.remove("Vary")
        head.headers.add("Vary", "Accept")
        let forged = CacheEntry(key: varied.key, head: head, body: varied.body, requestTime: varied.requestTime,
                                responseTime: varied.responseTime, vary: varied.vary, policy: FreshnessPolicy())
        #expect(throws: FleetEnvelope.Refusal.self) {
            try FleetEnvelope.decode(FleetEnvelope.encode(forged), for: varied.key, policy: FreshnessPolicy())
        }
        // A response with Vary and no variant is refused
        let bare = CacheEntry(key: varied.key, head: varied.head, body: varied.body, requestTime: varied.requestTime,
                              responseTime: varied.responseTime, vary: nil, policy: FreshnessPolicy())
        #expect(throws: FleetEnvelope.Refusal.self) {
            try FleetEnvelope.decode(FleetEnvelope.encode(bare), for: varied.key, policy: FreshnessPolicy())
        }
        // but a rendition made for Accept (its key names the format it chose) has Vary: Accept and no variant: read.
        let rendition = CacheEntry(key: CacheKey(varied.key.url, rendition: "rs:fit:100:100/f:auto"), head: varied.head,
                                   body: varied.body, requestTime: varied.requestTime, responseTime: varied.responseTime,
                                   vary: nil, policy: FreshnessPolicy())
        #expect(throws: Never.self) {
            try FleetEnvelope.decode(FleetEnvelope.encode(rendition), for: rendition.key, policy: FreshnessPolicy())
        }
    }
}
