// One upstream transfer: a libcurl easy handle, its options and the state its callbacks keep.
//
// Data model: `handle` (CURL*), the request header list and the error buffer live as long as this object.
// The callbacks (header, write, open-socket) receive `self` unretained through their userdata pointer;
// `CurlMulti` keeps the object alive while the handle is in the multi handle.
// Ownership: built and configured on any thread in `init` (no callback can run before the handle is added),
// then confined to the curl thread: `CurlMulti` adds it, its callbacks run during `curl_multi_perform`, and
// `complete` is called there too. Events therefore reach `events` serially and in order.
//
// The private-network guard judges twice: the open-socket callback refuses a private address before a socket is
// made, and the pre-request callback (CURLOPT_PREREQFUNCTION, libcurl 7.80) judges the peer of every request of the
// transfer, the first and each redirect hop, whether its connection is new or reused from the pool.
//
// Heads: the header callback collects one header section at a time and resets on every status line. At the
// blank line ending a section it drops interim 1xx responses and 3xx responses with a Location that curl
// follows, and reports the others at once as `.head` (with the effective URL), before any body byte.

internal import ImageCacheHTTP
internal import ImageCacheSystem
internal import CCurl
internal import CCurlShim
internal import Foundation
internal import Logging
internal import Synchronization

/// A libcurl easy handle for one request. Confined to the curl thread once added to `CurlMulti`.
final class CurlEasy: @unchecked Sendable {
    // MARK: immutable after init
    /// Identifies the transfer to `CurlMulti.cancel`.
    let id: UInt64
    let handle: UnsafeMutableRawPointer
    private var headerList: UnsafeMutablePointer<curl_slist>?
    private let errorBuffer: UnsafeMutablePointer<CChar>
    private let events: @Sendable (UpstreamEvent) -> Void
    private let addressGuard: AddressGuard
    private let loopGuard: LoopGuard?
    /// Whether the write callback may take body bytes now (see `FlowControl`); shared with the transfer's owner.
    let flow: FlowControl
    private let followsRedirects: Bool
    private let maxRedirects: Int
    private let maxBodyBytes: Int
    private let logger: Logger
    /// The request's method (a GET or HEAD may go again on a fresh connection).
    private let method: String
    /// The request body sent as it arrives, if any (read on the curl thread).
    private var streamedBody: StreamedBody?
    /// Interim 1xx responses are reported (UpstreamRequest.forwardsInterim).
    private let forwardsInterim: Bool
    /// A dial (UpstreamRequest.dialSlot): connect only, then leave the socket here.
    private let dialSlot: DialSlot?

    // MARK: owned by the curl thread
    /// The lines of the header section being received (status line first), CRLF removed.
    private var sectionLines: [String] = []
    private var headReported = false
    /// Statuses of the redirects curl followed, in order (for the cache: only permanent chains are stored).
    private var redirectStatuses: [Int] = []
    private var bodyBytesReceived = 0
    /// Set by a callback that stopped the transfer on purpose; wins over the CURLcode.
    private var callbackFailure: UpstreamError?
    /// The last address the open-socket callback refused.
    private var refusedAddress: String?
    /// Addresses a trusted transfer connected to before any redirect: its redirect hops may go back to them.
    private var firstHopAddresses: Set<IPAddress> = []

    /// When the private-network guard judges a connection.
    enum AddressGuard {
        /// Never (allow-private-networks).
        case off
        /// Every connection (forward and fetch modes).
        case always
        /// Only connections made for redirect hops, to other addresses than the first hop's (configured origins).
        case redirectsOnly
    }
    private var completed = false
    /// Sent again on a fresh connection once already (`retriesOnFreshConnection`).
    private var retried = false

