// Logs kept in the tier (the purge log is one): what a log is, and the walks that append to it and read it, as pure
// state machines (the fleet thread sends what they ask for and hands them the answers: FleetClient+Log.swift).
//
// A log is a series of segments, values `<name>.<n>` for n from 0, on each server. A segment is made (add, with the
// log's TTL) with a header line "#ic1-log <nonce>\n" (a random nonce) and grows by appends of whole lines up to
// `FleetLogLimits.segmentBytes`; a line that would take it past that goes to the next segment. A log has at most
// `maxSegments` segments on a server; past that an append is refused ("the log is full").
//
//   append  from the segment this host last found to be the latest on that server (0 at first):
//           mg <seg> s -> size: room for the line -> ms <seg> MA -> HD: done | NS (gone, or over the server's
//                              item_size_max meanwhile): size again
//                        no room -> the next segment
//                   -> EN: mg <seg+1> s -> it exists: walk on from it | EN: ms <seg> ME T<ttl> (header + line)
//                              -> HD: done | NS (another host made it meanwhile): size again
//           Every step is counted: a walk of more than `maxSteps` ends, refused (a log that changes under it that often
//           is not one this client made).
//   read    from this host's cursor on that server (segment, bytes of it read, its nonce): mg <seg> s -> the size
//           differs from what was read -> mg <seg> v (on control or bulk by size: FleetClient) -> the bytes past the
//           cursor (all of them, header skipped, when the nonce differs: the segment was made anew) -> mg <seg+1> s ->
//           it exists: read it from its start | EN: done. A read returns only what was appended since the last read
//           of that server, so a poll costs two small `mg` per log and server while nothing changes, and each byte of
//           the log crosses the network once per host (plus the segment it is in, when that segment grows).
//
// Why segments (rather than one value per log): one value is bounded by the server's item_size_max (1 MiB by
// default: about 10,000 purges); and a host that reads it every second reads all of it every time. Segments bound
// each value, and the cursor reads only the tail. Appends are not atomic with the size check: hosts appending at the
// same moment may take a segment a few lines past `segmentBytes`, which is far below any item_size_max it is used
// with (`segmentBytes(itemSizeMax:)`).
//
// Ownership: values; the cursors are kept per server by the fleet thread (FleetLink.logCursors).

/// Sizes of a log.
package enum FleetLogLimits {
    /// A segment's size past which lines go to the next one (or a quarter of the server's item_size_max, if less).
    package static let segmentBytes = 64 << 10
    /// Segments per log and server.
    package static let maxSegments = 256
    /// Requests one walk may take (a segment can take three: size, and an append that lost a race, and size again).
    package static let maxSteps = maxSegments * 3 + 8
    /// Bytes one read returns at most: it stops at the end of the segment where it went past this, and the next read
    /// goes on from there (a catch-up over many full logs is read over several polls, not held at once).
    package static let readBytesPerWalk = 1 << 20
    /// Cursors a server keeps (one per log name read; the least recently used go first): the purge log's 26 hourly logs
    /// and room to spare.
    package static let maxCursors = 40

    package static func segmentBytes(itemSizeMax: Int?) -> Int {
        guard let itemSizeMax, itemSizeMax > 0 else { return segmentBytes }
        return max(1024, min(segmentBytes, itemSizeMax / 4))
    }

    /// A segment's key.
    package static func segmentKey(_ name: String, _ segment: Int) -> String { "\(name).\(segment)" }

    /// The header line a segment starts with.
    package static func header(nonce: UInt64) -> [UInt8] {
        Array("#ic1-log \(String(nonce, radix: 16))\n".utf8)
    }

    /// A segment's nonce and the length of its header line; nil when it does not start with one.
    package static func parseHeader(_ bytes: [UInt8]) -> (nonce: String, length: Int)? {
        let prefix = Array("#ic1-log ".utf8)
        guard bytes.count > prefix.count, Array(bytes[0..<prefix.count]) == prefix,
              let end = bytes[prefix.count...].firstIndex(of: UInt8(ascii: "\n")) else { return nil }
        let nonce = String(decoding: bytes[prefix.count..<end], as: UTF8.self)
        guard !nonce.isEmpty, nonce.utf8.count <= 32 else { return nil }
        return (nonce, end + 1)
    }
}

/// Where this host stands in one log on one server.
package struct FleetLogCursor: Sendable, Equatable {
    /// The segment reads go on from.
    package var segment = 0
    /// The segment this host's last append found to be the latest (the next starts from it, or `segment` if later).
    package var appendSegment = 0
    /// Bytes of `segment` read (header included); 0 before the first read.
    package var offset = 0
    /// `segment`'s nonce when read.
    package var nonce: String?

    package init() {}
}

