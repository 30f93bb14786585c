// LeafCache with a manual clock and a minter the test completes by hand: one mint per host however many ask, the LRU
// bound, the 48 h re-mint while the old leaf serves, and the rules as a table.

import Dispatch
import Foundation
import Testing
@testable import ImageCacheHTTP
@testable import ImageCacheTLS
@testable import ImageCacheCore

@Suite("LeafCache: one generation's leaves by host", .timeLimit(.minutes(1)))
struct LeafCacheTests {
    static let host = InterceptHosts.Host.name("images.test")

    static func identity(_ result: Result<TLSIdentity, LeafError>?) -> TLSIdentity? {
        if case let .success(identity)? = result { return identity }
        return nil
    }

    @Test("50 concurrent asks for a new host cost one mint, and all 50 get its leaf; the next ask is answered at once")
    func concurrentAsksOneMint() throws {
        // Given an empty cache whose minter holds each mint until the test completes it
        let minter = ScriptedMinter()
        let cache = LeafCache(now: ManualClock().function, mint: minter.mint)
        let answers = Answers()

        // When 50 CONNECTs on as many threads ask for the same host
        DispatchQueue.concurrentPerform(iterations: 50) { _ in cache.identity(for: Self.host, answers.answer) }

        // Then one mint started, and nobody is answered before it lands
        #expect(minter.count == 1)
        #expect(answers.all.isEmpty)
        #expect(cache.mintsInFlight == 1)

        // When it lands
        try #require(minter.take()).complete(with: TestLeaves.first)

        // Then all 50 have the leaf, and it is cached
        #expect(answers.wait(for: 50))
        #expect(answers.all.allSatisfy { Self.identity($0) === TestLeaves.first })
        #expect(cache.count == 1)
        #expect(cache.mintsInFlight == 0)

        // And a later ask is answered before `identity` returns, with no new mint
        let later = Answers()
        cache.identity(for: Self.host, later.answer)
        #expect(later.all.count == 1 && Self.identity(later.all.first) === TestLeaves.first)
        #expect(minter.count == 1)
    }

    @Test("the cache holds 1024 hosts: the 1025th evicts the least recently used, and a host just used stays")
    func lruHoldsAt1024() {
        // Given a cache whose mints land at once, filled with hosts 0...1023
        let minter = ScriptedMinter(immediate: TestLeaves.first)
        let cache = LeafCache(now: ManualClock().function, mint: minter.mint)
        let answers = Answers()
        let hosts = (0...1024).map { InterceptHosts.Host.name("h\($0).example.com") }
        for host in hosts[0..<1024] { cache.identity(for: host, answers.answer) }
        #expect(cache.count == LeafCache.capacity)
        #expect(minter.count == 1024)

        // When host 0 is used again, then a 1025th host is minted
        cache.identity(for: hosts[0], answers.answer)
        #expect(minter.count == 1024, "a cached host costs no mint")
        cache.identity(for: hosts[1024], answers.answer)

        // Then the cache still holds 1024: host 1 (least recently used) went, host 0 stayed
        #expect(cache.count == 1024)
        cache.identity(for: hosts[0], answers.answer)
        #expect(minter.count == 1025)
        cache.identity(for: hosts[1], answers.answer)
        #expect(minter.count == 1026, "host 1 was evicted: asking for it mints again")
        #expect(cache.count == 1024)
    }

