// The memcached meta protocol as this client speaks it (doc/protocol.txt of memcached 1.6, "Meta Commands"): the
// requests it sends and the responses it reads. Pure values, no I/O; the parser is MetaResponseParser.swift and what
// an answer means to an operation is MetaOutcome.swift.
//
// Requests (one line each, `\r\n`-terminated; `ms` is followed by its data and `\r\n`). Every request but `mn` and
// `stats settings` carries `O<opaque>`, a per-connection counter the answer must echo (answers are matched in order;
// the token catches a desynced stream). Flag order matters: `N` before `t`, or `t` reports -1 on the fresh stub.
//   lookup   mg <key> s c f N<lease> t O<op>       no value: a large value never blocks the control connection
//   read     mg <key> v c f t O<op>                the value, on control or bulk by its size
//   check    mg <key> c O<op>                       a held lease's CAS, before its TTL is touched
//   touch    mg <key> T<lease> c O<op>             keeps a held lease alive
//   store    ms <key> <n> T<ttl> F<flags> C<cas> O<op>   fenced by the lease's CAS
//   delete   md <key> [C<cas>] O<op>               a release is a delete fenced by the lease's CAS
//   size     mg <key> s O<op>                       a log segment's size (FleetLog.swift)
//   noop     mn                                     the half-open breaker's probe (answer MN)
//   stats    stats settings                         item_size_max (answer STAT name value ... END)
// Not `q` (quiet) mode: in 1.6.18 a quiet `md` stays silent on HD but still answers NF and EX, so whether an answer
// comes depends on the outcome, and FIFO matching would need a trailing `mn` to know. A plain `md` costs one short
// answer line, which is read and dropped.
//
// Responses: `VA <n> <flags>\r\n<n bytes>\r\n`, `HD <flags>`, `EN`, `NF`, `NS`, `EX` (with flags), `MN`,
// `SERVER_ERROR <text>`, `CLIENT_ERROR <text>`, `ERROR`, and `STAT <name> <value>` lines ended by `END`. Flags as
// returned: c<cas> f<client flags> t<ttl> (-1: none) s<size> W (won the lease) Z (a lease is out) X (stale)
// O<opaque> k<key>. Error lines carry no opaque.

/// Keys the tier accepts: 1...250 bytes of printable ASCII without spaces (memcached's own rule for the text
/// protocol). An invalid key is the caller's error: it is answered `.unavailable` and never sent.
package enum FleetKey {
    package static let maxBytes = 250

    package static func isValid(_ key: String) -> Bool {
        var count = 0
        for byte in key.utf8 {
            guard byte > 0x20, byte < 0x7F else { return false }
            count += 1
            if count > maxBytes { return false }
        }
        return count > 0
    }
}

