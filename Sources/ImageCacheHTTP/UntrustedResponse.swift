// What every response from an untrusted source carries (forward and fetch modes: any URL a client names), so that a
// browser never runs what such an origin sends as a document of the daemon's own origin, where the admin endpoints
// live. As go-camo does:
//   X-Content-Type-Options: nosniff            the declared type is final (no HTML sniffed out of an "image")
//   Content-Security-Policy: default-src 'none'; img-src data:; style-src 'unsafe-inline'
//                                              opened as a document (an SVG, a mislabelled body) it runs no script,
//                                              loads nothing, submits nothing
// The origin's own fields of those names are replaced, not kept beside ours: browsers act on the first
// X-Content-Type-Options value, so an origin's "X-Content-Type-Options: sniff" first would undo ours.
// Pure values, no I/O.

/// The fields added to responses from untrusted origins.
public enum UntrustedResponse {
    public static let contentSecurityPolicy = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"

    /// The two fields, as sent.
    public static let fields: [(String, String)] = [
        ("X-Content-Type-Options", "nosniff"),
        ("Content-Security-Policy", contentSecurityPolicy),
    ]

    /// Replaces any field of those names with ours.
    public static func apply(to headers: inout HTTPHeaders) {
        for (name, value) in fields { headers.set(name, value) }
    }

    /// Whether `headers` carry exactly our fields (then a response for an untrusted client needs nothing added).
    public static func isApplied(_ headers: HTTPHeaders) -> Bool {
        headers.values("X-Content-Type-Options") == ["nosniff"]
            && headers.values("Content-Security-Policy") == [contentSecurityPolicy]
    }
}
