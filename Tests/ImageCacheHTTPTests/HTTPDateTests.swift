import Foundation
import ImageCacheHTTP
import Testing

@Suite("HTTPDate", .timeLimit(.minutes(1)))
struct HTTPDateTests {
    /// 1994-11-06 08:49:37 UTC, RFC 9110's example.
    static let example = Date(timeIntervalSince1970: 784_111_777)

    @Test("parses the three HTTP-date formats to the same instant", arguments: [
        "Sun, 06 Nov 1994 08:49:37 GMT",
        "Sunday, 06-Nov-94 08:49:37 GMT",
        "Sun Nov  6 08:49:37 1994",
        "  Sun, 06 Nov 1994 08:49:37 GMT ",
        "sun, 06 nov 1994 08:49:37 GMT",
    ])
    func parsesAllFormats(text: String) {
        // Given / When
        let date = HTTPDate.parse(text, relativeTo: Date(timeIntervalSince1970: 800_000_000))
        // Then
        #expect(date == HTTPDateTests.example)
    }

    @Test("refuses text that is not an HTTP-date", arguments: [
        "", "0", "-1", "garbage", "Sun, 06 Nov 1994 08:49:37", "Sun, 06 Nov 1994 08:49:37 UTC",
        "Sun, 6 Nov 1994 08:49:37 GMT", "Sun, 31 Nov 1994 08:49:37 GMT", "Sun, 29 Feb 1995 08:49:37 GMT",
        "Sun, 06 Nov 1994 24:00:00 GMT", "Sun, 06 Nov 1994 08:60:00 GMT", "Xyz, 06 Nov 1994 08:49:37 GMT",
        "Sun, 06 Foo 1994 08:49:37 GMT", "Sun, 06 Nov 1994 08:49:37 GMT junk", "Sun Nov 6 08:49:37 1994",
        "Sunday, 06-Nov-1994 08:49:37 GMT", "1994-11-06T08:49:37Z",
    ])
    func refusesInvalid(text: String) {
        #expect(HTTPDate.parse(text) == nil)
    }

    @Test("accepts 29 February in a leap year")
    func leapDay() {
        #expect(HTTPDate.parse("Thu, 29 Feb 2024 00:00:00 GMT") == Date(timeIntervalSince1970: 1_709_164_800))
        #expect(HTTPDate.parse("Tue, 29 Feb 2000 00:00:00 GMT") != nil)
        #expect(HTTPDate.parse("Thu, 29 Feb 1900 00:00:00 GMT") == nil)
    }

    @Test("reads a two-digit rfc850 year as at most 50 years ahead")
    func rfc850Century() {
        // Given a clock in 2025
        let now = Date(timeIntervalSince1970: 1_750_000_000)
        // When / Then
        #expect(HTTPDate.parse("Sunday, 06-Nov-94 08:49:37 GMT", relativeTo: now) == HTTPDateTests.example)
        #expect(HTTPDate.parse("Thursday, 01-Jan-70 00:00:00 GMT", relativeTo: now) == Date(timeIntervalSince1970: 3_155_760_000))
    }

    @Test("formats as IMF-fixdate", arguments: [
        (784_111_777.0, "Sun, 06 Nov 1994 08:49:37 GMT"),
        (0.0, "Thu, 01 Jan 1970 00:00:00 GMT"),
        (1_709_164_800.9, "Thu, 29 Feb 2024 00:00:00 GMT"),
        (-1.0, "Wed, 31 Dec 1969 23:59:59 GMT"),
        (4_102_444_800.0, "Fri, 01 Jan 2100 00:00:00 GMT"),
    ])
    func formats(seconds: Double, expected: String) {
        #expect(HTTPDate.format(Date(timeIntervalSince1970: seconds)) == expected)
    }

    @Test("round-trips whole seconds through format and parse")
    func roundTrip() {
        // Given instants spread over three centuries
        for seconds in stride(from: -2_000_000_000, through: 4_000_000_000, by: 7_777_777) {
            let date = Date(timeIntervalSince1970: Double(seconds))
            // When
            let text = HTTPDate.format(date)
            // Then
            #expect(HTTPDate.parse(text) == date, "\(text)")
        }
    }
}
