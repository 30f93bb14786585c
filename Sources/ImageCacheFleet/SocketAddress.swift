// A server's resolved address (a sockaddr copied out of getaddrinfo's list) and the monotonic clock the fleet thread
// keeps its deadlines and lease progress in. Values; resolution runs on the fleet thread when settings are applied
// (mostly numeric IPv4/IPv6 literals: no lookup then; a name blocks that thread for its lookup, once per settings).

#if canImport(Glibc)
internal import Glibc
#endif

struct SocketAddress {
    var family: Int32
    private var storage = sockaddr_storage()
    private var length: socklen_t

    /// The first TCP address of `host`:`port`; the resolver's error text when there is none.
    static func resolve(host: String, port: Int) -> Result<SocketAddress, ResolveError> {
        var hints = addrinfo()
        hints.ai_flags = AI_NUMERICSERV
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
}

struct ResolveError: Error, CustomStringConvertible {
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
