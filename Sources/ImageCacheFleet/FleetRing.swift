// The ring: which server of the configured list owns a key. Rendezvous (highest random weight) hashing: the owner is
// the server with the largest XXH3-64 of `server.description + "\0" + key`. Pure and immutable: a settings change
// makes a new ring.
//
// The list is fixed: a server that fails keeps its keys (they are answered unavailable while its breaker is open),
// never rehashed onto the others (Nishtala et al. 3.3: rehashing a failed server's load onto its neighbours risks
// cascading failures; oslo.cache bug 1819957: a server that comes back would serve what it held before). Removing a
// server from the list moves only its own keys; adding one takes about 1/n of every other server's keys.

package struct FleetRing: Sendable {
    package let servers: [FleetServer]
    /// Each server's name and the 0 separator, hashed with the key.
    private let prefixes: [[UInt8]]

    package init(servers: [FleetServer]) {
        self.servers = servers
        prefixes = servers.map { Array($0.description.utf8) + [0] }
    }

    /// The index of the server that owns `key`; nil when the list is empty.
    package func owner(of key: String) -> Int? {
        guard !servers.isEmpty else { return nil }
        var bytes: [UInt8] = []
        var best = 0
        var bestWeight: UInt64 = 0
        for (index, prefix) in prefixes.enumerated() {
            bytes.removeAll(keepingCapacity: true)
            bytes.append(contentsOf: prefix)
            bytes.append(contentsOf: key.utf8)
            let weight = XXH3.hash(bytes)
            if index == 0 || weight > bestWeight {
                best = index
                bestWeight = weight
            }
        }
        return best
    }
}