    /// Configures a handle for `request`. `addressGuard` says which connections the private-network guard judges;
    /// under `.always` the transfer uses `guardedConnections` as its connection cache.
    init(id: UInt64, request: UpstreamRequest, settings: UpstreamSettings, addressGuard: AddressGuard,
         guardedConnections: UnsafeMutableRawPointer, loopGuard: LoopGuard? = nil, flow: FlowControl = FlowControl(),
         logger: Logger,
         events: @escaping @Sendable (UpstreamEvent) -> Void) throws(CurlError) {
        try CurlGlobal.initialize()
        guard let handle = curl_easy_init() else {
            throw CurlError(code: -1, function: "curl_easy_init", message: "out of memory")
        }
        self.id = id
        self.handle = handle
        self.errorBuffer = .allocate(capacity: Int(CURL_ERROR_SIZE))
        self.errorBuffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE))
        self.events = events
        self.addressGuard = addressGuard
        self.loopGuard = loopGuard
        self.flow = flow
        self.followsRedirects = settings.maxRedirects > 0 && request.followsRedirects
        self.maxRedirects = settings.maxRedirects
        self.maxBodyBytes = request.maxBodyBytes
        self.forwardsInterim = request.forwardsInterim
        self.logger = logger
        self.method = request.method
        self.dialSlot = request.dialSlot
        try configure(request: request, settings: settings)
        if addressGuard == .always {
            try ccurl_easy_setopt_ptr(handle, CURLOPT_SHARE, guardedConnections).check("CURLOPT_SHARE")
        }
    }

    deinit {
        curl_easy_cleanup(handle)
        curl_slist_free_all(headerList)
        errorBuffer.deallocate()
    }

    private func configure(request: UpstreamRequest, settings c: UpstreamSettings) throws(CurlError) {
        let h = handle
        let me = Unmanaged.passUnretained(self).toOpaque()
        try ccurl_easy_setopt_string(h, CURLOPT_URL, request.url).check("CURLOPT_URL")
        try Self.setMethod(h, request)
        if let streamed = request.streamedBody {
            try ccurl_easy_setopt_data_cb(h, CURLOPT_READFUNCTION, curlReadCallback).check("CURLOPT_READFUNCTION")
            try ccurl_easy_setopt_ptr(h, CURLOPT_READDATA, me).check("CURLOPT_READDATA")
            self.streamedBody = streamed
        }
        try ccurl_easy_setopt_string(h, CURLOPT_PROTOCOLS_STR, "http,https").check("CURLOPT_PROTOCOLS_STR")
        // An https fetch never follows a redirect to plain http: the answer would be cached under the https key.
        let redirectProtocols = request.url.lowercased().hasPrefix("https:") ? "https" : "http,https"
        try ccurl_easy_setopt_string(h, CURLOPT_REDIR_PROTOCOLS_STR, redirectProtocols).check("CURLOPT_REDIR_PROTOCOLS_STR")
        // maxRedirects 0 means "do not follow": the 3xx is the final response.
        try ccurl_easy_setopt_long(h, CURLOPT_FOLLOWLOCATION, followsRedirects ? 1 : 0).check("CURLOPT_FOLLOWLOCATION")
        try ccurl_easy_setopt_long(h, CURLOPT_MAXREDIRS, c.maxRedirects).check("CURLOPT_MAXREDIRS")
        try ccurl_easy_setopt_long(h, CURLOPT_HTTP_VERSION, Int(CURL_HTTP_VERSION_2TLS)).check("CURLOPT_HTTP_VERSION")
        try ccurl_easy_setopt_long(h, CURLOPT_SSL_VERIFYPEER, 1).check("CURLOPT_SSL_VERIFYPEER")
        try ccurl_easy_setopt_long(h, CURLOPT_SSL_VERIFYHOST, 2).check("CURLOPT_SSL_VERIFYHOST")
        if !c.caBundle.isEmpty {
            try ccurl_easy_setopt_string(h, CURLOPT_CAINFO, c.caBundle).check("CURLOPT_CAINFO")
        }
        try ccurl_easy_setopt_long(h, CURLOPT_CONNECTTIMEOUT_MS, Self.milliseconds(c.connectTimeoutSeconds)).check("CURLOPT_CONNECTTIMEOUT_MS")
        try ccurl_easy_setopt_long(h, CURLOPT_TIMEOUT_MS, Self.milliseconds(c.totalTimeoutSeconds)).check("CURLOPT_TIMEOUT_MS")
        try ccurl_easy_setopt_long(h, CURLOPT_LOW_SPEED_LIMIT, c.lowSpeedLimitBytesPerSecond).check("CURLOPT_LOW_SPEED_LIMIT")
        try ccurl_easy_setopt_long(h, CURLOPT_LOW_SPEED_TIME, c.lowSpeedTimeSeconds).check("CURLOPT_LOW_SPEED_TIME")
        try ccurl_easy_setopt_long(h, CURLOPT_NOSIGNAL, 1).check("CURLOPT_NOSIGNAL")
        try ccurl_easy_setopt_long(h, CURLOPT_NOPROGRESS, 1).check("CURLOPT_NOPROGRESS")
        // An empty proxy turns proxies off, including http_proxy/https_proxy/all_proxy from the environment:
        // the daemon talks to origins directly, and the SSRF guard judges the origin's own address.
        try ccurl_easy_setopt_string(h, CURLOPT_PROXY, "").check("CURLOPT_PROXY")
        try ccurl_easy_setopt_off_t(h, CURLOPT_MAXFILESIZE_LARGE, curl_off_t(request.maxBodyBytes)).check("CURLOPT_MAXFILESIZE_LARGE")
        try ccurl_easy_setopt_long(h, CURLOPT_BUFFERSIZE, 64 << 10).check("CURLOPT_BUFFERSIZE")
        try ccurl_easy_setopt_ptr(h, CURLOPT_ERRORBUFFER, errorBuffer).check("CURLOPT_ERRORBUFFER")
        // Content codings pass through untouched: CURLOPT_ACCEPT_ENCODING stays unset, so curl neither adds an
        // Accept-Encoding field nor decodes; the client's own Accept-Encoding (if any) is forwarded as is.
        try ccurl_easy_setopt_string(h, CURLOPT_USERAGENT, request.headers["User-Agent"] ?? c.userAgent).check("CURLOPT_USERAGENT")
        headerList = Self.headerList(request.headers, hasBody: request.body != nil || request.streamedBody != nil,
                                     chunked: request.streamedBody.map { $0.length == nil } ?? false)
        try ccurl_easy_setopt_slist(h, CURLOPT_HTTPHEADER, headerList).check("CURLOPT_HTTPHEADER")

        try ccurl_easy_setopt_data_cb(h, CURLOPT_HEADERFUNCTION, curlHeaderCallback).check("CURLOPT_HEADERFUNCTION")
        try ccurl_easy_setopt_ptr(h, CURLOPT_HEADERDATA, me).check("CURLOPT_HEADERDATA")
        try ccurl_easy_setopt_data_cb(h, CURLOPT_WRITEFUNCTION, curlWriteCallback).check("CURLOPT_WRITEFUNCTION")
        try ccurl_easy_setopt_ptr(h, CURLOPT_WRITEDATA, me).check("CURLOPT_WRITEDATA")
        try ccurl_easy_setopt_opensocket_cb(h, curlOpenSocketCallback).check("CURLOPT_OPENSOCKETFUNCTION")
        try ccurl_easy_setopt_ptr(h, CURLOPT_OPENSOCKETDATA, me).check("CURLOPT_OPENSOCKETDATA")
        // Every request of the transfer (each redirect hop), on a new or a reused connection, is judged again by the
        // peer it is about to be sent to: a pooled connection opens no socket, so the open-socket check alone would
        // never see it.
        try ccurl_easy_setopt_prereq_cb(h, curlPrereqCallback).check("CURLOPT_PREREQFUNCTION")
        try ccurl_easy_setopt_ptr(h, CURLOPT_PREREQDATA, me).check("CURLOPT_PREREQDATA")
        if request.dialSlot != nil {
            // A tunnel's dial: a new connection (the open-socket guard judges the address, the loop guard too, since no
            // request is sent and the pre-request callback never runs), then stop. Not FORBID_REUSE: curl would close
            // the connection as the transfer ends, before its socket is taken; libcurl never gives a connect-only
            // connection to another transfer, and closes it when the handle leaves the multi.
            try ccurl_easy_setopt_long(h, CURLOPT_CONNECT_ONLY, 1).check("CURLOPT_CONNECT_ONLY")
            try ccurl_easy_setopt_long(h, CURLOPT_FRESH_CONNECT, 1).check("CURLOPT_FRESH_CONNECT")
        }
    }

    private static func milliseconds(_ seconds: Double) -> Int {
        seconds > 0 ? max(Int((seconds * 1000).rounded()), 1) : 0
    }

    /// The method and the body. The cache's fetches are GETs (HEAD requests are fetched with GET to fill the cache);
    /// other methods are requests passed through to a configured origin, with their body (Content-Length) if any.
    private static func setMethod(_ h: UnsafeMutableRawPointer, _ request: UpstreamRequest) throws(CurlError) {
        // A request that is not idempotent is never sent twice (RFC 9110 9.2.2): curl resends a request whose reused
        // connection died before an answer, so such a request takes a connection of its own; so does a streamed body,
        // which cannot be rewound for a resend.
        if !["GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"].contains(request.method) || request.streamedBody != nil {
            try ccurl_easy_setopt_long(h, CURLOPT_FRESH_CONNECT, 1).check("CURLOPT_FRESH_CONNECT")
        }
        if let streamed = request.streamedBody {
            // The read callback supplies the bytes; a length of -1 sends them chunked.
            try ccurl_easy_setopt_long(h, CURLOPT_POST, 1).check("CURLOPT_POST")
            try ccurl_easy_setopt_off_t(h, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(streamed.length ?? -1)).check("CURLOPT_POSTFIELDSIZE_LARGE")
            if request.method != "POST" {
                try ccurl_easy_setopt_string(h, CURLOPT_CUSTOMREQUEST, request.method).check("CURLOPT_CUSTOMREQUEST")
            }
            return
        }
        switch (request.method, request.body) {
        case ("GET", nil):
            try ccurl_easy_setopt_long(h, CURLOPT_HTTPGET, 1).check("CURLOPT_HTTPGET")
            return
        case ("HEAD", nil):
            try ccurl_easy_setopt_long(h, CURLOPT_NOBODY, 1).check("CURLOPT_NOBODY")
            return
        case (_, nil):
            try ccurl_easy_setopt_long(h, CURLOPT_HTTPGET, 1).check("CURLOPT_HTTPGET")
        case let (_, body?):
            // The body is copied into the handle (COPYPOSTFIELDS, after its size), so it need not outlive this call.
            try ccurl_easy_setopt_long(h, CURLOPT_POST, 1).check("CURLOPT_POST")
            try ccurl_easy_setopt_off_t(h, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(body.count)).check("CURLOPT_POSTFIELDSIZE_LARGE")
            let code = body.isEmpty ? ccurl_easy_setopt_string(h, CURLOPT_COPYPOSTFIELDS, "")
                : body.withUnsafeBytes { ccurl_easy_setopt_ptr(h, CURLOPT_COPYPOSTFIELDS, UnsafeMutableRawPointer(mutating: $0.baseAddress)) }
            try code.check("CURLOPT_COPYPOSTFIELDS")
            if request.method == "POST" { return }
        }
        try ccurl_easy_setopt_string(h, CURLOPT_CUSTOMREQUEST, request.method).check("CURLOPT_CUSTOMREQUEST")
    }

    /// The request fields as a curl list. User-Agent goes through CURLOPT_USERAGENT; Host and framing fields are curl's.
    /// With a body, "Expect:" keeps curl from waiting for a 100 Continue: the body is here already.
    private static func headerList(_ headers: HTTPHeaders, hasBody: Bool, chunked: Bool) -> UnsafeMutablePointer<curl_slist>? {
        let curlOwned = ["User-Agent", "Host", "Content-Length", "Transfer-Encoding", "Expect"]
        var list: UnsafeMutablePointer<curl_slist>? = nil
        for field in headers where !curlOwned.contains(where: { $0.equalsIgnoringASCIICase(field.name) })
            && !HopByHop.names.contains(where: { $0.equalsIgnoringASCIICase(field.name) }) {
            // "Name;" is curl's spelling of a field with an empty value ("Name:" would remove the field).
            let line = field.value.isEmpty ? "\(field.name);" : "\(field.name): \(field.value)"
            list = curl_slist_append(list, line)
        }
        if hasBody {
            list = curl_slist_append(list, "Expect:")
            if chunked { list = curl_slist_append(list, "Transfer-Encoding: chunked") }
            // curl would label a body without a type as a form (application/x-www-form-urlencoded): send none.
            if !headers.contains("Content-Type") { list = curl_slist_append(list, "Content-Type:") }
        }
        return list
    }

    // MARK: callbacks, on the curl thread

    /// One header line (with its CRLF) of any response on the way, redirects and 1xx included.
    fileprivate func receivedHeaderLine(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var length = bytes.count
        while length > 0, bytes[length - 1] == 0x0A || bytes[length - 1] == 0x0D { length -= 1 }
        // Bytes, not Characters: "\r\n" is one Character in Swift.
        let line = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[..<length]), as: UTF8.self)
        if line.hasPrefix("HTTP/") {
            sectionLines = [line]
            return true
        }
        // Once the final head is out, later lines are trailers: not reported.
        guard !headReported, !sectionLines.isEmpty else { return true }
        if !line.isEmpty {
            if let first = line.first, first == " " || first == "\t", sectionLines.count > 1 {
                sectionLines[sectionLines.count - 1] += " " + line.trimmingOWS()   // obsolete line folding
            } else {
                sectionLines.append(line)
            }
            return true
        }
        // The blank line: the section is complete.
        guard let head = ResponseHeadParser.parse(sectionLines) else {
            callbackFailure = .broken("unparsable status line: \(sectionLines[0])")
            return false
        }
        sectionLines = []
        if head.status < 200 {
            if forwardsInterim, head.status >= 102 {
                var interim = head
                HopByHop.strip(&interim.headers)
                events(.interim(interim))
            }
            return true
        }
        if followsRedirects, (300..<400).contains(head.status), let location = head.headers["Location"], !location.isEmpty {
            redirectStatuses.append(head.status)
            return true   // curl follows it (or fails with CURLE_TOO_MANY_REDIRECTS): never reported
        }
        var framed = head
        // Transfer-Encoding with Content-Length: the encoding frames the body (curl decodes it) and the length is
        // void; it must not reach a client, whose framing it would set (RFC 9112 6.1, 6.3).
        if head.headers.contains("Transfer-Encoding"), head.status != 204, head.status != 304 {
            // Only chunked is decoded here: a body in another transfer coding cannot be delivered as it is meant, so
            // the response fails before its head goes anywhere (a clean 502, not a 200 cut short).
            let codings = head.headers.tokens("Transfer-Encoding").map { $0.lowercased() }
            if codings != ["chunked"] {
                callbackFailure = .broken("the origin sent the transfer coding '\(codings.joined(separator: ", "))', which is not decoded here (only chunked)")
                return false
            }
            framed.headers.remove("Content-Length")
            reportHead(framed)
            return true
        }
        switch ResponseHeadParser.contentLength(head.headers) {
        case let .invalid(why):
            // RFC 9112 6.3: a response whose Content-Length is invalid or conflicting is an error; what follows
            // could be a short body or another response, so nothing of it is served or stored.
            callbackFailure = .broken(why)
            return false
        case let .length(length):
            if length > maxBodyBytes {
                callbackFailure = .tooLarge(limit: maxBodyBytes)
                return false
            }
            framed.headers.set("Content-Length", String(length))   // one field, one value
        case .absent:
            break
        }
        reportHead(framed)
        return true
    }

    /// Body bytes of the response on the way.
    /// True: taken; false: fail the transfer; nil: pause (libcurl delivers the same bytes again on resume).
    fileprivate func receivedBody(_ bytes: UnsafeRawBufferPointer) -> Bool? {
        guard headReported else { return true }   // the body of a response that is not reported
        guard !bytes.isEmpty else { return true }
        if bodyBytesReceived + bytes.count > maxBodyBytes {
            callbackFailure = .tooLarge(limit: maxBodyBytes)
            return false
        }
        guard flow.admit(bytes.count) else { return nil }
        bodyBytesReceived += bytes.count
        events(.body(Array(bytes)))
        return true
    }

    /// Bytes of a streamed request body for libcurl to send: a count, 0 at the end, or pause / abort.
    fileprivate func readBody(_ buffer: UnsafeMutableRawBufferPointer) -> Int {
        guard let streamedBody else { return 0 }
        switch streamedBody.read(into: buffer) {
        case let .bytes(count): return count
        case .end: return 0
        case .wait: return Int(CURL_READFUNC_PAUSE)
        case .failed:
            callbackFailure = .other("the client's request body did not arrive whole")
            return Int(CURL_READFUNC_ABORT)
        }
    }

    /// curl is about to connect to `address`: refuse private destinations, else make the socket. (Refusing here
    /// means nothing is even connected to; `prerequest` judges every request again, reused connections included.)
    fileprivate func openSocket(_ address: UnsafeMutablePointer<curl_sockaddr>) -> curl_socket_t {
        let family = address.pointee.family
        let ip = Self.ipAddress(address)
        if dialSlot != nil, let loopGuard, let ip, let port = Self.port(address), loopGuard.isOwnEndpoint(ip, port: port) {
            callbackFailure = .loop("a tunnel to \(ip) port \(port) would reach this daemon itself")
            return CURL_SOCKET_BAD
        }
        if addressGuard != .off, let refusal = judge(ip) ?? (ip == nil ? "address family \(family) is not IPv4 or IPv6" : nil) {
            refusedAddress = ip?.description ?? "family \(family)"
            logger.debug("refused upstream destination", metadata: ["reason": "\(refusal)"])
            return CURL_SOCKET_BAD
        }
        return socket(family, address.pointee.socktype | Int32(SOCK_CLOEXEC.rawValue), address.pointee.protocol)
    }

    /// A request of this transfer (the first, or a redirect hop) is about to be sent on a connection to `peer`,
    /// new or reused: false refuses it (the transfer fails as a refused destination).
    fileprivate func prerequest(peer: String, port: Int) -> Bool {
        if let loopGuard, let ip = IPAddress(peer), loopGuard.isOwnEndpoint(ip, port: port) {
            callbackFailure = .loop("upstream \(peer) port \(port) is this daemon itself")
            return false
        }
        guard addressGuard != .off else { return true }
        guard let ip = IPAddress(peer) else {
            callbackFailure = .refusedDestination(address: peer)
            return false
        }
        if let refusal = judge(ip) {
            refusedAddress = ip.description
            callbackFailure = .refusedDestination(address: ip.description)
            logger.debug("refused upstream request", metadata: ["reason": "\(refusal)"])
            return false
        }
        return true
    }

    /// The guard's verdict on a connection to `ip` for the current hop: nil to allow, else the refusal. A configured
    /// origin's first hop is trusted and its address remembered; its redirect hops may go back to those addresses
    /// or to public ones.
    private func judge(_ ip: IPAddress?) -> String? {
        guard let ip else { return nil }
        switch addressGuard {
        case .off:
            return nil
        case .always:
            return AddressPolicy.refusal(for: ip)
        case .redirectsOnly:
            var redirects = 0
            _ = ccurl_easy_getinfo_long(handle, CURLINFO_REDIRECT_COUNT, &redirects)
            if redirects == 0 {
                firstHopAddresses.insert(ip)
                return nil
            }
            return firstHopAddresses.contains(ip) ? nil : AddressPolicy.refusal(for: ip)
        }
    }

    private static func port(_ address: UnsafeMutablePointer<curl_sockaddr>) -> Int? {
        guard let offset = MemoryLayout<curl_sockaddr>.offset(of: \curl_sockaddr.addr) else { return nil }
        let raw = UnsafeRawPointer(address) + offset
        switch address.pointee.family {
        case AF_INET: return Int(UInt16(bigEndian: raw.loadUnaligned(as: sockaddr_in.self).sin_port))
        case AF_INET6: return Int(UInt16(bigEndian: raw.loadUnaligned(as: sockaddr_in6.self).sin6_port))
        default: return nil
        }
    }

    private static func ipAddress(_ address: UnsafeMutablePointer<curl_sockaddr>) -> IPAddress? {
        guard let offset = MemoryLayout<curl_sockaddr>.offset(of: \curl_sockaddr.addr) else { return nil }
        let raw = UnsafeRawPointer(address) + offset
        switch address.pointee.family {
        case AF_INET:
            let sin = raw.loadUnaligned(as: sockaddr_in.self)
            return IPAddress(v4Bytes: withUnsafeBytes(of: sin.sin_addr) { Array($0) })
        case AF_INET6:
            let sin6 = raw.loadUnaligned(as: sockaddr_in6.self)
            return .v6(withUnsafeBytes(of: sin6.sin6_addr) { Array($0) })
        default:
            return nil
        }
    }

    private func reportHead(_ parsed: HTTPResponseHead) {
        var head = parsed
        HopByHop.strip(&head.headers)
        headReported = true
        events(.head(head, url: effectiveURL, redirects: redirectStatuses))
    }

    private var effectiveURL: String {
        var url: UnsafePointer<CChar>? = nil
        guard ccurl_easy_getinfo_string(handle, CURLINFO_EFFECTIVE_URL, &url) == CURLE_OK, let url else { return "" }
        return String(cString: url)
    }

    // MARK: completion, on the curl thread

    /// Whether the transfer, which failed with `code`, goes again on a fresh connection (and is reset for it): a GET
    /// or HEAD on a kept connection that answered with bytes that are no HTTP/1.x response before any head was
    /// reported. Those are what an earlier response on the connection sent past its Content-Length (a hostile or
    /// broken origin): the request never had its own answer, and failing it would pass one response's fault on to
    /// another client's request. Once per transfer; curl closes the poisoned connection.
    func retriesOnFreshConnection(after code: CURLcode) -> Bool {
        guard !retried, !headReported, streamedBody == nil, method == "GET" || method == "HEAD",
              code == CURLE_UNSUPPORTED_PROTOCOL || code == CURLE_WEIRD_SERVER_REPLY else { return false }
        var connects = 0
        guard ccurl_easy_getinfo_long(handle, CURLINFO_NUM_CONNECTS, &connects) == CURLE_OK, connects == 0,
              ccurl_easy_setopt_long(handle, CURLOPT_FRESH_CONNECT, 1) == CURLE_OK else { return false }
        retried = true
        callbackFailure = nil
        sectionLines = []
        redirectStatuses = []
        logger.notice("upstream connection answered with bytes left from an earlier response; sent again on a new connection",
                      metadata: ["url": "\(effectiveURL)", "error": "\(detail(code))"])
        return true
    }

    /// A dial that connected: takes a duplicate of its socket into the dial's slot, before the handle leaves the
    /// multi (which closes curl's own descriptor). A dial whose socket cannot be taken fails.
    func takeDialledSocket(_ code: CURLcode) {
        guard let dialSlot, code == CURLE_OK else { return }
        var socket: curl_socket_t = CURL_SOCKET_BAD
        guard ccurl_easy_getinfo_socket(handle, CURLINFO_ACTIVESOCKET, &socket) == CURLE_OK, socket != CURL_SOCKET_BAD else {
            callbackFailure = .connect("the connection was made but its socket could not be taken")
            return
        }
        let copy = fcntl(socket, F_DUPFD_CLOEXEC, 0)
        guard copy >= 0 else {
            callbackFailure = .connect("could not take the connected socket: \(String(cString: strerror(errno)))")
            return
        }
        var ip: UnsafePointer<CChar>? = nil
        var port = 0
        _ = ccurl_easy_getinfo_string(handle, CURLINFO_PRIMARY_IP, &ip)
        _ = ccurl_easy_getinfo_long(handle, CURLINFO_PRIMARY_PORT, &port)
        dialSlot.fill(OwnedSocket(fd: copy, peer: ip.map { String(cString: $0) } ?? "?", port: port))
    }

    /// The transfer finished with `code` (from curl_multi_info_read): reports `.end` or `.failed`.
    func complete(_ code: CURLcode) {
        if dialSlot != nil {
            // A dial ends with its socket in the slot, or fails.
            if code == CURLE_OK, callbackFailure == nil { return finish(.end) }
        } else if code == CURLE_OK {
            if !headReported, let head = ResponseHeadParser.parse(sectionLines) {
                reportHead(head)
            }
            finish(headReported ? .end : .failed(.broken("no response head")))
            return
        }
        if let callbackFailure {
            finish(.failed(callbackFailure))
        } else if let refusedAddress, code == CURLE_COULDNT_CONNECT {
            finish(.failed(.refusedDestination(address: refusedAddress)))
        } else {
            finish(.failed(.from(curlCode: code, detail: detail(code), maxRedirects: maxRedirects, maxBodyBytes: maxBodyBytes)))
        }
    }

    /// Ends the transfer with `event` unless it already ended (used for shutdown and add failures too).
    func finish(_ event: UpstreamEvent) {
        guard !completed else { return }
        completed = true
        events(event)
    }

    private func detail(_ code: CURLcode) -> String {
        let text = String(cString: curl_easy_strerror(code))
        let buffer = String(cString: errorBuffer)
        return buffer.isEmpty || buffer == text ? text : "\(text): \(buffer)"
    }
}

