// HTTP-date (RFC 9110 section 5.6.7): parsed from the three formats recipients must accept, always sent as IMF-fixdate.
//
//   IMF-fixdate  Sun, 06 Nov 1994 08:49:37 GMT      (the only format we send)
//   rfc850-date  Sunday, 06-Nov-94 08:49:37 GMT     (obsolete; two-digit year, see `parse(_:relativeTo:)`)
//   asctime      Sun Nov  6 08:49:37 1994           (obsolete; day padded with a space)
//
// Hand-written over UTF-8 bytes: no DateFormatter, no locale, no allocation on the fast path. Names of days and
// months are accepted in any case; the day name is checked to be a day name but not against the date (a mismatch
// is harmless and common in the wild). Anything else that does not match one of the grammars is invalid (nil).
// Pure, no I/O.

public import Foundation

public enum HTTPDate {
    /// Parses an HTTP-date in any of the three formats; nil when invalid.
    public static func parse(_ text: some StringProtocol) -> Date? {
        parse(text, relativeTo: nil)
    }

    /// Parses an HTTP-date; a two-digit rfc850 year that would be more than 50 years after `now`'s year is taken
    /// as the most recent past year with those digits (RFC 9110 section 5.6.7). `now` nil reads the clock.
    public static func parse(_ text: some StringProtocol, relativeTo now: Date?) -> Date? {
        let seconds: Int? = text.utf8.withContiguousStorageIfAvailable { parseBytes($0, now: now) }
            ?? Array(text.utf8).withUnsafeBufferPointer { parseBytes($0, now: now) }
        return seconds.map { Date(timeIntervalSince1970: TimeInterval($0)) }
    }

    /// IMF-fixdate of `date`, fractions of a second dropped: "Sun, 06 Nov 1994 08:49:37 GMT".
    public static func format(_ date: Date) -> String {
        let total = Int(date.timeIntervalSince1970.rounded(.down))
        let days = floorDiv(total, 86_400)
        let secondOfDay = total - days * 86_400
        let (year, month, day) = civil(fromDays: days)
        let weekday = ((days % 7) + 11) % 7  // 1970-01-01 was a Thursday (4); 0 = Sunday
        var out: [UInt8] = []
        out.reserveCapacity(29)
        out.append(contentsOf: dayNames[weekday].utf8)
        out.append(contentsOf: ", ".utf8)
        appendDigits(&out, day, width: 2)
        out.append(0x20)
        out.append(contentsOf: monthNames[month - 1].utf8)
        out.append(0x20)
        appendDigits(&out, year, width: 4)
        out.append(0x20)
        appendDigits(&out, secondOfDay / 3600, width: 2)
        out.append(0x3A)
        appendDigits(&out, secondOfDay / 60 % 60, width: 2)
        out.append(0x3A)
        appendDigits(&out, secondOfDay % 60, width: 2)
        out.append(contentsOf: " GMT".utf8)
        return String(decoding: out, as: UTF8.self)
    }

    // MARK: - Parsing

