// FleetEnvelope: an entry as the fleet tier holds it. A value read back is the same response, verified whole; a
// damaged, truncated, foreign or varied one is refused (never served); only what has freshness left is shared, for
// as long as it has.

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

    @Test("shared for the freshness it has left, at most an hour; not at all when stale, or when it varies (Vary)")
    func sharedTTL() {
        #expect(FleetEnvelope.sharedTTL(of: Self.entry(age: 100), now: Fixture.t0) == 200)
        #expect(FleetEnvelope.sharedTTL(of: Self.entry(age: 299.5), now: Fixture.t0) == nil)
        #expect(FleetEnvelope.sharedTTL(of: Self.entry(cacheControl: "no-cache"), now: Fixture.t0) == nil)
        let varied = Self.entry(extra: [("Vary", "Accept")], requestHeaders: ["Accept": "image/webp"])
        #expect(FleetEnvelope.sharedTTL(of: varied, now: Fixture.t0) == nil)
        // At most an hour: no value outlives the hosts' memory of a purge (FleetPurges).
        #expect(FleetEnvelope.sharedTTL(of: Self.entry(cacheControl: "max-age=31536000"), now: Fixture.t0) == 3600)
    }
}
