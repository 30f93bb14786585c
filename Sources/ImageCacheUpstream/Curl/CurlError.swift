// Errors from libcurl calls, and how a finished transfer's CURLcode becomes an `UpstreamError`.
// Pure values; `check` converts a code on the line that produced it (house rule 5).

internal import CCurl
internal import CCurlShim

/// A libcurl call that failed: which call, its code and libcurl's text for it.
struct CurlError: Error, Sendable, CustomStringConvertible {
    /// The CURLcode (or CURLMcode for multi calls) as a number.
    var code: Int
    /// What was called, with the option name for setopt ("curl_easy_setopt(CURLOPT_TIMEOUT_MS)").
    var function: String
    var message: String

    var description: String { "\(function) failed: \(message) (\(code))" }
}

extension CURLcode {
    /// Throws a `CurlError` unless this is CURLE_OK.
    func check(_ function: String) throws(CurlError) {
        guard self != CURLE_OK else { return }
        throw CurlError(code: Int(rawValue), function: function, message: String(cString: curl_easy_strerror(self)))
    }
}

extension CURLMcode {
    /// Throws a `CurlError` unless this is CURLM_OK.
    func check(_ function: String) throws(CurlError) {
        guard self != CURLM_OK else { return }
        throw CurlError(code: Int(rawValue), function: function, message: String(cString: curl_multi_strerror(self)))
    }
}

extension UpstreamError {
    /// The failure a finished transfer's code means. `detail` is libcurl's text (strerror and error buffer).
    /// `maxRedirects` is the configured limit, reported by `.tooManyRedirects`.
    static func from(curlCode code: CURLcode, detail: String, maxRedirects: Int, maxBodyBytes: Int) -> UpstreamError {
        switch code {
        case CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY:
            return .dns(detail)
        case CURLE_COULDNT_CONNECT:
            return .connect(detail)
        case CURLE_OPERATION_TIMEDOUT:
            return .timeout(detail)
        case CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CONNECT_ERROR, CURLE_SSL_CACERT_BADFILE,
             CURLE_SSL_CERTPROBLEM, CURLE_SSL_CIPHER, CURLE_SSL_ENGINE_NOTFOUND, CURLE_SSL_ENGINE_SETFAILED,
             CURLE_SSL_ISSUER_ERROR, CURLE_SSL_PINNEDPUBKEYNOTMATCH, CURLE_SSL_INVALIDCERTSTATUS,
             CURLE_SSL_CRL_BADFILE, CURLE_SSL_SHUTDOWN_FAILED, CURLE_SSL_CLIENTCERT, CURLE_USE_SSL_FAILED:
            return .tls(detail)
        case CURLE_TOO_MANY_REDIRECTS:
            return .tooManyRedirects(maxRedirects)
        case CURLE_FILESIZE_EXCEEDED:
            return .tooLarge(limit: maxBodyBytes)
        case CURLE_PARTIAL_FILE, CURLE_RECV_ERROR, CURLE_SEND_ERROR, CURLE_GOT_NOTHING, CURLE_WEIRD_SERVER_REPLY,
             CURLE_HTTP2, CURLE_HTTP2_STREAM, CURLE_HTTP3, CURLE_BAD_CONTENT_ENCODING:
            return .broken(detail)
        case CURLE_UNSUPPORTED_PROTOCOL, CURLE_URL_MALFORMAT:
            return .badURL(detail)
        case CURLE_ABORTED_BY_CALLBACK:
            return .cancelled
        default:
            return .other(detail)
        }
    }
}