/// One server's part of an append: a walk over the segments to the one with room for the line.
package struct FleetLogAppendWalk: Sendable {
    package enum Action: Sendable, Equatable {
        /// `mg <key> s`.
        case size(String)
        /// `ms <key> <n> MA` with the line.
        case append(String)
        /// `ms <key> <n> ME T<ttl>` with `bytes` (the header and the line).
        case add(String, bytes: [UInt8])
        /// The walk ended: the line is on the server (in `segment`), or it is not (`reason`).
        case done(stored: Bool, reason: String?)
    }

    package enum Answer: Sendable, Equatable {
        /// `HD s<size>`.
        case size(Int)
        /// `EN`.
        case missing
        /// `HD` to an append or add.
        case stored
        /// `NS`.
        case notStored
        /// Anything else (the client handles a failed connection).
        case other(String)
    }

    private enum Step: Equatable {
        case sizing(Int)
        /// Segment `n` is missing: does `n + 1` exist?
        case probingNext(Int)
        case appending(Int)
        case adding(Int)
        case done
    }

    package let name: String
    package let line: [UInt8]
    let segmentBytes: Int
    let nonce: UInt64
    private var step: Step
    private var steps = 0
    private var refusals = 0
    /// The walk went back to segment 0 once (the log was lost under it).
    private var restarted = false
    /// The segment the walk started from.
    private let startSegment: Int
    /// The segment the line went to (or the latest found), for the host's cursor.
    package private(set) var segment: Int

    package init(name: String, line: [UInt8], from segment: Int, segmentBytes: Int, nonce: UInt64) {
        self.name = name
        self.line = line
        self.segmentBytes = segmentBytes
        self.nonce = nonce
        self.segment = max(0, min(segment, FleetLogLimits.maxSegments - 1))
        startSegment = self.segment
        step = .sizing(self.segment)
    }

    package mutating func start() -> Action { ask(.sizing(segment)) }

    package mutating func answered(_ answer: Answer) -> Action {
        switch (step, answer) {
        case let (.sizing(n), .size(size)):
            return size + line.count <= segmentBytes ? ask(.appending(n)) : ask(.sizing(n + 1))
        case let (.sizing(n), .missing):
            return ask(.probingNext(n))
        case let (.probingNext(n), .size):
            return ask(.sizing(n + 1))
        case let (.probingNext(n), .missing) where n > 0 && n == startSegment && !restarted:
            // Neither the segment this host knew as the latest nor the next is there: the server lost the log (a
            // restart, a flush). It is made again from segment 0, where every reader looks first.
            restarted = true
            return ask(.sizing(0))
        case let (.probingNext(n), .missing):
            return ask(.adding(n))
        case (.appending, .stored), (.adding, .stored):
            return end(stored: true, reason: nil)
        case let (.appending(n), .notStored), let (.adding(n), .notStored):
            // Gone, over the server's item_size_max, or made by another host meanwhile: look again, a few times.
            refusals += 1
            guard refusals <= Self.maxRefusals else { return end(stored: false, reason: "the server did not store the line") }
            return ask(.sizing(n))
        case let (_, .other(text)):
            return end(stored: false, reason: text)
        default:
            return end(stored: false, reason: "an answer out of turn")
        }
    }

    /// `NS` answers a walk takes before it gives up.
    static let maxRefusals = 4

    private mutating func ask(_ next: Step) -> Action {
        steps += 1
        guard steps <= FleetLogLimits.maxSteps else {
            return end(stored: false, reason: "the log changed under every step of its append")
        }
        switch next {
        case let .sizing(n):
            guard n < FleetLogLimits.maxSegments else {
                return end(stored: false, reason: "the log is full (\(FleetLogLimits.maxSegments) segments)")
            }
            segment = n
            step = next
            return .size(FleetLogLimits.segmentKey(name, n))
        case let .probingNext(n):
            guard n + 1 < FleetLogLimits.maxSegments else { return ask(.adding(n)) }
            step = next
            return .size(FleetLogLimits.segmentKey(name, n + 1))
        case let .appending(n):
            segment = n
            step = next
            return .append(FleetLogLimits.segmentKey(name, n))
        case let .adding(n):
            segment = n
            step = next
            return .add(FleetLogLimits.segmentKey(name, n), bytes: FleetLogLimits.header(nonce: nonce) + line)
        case .done:
            return end(stored: false, reason: nil)
        }
    }

    private mutating func end(stored: Bool, reason: String?) -> Action {
        step = .done
        return .done(stored: stored, reason: reason)
    }
}

