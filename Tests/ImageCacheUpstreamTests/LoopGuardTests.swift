import Testing
@testable import ImageCacheHTTP
@testable import ImageCacheUpstream

@Suite("LoopGuard", .timeLimit(.minutes(1)))
struct LoopGuardTests {
    @Test("the daemon's own endpoints: its listening address and port, loopback for a wildcard listener, and 0.0.0.0 or :: on any listening port")
    func ownEndpoints() throws {
        let guarded = LoopGuard(instanceID: "test")
        guarded.recordListening(host: "127.0.0.1", port: 8080)
        #expect(guarded.isOwnEndpoint(try #require(IPAddress("127.0.0.1")), port: 8080))
        #expect(guarded.isOwnEndpoint(try #require(IPAddress("::ffff:127.0.0.1")), port: 8080))
        #expect(guarded.isOwnEndpoint(try #require(IPAddress("0.0.0.0")), port: 8080), "0.0.0.0 reaches a local listener")
        #expect(guarded.isOwnEndpoint(try #require(IPAddress("::")), port: 8080))
        #expect(!guarded.isOwnEndpoint(try #require(IPAddress("0.0.0.0")), port: 8081))
        #expect(!guarded.isOwnEndpoint(try #require(IPAddress("127.0.0.1")), port: 8081))
        #expect(!guarded.isOwnEndpoint(try #require(IPAddress("93.184.216.34")), port: 8080))
    }
}