// The C callbacks: capture nothing, find the CurlEasy through userdata.

private let curlHeaderCallback: ccurl_data_cb = { data, size, count, userdata in
    let easy = Unmanaged<CurlEasy>.fromOpaque(userdata!).takeUnretainedValue()
    let bytes = UnsafeRawBufferPointer(start: data, count: size * count)
    return easy.receivedHeaderLine(bytes) ? size * count : 0
}

private let curlWriteCallback: ccurl_data_cb = { data, size, count, userdata in
    let easy = Unmanaged<CurlEasy>.fromOpaque(userdata!).takeUnretainedValue()
    let bytes = UnsafeRawBufferPointer(start: data, count: size * count)
    switch easy.receivedBody(bytes) {
    case true?: return size * count
    case false?: return 0
    case nil: return 0x1000_0001   // CURL_WRITEFUNC_PAUSE (a macro Swift does not import)
    }
}

private let curlReadCallback: ccurl_data_cb = { data, size, count, userdata in
    let easy = Unmanaged<CurlEasy>.fromOpaque(userdata!).takeUnretainedValue()
    return easy.readBody(UnsafeMutableRawBufferPointer(start: data, count: size * count))
}

private let curlPrereqCallback: ccurl_prereq_cb = { clientp, primaryIP, _, primaryPort, _ in
    let easy = Unmanaged<CurlEasy>.fromOpaque(clientp!).takeUnretainedValue()
    return easy.prerequest(peer: String(cString: primaryIP), port: Int(primaryPort)) ? CURL_PREREQFUNC_OK : CURL_PREREQFUNC_ABORT
}