    @Test("a leaf 48 h old is re-minted once while it keeps serving; the new one serves once it lands")
    func remintAfter48Hours() throws {
        // Given a leaf minted at t0
        let clock = ManualClock()
        let minter = ScriptedMinter()
        let cache = LeafCache(now: clock.function, mint: minter.mint)
        let answers = Answers()
        cache.identity(for: Self.host, answers.answer)
        try #require(minter.take()).complete(with: TestLeaves.first)
        #expect(answers.wait(for: 1))

        // When it is asked for just before 48 h
        clock.advance(hours: 47.99)
        cache.identity(for: Self.host, answers.answer)
        // Then it serves, and nothing is minted
        #expect(answers.all.count == 2 && Self.identity(answers.all.last) === TestLeaves.first)
        #expect(minter.count == 1)

        // When it is asked for at 48 h, twice
        clock.advance(hours: 0.01)
        cache.identity(for: Self.host, answers.answer)
        cache.identity(for: Self.host, answers.answer)
        // Then both asks are answered at once with the old leaf, and one re-mint started
        #expect(answers.all.count == 4 && answers.all.suffix(2).allSatisfy { Self.identity($0) === TestLeaves.first })
        #expect(minter.count == 2)

        // When the re-mint lands
        let remint = try #require(minter.take())
        #expect(remint.now == clock.now)
        remint.complete(with: TestLeaves.second)
        // Then the new leaf serves, with no further mint
        cache.identity(for: Self.host, answers.answer)
        #expect(Self.identity(answers.all.last) === TestLeaves.second)
        #expect(minter.count == 2)
        #expect(cache.count == 1)
    }

    @Test("a leaf within an hour of its end is not served: the ask waits for the new leaf")
    func expiredLeafWaits() throws {
        // Given a leaf minted at t0 (valid 72 h) whose re-mint never came
        let clock = ManualClock()
        let minter = ScriptedMinter()
        let cache = LeafCache(now: clock.function, mint: minter.mint)
        let answers = Answers()
        cache.identity(for: Self.host, answers.answer)
        try #require(minter.take()).complete(with: TestLeaves.first)

        // When it is asked for 71 h later
        clock.advance(hours: 71)
        cache.identity(for: Self.host, answers.answer)

        // Then the ask waits for a new mint, and gets the new leaf
        #expect(answers.all.count == 1)
        #expect(minter.count == 2)
        try #require(minter.take()).complete(with: TestLeaves.second)
        #expect(answers.wait(for: 2))
        #expect(Self.identity(answers.all.last) === TestLeaves.second)
    }

    @Test("a failed mint answers its waiters with the failure; a failed re-mint leaves the old leaf serving and the next ask tries again")
    func failedMints() throws {
        // Given two asks waiting for a new host's mint
        let clock = ManualClock()
        let minter = ScriptedMinter()
        let cache = LeafCache(now: clock.function, mint: minter.mint)
        let answers = Answers()
        cache.identity(for: Self.host, answers.answer)
        cache.identity(for: Self.host, answers.answer)

        // When the mint is refused
        try #require(minter.take()).done(.failure(.tooManyMints(limit: 256)))

        // Then both get the refusal, and nothing is cached
        #expect(answers.wait(for: 2))
        #expect(answers.all.allSatisfy { if case .failure(.tooManyMints(256)) = $0 { true } else { false } })
        #expect(cache.count == 0)

        // When the next ask's mint lands, and 48 h later the re-mint fails
        cache.identity(for: Self.host, answers.answer)
        try #require(minter.take()).complete(with: TestLeaves.first)
        clock.advance(hours: 48)
        cache.identity(for: Self.host, answers.answer)
        try #require(minter.take()).done(.failure(.mintFailed(host: "images.test", reason: "test")))

        // Then the old leaf still serves, and the next ask starts another re-mint
        cache.identity(for: Self.host, answers.answer)
        #expect(Self.identity(answers.all.last) === TestLeaves.first)
        #expect(minter.count == 4)
    }

    @Test("the rules: fresh under 48 h, renew from 48 h, expired within an hour of notAfter", arguments: [
        // hours since the mint, hours of validity from the mint, expected
        (0.0, 72.0, LeafCache.Freshness.fresh),
        (47.9, 72.0, .fresh),
        (48.0, 72.0, .renew),
        (70.9, 72.0, .renew),
        (71.0, 72.0, .expired),
        (80.0, 72.0, .expired),
        (10.0, 10.5, .expired),   // a leaf cut short by its CA's own end
    ])
    func freshness(age: Double, validity: Double, expected: LeafCache.Freshness) {
        let minted = Date(timeIntervalSince1970: 1_800_000_000)
        #expect(LeafCache.freshness(mintedAt: minted, notAfter: minted.addingTimeInterval(validity * 3600),
                                    now: minted.addingTimeInterval(age * 3600)) == expected)
    }
}
