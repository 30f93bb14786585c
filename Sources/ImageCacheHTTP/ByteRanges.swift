// Range requests (RFC 9110 section 14) answered from a stored full response of `length` bytes:
//   a method other than GET, a unit other than bytes, a field that does not parse   -> ignored: the whole response
//   If-Range that does not hold (13.1.5: an entity tag strongly equal to the      -> ignored: the whole response
//   stored one; or an HTTP-date equal to its Last-Modified when that date is
//   strong, 8.8.2.2: the stored Date at least one second after Last-Modified; a
//   weak tag, or a date with no Date or one less than a second later, never holds)
//   several ranges                                                                 -> the whole response (14.2 lets a
//                                                                                     server ignore Range; no multipart)
//   one range, first-last / first- / -suffix, that overlaps the body               -> 206 with that part, clamped to
//                                                                                     the body (Content-Range)
//   one range that does not overlap it (first >= length, or a zero suffix)         -> 416, Content-Range: bytes */length
// Pure: no I/O, no state.

internal import Foundation

package enum RangeAnswer: Sendable, Equatable {
    /// Serve the whole response (200).
    case whole
    /// Serve these bytes of it (206).
    case part(ClosedRange<Int>)
    /// 416 Range Not Satisfiable.
    case unsatisfiable

    /// `etag`, `lastModified`, `date`: the stored response's ETag, Last-Modified and Date fields.
    package static func evaluate(method: String, headers: HTTPHeaders, length: Int, etag: String?,
                                 lastModified: String?, date: String?) -> RangeAnswer {
        guard method == "GET", let field = headers["Range"] else { return .whole }
        if let ifRange = headers["If-Range"],
           !ifRangeHolds(ifRange, etag: etag, lastModified: lastModified, date: date) { return .whole }
        let text = field.trimmingOWS()
        guard text.count > 6, text.prefix(6).lowercased() == "bytes=" else { return .whole }
        // Empty list elements are allowed (RFC 9110 5.6.1): "bytes=0-99," is one range.
        let specs = text.dropFirst(6).split(separator: ",").filter { !$0.trimmingOWS().isEmpty }
        guard specs.count == 1 else { return .whole }
        let spec = specs[0].trimmingOWS()
        guard let dash = spec.firstIndex(of: "-") else { return .whole }
        let firstText = spec[..<dash], lastText = spec[spec.index(after: dash)...]
        if firstText.isEmpty {
            // -suffix: the last `suffix` bytes.
            guard let suffix = digits(lastText) else { return .whole }
            guard suffix > 0, length > 0 else { return .unsatisfiable }
            return .part(max(0, length - suffix)...(length - 1))
        }
        guard let first = digits(firstText) else { return .whole }
        var last = length - 1
        if !lastText.isEmpty {
            guard let given = digits(lastText), given >= first else { return .whole }
            last = min(given, length - 1)
        }
        guard first < length else { return .unsatisfiable }
        return .part(first...last)
    }

    /// If-Range: an entity tag holds when strongly equal to the stored one; a date when equal to a Last-Modified that
    /// is a strong validator (RFC 9110 8.8.2.2: the response's Date at least one second later; a resource changed
    /// twice within that second would otherwise join two versions' bytes).
    private static func ifRangeHolds(_ value: String, etag: String?, lastModified: String?, date: String?) -> Bool {
        let trimmed = value.trimmingOWS()
        if trimmed.hasPrefix("\"") || trimmed.hasPrefix("W/") {
            guard let theirs = EntityTag.parse(trimmed), let ours = etag.flatMap({ EntityTag.parse($0) }) else { return false }
            return theirs.strongMatches(ours)
        }
        guard let given = HTTPDate.parse(trimmed), let modified = lastModified.flatMap({ HTTPDate.parse($0) }),
              let sent = date.flatMap({ HTTPDate.parse($0) }) else { return false }
        return given == modified && sent.timeIntervalSince(modified) >= 1
    }

    /// 1*DIGIT as a number; a value past Int's range counts as the largest (it is beyond any body).
    private static func digits(_ text: Substring) -> Int? {
        guard !text.isEmpty, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        return Int(text) ?? Int.max
    }
}
