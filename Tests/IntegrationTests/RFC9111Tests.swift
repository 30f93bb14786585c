// The cache's requirements in the RFCs' own terms: one case per requirement, named after its section (RFC 9111 unless
// said), each run against the real daemon in reverse mode in front of a scripted origin. A case is a sequence of
// steps: move the test clock, send a request, check the status, X-Cache and how many requests the origin has seen.
// (The fuller tests of each area are elsewhere; the per-section table in docs/cache-semantics.md names them.)

import Foundation
import Synchronization
import Testing
@testable import ImageCacheOps
import ImageCacheUpstream

/// One requirement: its section, what it says, how the origin answers, and the steps that show it.
struct RFCCase: Sendable, CustomTestStringConvertible {
    struct Step: Sendable {
        var method = "GET"
        /// Seconds the test clock moves before the request.
        var after: Double = 0
        var headers: [(String, String)] = []
        var status = 200
        /// The X-Cache word the response carries (nil: not checked).
        var xCache: String?
        /// Requests the origin has seen once the response is in.
        var originRequests: Int
        /// A response field and its value (nil: absent).
        var field: (String, String?)?
    }

    let section: String
    let requirement: String
    let reply: @Sendable (RecordedRequest) -> Reply
    let steps: [Step]

    var testDescription: String { "\(section): \(requirement)" }
}

@Suite("RFC 9111 and friends, requirement by requirement", .timeLimit(.minutes(2)))
struct RFC9111Tests {
    static let png = Fixtures.png(size: 1500)

    static func ok(_ fields: [(String, String)]) -> @Sendable (RecordedRequest) -> Reply {
        { _ in Reply(status: 200, headers: [("Content-Type", "image/png")] + fields, body: png) }
    }

    typealias Step = RFCCase.Step

