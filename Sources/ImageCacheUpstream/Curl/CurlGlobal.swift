// libcurl's process-wide state: `curl_global_init` runs once, before the first handle is made, and is never
// undone (curl_global_cleanup is not thread-safe and the daemon keeps libcurl until exit).
// Owned by nobody: a `static let` gives the once-only initialisation and its thread safety.

internal import CCurl
internal import CCurlShim

enum CurlGlobal {
    private static let initResult: CURLcode = curl_global_init(Int(CURL_GLOBAL_ALL))

    /// Initialises libcurl once per process; throws when that failed.
    static func initialize() throws(CurlError) {
        try initResult.check("curl_global_init")
    }

    /// The libcurl version text ("libcurl/7.88.1 OpenSSL/3.0.x ...") for logs.
    static var version: String {
        guard let text = curl_version() else { return "libcurl" }
        return String(cString: text)
    }
}
