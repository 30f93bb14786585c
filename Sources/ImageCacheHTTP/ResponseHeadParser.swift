// ResponseHeadParser: a response head as curl hands it over, line by line. Pure.

/// Parses a response header section as curl hands it over ("HTTP/1.1 200 OK" or "HTTP/2 200", then fields).
package enum ResponseHeadParser {
    /// Nil when the first line is not a status line. Fields whose name is not a token or whose value holds a control
    /// character (CR, LF, NUL ...) are dropped, and so is such a reason phrase: what an origin sends never reaches a
    /// client as a header it did not mean (no injection through a bare CR).
    package static func parse(_ lines: [String]) -> HTTPResponseHead? {
        guard let statusLine = lines.first, statusLine.hasPrefix("HTTP/") else { return nil }
        // Split by Unicode scalars: " " and a combining mark after it are one Character.
        let parts = statusLine.unicodeScalars.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: true)
            .map { Substring($0) }
        guard parts.count >= 2, parts[1].utf8.count == 3, let status = Int(parts[1]), status >= 100 else { return nil }
        var reason = parts.count > 2 ? String(parts[2].trimmingOWS()) : ""
        if !isFieldValue(reason[...]) { reason = "" }
        var headers = HTTPHeaders()
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            let name = line[..<colon]
            let value = line[line.index(after: colon)...].trimmingOWS()
            guard isToken(name), isFieldValue(value) else { continue }
            headers.add(String(name), String(value))
        }
        return HTTPResponseHead(status: status, reason: reason.isEmpty ? nil : reason, headers: headers)
    }

    /// What a response's Content-Length fields say (RFC 9112 6.3): one length (several fields or list elements
    /// that all agree count as one), none, or invalid (a value that is not digits, or values that differ).
    package enum ContentLength: Equatable {
        case absent
        case length(Int)
        case invalid(String)
    }

    package static func contentLength(_ headers: HTTPHeaders) -> ContentLength {
        let values = headers.values("Content-Length")
        guard !values.isEmpty else { return .absent }
        var length: Int?
        for value in values {
            for element in value.split(separator: ",", omittingEmptySubsequences: false) {
                let text = element.trimmingOWS()
                guard !text.isEmpty, text.utf8.count <= 18, text.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }), let parsed = Int(text) else {
                    return .invalid("invalid Content-Length '\(value.prefix(40))' from upstream")
                }
                if let length, length != parsed {
                    return .invalid("conflicting Content-Length values from upstream (\(values.joined(separator: ", ").prefix(80)))")
                }
                length = parsed
            }
        }
        return length.map(ContentLength.length) ?? .absent
    }

    /// RFC 9110 token: visible ASCII except delimiters.
    static func isToken(_ text: Substring) -> Bool {
        !text.isEmpty && text.utf8.allSatisfy { byte in
            byte > 0x20 && byte < 0x7F && !"\"(),/:;<=>?@[\\]{}".utf8.contains(byte)
        }
    }

    /// RFC 9110 field-value: visible characters, SP, HTAB and obs-text; no other control characters.
    static func isFieldValue(_ text: Substring) -> Bool {
        text.utf8.allSatisfy { byte in byte == 0x09 || (byte >= 0x20 && byte != 0x7F) }
    }
}