    static let cases: [RFCCase] = [
        RFCCase(section: "3", requirement: "a 200 with explicit freshness is stored and reused", reply: ok([("Cache-Control", "max-age=60")]),
                steps: [Step(xCache: "MISS", originRequests: 1), Step(xCache: "HIT", originRequests: 1)]),
        RFCCase(section: "3", requirement: "a response with no-store is not stored", reply: ok([("Cache-Control", "max-age=60, no-store")]),
                steps: [Step(xCache: "MISS", originRequests: 1, field: ("Cache-Status", "imagecached; fwd=uri-miss; fwd-status=200")),
                        Step(xCache: "MISS", originRequests: 2)]),
        RFCCase(section: "3", requirement: "a request with no-store is not answered from, nor stored in, the cache",
                reply: ok([("Cache-Control", "max-age=60")]),
                steps: [Step(headers: [("Cache-Control", "no-store")], xCache: "BYPASS", originRequests: 1),
                        Step(xCache: "MISS", originRequests: 2)]),
        RFCCase(section: "3", requirement: "a heuristically cacheable 404 is stored (negative-ttl)",
                reply: { _ in Reply(status: 404, headers: [("Content-Type", "text/plain")], body: Array("no".utf8)) },
                steps: [Step(status: 404, xCache: "MISS", originRequests: 1), Step(status: 404, xCache: "HIT", originRequests: 1),
                        Step(after: 11, status: 404, xCache: "EXPIRED", originRequests: 2)]),
        RFCCase(section: "3", requirement: "a 302 without explicit freshness is not stored",
                reply: { _ in Reply(status: 302, headers: [("Location", "/elsewhere")], body: []) },
                steps: [Step(status: 302, originRequests: 1), Step(status: 302, originRequests: 2)]),
        RFCCase(section: "3.1", requirement: "fields named by Connection are not stored",
                reply: ok([("Cache-Control", "max-age=60"), ("Connection", "X-Hop"), ("X-Hop", "1")]),
                steps: [Step(originRequests: 1, field: ("X-Hop", nil)), Step(xCache: "HIT", originRequests: 1, field: ("X-Hop", nil))]),
        RFCCase(section: "3.5", requirement: "a response to a request with Authorization is not stored unless public",
                reply: ok([("Cache-Control", "max-age=60")]),
                steps: [Step(headers: [("Authorization", "Bearer a")], xCache: "BYPASS", originRequests: 1),
                        Step(xCache: "MISS", originRequests: 2)]),
        RFCCase(section: "3.5", requirement: "with public, a response to a request with Authorization is stored",
                reply: ok([("Cache-Control", "public, max-age=60")]),
                steps: [Step(headers: [("Authorization", "Bearer a")], originRequests: 1),
                        Step(headers: [("Authorization", "Bearer a")], originRequests: 2),
                        Step(xCache: "HIT", originRequests: 2)]),
        RFCCase(section: "5.2.2.7", requirement: "a private response is not stored by a shared cache",
                reply: ok([("Cache-Control", "private, max-age=60")]),
                steps: [Step(originRequests: 1), Step(originRequests: 2)]),
        RFCCase(section: "4.1", requirement: "a stored response is reused only for requests whose Vary fields match",
                reply: { request in Reply(status: 200, headers: [("Content-Type", "image/png"), ("Cache-Control", "max-age=60"),
                                                                 ("Vary", "Accept"), ("X-Accept", request.header("Accept") ?? "-")], body: png) },
                steps: [Step(headers: [("Accept", "image/webp")], xCache: "MISS", originRequests: 1),
                        Step(headers: [("Accept", "image/png")], xCache: "MISS", originRequests: 2),
                        Step(headers: [("Accept", "image/webp")], xCache: "HIT", originRequests: 2, field: ("X-Accept", "image/webp"))]),
        RFCCase(section: "4.1", requirement: "Vary: * never matches", reply: ok([("Cache-Control", "max-age=60"), ("Vary", "*")]),
                steps: [Step(originRequests: 1), Step(originRequests: 2)]),
        RFCCase(section: "4.2.1", requirement: "a response is stale once its max-age has passed", reply: ok([("Cache-Control", "max-age=60")]),
                steps: [Step(originRequests: 1), Step(after: 30, xCache: "HIT", originRequests: 1), Step(after: 31, originRequests: 2)]),
        RFCCase(section: "4.2.1", requirement: "s-maxage governs a shared cache over max-age",
                reply: ok([("Cache-Control", "max-age=1, s-maxage=60")]),
                steps: [Step(originRequests: 1), Step(after: 10, xCache: "HIT", originRequests: 1)]),
        RFCCase(section: "4.2.1", requirement: "without Cache-Control, Expires minus Date is the lifetime",
                reply: { _ in
                    Reply(status: 200, headers: [("Content-Type", "image/png"), ("Date", HTTPDateText.testClock(0)), ("Expires", HTTPDateText.testClock(60))],
                          body: png)
                },
                steps: [Step(originRequests: 1), Step(xCache: "HIT", originRequests: 1)]),
        RFCCase(section: "4.2.3", requirement: "the origin's Age counts toward the age", reply: ok([("Cache-Control", "max-age=60"), ("Age", "50")]),
                steps: [Step(originRequests: 1), Step(after: 5, xCache: "HIT", originRequests: 1), Step(after: 10, originRequests: 2)]),
        RFCCase(section: "4.2.4", requirement: "a stale response is served when the request's max-stale allows it",
                reply: ok([("Cache-Control", "max-age=10")]),
                steps: [Step(originRequests: 1), Step(after: 20, headers: [("Cache-Control", "max-stale=60")], xCache: "STALE", originRequests: 1)]),
        RFCCase(section: "5.2.2.2", requirement: "must-revalidate forbids serving stale, even with max-stale",
                reply: ok([("Cache-Control", "max-age=10, must-revalidate")]),
                steps: [Step(originRequests: 1), Step(after: 20, headers: [("Cache-Control", "max-stale=60")], originRequests: 2)]),
        RFCCase(section: "4.3.1, 4.3.4", requirement: "a stale response is revalidated with its ETag and a 304 freshens it",
                reply: { request in
                    request.header("If-None-Match") == "\"v1\""
                        ? Reply(status: 304, headers: [("ETag", "\"v1\""), ("Cache-Control", "max-age=60")])
                        : Reply(status: 200, headers: [("Content-Type", "image/png"), ("ETag", "\"v1\""), ("Cache-Control", "max-age=60")], body: png)
                },
                steps: [Step(originRequests: 1), Step(after: 61, xCache: "REVALIDATED", originRequests: 2),
                        Step(xCache: "HIT", originRequests: 2)]),
        RFCCase(section: "4.3.2", requirement: "a client's matching If-None-Match on a fresh stored response gets 304",
                reply: ok([("Cache-Control", "max-age=60"), ("ETag", "\"v1\"")]),
                steps: [Step(originRequests: 1), Step(headers: [("If-None-Match", "W/\"v1\"")], status: 304, xCache: "HIT", originRequests: 1)]),
        RFCCase(section: "4.4", requirement: "a non-error response to an unsafe method invalidates the target URI",
                reply: { request in request.method == "GET" ? Reply(status: 200, headers: [("Content-Type", "image/png"), ("Cache-Control", "max-age=60")], body: png)
                                                             : Reply(status: 204) },
                steps: [Step(originRequests: 1), Step(xCache: "HIT", originRequests: 1), Step(method: "DELETE", status: 204, originRequests: 2),
                        Step(xCache: "MISS", originRequests: 3)]),
        RFCCase(section: "5.2.1.4", requirement: "a request's no-cache makes the cache revalidate", reply: ok([("Cache-Control", "max-age=60")]),
                steps: [Step(originRequests: 1), Step(headers: [("Cache-Control", "no-cache")], originRequests: 2)]),
        RFCCase(section: "5.2.2.4", requirement: "a response's no-cache is stored and revalidated on every use",
                reply: { request in
                    request.header("If-None-Match") == "\"n\""
                        ? Reply(status: 304, headers: [("ETag", "\"n\""), ("Cache-Control", "no-cache")])
                        : Reply(status: 200, headers: [("Content-Type", "image/png"), ("ETag", "\"n\""), ("Cache-Control", "no-cache")], body: png)
                },
                steps: [Step(originRequests: 1), Step(xCache: "REVALIDATED", originRequests: 2), Step(xCache: "REVALIDATED", originRequests: 3)]),
        RFCCase(section: "5.1", requirement: "a response from the cache carries Age", reply: ok([("Cache-Control", "max-age=60")]),
                steps: [Step(originRequests: 1), Step(after: 7, xCache: "HIT", originRequests: 1, field: ("Age", "7"))]),
        RFCCase(section: "RFC 9213 2", requirement: "CDN-Cache-Control governs the cache over Cache-Control",
                reply: ok([("Cache-Control", "no-store"), ("CDN-Cache-Control", "max-age=60")]),
                steps: [Step(originRequests: 1), Step(xCache: "HIT", originRequests: 1, field: ("Cache-Control", "no-store"))]),
        RFCCase(section: "RFC 9110 7.6.3", requirement: "a request carrying this daemon's own Via is a loop (508)", reply: ok([]),
                steps: [Step(headers: [("Via", "1.1 \(RFC9111Tests.viaPlaceholder)")], status: 508, originRequests: 0)]),
    ]

