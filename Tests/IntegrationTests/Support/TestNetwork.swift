// A network namespace of the test's own with veth links to this one (root only): for partitions. Each link is a
// /30 in 10.231.<k>.0/24 (k random per namespace); the namespace's side holds .4i+2, this side .4i+1. Cutting a link
// (`ip link set ... down` on this side) drops its packets silently, as a partition does. Removed with the namespace.

import Foundation
import ImageCacheTestSupport

final class TestNetwork: @unchecked Sendable {
    struct Failure: Error, CustomStringConvertible { var description: String }

    /// Root and iproute2: what the partition tests need (they are skipped otherwise).
    static var isAvailable: Bool {
        geteuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/sbin/ip")
    }

    let namespace: String
    /// The namespace's address on each link.
    let addresses: [String]
    private let hostSides: [String]

    init(links: Int) throws {
        let tag = String(UInt32.random(in: 0...0xFFFFF), radix: 36)
        namespace = "icf\(tag)"
        let k = Int.random(in: 1...254)
        var addresses: [String] = [], hostSides: [String] = []
        try Self.ip(["netns", "add", namespace])
        for index in 0..<links {
            let host = "ich\(tag)\(index)", peer = "icn\(tag)\(index)"
            try Self.ip(["link", "add", host, "type", "veth", "peer", "name", peer])
            try Self.ip(["link", "set", peer, "netns", namespace])
            try Self.ip(["addr", "add", "10.231.\(k).\(4 * index + 1)/30", "dev", host])
            try Self.ip(["link", "set", host, "up"])
            try Self.ip(["netns", "exec", namespace, "ip", "addr", "add", "10.231.\(k).\(4 * index + 2)/30", "dev", peer])
            try Self.ip(["netns", "exec", namespace, "ip", "link", "set", peer, "up"])
            addresses.append("10.231.\(k).\(4 * index + 2)")
            hostSides.append(host)
        }
        try Self.ip(["netns", "exec", namespace, "ip", "link", "set", "lo", "up"])
        self.addresses = addresses
        self.hostSides = hostSides
    }

    deinit {
        for host in hostSides { try? Self.ip(["link", "del", host]) }
        try? Self.ip(["netns", "del", namespace])
    }

    /// Cuts link `index`: packets either way are dropped.
    func cut(_ index: Int) throws { try Self.ip(["link", "set", hostSides[index], "down"]) }

    private static func ip(_ arguments: [String]) throws {
        let result = try Subprocess.run("/usr/sbin/ip", arguments)
        guard result.status == 0 else {
            throw Failure(description: "ip \(arguments.joined(separator: " ")): \(result.errorText)")
        }
    }
}
