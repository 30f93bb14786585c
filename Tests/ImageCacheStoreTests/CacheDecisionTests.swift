import Foundation
import ImageCacheTestSupport
@testable import ImageCacheHTTP
@testable import ImageCacheStore
import Testing
import ImageCacheStatus

/// The cache decision as a table: what is stored, what the request says, how old the entry is -> what happens.
@Suite("CacheDecision", .timeLimit(.minutes(1)))
struct CacheDecisionTests {
    typealias Fields = [(String, String)]

    struct Case: CustomTestStringConvertible, Sendable {
        let name: String
        /// The stored response's fields (the variant the store selected); nil: none selected.
        let stored: Fields?
        /// With `stored` nil: the URL has variants, none for this request.
        var otherVariants = false
        /// The request fields the stored variant was fetched with (its Vary is judged on them).
        var storedWith: Fields = [("Accept", "image/webp")]
        /// The request's fields (directives and Vary-nominated ones).
        var request: Fields = [("Accept", "image/webp")]
        /// Seconds since the stored response was received.
        var age: Double = 10
        /// The configured stale-while-revalidate window (`stale-while-revalidate`), seconds.
        var configuredSWR: Double = 0
        let expected: CacheDecision
        var testDescription: String { name }
    }

    static let validator: Fields = [("ETag", "\"v1\"")]

