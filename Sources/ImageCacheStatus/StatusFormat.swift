// StatusFormat: the one place where the status page's numbers and times become text for people. The page's first
// render and the `display` of every stats document (StatusView) are made with it; the page's script formats none of
// them (it only draws its charts' axes, which nothing here renders).
// Pure functions, no locale: the same figures read the same on every machine and in every browser.

internal import Foundation

package enum StatusFormat {
    /// 1234567 -> "1,234,567".
    package static func count(_ value: Int) -> String {
        var digits = String(value.magnitude)
        var out = ""
        while digits.count > 3 {
            out = "," + digits.suffix(3) + out
            digits.removeLast(3)
        }
        return (value < 0 ? "-" : "") + digits + out
    }

    /// One decimal, halves rounded up: 1.25 -> "1.3" (for values of zero or more).
    package static func tenths(_ value: Double) -> String {
        let tenths = Int((value * 10).rounded())
        return "\(tenths / 10).\(tenths % 10)"
    }

    /// Bytes in B, KiB, MiB, GiB, TiB, PiB: 1023 -> "1,023 B", 1536 -> "1.5 KiB".
    package static func bytes(_ value: Int) -> String {
        if value < 1024 { return count(value) + " B" }
        let units = ["KiB", "MiB", "GiB", "TiB", "PiB"]
        var scaled = Double(value) / 1024
        var unit = 0
        while scaled >= 1024, unit < units.count - 1 {
            scaled /= 1024
            unit += 1
        }
        return tenths(scaled) + " " + units[unit]
    }

    /// 0.8765 -> "87.7%".
    package static func percent(_ ratio: Double) -> String { tenths(ratio * 100) + "%" }

    /// Seconds as the two largest units: "3d 4h", "4h 5m", "5m 6s", "6s".
    package static func duration(_ seconds: Double) -> String {
        let whole = Int(max(0, seconds).rounded(.down))
        let (days, hours, minutes, rest) = (whole / 86400, whole % 86400 / 3600, whole % 3600 / 60, whole % 60)
        if days > 0 { return "\(days)d \(hours)h" }
        if hours > 0 { return "\(hours)h \(minutes)m" }
        if minutes > 0 { return "\(minutes)m \(rest)s" }
        return "\(rest)s"
    }

    /// An age or a period in seconds, to the tenth: 1.25 -> "1.3 s".
    package static func seconds(_ value: Double) -> String { tenths(value) + " s" }

    /// A period in milliseconds as seconds, without a needless ".0": 2000 -> "2 s", 1500 -> "1.5 s".
    package static func period(milliseconds: Int) -> String {
        let text = tenths(Double(milliseconds) / 1000)
        return (text.hasSuffix(".0") ? String(text.dropLast(2)) : text) + " s"
    }

    /// 1234 -> "1,234 ms".
    package static func milliseconds(_ value: Int) -> String { count(value) + " ms" }

    /// Seconds since 1970 as the time of day in UTC: "09:41:05 UTC" (the page shows every time in UTC).
    package static func clock(_ time: Double) -> String {
        let second = ((Int(time.rounded(.down)) % 86400) + 86400) % 86400
        func two(_ value: Int) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return "\(two(second / 3600)):\(two(second % 3600 / 60)):\(two(second % 60)) UTC"
    }

    /// Seconds since 1970 in ISO 8601 (a <time> element's datetime).
    package static func isoTime(_ time: Double) -> String { Date(timeIntervalSince1970: time).ISO8601Format() }
}