/// The request lines (bytes, `\r\n` included). Keys are valid (`FleetKey.isValid`): the caller checked.
package enum MetaRequest {
    package static func lookup(_ key: String, leaseSeconds: Int, opaque: UInt32) -> [UInt8] {
        line("mg \(key) s c f N\(leaseSeconds) t O\(opaque)")
    }

    package static func read(_ key: String, opaque: UInt32) -> [UInt8] {
        line("mg \(key) v c f t O\(opaque)")
    }

    package static func check(_ key: String, opaque: UInt32) -> [UInt8] {
        line("mg \(key) c O\(opaque)")
    }

    package static func touch(_ key: String, ttlSeconds: Int, opaque: UInt32) -> [UInt8] {
        line("mg \(key) T\(ttlSeconds) c O\(opaque)")
    }

    /// The `ms` line; the value's `count` bytes and `\r\n` follow it.
    package static func storeHeader(_ key: String, count: Int, ttlSeconds: Int, flags: UInt32, cas: UInt64,
                                    opaque: UInt32) -> [UInt8] {
        line("ms \(key) \(count) T\(ttlSeconds) F\(flags) C\(cas) O\(opaque)")
    }

    /// `ms` in append mode (`MA`): adds the bytes to the end of an existing value; NS when there is none.
    package static func appendHeader(_ key: String, count: Int, opaque: UInt32) -> [UInt8] {
        line("ms \(key) \(count) MA O\(opaque)")
    }

    /// `ms` in add mode (`ME`): stores only when there is no value; NS when there is one.
    package static func addHeader(_ key: String, count: Int, ttlSeconds: Int, opaque: UInt32) -> [UInt8] {
        line("ms \(key) \(count) ME T\(ttlSeconds) O\(opaque)")
    }

    /// The size of a value, without it: `mg <key> s` (HD s<n>, or EN).
    package static func size(_ key: String, opaque: UInt32) -> [UInt8] {
        line("mg \(key) s O\(opaque)")
    }

    /// A plain read with the CAS (no lease asked): `mg <key> v c O`.
    package static func plainRead(_ key: String, opaque: UInt32) -> [UInt8] {
        line("mg \(key) v c O\(opaque)")
    }

    package static func delete(_ key: String, cas: UInt64?, opaque: UInt32) -> [UInt8] {
        line("md \(key)" + (cas.map { " C\($0)" } ?? "") + " O\(opaque)")
    }

    package static let noop: [UInt8] = Array("mn\r\n".utf8)
    package static let statsSettings: [UInt8] = Array("stats settings\r\n".utf8)
    package static let crlf: [UInt8] = [13, 10]

    private static func line(_ text: String) -> [UInt8] { Array((text + "\r\n").utf8) }
}

/// The flags of an answer (absent ones are nil or false).
package struct MetaFlags: Sendable, Equatable {
    package var cas: UInt64?
    package var clientFlags: UInt32?
    /// Seconds left; -1 when the item has none.
    package var ttl: Int?
    package var size: Int?
    /// `W`: this client won the lease (it is to fill or revalidate the item).
    package var won = false
    /// `Z`: a lease for the item is out (another client fills it).
    package var waiting = false
    /// `X`: the item is stale (`md I`).
    package var stale = false
    package var opaque: UInt32?
    package var key: String?

    package init() {}

    /// The remaining TTL as FleetValue reports it: nil for none (-1) or not reported.
    package var remainingTTL: Int? { ttl.flatMap { $0 < 0 ? nil : $0 } }
}

/// One answer.
package struct MetaResponse: Sendable, Equatable {
    package enum Status: Sendable, Equatable {
        /// `VA`: a value follows (in `value`).
        case value
        /// `HD`: success, no value.
        case header
        /// `EN`: a get found nothing.
        case miss
        /// `NF`: not found (a store or delete with a CAS, a delete).
        case notFound
        /// `NS`: not stored.
        case notStored
        /// `EX`: the CAS did not match.
        case exists
        /// `MN`: the answer to `mn`.
        case noop
        case serverError(String)
        case clientError(String)
        /// `ERROR`: an unknown command.
        case error
        /// `STAT` lines up to `END`.
        case stats([String: String])
    }

    package var status: Status
    package var flags: MetaFlags
    package var value: [UInt8]?

    package init(status: Status, flags: MetaFlags = MetaFlags(), value: [UInt8]? = nil) {
        self.status = status
        self.flags = flags
        self.value = value
    }

    /// Whether this kind of answer echoes the request's `O` flag (error lines, `MN` and stats do not).
    package var carriesOpaque: Bool {
        switch status {
        case .value, .header, .miss, .notFound, .notStored, .exists: true
        case .noop, .serverError, .clientError, .error, .stats: false
        }
    }
}

/// Bytes that are not the meta protocol: the connection is closed (its stream cannot be trusted any more).
package struct MetaProtocolError: Error, Sendable, Equatable, CustomStringConvertible {
    package var reason: String
    package init(_ reason: String) { self.reason = reason }
    package var description: String { "memcached protocol error: \(reason)" }
}
