// Request loops: the daemon must never wait on itself (a redirect back into the daemon once waited until the
// upstream timeout, and a chain of /fetch URLs naming the daemon ran until the per-host connection cap).
// Two signs, each answered at once with 508 Loop Detected:
//   - a request carrying this daemon's own Via token (`1.1 imagecached-<instance id>`, sent on every upstream
//     request): it left here and came back, through a redirect a client followed, another proxy, or a URL that
//     names the daemon. The instance id is random per process, so two daemons chained on purpose never match;
//   - an upstream request about to be sent to one of the daemon's own listening sockets (CurlEasy asks for every
//     request of a transfer, each redirect hop and reused connections included): the daemon would be its own
//     client, /_imagecached/ pages included. A wildcard listener (0.0.0.0, ::, a host name, or a socket systemd
//     passed) counts for every local address: loopback and the addresses of this machine's interfaces.
// Data model: the instance id and token are immutable; the listening endpoints and local addresses are recorded once
// the listeners are bound (Daemon.start) and read by the curl thread, under one Mutex.

public import ImageCacheHTTP
public import Foundation
internal import Synchronization
internal import ImageCacheSystem

/// Recognises requests that loop back into this daemon.
public final class LoopGuard: Sendable {
    /// Random per process: 8 hex digits.
    public let instanceID: String
    /// The received-by of this daemon's Via field: "imagecached-<instance id>".
    public let viaToken: String
    /// The Via field value sent upstream.
    public let viaValue: String

    private struct Endpoints {
        /// (address, port); a nil address stands for every local address.
        var listening: [(IPAddress?, Int)] = []
        var local: Set<IPAddress> = []
    }
    private let endpoints = Locked(Endpoints())

    public init(instanceID: String = String(format: "%08x", UInt32.random(in: 0...UInt32.max))) {
        self.instanceID = instanceID
        viaToken = "imagecached-" + instanceID
        viaValue = "1.1 " + viaToken
    }

    /// Records a listening socket: `host` as configured (an IP literal, or nil / a wildcard / a name for "every local
    /// address"), and the bound port.
    public func recordListening(host: String?, port: Int) {
        var address = host.flatMap { IPAddress($0.trimmingCharacters(in: CharacterSet(charactersIn: "[]"))) }
        if let a = address, a == IPAddress("0.0.0.0") || a == IPAddress("::") { address = nil }
        let local = address == nil ? Self.interfaceAddresses() : []
        endpoints.withLock {
            $0.listening.append((address, port))
            $0.local.formUnion(local)
        }
    }

    /// Whether a request to `ip`:`port` would reach this daemon.
    public func isOwnEndpoint(_ ip: IPAddress, port: Int) -> Bool {
        let ip = ip.unmappedIPv4
        // 0.0.0.0 and :: as a destination mean this host: they reach whatever listens on the port here.
        let unspecified = ip == IPAddress("0.0.0.0") || ip == IPAddress("::")
        return endpoints.withLock { state in
            state.listening.contains { address, listeningPort in
                guard listeningPort == port else { return false }
                if unspecified { return true }
                guard let address else { return ip.isLoopback || state.local.contains(ip) }
                return address.unmappedIPv4 == ip
            }
        }
    }

    /// Whether `headers` carry this daemon's own Via token (the request already passed through here).
    public func carriesOwnVia(_ headers: HTTPHeaders) -> Bool {
        // No allocation when there is no Via (every request asks this, on the hit path too).
        for field in headers where field.name.equalsIgnoringASCIICase("Via") && field.value.contains(viaToken) { return true }
        return false
    }

    /// The addresses of this machine's interfaces (getifaddrs).
    static func interfaceAddresses() -> Set<IPAddress> {
        var list: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&list) == 0, let first = list else { return [] }
        defer { freeifaddrs(list) }
        var result: Set<IPAddress> = []
        var cursor: UnsafeMutablePointer<ifaddrs>? = first
        while let entry = cursor {
            if let address = entry.pointee.ifa_addr {
                switch Int32(address.pointee.sa_family) {
                case AF_INET:
                    address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { sin in
                        var raw = sin.pointee.sin_addr
                        result.insert(IPAddress(v4Bytes: withUnsafeBytes(of: &raw) { Array($0) }))
                    }
                case AF_INET6:
                    address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { sin6 in
                        var raw = sin6.pointee.sin6_addr
                        result.insert(.v6(withUnsafeBytes(of: &raw) { Array($0) }))
                    }
                default:
                    break
                }
            }
            cursor = entry.pointee.ifa_next
        }
        return result
    }
}
