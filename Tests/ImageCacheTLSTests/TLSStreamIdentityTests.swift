// A server stream that brings its own identity, on a context without one (interception: one context per CA
// generation, one leaf per host): the handshake, the SNI rule, and which tickets resume. Joined in memory, no sockets.

import Foundation
import ImageCacheTestSupport
@testable import ImageCacheTLS
import Testing

@Suite("TLSStream with a per-stream identity: one context, a leaf per host", .timeLimit(.minutes(1)))
struct TLSStreamIdentityTests {
    /// Leaves of the constrained test CA beyond the standard set: a second one for images.test (a re-mint) and one
    /// for a.images.test (another host of the same generation). Made once per test process.
    static let extraLeaves = Result {
        let pki = try TestPKI.standard()
        let directory = try TestPKI.makeDirectory()
        return (reminted: try TestPKI.issueLeaf(named: "images-reminted", dnsNames: ["images.test"], by: pki.constrainedCA, in: directory),
                subdomain: try TestPKI.issueLeaf(named: "a-images", dnsNames: ["a.images.test"], by: pki.constrainedCA, in: directory))
    }

    static func identity(_ credential: TestPKI.Credential) throws -> TLSIdentity {
        try TLSIdentity(certificateDER: credential.certificateDER, privateKeyDER: credential.keyDER)
    }

    static func stream(_ context: TLSContext, _ credential: TestPKI.Credential, host: String) throws -> TLSStream {
        try TLSStream(server: context, identity: identity(credential), serverName: .mustMatch(host))
    }

    @Test("a client trusting the CA completes a handshake with a leaf given to the stream, on a context with no certificate")
    func handshakeWithStreamIdentity() throws {
        // Given a context with no identity of its own, and a stream on it presenting the images.test leaf
        let pki = try TestPKI.standard()
        let context = try TLSContext.server()
        #expect(context.needsStreamIdentity)
        let client = try TLSStream(client: Contexts.verifyingClient(), serverName: "images.test", alpn: ["http/1.1"])
        let streams = JoinedStreams(client: client, server: try Self.stream(context, pki.imagesLeaf, host: "images.test"))

        // When both handshake
        let result = streams.handshake()

        // Then the verifying client accepts the leaf (chain to the CA, name images.test), with ALPN as the context says
        #expect(result.client == .done)
        #expect(result.server == .done)
        #expect(streams.server.serverName == "images.test")
        #expect(streams.server.negotiatedALPN == "http/1.1")
    }

    @Test("two streams on one context present two hosts' leaves, each verified by its client for its own name")
    func twoHostsOneContext() throws {
        // Given one context and two hosts
        let pki = try TestPKI.standard()
        let extra = try Self.extraLeaves.get()
        let context = try TLSContext.server()
        for (credential, host) in [(pki.imagesLeaf, "images.test"), (extra.subdomain, "a.images.test")] {
            // When a client for each host connects
            let streams = JoinedStreams(client: try TLSStream(client: Contexts.verifyingClient(), serverName: host),
                                        server: try Self.stream(context, credential, host: host))
            let result = streams.handshake()

            // Then each handshake succeeds: the client got the leaf for the name it asked
            #expect(result.client == .done, "\(host): \(String(describing: result.client.error))")
            #expect(result.server == .done, "\(host)")
        }
    }

    @Test("a client asking for another name than the stream's host is refused with unrecognized_name")
    func sniMismatchRefused() throws {
        // Given a stream for images.test and a client asking for evil.test that verifies nothing (only SNI can stop it)
        let pki = try TestPKI.standard()
        let client = try TLSStream(client: TLSContext.client(trust: .noVerification), serverName: "evil.test")
        let streams = JoinedStreams(client: client, server: try Self.stream(TLSContext.server(), pki.imagesLeaf, host: "images.test"))

        // When both handshake
        let result = streams.handshake()

        // Then the server refuses by name and the client hears the alert; the leaf was never sent
        let serverError = try #require(result.server.error)
        #expect(serverError.kind == .serverNameMismatch)
        #expect(serverError.detail.contains("evil.test") && serverError.detail.contains("images.test"), "\(serverError)")
        let clientError = try #require(result.client.error)
        #expect(clientError.detail.contains("unrecognized name"), "\(clientError)")
    }

    @Test("a ticket resumes on the same host's re-minted leaf, and never on another host of the same context",
          arguments: [TLSProtocolVersion.tls1_3, .tls1_2])
    func ticketsBoundToHost(version: TLSProtocolVersion) throws {
        // Given a full handshake to images.test on a generation's context, whose client kept its session
        let pki = try TestPKI.standard()
        let extra = try Self.extraLeaves.get()
        let context = try TLSContext.server()
        let clientContext = try Contexts.verifyingClient(versions: .tls1_2 ... version)
        let first = JoinedStreams(client: try TLSStream(client: clientContext, serverName: "images.test"),
                                  server: try Self.stream(context, pki.imagesLeaf, host: "images.test"))
        let firstResult = first.handshake()
        try #require(firstResult.client == .done && firstResult.server == .done)
        first.pump()
        _ = JoinedStreams.read(first.client)  // takes the TLS 1.3 tickets
        let session = try #require(first.client.session())
        _ = first.client.shutdown()

        // When the session is offered to the same host under a re-minted leaf
        let again = JoinedStreams(client: try TLSStream(client: clientContext, serverName: "images.test", session: session),
                                  server: try Self.stream(context, extra.reminted, host: "images.test"))
        let againResult = again.handshake()

        // Then it resumes
        #expect(againResult.client == .done && againResult.server == .done)
        #expect(again.server.isResumed)

        // When it is offered to another host on the same context
        let other = JoinedStreams(client: try TLSStream(client: clientContext, serverName: "a.images.test", session: session),
                                  server: try Self.stream(context, extra.subdomain, host: "a.images.test"))
        let otherResult = other.handshake()

        // Then that host's handshake is a full one, and its client verifies that host's leaf
        #expect(otherResult.client == .done, "\(String(describing: otherResult.client.error))")
        #expect(otherResult.server == .done)
        #expect(!other.server.isResumed)
        #expect(!other.client.isResumed)
    }

    @Test("an identity gives its chain back as DER, the leaf as it was read")
    func chainDER() throws {
        let pki = try TestPKI.standard()
        #expect(try Self.identity(pki.imagesLeaf).certificateChainDER == [pki.imagesLeaf.certificateDER])
    }
}