    static let dayNames = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    static let longDayNames = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]
    static let monthNames = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    /// A cursor over the bytes of one date.
    private struct Scanner {
        let bytes: UnsafeBufferPointer<UInt8>
        var index: Int

        var atEnd: Bool { index >= bytes.count }

        mutating func expect(_ byte: UInt8) -> Bool {
            guard index < bytes.count, bytes[index] == byte else { return false }
            index += 1
            return true
        }

        /// Exactly `count` ASCII digits.
        mutating func digits(_ count: Int) -> Int? {
            guard index + count <= bytes.count else { return nil }
            var value = 0
            for i in index..<(index + count) {
                let b = bytes[i]
                guard b >= 0x30 && b <= 0x39 else { return nil }
                value = value * 10 + Int(b - 0x30)
            }
            index += count
            return value
        }

        /// A run of ASCII letters, compared case-insensitively against `names`; the index into `names`.
        mutating func name(in names: [String]) -> Int? {
            let start = index
            while index < bytes.count, (bytes[index] | 0x20) >= 0x61, (bytes[index] | 0x20) <= 0x7A { index += 1 }
            let word = UnsafeBufferPointer(rebasing: bytes[start..<index])
            for (i, candidate) in names.enumerated() where candidate.utf8.count == word.count {
                if zip(candidate.utf8, word).allSatisfy({ $0 | 0x20 == $1 | 0x20 }) { return i }
            }
            return nil
        }

        /// "HH:MM:SS" as seconds of the day (second 60 allowed for a leap second).
        mutating func timeOfDay() -> Int? {
            guard let h = digits(2), expect(0x3A), let m = digits(2), expect(0x3A), let s = digits(2),
                  h < 24, m < 60, s <= 60 else { return nil }
            return h * 3600 + m * 60 + s
        }

        mutating func gmt() -> Bool {
            expect(0x20) && expect(0x47) && expect(0x4D) && expect(0x54)
        }
    }

    private static func parseBytes(_ raw: UnsafeBufferPointer<UInt8>, now: Date?) -> Int? {
        // Tolerate surrounding white space (field values are usually trimmed already).
        var lower = 0
        var upper = raw.count
        while lower < upper, raw[lower] == 0x20 || raw[lower] == 0x09 { lower += 1 }
        while upper > lower, raw[upper - 1] == 0x20 || raw[upper - 1] == 0x09 { upper -= 1 }
        var s = Scanner(bytes: UnsafeBufferPointer(rebasing: raw[lower..<upper]), index: 0)

        let nameStart = s.index
        if s.name(in: dayNames) != nil {
            if s.expect(0x2C) { return parseIMFFixdate(&s) }
            if s.expect(0x20) { return parseAsctime(&s) }
            return nil
        }
        s.index = nameStart
        if s.name(in: longDayNames) != nil, s.expect(0x2C) { return parseRFC850(&s, now: now) }
        return nil
    }

    /// After "Sun,": " 06 Nov 1994 08:49:37 GMT".
    private static func parseIMFFixdate(_ s: inout Scanner) -> Int? {
        guard s.expect(0x20), let day = s.digits(2), s.expect(0x20), let month = s.name(in: monthNames),
              s.expect(0x20), let year = s.digits(4), s.expect(0x20), let time = s.timeOfDay(), s.gmt(), s.atEnd
        else { return nil }
        return timestamp(year: year, month: month + 1, day: day, secondOfDay: time)
    }

    /// After "Sunday,": " 06-Nov-94 08:49:37 GMT".
    private static func parseRFC850(_ s: inout Scanner, now: Date?) -> Int? {
        guard s.expect(0x20), let day = s.digits(2), s.expect(0x2D), let month = s.name(in: monthNames),
              s.expect(0x2D), let yy = s.digits(2), s.expect(0x20), let time = s.timeOfDay(), s.gmt(), s.atEnd
        else { return nil }
        let nowSeconds = Int((now ?? Date()).timeIntervalSince1970)
        let currentYear = civil(fromDays: floorDiv(nowSeconds, 86_400)).year
        var year = currentYear - currentYear % 100 + yy
        if year > currentYear + 50 { year -= 100 }
        return timestamp(year: year, month: month + 1, day: day, secondOfDay: time)
    }

    /// After "Sun ": "Nov  6 08:49:37 1994" (day as two digits or space + digit).
    private static func parseAsctime(_ s: inout Scanner) -> Int? {
        guard let month = s.name(in: monthNames), s.expect(0x20) else { return nil }
        let day: Int
        if s.expect(0x20) {
            guard let d = s.digits(1) else { return nil }
            day = d
        } else {
            guard let d = s.digits(2) else { return nil }
            day = d
        }
        guard s.expect(0x20), let time = s.timeOfDay(), s.expect(0x20), let year = s.digits(4), s.atEnd else { return nil }
        return timestamp(year: year, month: month + 1, day: day, secondOfDay: time)
    }

    private static func timestamp(year: Int, month: Int, day: Int, secondOfDay: Int) -> Int? {
        guard day >= 1, day <= daysInMonth(year: year, month: month) else { return nil }
        return days(fromCivil: year, month, day) * 86_400 + secondOfDay
    }

    // MARK: - Calendar arithmetic (proleptic Gregorian, after H. Hinnant's "chrono-compatible low-level date algorithms")

    static func daysInMonth(year: Int, month: Int) -> Int {
        switch month {
        case 2: (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Days since 1970-01-01.
    static func days(fromCivil year: Int, _ month: Int, _ day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = floorDiv(y, 400)
        let yoe = y - era * 400
        let mp = (month + 9) % 12
        let doy = (153 * mp + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    static func civil(fromDays z0: Int) -> (year: Int, month: Int, day: Int) {
        let z = z0 + 719_468
        let era = floorDiv(z, 146_097)
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let day = doy - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        return (yoe + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }

    private static func floorDiv(_ a: Int, _ b: Int) -> Int {
        a >= 0 ? a / b : -((-a + b - 1) / b)
    }

    private static func appendDigits(_ out: inout [UInt8], _ value: Int, width: Int) {
        var divisor = 1
        for _ in 1..<width { divisor *= 10 }
        var v = value
        while divisor > 0 {
            out.append(UInt8(0x30 + (v / divisor) % 10))
            v %= divisor
            divisor /= 10
        }
    }
}
