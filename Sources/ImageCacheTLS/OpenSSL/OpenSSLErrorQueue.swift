// OpenSSL's per-thread error queue, read the way every call here needs it: cleared before a call (SSL_get_error
// judges by what is on the queue), drained into one line of text after a failure, so no failure's leftovers reach
// the next call or another stream on the same thread.

internal import COpenSSL

/// OpenSSL's thread-local error queue.
enum OpenSSLErrorQueue {
    /// What a drain found: the text of every entry, and the first entry's library and reason codes.
    struct Drained {
        var text: String
        var firstLibrary: Int32
        var firstReason: Int32
    }

    /// Empties the queue before a call whose failure will be judged from it.
    static func clear() {
        ERR_clear_error()
    }

    /// Takes every entry off the queue: their texts ("error:0A00010B:SSL routines::wrong version number", with the
    /// entry's data such as "SSL alert number 70" after a colon), joined by "; ", or nil when the queue was empty.
    static func drain() -> Drained? {
        var texts: [String] = []
        var firstLibrary: Int32 = 0
        var firstReason: Int32 = 0
        var buffer = [CChar](repeating: 0, count: 256)
        while true {
            var data: UnsafePointer<CChar>?
            var flags: Int32 = 0
            let code = ERR_get_error_all(nil, nil, nil, &data, &flags)
            guard code != 0 else { break }
            if texts.isEmpty {
                firstLibrary = ERR_GET_LIB(code)
                firstReason = ERR_GET_REASON(code)
            }
            ERR_error_string_n(code, &buffer, buffer.count)
            var text = buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
            if flags & ERR_TXT_STRING != 0, let data, data.pointee != 0 {
                text += " (\(String(cString: data)))"
            }
            texts.append(text)
        }
        guard !texts.isEmpty else { return nil }
        return Drained(text: texts.joined(separator: "; "), firstLibrary: firstLibrary, firstReason: firstReason)
    }

    /// A `TLSError` for a call that failed: `sentence` (what we know), then the queue's text; the queue is left empty.
    static func error(_ kind: TLSError.Kind, _ function: String, _ sentence: String? = nil) -> TLSError {
        let queued = drain()?.text
        let detail = [sentence, queued].compactMap { $0 }.joined(separator: ": ")
        return TLSError(kind: kind, function: function, detail: detail.isEmpty ? "no reason given" : detail)
    }
}
