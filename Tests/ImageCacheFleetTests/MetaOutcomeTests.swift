import Testing
@testable import ImageCacheFleet

@Suite(.timeLimit(.minutes(1)))
struct MetaOutcomeTests {
    static func answer(_ text: String) throws -> MetaResponse {
        var parser = MetaResponseParser()
        let responses = try parser.feed(Array(text.utf8))
        try #require(responses.count == 1)
        return responses[0]
    }

    @Test func aLookupAnswerSaysWonWaitReadOrUnavailable() throws {
        #expect(MetaOutcome.lookup(try Self.answer("HD s0 c5 f0 t5 O1 W\r\n")) == .won(cas: 5))
        #expect(MetaOutcome.lookup(try Self.answer("HD s0 c5 f0 t5 O2 Z\r\n")) == .wait)
        #expect(MetaOutcome.lookup(try Self.answer("HD s5 c6 f7 t60 O3 X Z\r\n")) == .wait)
        #expect(MetaOutcome.lookup(try Self.answer("HD s5 c6 f7 t60 O4\r\n")) == .read(size: 5))
        #expect(MetaOutcome.lookup(try Self.answer("HD s0 c6 f7 t-1 O5\r\n")) == .empty(flags: 7, cas: 6, remainingTTL: nil))
        guard case .unavailable = MetaOutcome.lookup(try Self.answer("EN O6\r\n")) else { Issue.record("EN"); return }
        guard case .unavailable = MetaOutcome.lookup(try Self.answer("SERVER_ERROR out of memory\r\n")) else {
            Issue.record("SERVER_ERROR"); return
        }
    }

    @Test func aReadAnswerSaysHitWonWaitOrVanished() throws {
        #expect(MetaOutcome.read(try Self.answer("VA 5 c6 f7 t59 O1\r\nhello\r\n"))
                == .hit(bytes: Array("hello".utf8), flags: 7, cas: 6, remainingTTL: 59))
        #expect(MetaOutcome.read(try Self.answer("VA 0 c2 f0 t4 O2 W\r\n\r\n")) == .won(cas: 2))
        #expect(MetaOutcome.read(try Self.answer("VA 0 c2 f0 t4 O3 Z\r\n\r\n")) == .wait)
        #expect(MetaOutcome.read(try Self.answer("EN O4\r\n")) == .vanished)
    }

    @Test func aStoreAnswerSaysStoredLostOrTooLarge() throws {
        #expect(MetaOutcome.store(try Self.answer("HD O1\r\n")) == .stored)
        #expect(MetaOutcome.store(try Self.answer("EX O2\r\n")) == .lostLease)
        #expect(MetaOutcome.store(try Self.answer("NF O3\r\n")) == .lostLease)
        #expect(MetaOutcome.store(try Self.answer("SERVER_ERROR object too large for cache\r\n")) == .tooLarge)
        #expect(MetaOutcome.store(try Self.answer("SERVER_ERROR out of memory storing object\r\n"))
                == .unavailable(reason: "SERVER_ERROR out of memory storing object"))
    }

    @Test func aRefreshKeepsTheLeaseOnlyWhileTheCASIsItsOwn() throws {
        #expect(MetaOutcome.leaseHeld(try Self.answer("HD c5 O1 Z\r\n"), cas: 5) == true)
        #expect(MetaOutcome.leaseHeld(try Self.answer("HD c6 O1\r\n"), cas: 5) == false)
        #expect(MetaOutcome.leaseHeld(try Self.answer("EN O1\r\n"), cas: 5) == false)
        #expect(MetaOutcome.leaseHeld(try Self.answer("SERVER_ERROR busy\r\n"), cas: 5) == nil)
    }

    @Test func aDeleteIsDoneWhenTheValueIsGone() throws {
        #expect(MetaOutcome.deleted(try Self.answer("HD O1\r\n")))
        #expect(MetaOutcome.deleted(try Self.answer("NF O1\r\n")))
        #expect(MetaOutcome.deleted(try Self.answer("EX O1\r\n")))
        #expect(!MetaOutcome.deleted(try Self.answer("SERVER_ERROR busy\r\n")))
        #expect(MetaOutcome.desyncs(try Self.answer("CLIENT_ERROR bad data chunk\r\n")))
        #expect(MetaOutcome.desyncs(try Self.answer("ERROR\r\n")))
        #expect(!MetaOutcome.desyncs(try Self.answer("SERVER_ERROR object too large for cache\r\n")))
    }
}
