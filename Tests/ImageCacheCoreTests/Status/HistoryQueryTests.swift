// The ?since query of /_imagecached/stats/history, as the proxy reads it (Proxy+Status.swift).

import Testing
@testable import ImageCacheCore

@Suite("History query: ?since=<seconds since 1970>", .timeLimit(.minutes(1)))
struct HistoryQueryTests {
    @Test("?since takes a finite number of seconds; anything else is refused", arguments: [
        (nil, .some(nil)), ("", .some(nil)), ("since=1800000000", .some(1_800_000_000)), ("since=1e3", .some(1000)),
        ("since=", nil), ("since=nan", nil), ("since=inf", nil), ("since=soon", nil), ("from=1", nil), ("since=1&since=2", nil),
        ("since=1&x=2", nil),
    ] as [(String?, Double??)])
    func sinceQuery(query: String?, expected: Double??) {
        switch Proxy.historySince(query) {
        case let .success(since): #expect(expected == .some(since), "\(query ?? "nil")")
        case let .failure(error):
            #expect(expected == nil, "\(query ?? "nil")")
            #expect(error.description.contains("?since=<seconds since 1970>"))
        }
    }
}