    /// Replaced by the daemon's own Via token when a step carries it.
    static let viaPlaceholder = "<this daemon>"

    @Test(arguments: cases)
    func requirement(_ rfcCase: RFCCase) async throws {
        let harness = try ProxyHarness()
        harness.origin.route("/r") { rfcCase.reply($0) }
        for (index, step) in rfcCase.steps.enumerated() {
            if step.after > 0 { harness.clock.advance(step.after) }
            let headers = step.headers.map { field in
                (field.0, field.1.replacingOccurrences(of: Self.viaPlaceholder, with: harness.daemon.loopGuard.viaToken))
            }
            let response = try await harness.get("/r", method: step.method, headers: headers)
            let at = "step \(index + 1)"
            #expect(response.status == step.status, "\(at)")
            if let xCache = step.xCache { #expect(response.header("X-Cache") == xCache, "\(at)") }
            #expect(harness.origin.requestCount("/r") == step.originRequests, "\(at)")
            if let (name, value) = step.field { #expect(response.header(name) == value, "\(at): \(name)") }
        }
    }
}

/// HTTP dates relative to the test clock's start (TestClock), for an origin's Date and Expires.
enum HTTPDateText {
    static func testClock(_ offset: Double) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.string(from: Date(timeIntervalSince1970: 1_800_000_000 + offset))
    }
}
