// What each answer means to the operation that asked: the tier's rules, one function per request kind, pure (the
// fleet thread applies them; FleetClient+Operations.swift). The table, as checked by hand against Debian's memcached
// 1.6.18 (`-U 0 -t 1 -m 64 -I 32m`, two connections A and B):
//
//   A: mg f1 s c f N5 t O1        -> HD s0 c5 f0 t5 O1 W       miss: a 0-byte stub is made, A won the lease (c5)
//   B: mg f1 s c f N5 t O2        -> HD s0 c5 f0 t5 O2 Z       another client holds it: wait
//   A: ms f1 5 T60 F7 C5 O3 hello -> HD O3                     the store fenced by the lease's CAS
//   B: mg f1 s c f N5 t O5        -> HD s5 c6 f7 t60 O5        a value (no W/Z): read it
//   B: mg f1 v c f t O6           -> VA 5 c6 f7 t59 O6 hello
//   A: ms f1 5 T60 F7 C5 O7       -> EX O7                     a stale CAS: the lease is lost
//   A: ms nf1 5 T60 F7 C12345 O1  -> NF O1                     no stub any more (expired, released)
//   B: mg k2 v c f t O6           -> VA 0 c2 f0 t4 O6 Z        a read that finds a stub reports its lease flags
//   A: mg k1 T5 c O4              -> HD c1 O4 Z                a held lease's touch keeps its CAS (and Z)
//   A: mg k9 T5 c O9              -> EN O9                     ... and finds nothing once it expired
//   A: md r1 C7 O13 (quiet: q)    -> (nothing) ; md r1 C999 q -> EX ; md r1 q (gone) -> NF
//   A: ms big 33554432 ... (-I 32m) -> SERVER_ERROR object too large for cache   (no opaque; MN works after)
//   T1 leases: `mg e1 T1 c t` every 0.3 s -> EN from the first clock tick on; T2 ones stay (memcached's clock counts
//   whole seconds and an item with exptime <= now is gone, so a 1 s lease cannot be kept alive).
//
// Lookups: HD with W -> won, with Z -> wait (a stale X with Z too: this tier has no stale answer), without either ->
// a value, read with `mg v` (s0: answered at once, nothing to read); EN (no stub could be made) -> unavailable.
// Reads: VA without W/Z -> hit; with W -> won (the item became a stub, or went stale, and this read won it); with Z ->
// wait; EN (deleted or replaced between the two requests) -> look up once more.

/// What the `mg <key> s c f N t` answer of a lookup calls for.
package enum LookupStep: Equatable {
    /// A value of `size` bytes is there: read it.
    case read(size: Int)
    /// An empty value: no read needed.
    case empty(flags: UInt32, cas: UInt64, remainingTTL: Int?)
    case won(cas: UInt64)
    case wait
    case unavailable(String)
}

/// What the `mg <key> v c f t` answer of a lookup's read calls for.
package enum ReadStep: Equatable {
    case hit(bytes: [UInt8], flags: UInt32, cas: UInt64, remainingTTL: Int?)
    case won(cas: UInt64)
    case wait
    /// Gone between the lookup and the read: look up once more.
    case vanished
    case unavailable(String)
}

package enum MetaOutcome {
    package static func lookup(_ response: MetaResponse) -> LookupStep {
        let flags = response.flags
        switch response.status {
        case .header:
            if flags.won { return flags.cas.map { .won(cas: $0) } ?? .unavailable("a lease without a CAS") }
            if flags.waiting { return .wait }
            guard let size = flags.size, let cas = flags.cas else { return .unavailable("a hit without its size or CAS") }
            if size == 0 { return .empty(flags: flags.clientFlags ?? 0, cas: cas, remainingTTL: flags.remainingTTL) }
            return .read(size: size)
        case .miss: return .unavailable("memcached could not make the lease stub (EN)")
        default: return .unavailable(describe(response))
        }
    }

    package static func read(_ response: MetaResponse) -> ReadStep {
        let flags = response.flags
        switch response.status {
        case .value:
            if flags.won { return flags.cas.map { .won(cas: $0) } ?? .unavailable("a lease without a CAS") }
            if flags.waiting { return .wait }
            guard let cas = flags.cas else { return .unavailable("a value without its CAS") }
            return .hit(bytes: response.value ?? [], flags: flags.clientFlags ?? 0, cas: cas, remainingTTL: flags.remainingTTL)
        case .miss: return .vanished
        default: return .unavailable(describe(response))
        }
    }

    package static func store(_ response: MetaResponse) -> FleetStoreResult {
        switch response.status {
        case .header: .stored
        case .exists, .notFound: .lostLease
        case let .serverError(message) where message.contains("too large"): .tooLarge
        default: .unavailable(reason: describe(response))
        }
    }

    /// A held lease's check or touch: whether the item is still the stub with the lease's CAS.
    package static func leaseHeld(_ response: MetaResponse, cas: UInt64) -> Bool? {
        switch response.status {
        case .header, .value: response.flags.cas == cas
        case .miss, .notFound: false
        default: nil  // no answer about the lease (a server error): ask again at the next refresh
        }
    }

    /// A delete was carried out or had nothing to do (NF: gone already; EX: replaced by another value already).
    package static func deleted(_ response: MetaResponse) -> Bool {
        switch response.status {
        case .header, .notFound, .exists: true
        default: false
        }
    }

    /// Answers after which the stream cannot be trusted (memcached refused a line it did not understand: what it
    /// makes of the bytes after it is unknown).
    package static func desyncs(_ response: MetaResponse) -> Bool {
        switch response.status {
        case .clientError, .error: true
        default: false
        }
    }

    package static func describe(_ response: MetaResponse) -> String {
        switch response.status {
        case .value: "VA"
        case .header: "HD"
        case .miss: "EN"
        case .notFound: "NF"
        case .notStored: "NS"
        case .exists: "EX"
        case .noop: "MN"
        case let .serverError(message): "SERVER_ERROR \(message)"
        case let .clientError(message): "CLIENT_ERROR \(message)"
        case .error: "ERROR"
        case .stats: "STAT ... END"
        }
    }
}
