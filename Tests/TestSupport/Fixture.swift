public import Foundation
public import ImageCacheHTTP
public import ImageCacheStore

/// Builders shared by the cache tests.
/// Keys, heads and entries at a fixed time, for the tests of the store and of the fetch and rendition machines.
package enum Fixture {
    package static let t0 = Date(timeIntervalSince1970: 1_700_000_000)

    package static func key(_ url: String = "http://origin.test/a.png") -> CacheKey {
        CacheKey(try! UpstreamURL.parse(url))
    }

    package static func head(_ status: Int = 200, _ fields: [(String, String)]) -> HTTPResponseHead {
        HTTPResponseHead(status: status, headers: HTTPHeaders(fields))
    }

    package static func date(_ offset: Double) -> String { HTTPDate.format(t0.addingTimeInterval(offset)) }

    package static func entry(_ fields: [(String, String)], status: Int = 200, key: CacheKey = Fixture.key(),
                      body: [UInt8] = [1, 2, 3], requestTime: Date = Fixture.t0, responseTime: Date = Fixture.t0,
                      requestHeaders: HTTPHeaders = [:], policy: FreshnessPolicy = FreshnessPolicy()) -> CacheEntry {
        CacheEntry(key: key, head: head(status, fields), body: body, requestTime: requestTime, responseTime: responseTime,
                   requestHeaders: requestHeaders, policy: policy)
    }
}
