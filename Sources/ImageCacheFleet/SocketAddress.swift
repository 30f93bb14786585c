// A server's resolved address (a sockaddr copied out of getaddrinfo's list) and the monotonic clock the fleet thread
// keeps its deadlines and lease progress in. Values. Two ways to get an address: `numeric` reads an IPv4/IPv6 literal
// without any lookup (AI_NUMERICHOST: it never blocks, so the fleet thread calls it); `resolve` looks a name up with
// getaddrinfo, which may block for seconds, so only FleetResolver's threads call it, never the fleet thread.

#if canImport(Glibc)
internal import Glibc
#endif

struct SocketAddress: Sendable, Equatable, CustomStringConvertible {
    var family: Int32
    private var storage = sockaddr_storage()
    private var length: socklen_t

    /// How a name becomes an address: `resolve` (getaddrinfo) in the daemon; tests put their own here (FleetTier's
    /// package init) to fail, succeed or hold a resolution on cue. Called on a resolver thread, never the fleet thread.
    typealias Resolver = @Sendable (_ host: String, _ port: Int) -> Result<SocketAddress, ResolveError>

    /// The first TCP address of `host`:`port`; the resolver's error text when there is none. Blocks for a name.
    static func resolve(host: String, port: Int) -> Result<SocketAddress, ResolveError> {
        lookUp(host: host, port: port, flags: 0)
    }

    /// The address of an IP literal (`127.0.0.1`, `::1`); nil for a name. Never blocks (no lookup).
    static func numeric(host: String, port: Int) -> SocketAddress? {
        try? lookUp(host: host, port: port, flags: AI_NUMERICHOST).get()
    }

    private static func lookUp(host: String, port: Int, flags: Int32) -> Result<SocketAddress, ResolveError> {
        var hints = addrinfo()
        hints.ai_flags = AI_NUMERICSERV | flags
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, String(port), &hints, &list)
        guard status == 0, let info = list else {
            return .failure(ResolveError(message: String(cString: gai_strerror(status))))
        }
        defer { freeaddrinfo(list) }
        var address = SocketAddress(family: info.pointee.ai_family, length: info.pointee.ai_addrlen)
        withUnsafeMutableBytes(of: &address.storage) { target in
            target.copyMemory(from: UnsafeRawBufferPointer(start: info.pointee.ai_addr, count: Int(info.pointee.ai_addrlen)))
        }
        return .success(address)
    }

    private init(family: Int32, length: socklen_t) {
        self.family = family
        self.length = length
    }

    func withSockaddr<R>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
        withUnsafeBytes(of: storage) { bytes in
            body(bytes.baseAddress!.assumingMemoryBound(to: sockaddr.self), length)
        }
    }

    /// The same family and the same sockaddr bytes.
    static func == (lhs: SocketAddress, rhs: SocketAddress) -> Bool {
        guard lhs.family == rhs.family, lhs.length == rhs.length else { return false }
        return withUnsafeBytes(of: lhs.storage) { left in
            withUnsafeBytes(of: rhs.storage) { right in
                left.prefix(Int(lhs.length)).elementsEqual(right.prefix(Int(rhs.length)))
            }
        }
    }

    /// The numeric host (`192.0.2.1`, `2001:db8::1`), for the logs.
    var description: String {
        var host = [CChar](repeating: 0, count: Int(NI_MAXHOST))
        let status = withSockaddr { pointer, length in
            getnameinfo(pointer, length, &host, socklen_t(host.count), nil, 0, NI_NUMERICHOST)
        }
        guard status == 0 else { return "?" }
        return String(decoding: host.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

struct ResolveError: Error, Sendable, Equatable, CustomStringConvertible {
    var message: String
    var description: String { message }
}

/// CLOCK_MONOTONIC, in nanoseconds.
package enum FleetClock {
    package static func nanoseconds() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }
}
