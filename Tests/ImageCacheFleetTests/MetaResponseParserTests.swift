import Testing
@testable import ImageCacheFleet

@Suite(.timeLimit(.minutes(1)))
struct MetaResponseParserTests {
    /// One answer of every kind, as memcached 1.6.18 writes them (MetaOutcome.swift's transcript).
    static let stream = Array((
        "VA 5 c6 f7 t59 O6\r\nhello\r\n" +
        "HD s5 c6 f7 t60 O5\r\n" +
        "HD s0 c5 f0 t5 O1 W\r\n" +
        "HD c1 O4 Z\r\n" +
        "VA 0 c2 f0 t4 O6 Z\r\n\r\n" +
        "EN O9\r\n" +
        "NF O1\r\n" +
        "NS O2\r\n" +
        "EX O7\r\n" +
        "MN\r\n" +
        "SERVER_ERROR object too large for cache\r\n" +
        "CLIENT_ERROR bad command line format\r\n" +
        "ERROR\r\n" +
        "STAT item_size_max 33554432\r\nSTAT inter 127.0.0.1\r\nSTAT ssl_ciphers NULL\r\nEND\r\n" +
        "HD t-1 s1 X kflag O3 b\r\n" +
        "VA 4 f4294967295 O8\r\na\r\nb\r\n"
    ).utf8)

    static func flags(cas: UInt64? = nil, clientFlags: UInt32? = nil, ttl: Int? = nil, size: Int? = nil, won: Bool = false,
                      waiting: Bool = false, stale: Bool = false, opaque: UInt32? = nil, key: String? = nil) -> MetaFlags {
        var flags = MetaFlags()
        flags.cas = cas
        flags.clientFlags = clientFlags
        flags.ttl = ttl
        flags.size = size
        flags.won = won
        flags.waiting = waiting
        flags.stale = stale
        flags.opaque = opaque
        flags.key = key
        return flags
    }

    static let expected: [MetaResponse] = [
        MetaResponse(status: .value, flags: flags(cas: 6, clientFlags: 7, ttl: 59, opaque: 6), value: Array("hello".utf8)),
        MetaResponse(status: .header, flags: flags(cas: 6, clientFlags: 7, ttl: 60, size: 5, opaque: 5)),
        MetaResponse(status: .header, flags: flags(cas: 5, clientFlags: 0, ttl: 5, size: 0, won: true, opaque: 1)),
        MetaResponse(status: .header, flags: flags(cas: 1, waiting: true, opaque: 4)),
        MetaResponse(status: .value, flags: flags(cas: 2, clientFlags: 0, ttl: 4, waiting: true, opaque: 6), value: []),
        MetaResponse(status: .miss, flags: flags(opaque: 9)),
        MetaResponse(status: .notFound, flags: flags(opaque: 1)),
        MetaResponse(status: .notStored, flags: flags(opaque: 2)),
        MetaResponse(status: .exists, flags: flags(opaque: 7)),
        MetaResponse(status: .noop),
        MetaResponse(status: .serverError("object too large for cache")),
        MetaResponse(status: .clientError("bad command line format")),
        MetaResponse(status: .error),
        MetaResponse(status: .stats(["item_size_max": "33554432", "inter": "127.0.0.1", "ssl_ciphers": "NULL"])),
        MetaResponse(status: .header, flags: flags(ttl: -1, size: 1, stale: true, opaque: 3, key: "flag")),
        MetaResponse(status: .value, flags: flags(clientFlags: 4_294_967_295, opaque: 8), value: Array("a\r\nb".utf8)),
    ]

    @Test func readsEveryKindOfAnswer() throws {
        // Given every kind of answer in one stream
        var parser = MetaResponseParser()
        // When it is fed at once
        let responses = try parser.feed(Self.stream)
        // Then each answer comes out, in order, with its flags and value
        #expect(responses == Self.expected)
        #expect(parser.isIdle)
        #expect(responses[14].flags.remainingTTL == nil)
        #expect(responses[0].flags.remainingTTL == 59)
    }

    @Test func readsTheSameAnswersWhateverTheChunksAre() throws {
        // Given the stream cut in two at every byte boundary
        for cut in 0...Self.stream.count {
            var parser = MetaResponseParser()
            // When each part is fed in turn
            var responses = try parser.feed(Array(Self.stream[..<cut]))
            responses += try parser.feed(Array(Self.stream[cut...]))
            // Then the answers are the same
            #expect(responses == Self.expected, "cut at \(cut)")
        }
        // And fed one byte at a time
        var parser = MetaResponseParser()
        var responses: [MetaResponse] = []
        for byte in Self.stream { responses += try parser.feed([byte]) }
        #expect(responses == Self.expected)
    }