    static let cases: [Case] = [
        Case(name: "nothing stored: miss", stored: nil, expected: .forward(.miss, conditional: false)),
        Case(name: "nothing stored, only-if-cached: 504", stored: nil, request: [("Cache-Control", "only-if-cached")],
             expected: .refuse(status: 504, reason: CacheDecision.notCached)),
        Case(name: "fresh: served with its ttl", stored: [("Cache-Control", "max-age=60")],
             expected: .serve(.fresh(ttl: 50))),
        Case(name: "fresh, only-if-cached: served", stored: [("Cache-Control", "max-age=60")],
             request: [("Cache-Control", "only-if-cached")], expected: .serve(.fresh(ttl: 50))),
        Case(name: "the request's max-age caps the lifetime", stored: [("Cache-Control", "max-age=60")] + validator,
             request: [("Cache-Control", "max-age=5")], expected: .forward(.stale, conditional: true)),
        Case(name: "min-fresh asks for more than is left", stored: [("Cache-Control", "max-age=60")] + validator,
             request: [("Cache-Control", "min-fresh=55")], expected: .forward(.stale, conditional: true)),
        Case(name: "stale with a validator: revalidate", stored: [("Cache-Control", "max-age=5")] + validator,
             expected: .forward(.stale, conditional: true)),
        Case(name: "stale with Last-Modified: revalidate", stored: [("Cache-Control", "max-age=5"),
                                                                     ("Last-Modified", Fixture.date(-1000))],
             expected: .forward(.stale, conditional: true)),
        Case(name: "stale without a validator: fetch", stored: [("Cache-Control", "max-age=5")],
             expected: .forward(.stale, conditional: false)),
        Case(name: "stale, max-stale covers it: served stale", stored: [("Cache-Control", "max-age=5")],
             request: [("Cache-Control", "max-stale=10")], expected: .serve(.stale(staleness: 5, why: .maxStale))),
        Case(name: "stale, max-stale too short", stored: [("Cache-Control", "max-age=5")] + validator,
             request: [("Cache-Control", "max-stale=2")], expected: .forward(.stale, conditional: true)),
        Case(name: "stale, max-stale, but must-revalidate", stored: [("Cache-Control", "max-age=5, must-revalidate")] + validator,
             request: [("Cache-Control", "max-stale")], expected: .forward(.stale, conditional: true)),
        Case(name: "stale, max-stale, but s-maxage", stored: [("Cache-Control", "s-maxage=5")] + validator,
             request: [("Cache-Control", "max-stale")], expected: .forward(.stale, conditional: true)),
        Case(name: "stale, only-if-cached: 504", stored: [("Cache-Control", "max-age=5")] + validator,
             request: [("Cache-Control", "only-if-cached")], expected: .refuse(status: 504, reason: CacheDecision.staleOnly)),
        Case(name: "the request's no-cache revalidates a fresh entry", stored: [("Cache-Control", "max-age=60")] + validator,
             request: [("Cache-Control", "no-cache")], expected: .forward(.request, conditional: true)),
        Case(name: "Pragma: no-cache does too", stored: [("Cache-Control", "max-age=60")] + validator,
             request: [("Pragma", "no-cache")], expected: .forward(.request, conditional: true)),
        Case(name: "the response's no-cache revalidates every time", stored: [("Cache-Control", "max-age=60, no-cache")] + validator,
             expected: .forward(.stale, conditional: true)),
        Case(name: "stale within stale-while-revalidate: served stale, revalidated in the background",
             stored: [("Cache-Control", "max-age=5, stale-while-revalidate=30")] + validator,
             expected: .serve(.stale(staleness: 5, why: .staleWhileRevalidate))),
        Case(name: "stale past stale-while-revalidate: revalidate", stored: [("Cache-Control", "max-age=5, stale-while-revalidate=3")] + validator,
             expected: .forward(.stale, conditional: true)),
        Case(name: "stale-while-revalidate, but must-revalidate", stored: [("Cache-Control", "max-age=5, must-revalidate, stale-while-revalidate=30")] + validator,
             expected: .forward(.stale, conditional: true)),
        Case(name: "stale-while-revalidate, but s-maxage", stored: [("Cache-Control", "s-maxage=5, stale-while-revalidate=30")] + validator,
             expected: .forward(.stale, conditional: true)),
        Case(name: "stale-while-revalidate, but the request's no-cache", stored: [("Cache-Control", "max-age=5, stale-while-revalidate=30")] + validator,
             request: [("Cache-Control", "no-cache")], expected: .forward(.request, conditional: true)),
        Case(name: "stale-while-revalidate, but the request's max-age asks for a fresher copy",
             stored: [("Cache-Control", "max-age=5, stale-while-revalidate=30")] + validator,
             request: [("Cache-Control", "max-age=8")], expected: .forward(.stale, conditional: true)),
        Case(name: "stale-while-revalidate, but the request's max-stale is shorter than the staleness",
             stored: [("Cache-Control", "max-age=5, stale-while-revalidate=30")] + validator,
             request: [("Cache-Control", "max-stale=2")], expected: .forward(.stale, conditional: true)),
        Case(name: "stale-while-revalidate, only-if-cached: served stale", stored: [("Cache-Control", "max-age=5, stale-while-revalidate=30")] + validator,
             request: [("Cache-Control", "only-if-cached")], expected: .serve(.stale(staleness: 5, why: .staleWhileRevalidate))),
        Case(name: "configured stale-while-revalidate covers a response that names none: served stale, revalidated",
             stored: [("Cache-Control", "max-age=5")] + validator, configuredSWR: 30,
             expected: .serve(.stale(staleness: 5, why: .staleWhileRevalidate))),
        Case(name: "configured stale-while-revalidate shorter than the staleness: revalidate",
             stored: [("Cache-Control", "max-age=5")] + validator, configuredSWR: 3, expected: .forward(.stale, conditional: true)),
        Case(name: "the response's own stale-while-revalidate wins over the configured window",
             stored: [("Cache-Control", "max-age=5, stale-while-revalidate=2")] + validator, configuredSWR: 30,
             expected: .forward(.stale, conditional: true)),
        Case(name: "configured stale-while-revalidate, but must-revalidate",
             stored: [("Cache-Control", "max-age=5, must-revalidate")] + validator, configuredSWR: 30,
             expected: .forward(.stale, conditional: true)),
        Case(name: "configured stale-while-revalidate, but proxy-revalidate",
             stored: [("Cache-Control", "max-age=5, proxy-revalidate")] + validator, configuredSWR: 30,
             expected: .forward(.stale, conditional: true)),
        Case(name: "configured stale-while-revalidate, but s-maxage",
             stored: [("Cache-Control", "s-maxage=5")] + validator, configuredSWR: 30,
             expected: .forward(.stale, conditional: true)),
        Case(name: "configured stale-while-revalidate, but the request's max-age asks for a fresher copy",
             stored: [("Cache-Control", "max-age=5")] + validator, request: [("Cache-Control", "max-age=8")], configuredSWR: 30,
             expected: .forward(.stale, conditional: true)),
        Case(name: "only other variants: vary-miss", stored: nil, otherVariants: true,
             request: [("Accept", "image/avif")], expected: .forward(.varyMiss, conditional: false)),
        Case(name: "only other variants, only-if-cached: 504", stored: nil, otherVariants: true,
             request: [("Accept", "image/avif"), ("Cache-Control", "only-if-cached")],
             expected: .refuse(status: 504, reason: CacheDecision.otherVariant)),
        Case(name: "a variant with Vary, selected: served", stored: [("Cache-Control", "max-age=60"), ("Vary", "accept")],
             request: [("Accept", " image/webp ")], expected: .serve(.fresh(ttl: 50))),
    ]

