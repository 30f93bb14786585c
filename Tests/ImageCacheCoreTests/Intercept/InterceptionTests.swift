// The certificates queue and the generations: real leaves minted on `imagecached.certificates` with a local CA made
// in memory, the 256-mint bound, and a new CA dropping the old one's leaves.

import Dispatch
import Foundation
import ImageCacheSystem
import Testing
@testable import ImageCacheHTTP
import ImageCacheStatus
@testable import ImageCacheTLS
@testable import ImageCacheCertificates
@testable import ImageCacheCore

@Suite("Minting and InterceptionCell: the certificates queue, its bound, and CA generations", .timeLimit(.minutes(1)))
struct InterceptionTests {
    static func ca(_ hosts: [String] = ["images.test"]) throws -> LocalCA {
        LocalCA.make(hosts: try InterceptHosts.parse(hosts), hostname: "test", now: Date())
    }

    /// The identity the generation in force gives `host` (minting it if need be); nil after 10 s.
    static func identity(_ cell: InterceptionCell, _ host: String) throws -> TLSIdentity? {
        let generation = try #require(cell.current)
        let answers = Answers()
        generation.leaves.identity(for: try #require(InterceptHosts.Host(host)), answers.answer)
        guard answers.wait(for: 1), case let .success(identity)? = answers.all.first else { return nil }
        return identity
    }

    static func trusted(_ identity: TLSIdentity, by ca: LocalCA, host: String) throws -> Bool {
        try TLSVerifier.verify(chainDER: identity.certificateChainDER, anchorPEM: Array(ca.certificatePEM.utf8), hostName: host) == .trusted
    }

    @Test("at most 256 mints are queued: the 257th ask is refused at once with 503's reason, and the queue drains")
    func mintQueueBound() throws {
        // Given the certificates queue, its first mint held so that the others wait behind it
        let minting = Minting()
        let gate = DispatchSemaphore(value: 0)
        let done = DispatchGroup()
        let leaf = LeafCache.Leaf(identity: TestLeaves.first, notAfter: Date().addingTimeInterval(72 * 3600))
        for index in 0..<Minting.queueLimit {
            done.enter()
            minting.submit({
                if index == 0 { gate.wait() }
                return .success(leaf)
            }, done: { _ in done.leave() })
        }
        #expect(minting.queued == 256)

        // When one more mint is asked for
        let refused = Locked<Result<LeafCache.Leaf, LeafError>?>(nil)
        minting.submit({ .success(leaf) }, done: { result in refused.withLock { $0 = result } })

        // Then it is refused before `submit` returns, saying why, and the client would get 503
        let refusal = try #require(refused.withLock { $0 })
        guard case let .failure(error) = refusal else { Issue.record("the 257th mint was taken"); return }
        #expect(error == .tooManyMints(limit: 256))
        #expect(error.status == 503)
        #expect(error.description == "too many certificates being made (256 queued); try again later")

        // When the first mint goes on, the queue drains: every queued mint is made
        gate.signal()
        #expect(done.wait(timeout: .now() + 10) == .success)
        #expect(minting.queued == 0)
        #expect(minting.minted == 256)
    }

    @Test("a minted leaf is a P-256 leaf for its host, signed by the CA: OpenSSL verifies it for that name; an IP host gets an IP leaf")
    func realLeaves() throws {
        // Given a generation for a CA that may sign images.test and 203.0.113.9
        let ca = try Self.ca(["images.test", "203.0.113.9"])
        let cell = InterceptionCell(now: { Date() })
        #expect(try cell.use(ca) == .started(fingerprint: ca.fingerprint))

        // When leaves are asked for both hosts
        let name = try #require(try Self.identity(cell, "images.test"))
        let address = try #require(try Self.identity(cell, "203.0.113.9"))

        // Then each chains to the CA and names its host, and no other
        #expect(try Self.trusted(name, by: ca, host: "images.test"))
        #expect(!(try Self.trusted(name, by: ca, host: "other.test")))
        #expect(try Self.trusted(address, by: ca, host: "203.0.113.9"))
        #expect(name.subject == "/CN=images.test")
        #expect(name.notAfter.timeIntervalSinceNow <= 72 * 3600 + 5)
    }

    @Test("rotating the ticket keys gives the generation a fresh context and keeps its leaves")
    func ticketKeyRotation() throws {
        let ca = try Self.ca()
        let cell = InterceptionCell(now: { Date() })
        _ = try cell.use(ca)
        let leaf = try #require(try Self.identity(cell, "images.test"))
        let generation = try #require(cell.current)
        let before = generation.context
        try generation.rotateTicketKeys()
        #expect(generation.context !== before)
        #expect(try Self.identity(cell, "images.test") === leaf, "the leaf is kept, not minted again")
    }

    @Test("the same CA keeps its generation and leaves; a new CA starts a new generation without them; none ends it")
    func generations() throws {
        // Given a generation for CA A with a leaf for images.test
        let caA = try Self.ca()
        let caB = try Self.ca()
        let cell = InterceptionCell(now: { Date() })
        #expect(cell.current == nil)
        #expect(try cell.use(caA) == .started(fingerprint: caA.fingerprint))
        let generationA = try #require(cell.current)
        let leafA = try #require(try Self.identity(cell, "images.test"))
        #expect(generationA.leaves.count == 1)

        // When the same CA is handed over again (a reload that found the same files)
        #expect(try cell.use(caA) == .unchanged)

        // Then the generation, its context and its leaf are the same
        #expect(cell.current === generationA)
        #expect(try Self.identity(cell, "images.test") === leafA)

        // When CA B replaces it (ca init --replace, then a reload)
        #expect(try cell.use(caB) == .started(fingerprint: caB.fingerprint))

        // Then the new generation has its own context and no leaves: images.test's leaf is minted again, by B
        let generationB = try #require(cell.current)
        #expect(generationB !== generationA)
        #expect(generationB.context !== generationA.context)
        #expect(generationB.leaves.count == 0)
        let leafB = try #require(try Self.identity(cell, "images.test"))
        #expect(leafB !== leafA)
        #expect(try Self.trusted(leafB, by: caB, host: "images.test"))
        #expect(!(try Self.trusted(leafB, by: caA, host: "images.test")))

        // When intercept-hosts is emptied
        #expect(try cell.use(nil) == .ended)
        #expect(cell.current == nil)
        #expect(try cell.use(nil) == .unchanged)
    }

    @Test("the stats count the leaves minted, cached and queued, and are absent when nothing was ever intercepted")
    func stats() throws {
        let cell = InterceptionCell(now: { Date() })
        #expect(cell.stats == nil)
        _ = try cell.use(try Self.ca())
        #expect(cell.stats == .init(minted: 0, cached: 0, mintsQueued: 0))
        _ = try Self.identity(cell, "images.test")
        #expect(cell.stats == .init(minted: 1, cached: 1, mintsQueued: 0))
    }
}