    @Test func answersNothingUntilAnAnswerIsWhole() throws {
        var parser = MetaResponseParser()
        #expect(try parser.feed(Array("VA 5 c6 O1\r\nhel".utf8)).isEmpty)
        #expect(!parser.isIdle)
        #expect(try parser.feed(Array("lo\r".utf8)).isEmpty)
        #expect(try parser.feed(Array("\nH".utf8)).map(\.value) == [Array("hello".utf8)])
        #expect(try parser.feed(Array("D O2\r\n".utf8)).map(\.status) == [.header])
        #expect(parser.isIdle)
    }

    @Test(arguments: [
        ("a line without its CR", "HD O1\n"),
        ("an unknown answer", "HELLO\r\n"),
        ("an empty line", "\r\n"),
        ("a VA without a length", "VA\r\n"),
        ("a VA with a negative length", "VA -1 O1\r\n"),
        ("a VA length that is not a number", "VA 1x O1\r\nx\r\n"),
        ("a value not followed by CRLF", "VA 2 O1\r\nabc\r\n"),
        ("a CAS that is not a number", "HD cabc O1\r\n"),
        ("client flags over 32 bits", "HD f4294967296 O1\r\n"),
        ("a negative size", "HD s-5 O1\r\n"),
        ("an opaque that is not a number", "HD Oxyz\r\n"),
        ("a line other than STAT inside stats", "STAT a 1\r\nHD O1\r\n"),
        ("a STAT line without a name", "STAT\r\n"),
    ])
    func refusesMalformedAnswers(_ what: String, _ text: String) {
        var parser = MetaResponseParser()
        #expect(throws: MetaProtocolError.self, "\(what)") { try parser.feed(Array(text.utf8)) }
    }

    @Test func refusesALineOver8KiBWithoutItsCRLF() throws {
        // Given a line that never ends
        var parser = MetaResponseParser()
        let chunk = [UInt8](repeating: UInt8(ascii: "a"), count: 4096)
        // When more than 8 KiB of it arrives, in chunks
        #expect(try parser.feed(chunk).isEmpty)
        #expect(try parser.feed(chunk).isEmpty)
        // Then it is refused
        #expect(throws: MetaProtocolError.self) { try parser.feed(chunk) }
        // And a line of 8 KiB with its CRLF is read
        var long = MetaResponseParser()
        let line = "SERVER_ERROR " + String(repeating: "x", count: MetaResponseParser.maxLineBytes - 13)
        #expect(try long.feed(Array((line + "\r\n").utf8)).count == 1)
    }

    @Test func refusesAValueLongerThanItsBound() throws {
        // Given a parser bound to values of 16 bytes
        var parser = MetaResponseParser(maxValueBytes: 16)
        // Then a value of 16 bytes is read and one of 17 is refused before its bytes come
        #expect(try parser.feed(Array("VA 16 O1\r\n0123456789abcdef\r\n".utf8)).count == 1)
        #expect(throws: MetaProtocolError.self) { try parser.feed(Array("VA 17 O2\r\n".utf8)) }
    }
}

@Suite(.timeLimit(.minutes(1)))
struct MetaRequestTests {
    @Test func buildsTheRequestLines() {
        func text(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }
        #expect(text(MetaRequest.lookup("ic1:abc", leaseSeconds: 5, opaque: 7)) == "mg ic1:abc s c f N5 t O7\r\n")
        #expect(text(MetaRequest.read("k", opaque: 8)) == "mg k v c f t O8\r\n")
        #expect(text(MetaRequest.check("k", opaque: 9)) == "mg k c O9\r\n")
        #expect(text(MetaRequest.touch("k", ttlSeconds: 5, opaque: 10)) == "mg k T5 c O10\r\n")
        #expect(text(MetaRequest.storeHeader("k", count: 20, ttlSeconds: 3600, flags: 4_294_967_295, cas: 101, opaque: 11))
                == "ms k 20 T3600 F4294967295 C101 O11\r\n")
        #expect(text(MetaRequest.delete("k", cas: 101, opaque: 12)) == "md k C101 O12\r\n")
        #expect(text(MetaRequest.delete("k", cas: nil, opaque: 13)) == "md k O13\r\n")
        #expect(text(MetaRequest.noop) == "mn\r\n")
        #expect(text(MetaRequest.statsSettings) == "stats settings\r\n")
    }

    @Test func acceptsOnlyKeysMemcachedAccepts() {
        #expect(FleetKey.isValid("ic1:0123abcd~r-v"))
        #expect(FleetKey.isValid(String(repeating: "k", count: 250)))
        for key in ["", String(repeating: "k", count: 251), "a b", "a\tb", "a\r\nb", "caf\u{e9}", "a\u{7f}", "\u{0}"] {
            #expect(!FleetKey.isValid(key), "\(key.debugDescription)")
        }
    }
}