private let curlOpenSocketCallback: ccurl_opensocket_cb = { clientp, _, address in
    let easy = Unmanaged<CurlEasy>.fromOpaque(clientp!).takeUnretainedValue()
    return easy.openSocket(address)
}

/// Flow control of one transfer's body between its easy handle (the curl thread) and its consumer (any queue).
///
/// Two reasons stop the write callback from taking bytes (it answers CURL_WRITEFUNC_PAUSE, libcurl keeps the bytes
/// and stops reading the socket, so the origin's sending stalls in TCP):
///   - the owner paused it (`setPaused`: every client of the fetch is behind);
///   - `window` bytes are in transit: delivered as events but not yet `release`d by the consumer. This bounds what
///     piles up in the consumer's queue when the curl thread reads faster than the consumer works (a local origin
///     sends at memory speed), so an owner's pause takes effect within a window, not after the whole body.
/// Either side that ends a pause says so (`setPaused(false)` / `release` returning true) and the owner of the handle
/// resumes it on the curl thread (`CurlMulti.resume`); a resumed handle that must still wait pauses again at once.
final class FlowControl: Sendable {
    /// Bytes delivered but not yet released at which the write callback pauses (Int.max: never); resumed at half.
    let window: Int
    private let pausedByOwner = Atomic<Bool>(false)
    private let inTransit = Atomic<Int>(0)
    /// The write callback paused for want of window (the consumer resumes it once it has released half).
    private let waitingForWindow = Atomic<Bool>(false)