    @Test("decide: one table for memory hits, disk hits and coalesced waiters", arguments: cases)
    func decide(_ row: Case) {
        let stored = row.stored.map {
            Fixture.entry($0, requestHeaders: HTTPHeaders(row.storedWith))
        }
        let request = HTTPHeaders(row.request)
        let decision = CacheDecision.decide(stored: stored, otherVariants: row.otherVariants, request: CacheControl(request),
                                            now: Fixture.t0.addingTimeInterval(row.age),
                                            defaultStaleWhileRevalidate: row.configuredSWR)
        #expect(decision == row.expected)
    }

    @Test("requests with credentials or no-store are forwarded alone before any lookup (504 with only-if-cached); others are looked up")
    func beforeLookup() {
        let noStore = CacheControl(HTTPHeaders([("Cache-Control", "no-store")]))
        let plain = CacheControl(HTTPHeaders([("Cache-Control", "max-age=0")]))
        #expect(CacheDecision.beforeLookup(requestCacheControl: noStore, hasAuthorization: false) == .forward(.bypass, conditional: false))
        #expect(CacheDecision.beforeLookup(requestCacheControl: plain, hasAuthorization: true) == .forward(.bypass, conditional: false))
        #expect(CacheDecision.beforeLookup(requestCacheControl: plain, hasAuthorization: false) == nil)
        let offline = CacheControl(HTTPHeaders([("Cache-Control", "only-if-cached")]))
        #expect(CacheDecision.beforeLookup(requestCacheControl: offline, hasAuthorization: true)
                == .refuse(status: 504, reason: CacheDecision.uncacheable))
    }

    @Test("after an origin failure: stale-if-error from the response, the request or the offline window; never past must-revalidate, proxy-revalidate or s-maxage",
          arguments: [
              // (stored Cache-Control, request Cache-Control, offline window, seconds since stored, served stale?)
              ("max-age=10, stale-if-error=60", "", 0.0, 40.0, true),
              ("max-age=10, stale-if-error=20", "", 0, 40, false),
              ("max-age=10", "stale-if-error=60", 0, 40, true),
              ("max-age=10", "", 60, 40, true),
              ("max-age=10", "", 20, 40, false),
              ("max-age=10, must-revalidate, stale-if-error=60", "", 60, 40, false),
              ("max-age=10, proxy-revalidate", "stale-if-error=60", 0, 40, false),
              // s-maxage carries proxy-revalidate for a shared cache (RFC 9111 5.2.2.10): the error is passed on.
              ("s-maxage=10, stale-if-error=60", "", 0, 40, false),
              ("s-maxage=10", "stale-if-error=60", 0, 40, false),
              ("s-maxage=10", "", 60, 40, false),
              ("max-age=60", "", 0, 40, true),   // not stale yet
          ] as [(String, String, Double, Double, Bool)])
    func afterOriginFailure(stored: String, request: String, offline: Double, age: Double, served: Bool) {
        let entry = Fixture.entry([("Cache-Control", stored)])
        let decision = CacheDecision.afterOriginFailure(
            stored: entry, request: CacheControl(HTTPHeaders(request.isEmpty ? [] : [("Cache-Control", request)])),
            offlineSeconds: offline, now: Fixture.t0.addingTimeInterval(age))
        #expect((decision != nil) == served)
        if let decision {
            #expect(decision.servedOutcome(tier: nil)?.detail == "stale-if-error")
            #expect(decision.servedOutcome(tier: nil)?.served == .stale)
        }
    }

    @Test("what a served decision reports: Cache-Status detail and ttl, and how it is counted")
    func outcomes() {
        let fresh = CacheDecision.serve(.fresh(ttl: 42))
        #expect(fresh.servedOutcome(tier: nil)?.cacheStatus == "imagecached; hit; ttl=42")
        #expect(fresh.servedOutcome(tier: "disk")?.cacheStatus == "imagecached; hit; ttl=42; detail=disk")
        #expect(fresh.servedOutcome(tier: nil)?.served == .hit && fresh.servedOutcome(tier: "disk")?.served == .diskHit)
        let stale = CacheDecision.serve(.stale(staleness: 7.5, why: .maxStale))
        #expect(stale.servedOutcome(tier: "disk")?.cacheStatus == "imagecached; hit; ttl=-8; detail=disk")
        #expect(stale.servedOutcome(tier: nil)?.xCache == "STALE" && stale.servedOutcome(tier: "disk")?.served == .stale)
        #expect(CacheDecision.forward(.miss, conditional: false).servedOutcome(tier: nil) == nil)
    }
}