/// One server's read of a log: the bytes appended since this host's cursor.
package struct FleetLogReadWalk: Sendable {
    package enum Action: Sendable, Equatable {
        /// `mg <key> s`.
        case size(String)
        /// `mg <key> v` (a value of about `bytes`).
        case read(String, bytes: Int)
        /// The walk ended: `cursor` is where the host stands now.
        case done(FleetLogCursor)
    }

    package enum Answer: Sendable, Equatable {
        case size(Int)
        case missing
        case value([UInt8])
        case other(String)
    }

    private enum Step: Equatable {
        case sizing(Int)
        case reading(Int)
        /// After segment n: does n + 1 exist?
        case probingNext(Int)
        case done
    }

    package let name: String
    package private(set) var cursor: FleetLogCursor
    /// The lines appended since the cursor, in order (headers left out).
    package private(set) var appended: [UInt8] = []
    /// The log has no segment on the server at all.
    package private(set) var missing = false
    /// The walk stopped before the log's end (it had `readBytesPerWalk` bytes, or took `maxSteps` requests): the rest
    /// comes at the next read.
    package private(set) var stoppedEarly = false
    private var step: Step
    private var steps = 0
    /// The segment the walk started from, and whether it went back to segment 0 once (the log was lost under it).
    private let startSegment: Int
    private var restarted = false
    private var startWasMissing = false

    package init(name: String, cursor: FleetLogCursor) {
        self.name = name
        self.cursor = cursor
        startSegment = cursor.segment
        step = .sizing(cursor.segment)
    }

    package mutating func start() -> Action { ask(.sizing(cursor.segment)) }

    package mutating func answered(_ answer: Answer) -> Action {
        switch (step, answer) {
        case let (.sizing(n), .size(size)):
            if size != cursor.offset || cursor.nonce == nil { return ask(.reading(n), bytes: size) }
            return ask(.probingNext(n))
        case let (.sizing(n), .missing):
            if n == 0 { missing = true }
            if n == startSegment, !restarted { startWasMissing = true }
            return ask(.probingNext(n))
        case let (.reading(n), .value(bytes)):
            take(bytes)
            return ask(.probingNext(n))
        case let (.reading(n), .missing):
            return ask(.probingNext(n))
        case (.probingNext, .size) where appended.count >= FleetLogLimits.readBytesPerWalk:
            stoppedEarly = true
            return finish()  // the rest at the next read: the cursor is at the end of a segment read whole
        case let (.probingNext(n), .size(size)):
            missing = false
            let appendSegment = cursor.appendSegment
            cursor = FleetLogCursor()
            cursor.segment = n + 1
            cursor.appendSegment = appendSegment
            return ask(.reading(n + 1), bytes: size)
        case let (.probingNext(n), .missing) where n == startSegment && n > 0 && startWasMissing && !restarted:
            // The segment the cursor was on and the next are both gone: the server lost the log (a restart, a flush),
            // and it is made again from segment 0. Read from there (lines read before come again; the caller keeps
            // what it has seen).
            restarted = true
            cursor = FleetLogCursor()
            return ask(.sizing(0))
        case (.probingNext, .missing):
            return finish()
        case (_, .other):
            return finish()
        default:
            return finish()
        }
    }

    private mutating func take(_ bytes: [UInt8]) {
        guard let header = FleetLogLimits.parseHeader(bytes) else {
            // Not a segment this client made: nothing in it is trusted; the cursor stays, so it is not read again
            // until it changes.
            cursor.offset = bytes.count
            cursor.nonce = cursor.nonce ?? ""
            return
        }
        let from = header.nonce == cursor.nonce && cursor.offset >= header.length && cursor.offset <= bytes.count
            ? cursor.offset : header.length
        appended += bytes[from...]
        cursor.offset = bytes.count
        cursor.nonce = header.nonce
    }

    private mutating func ask(_ next: Step, bytes: Int = 0) -> Action {
        steps += 1
        guard steps <= FleetLogLimits.maxSteps else {
            stoppedEarly = true
            return finish()
        }
        switch next {
        case let .sizing(n):
            step = next
            return .size(FleetLogLimits.segmentKey(name, n))
        case let .reading(n):
            step = next
            return .read(FleetLogLimits.segmentKey(name, n), bytes: bytes)
        case let .probingNext(n):
            guard n + 1 < FleetLogLimits.maxSegments else { return finish() }
            step = next
            return .size(FleetLogLimits.segmentKey(name, n + 1))
        case .done:
            return finish()
        }
    }

    private mutating func finish() -> Action {
        step = .done
        return .done(cursor)
    }
}
