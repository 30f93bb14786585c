// An incremental parser of memcached meta answers: bytes in, whole answers out, in order (MetaProtocol.swift lists
// them). Pure: no I/O; a connection owns one and feeds it what it reads (so it is confined to the fleet thread).
//
// Data model: `state` says what the next bytes are (a line, a value's data, the CRLF after it, more STAT lines);
// `partial` holds a line begun in an earlier chunk; `valueBytes` grows to a value's announced length (kept out of
// `state` so appending never copies it). Value bytes are copied in bulk, never scanned; only lines are searched for
// their `\n` (memchr).
//
// Refused as a protocol error (the owner closes the connection; the parser is not used again): a line longer than
// `maxLineBytes` (8 KiB) without its CRLF, a line not ended by `\r\n`, a value length over `maxValueBytes` or not a
// number, a value not followed by `\r\n`, a flag whose number does not parse, an unknown answer, a line other than
// STAT or END inside a stats answer.

#if canImport(Glibc)
internal import Glibc
#endif

package struct MetaResponseParser {
    package static let maxLineBytes = 8192
    /// memcached's own largest item: `-I` cannot exceed 1 GiB.
    package static let defaultMaxValueBytes = 1 << 30

    private enum State {
        case line
        /// `remaining` bytes of a value's data are still to come.
        case value(MetaFlags, remaining: Int)
        /// The value's data are in; `seen` bytes of the `\r\n` after them too.
        case trailer(MetaFlags, seen: Int)
        /// Inside a stats answer (collected in `stats`).
        case stats
    }

    /// Values announced longer than this are refused.
    package var maxValueBytes: Int
    private var state = State.line
    private var partial: [UInt8] = []
    private var valueBytes: [UInt8] = []
    private var stats: [String: String] = [:]

    package init(maxValueBytes: Int = MetaResponseParser.defaultMaxValueBytes) {
        self.maxValueBytes = maxValueBytes
    }

    /// Whether the parser is between answers (no part of one read yet).
    package var isIdle: Bool {
        if case .line = state { return partial.isEmpty }
        return false
    }

    package mutating func feed(_ bytes: [UInt8]) throws(MetaProtocolError) -> [MetaResponse] {
        let result = bytes.withUnsafeBytes { buffer in Result(catching: { () throws(MetaProtocolError) in try feed(buffer) }) }
        return try result.get()
    }

    /// Parses `buffer` on from where the last call stopped; returns the answers it completed.
    package mutating func feed(_ buffer: UnsafeRawBufferPointer) throws(MetaProtocolError) -> [MetaResponse] {
        var responses: [MetaResponse] = []
        var offset = 0
        let count = buffer.count
        while offset < count {
            switch state {
            case let .value(flags, remaining):
                let take = min(remaining, count - offset)
                valueBytes.append(contentsOf: UnsafeRawBufferPointer(rebasing: buffer[offset..<(offset + take)]))
                offset += take
                state = take == remaining ? .trailer(flags, seen: 0) : .value(flags, remaining: remaining - take)
            case let .trailer(flags, seen):
                guard buffer[offset] == (seen == 0 ? 13 : 10) else { throw MetaProtocolError("a value not followed by CRLF") }
                offset += 1
                if seen == 0 {
                    state = .trailer(flags, seen: 1)
                } else {
                    responses.append(MetaResponse(status: .value, flags: flags, value: valueBytes))
                    valueBytes = []
                    state = .line
                }
            case .line, .stats:
                let rest = count - offset
                guard let newline = memchr(buffer.baseAddress! + offset, 10, rest) else {
                    partial.append(contentsOf: UnsafeRawBufferPointer(rebasing: buffer[offset...]))
                    guard partial.count <= Self.maxLineBytes + 1 else {
                        throw MetaProtocolError("a line over \(Self.maxLineBytes) bytes")
                    }
                    offset = count
                    continue
                }
                let end = offset + (UnsafeRawPointer(newline) - (buffer.baseAddress! + offset))
                if partial.isEmpty {
                    try take(UnsafeRawBufferPointer(rebasing: buffer[offset..<end]), into: &responses)
                } else {
                    partial.append(contentsOf: UnsafeRawBufferPointer(rebasing: buffer[offset..<end]))
                    let line = partial
                    partial.removeAll(keepingCapacity: true)
                    try line.withUnsafeBytes { bytes in
                        Result(catching: { () throws(MetaProtocolError) in try take(bytes, into: &responses) })
                    }.get()
                }
                offset = end + 1
            }
        }
        return responses
    }

    /// One line, its `\n` excluded.
    private mutating func take(_ raw: UnsafeRawBufferPointer, into responses: inout [MetaResponse]) throws(MetaProtocolError) {
        guard raw.count <= Self.maxLineBytes + 1 else { throw MetaProtocolError("a line over \(Self.maxLineBytes) bytes") }
        guard raw.last == 13 else { throw MetaProtocolError("a line not ended by CRLF") }
        let text = String(decoding: UnsafeRawBufferPointer(rebasing: raw.dropLast()), as: UTF8.self)
        let tokens = text.split(separator: " ", omittingEmptySubsequences: true)
        guard let head = tokens.first else { throw MetaProtocolError("an empty line") }

        if case .stats = state {
            switch head {
            case "STAT":
                guard tokens.count >= 2 else { throw MetaProtocolError("a STAT line without a name: \(text.prefix(80))") }
                stats[String(tokens[1])] = tokens.dropFirst(2).joined(separator: " ")
            case "END":
                responses.append(MetaResponse(status: .stats(stats)))
                stats = [:]
                state = .line
            default:
                throw MetaProtocolError("\(text.prefix(80)) inside a stats answer")
            }
            return
        }

        switch head {
        case "VA":
            guard tokens.count >= 2, let length = Int(tokens[1]), length >= 0 else {
                throw MetaProtocolError("a VA line without a length: \(text.prefix(80))")
            }
            guard length <= maxValueBytes else {
                throw MetaProtocolError("a value of \(length) bytes (at most \(maxValueBytes) expected)")
            }
            let flags = try Self.flags(tokens.dropFirst(2))
            valueBytes = []
            valueBytes.reserveCapacity(length)
            state = length == 0 ? .trailer(flags, seen: 0) : .value(flags, remaining: length)
        case "HD": responses.append(MetaResponse(status: .header, flags: try Self.flags(tokens.dropFirst())))
        case "EN": responses.append(MetaResponse(status: .miss, flags: try Self.flags(tokens.dropFirst())))
        case "NF": responses.append(MetaResponse(status: .notFound, flags: try Self.flags(tokens.dropFirst())))
        case "NS": responses.append(MetaResponse(status: .notStored, flags: try Self.flags(tokens.dropFirst())))
        case "EX": responses.append(MetaResponse(status: .exists, flags: try Self.flags(tokens.dropFirst())))
        case "MN": responses.append(MetaResponse(status: .noop))
        case "SERVER_ERROR": responses.append(MetaResponse(status: .serverError(Self.message(text, after: head))))
        case "CLIENT_ERROR": responses.append(MetaResponse(status: .clientError(Self.message(text, after: head))))
        case "ERROR": responses.append(MetaResponse(status: .error))
        case "STAT":
            guard tokens.count >= 2 else { throw MetaProtocolError("a STAT line without a name: \(text.prefix(80))") }
            stats = [String(tokens[1]): tokens.dropFirst(2).joined(separator: " ")]
            state = .stats
        case "END":
            responses.append(MetaResponse(status: .stats([:])))
        default:
            throw MetaProtocolError("an unknown answer: \(text.prefix(80))")
        }
    }

    private static func message(_ text: String, after head: Substring) -> String {
        String(text.dropFirst(head.count).drop(while: { $0 == " " }))
    }

    /// The flag tokens of an answer. Letters this client never asks for are skipped.
    private static func flags(_ tokens: ArraySlice<Substring>) throws(MetaProtocolError) -> MetaFlags {
        var flags = MetaFlags()
        for token in tokens {
            let letter = token.first!
            let rest = token.dropFirst()
            switch letter {
            case "c": flags.cas = try number(rest, token)
            case "f": flags.clientFlags = try number(rest, token)
            case "t": flags.ttl = try number(rest, token)
            case "s":
                let size: Int = try number(rest, token)
                guard size >= 0 else { throw MetaProtocolError("a negative size \(token.prefix(40))") }
                flags.size = size
            case "O": flags.opaque = try number(rest, token)
            case "W": flags.won = true
            case "Z": flags.waiting = true
            case "X": flags.stale = true
            case "k": flags.key = String(rest)
            default: continue
            }
        }
        return flags
    }

    private static func number<T: FixedWidthInteger>(_ text: Substring, _ token: Substring) throws(MetaProtocolError) -> T {
        guard let value = T(text) else { throw MetaProtocolError("a malformed flag \(token.prefix(40))") }
        return value
    }
}