    /// `window`: `UpstreamRequest.deliveryWindow` (nil: none).
    init(window: Int? = nil) {
        self.window = max(window ?? .max, 1)
    }

    var isPausedByOwner: Bool { pausedByOwner.load(ordering: .relaxed) }

    func setPaused(_ paused: Bool) { pausedByOwner.store(paused, ordering: .relaxed) }

    /// Curl thread: whether `bytes` may be delivered now (they are then counted in transit); false: pause.
    func admit(_ bytes: Int) -> Bool {
        if pausedByOwner.load(ordering: .relaxed) { return false }
        if inTransit.load(ordering: .sequentiallyConsistent) >= window {
            // Raise the flag, then look again: a release that drained the window in between either sees the flag
            // (and resumes) or happened before this second look (which then finds room).
            waitingForWindow.store(true, ordering: .sequentiallyConsistent)
            guard inTransit.load(ordering: .sequentiallyConsistent) < window else { return false }
            waitingForWindow.store(false, ordering: .sequentiallyConsistent)   // a resume may still come: harmless
        }
        inTransit.add(bytes, ordering: .sequentiallyConsistent)
        return true
    }

    /// Consumer: `bytes` of delivered body are dealt with. True when the handle waits for window and must be resumed.
    func release(_ bytes: Int) -> Bool {
        let left = inTransit.subtract(bytes, ordering: .sequentiallyConsistent).newValue
        guard left < window / 2 else { return false }
        return waitingForWindow.exchange(false, ordering: .sequentiallyConsistent)
    }
}
