// TLSStream: a client and a server joined in memory (Support/JoinedStreams), driven step by step, no sockets.

import Dispatch
import ImageCacheSystem
import ImageCacheTestSupport
@testable import ImageCacheTLS
import Testing

@Suite("TLSStream: handshake, records and close over joined BIO pairs", .timeLimit(.minutes(1)))
struct TLSStreamTests {
    // MARK: handshake and ALPN

    @Test("a client offering h2 and http/1.1 gets http/1.1, verifies the server's chain and name, over TLS 1.3")
    func handshakeSelectsHTTP11() throws {
        // Given a server for images.test and a client trusting its CA
        let streams = try JoinedStreams(server: Contexts.server(), client: Contexts.verifyingClient(), alpn: ["h2", "http/1.1"])

        // When both handshake
        let result = streams.handshake()

        // Then both are done, on http/1.1 and TLS 1.3
        #expect(result.client == .done)
        #expect(result.server == .done)
        #expect(streams.server.negotiatedALPN == "http/1.1")
        #expect(streams.client.negotiatedALPN == "http/1.1")
        #expect(streams.server.protocolVersion == .tls1_3)
        #expect(streams.client.protocolVersion == .tls1_3)
        #expect(!streams.server.isResumed)
    }

    @Test("an h2-only client gets no ALPN answer (never h2), and a client without ALPN none either")
    func handshakeWithoutHTTP11() throws {
        for offered in [["h2"], []] {
            // Given a client that does not offer http/1.1
            let streams = try JoinedStreams(server: Contexts.server(), client: Contexts.verifyingClient(), alpn: offered)

            // When both handshake
            let result = streams.handshake()

            // Then the handshake still succeeds, with no protocol agreed
            #expect(result.client == .done, "offered \(offered)")
            #expect(result.server == .done, "offered \(offered)")
            #expect(streams.server.negotiatedALPN == nil, "offered \(offered)")
            #expect(streams.client.negotiatedALPN == nil, "offered \(offered)")
        }
    }

    @Test("a client trusting another CA refuses the server's certificate, and says why")
    func clientRefusesUnknownIssuer() throws {
        // Given a client whose only anchor is another CA
        let pki = try TestPKI.standard()
        let client = try TLSContext.client(trust: .anchorsPEM(pki.otherCA.certificatePEM))
        let streams = try JoinedStreams(server: Contexts.server(), client: client)

        // When both handshake
        let result = streams.handshake()

        // Then the client fails with the verify error, and the server with the client's alert
        let clientError = try #require(result.client.error)
        #expect(clientError.kind == .protocolFailure)
        #expect(clientError.detail.contains("unable to get local issuer certificate"), "\(clientError)")
        let serverError = try #require(result.server.error)
        #expect(serverError.detail.contains("unknown ca"), "\(serverError)")
    }

    @Test("a TLS 1.2 client is served over TLS 1.2")
    func tls12Client() throws {
        // Given a client that speaks TLS 1.2 at most
        let streams = try JoinedStreams(server: Contexts.server(), client: Contexts.verifyingClient(versions: .tls1_2 ... .tls1_2),
                                        alpn: ["http/1.1"])

        // When both handshake
        let result = streams.handshake()

        // Then TLS 1.2 with ALPN
        #expect(result.client == .done && result.server == .done)
        #expect(streams.server.protocolVersion == .tls1_2)
        #expect(streams.server.negotiatedALPN == "http/1.1")
    }

    @Test("a client that speaks TLS 1.1 at most is refused with protocol_version")
    func tls11Refused() throws {
        // Given a client for TLS 1.0 and 1.1 only
        let old = try TLSContext.client(trust: .noVerification, versions: .tls1_0 ... .tls1_1)
        let streams = try JoinedStreams(server: Contexts.server(), client: old)

        // When both handshake
        let result = streams.handshake()

        // Then the server refuses the version and the client hears the alert
        let serverError = try #require(result.server.error)
        #expect(serverError.kind == .protocolFailure)
        #expect(serverError.detail.contains("unsupported protocol"), "\(serverError)")
        let clientError = try #require(result.client.error)
        #expect(clientError.detail.contains("protocol version"), "\(clientError)")
        #expect(!streams.server.isHandshakeDone)
    }

    // MARK: bytes that are not a ClientHello

    @Test("a plain HTTP request on the TLS stream fails the handshake, and the sniff calls it plain HTTP")
    func plainHTTPFails() throws {
        // Given a server that receives an HTTP request instead of a ClientHello
        let server = try TLSStream(server: Contexts.server())
        let request = Array("GET / HTTP/1.1\r\nHost: images.test\r\n\r\n".utf8)
        #expect(request.withUnsafeBytes { server.feed($0) } == request.count)

        // When it handshakes
        let result = server.handshake()

        // Then it fails as a protocol failure naming the HTTP request
        let error = try #require(result.error)
        #expect(error.kind == .protocolFailure)
        #expect(error.detail.contains("http request"), "\(error)")
        #expect(TLSRecordSniff(request) == .plainHTTP)
    }

    @Test("garbage first bytes fail the handshake, and the sniff calls them other")
    func garbageFails() throws {
        // Given a server that receives bytes that are neither TLS nor HTTP
        let server = try TLSStream(server: Contexts.server())
        let garbage: [UInt8] = [0x00, 0xff, 0x13, 0x37] + Array(repeating: 0x41, count: 60)
        _ = garbage.withUnsafeBytes { server.feed($0) }

        // When it handshakes
        let result = server.handshake()

        // Then it fails, and never asks for more bytes
        let error = try #require(result.error)
        #expect(error.kind == .protocolFailure, "\(error)")
        #expect(TLSRecordSniff(garbage) == .other)
    }

    @Test("a truncated ClientHello leaves the server waiting to read, and the rest completes the handshake")
    func truncatedClientHello() throws {
        // Given the client's first flight, of which the server gets only the record header and 20 bytes
        let streams = try JoinedStreams(server: Contexts.server(), client: Contexts.verifyingClient())
        #expect(streams.client.handshake() == .wantRead)
        let hello = Array(streams.client.pendingCiphertext())
        streams.client.ciphertextConsumed(hello.count)
        #expect(TLSRecordSniff(hello) == .tls)
        _ = hello[..<25].withUnsafeBytes { streams.server.feed($0) }

        // When the server handshakes
        let partial = streams.server.handshake()

        // Then it still waits for bytes, handshaking
        #expect(partial == .wantRead)
        #expect(!streams.server.isHandshakeDone)

        // And when the rest comes, both finish
        _ = hello[25...].withUnsafeBytes { streams.server.feed($0) }
        let result = streams.handshake()
        #expect(result.client == .done)
        #expect(result.server == .done)
    }

    // MARK: SNI

    @Test("the server's SNI callback admits the name it must match, and the name is observed")
    func sniMatches() throws {
        // Given a server that must be asked for images.test
        let streams = try JoinedStreams(server: Contexts.server(), rule: .mustMatch("images.test"),
                                        client: Contexts.verifyingClient(), serverName: "images.test")

        // When both handshake
        let result = streams.handshake()

        // Then they succeed and the server saw the name
        #expect(result.client == .done && result.server == .done)
        #expect(streams.server.serverName == "images.test")
    }

    @Test("a client asking for another name is refused with unrecognized_name")
    func sniMismatch() throws {
        // Given a server for images.test and a client asking for evil.test (not verifying, so only SNI can stop it)
        let client = try TLSContext.client(trust: .noVerification)
        let streams = try JoinedStreams(server: Contexts.server(), rule: .mustMatch("images.test"), client: client,
                                        serverName: "evil.test")

        // When both handshake
        let result = streams.handshake()

        // Then the server refuses by name, and the client hears the alert
        let serverError = try #require(result.server.error)
        #expect(serverError.kind == .serverNameMismatch)
        #expect(serverError.detail.contains("evil.test") && serverError.detail.contains("images.test"), "\(serverError)")
        let clientError = try #require(result.client.error)
        #expect(clientError.detail.contains("unrecognized name"), "\(clientError)")
    }

    @Test("a client connecting to an IP literal sends no SNI, which a must-match server admits")
    func noSNIAdmitted() throws {
        // Given a client for 127.0.0.1
        let client = try TLSContext.client(trust: .noVerification)
        let streams = try JoinedStreams(server: Contexts.server(), rule: .mustMatch("images.test"), client: client,
                                        serverName: "127.0.0.1")

        // When both handshake
        let result = streams.handshake()

        // Then they succeed, with no name seen
        #expect(result.client == .done && result.server == .done)
        #expect(streams.server.serverName == nil)
    }

    // MARK: data

    @Test("1 MB each way goes through the 64 KiB ring: the writer waits, the ring drains, the bytes arrive equal")
    func megabyteEachWay() throws {
        // Given an established pair
        let streams = try JoinedStreams(server: Contexts.server(), client: Contexts.verifyingClient(), alpn: ["http/1.1"])
        let handshake = streams.handshake()
        try #require(handshake.client == .done && handshake.server == .done)
        let upload = (0..<1_000_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        let download = (0..<1_000_000).map { UInt8(truncatingIfNeeded: $0 &* 17 &+ 3) }

        // When 1 MB goes from the client to the server, then 1 MB back
        let up = JoinedStreams.transfer(upload, from: streams.client, to: streams.server)
        let down = JoinedStreams.transfer(download, from: streams.server, to: streams.client)

        // Then every byte arrives in order, and each writer found its ring full (WANT_WRITE) and retried
        expectSameBytes(up.received, upload)
        expectSameBytes(down.received, download)
        #expect(up.waits >= 1_000_000 / TLSStream.outgoingRingBytes)
        #expect(down.waits >= 1_000_000 / TLSStream.outgoingRingBytes)
    }

    @Test("the outgoing ring never holds more than 64 KiB")
    func ringBound() throws {
        // Given an established pair whose server never drains
        let streams = try JoinedStreams(server: Contexts.server(), client: Contexts.verifyingClient())
        let handshake = streams.handshake()
        try #require(handshake.server == .done)
        let body = [UInt8](repeating: 0x5a, count: 200_000)

        // When the server writes until OpenSSL says wait
        var written = 0
        while case .wrote(let count) = body[written...].withUnsafeBytes({ streams.server.write($0) }) {
            written += count
        }

        // Then the ring holds what fits and no more, and OpenSSL took about that much plaintext
        var pending = 0
        while true {
            let piece = streams.server.pendingCiphertext()
            guard !piece.isEmpty else { break }
            pending += piece.count
            streams.server.ciphertextConsumed(piece.count)
        }
        #expect(pending <= TLSStream.outgoingRingBytes)
        #expect(written > TLSStream.outgoingRingBytes / 2)
        #expect(written < TLSStream.outgoingRingBytes + 16 * 1024)
    }

    @Test("a read into a small buffer leaves the rest of the record inside OpenSSL, readable with no new ciphertext")
    func pendingPlaintext() throws {
        // Given an established pair and a 10 000-byte write from the server, all of it moved to the client
        let streams = try JoinedStreams(server: Contexts.server(), client: Contexts.verifyingClient())
        let handshake = streams.handshake()
        try #require(handshake.client == .done && handshake.server == .done)
        let body = [UInt8](repeating: 0x42, count: 10_000)
        #expect(body.withUnsafeBytes { streams.server.write($0) } == .wrote(body.count))
        streams.pump()

        // When the client reads 1000 bytes
        var small = [UInt8](repeating: 0, count: 1000)
        #expect(small.withUnsafeMutableBytes { streams.client.read(into: $0) } == .bytes(1000))

        // Then OpenSSL holds the rest, and reads give it without another byte from the network
        #expect(streams.client.hasPendingPlaintext)
        var received = 1000
        while streams.client.hasPendingPlaintext, case .bytes(let count) = small.withUnsafeMutableBytes({ streams.client.read(into: $0) }) {
            received += count
        }
        #expect(received == body.count)
        #expect(!streams.client.hasPendingPlaintext)
    }

    @Test("feed takes what the 17 KiB incoming ring holds and says so; the rest goes in once the SSL has read")
    func feedStopsAtTheRing() throws {
        // Given 20 000 bytes of an early flight for a fresh server
        let server = try TLSStream(server: Contexts.server())
        let early = [UInt8](repeating: 0x16, count: 20_000)

        // When they are fed
        let taken = early.withUnsafeBytes { server.feed($0) }

        // Then the ring took exactly its size, and has no room left
        #expect(taken == TLSStream.incomingRingBytes)
        #expect(server.networkWriteSpace().isEmpty)
        #expect(server.hasUnreadCiphertext)
    }

    @Test("once the network has ended and the SSL has read every byte, nothing is unread (no owner spins on it)")
    func nothingUnreadAfterTheEnd() throws {
        let server = try TLSStream(server: Contexts.server())
        let start: [UInt8] = [0x16, 0x03, 0x01, 0x00, 0x20]
        #expect(start.withUnsafeBytes { server.feed($0) } == start.count)
        #expect(server.hasUnreadCiphertext)
        server.networkDidEnd()
        _ = server.handshake()   // takes the 5 bytes, then meets the end
        #expect(!server.hasUnreadCiphertext)
    }

    // MARK: resumption

    @Test("a second connection with the first one's ticket resumes, over TLS 1.3 and TLS 1.2",
          arguments: [TLSProtocolVersion.tls1_3, .tls1_2])
    func ticketResumption(version: TLSProtocolVersion) throws {
        // Given a full handshake whose client kept its session (under TLS 1.3 the tickets come after the handshake,
        // so the client reads once to take them)
        let server = try Contexts.server()
        let client = try Contexts.verifyingClient(versions: .tls1_2 ... version)
        let first = try JoinedStreams(server: server, client: client)
        let firstResult = first.handshake()
        try #require(firstResult.client == .done && firstResult.server == .done)
        first.pump()
        #expect(JoinedStreams.read(first.client) == .wantRead)
        let session = try #require(first.client.session())
        #expect(session.protocolVersion == version)

        // When a second connection offers it
        let second = try JoinedStreams(server: server, client: client, session: session)
        let secondResult = second.handshake()

        // Then it resumes, on both sides, without a full key exchange
        #expect(secondResult.client == .done && secondResult.server == .done)
        #expect(!first.server.isResumed)
        #expect(second.server.isResumed)
        #expect(second.client.isResumed)
        #expect(second.server.protocolVersion == version)
    }

    @Test("a client session whose connection ended without close_notify is not resumed (OpenSSL drops it)")
    func noResumptionAfterUncleanEnd() throws {
        // Given a session kept from a connection that is then dropped without shutdown()
        let server = try Contexts.server()
        let client = try Contexts.verifyingClient()
        var first: JoinedStreams? = try JoinedStreams(server: server, client: client)
        _ = first!.handshake()
        first!.pump()
        _ = JoinedStreams.read(first!.client)
        let session = try #require(first!.client.session())
        first = nil

        // When a second connection offers it
        let second = try JoinedStreams(server: server, client: client, session: session)
        let result = second.handshake()

        // Then the handshake is a full one
        #expect(result.client == .done && result.server == .done)
        #expect(!second.client.isResumed)
    }

    @Test("a ticket from another server context (other ticket keys) falls back to a full handshake")
    func ticketFromAnotherContext() throws {
        // Given a session from one server context
        let client = try Contexts.verifyingClient()
        let first = try JoinedStreams(server: Contexts.server(), client: client)
        _ = first.handshake()
        first.pump()
        _ = JoinedStreams.read(first.client)
        let session = try #require(first.client.session())

        // When it is offered to a new context for the same identity
        let second = try JoinedStreams(server: Contexts.server(), client: client, session: session)
        let result = second.handshake()

        // Then the handshake succeeds in full
        #expect(result.client == .done && result.server == .done)
        #expect(!second.server.isResumed)
        #expect(!second.client.isResumed)
    }

    @Test("one server context serves full and resumed handshakes on four threads at once (the loops share it)")
    func sharedContextAcrossThreads() throws {
        // Given one server context and one client context, shared by four threads
        let server = try Contexts.server()
        let client = try Contexts.verifyingClient()
        let outcomes = Locked<[String]>([])  // visible to ThreadSanitizer, unlike Mutex (docs/reliability.md)

        // When each thread makes ten connections, each resuming the one before, and sends a line over each
        DispatchQueue.concurrentPerform(iterations: 4) { thread in
            var session: TLSSession?
            var resumed = 0
            for connection in 0..<10 {
                guard let streams = try? JoinedStreams(server: server, client: client, session: session) else { continue }
                let result = streams.handshake()
                guard result.client == .done, result.server == .done else { continue }
                let line = Array("thread \(thread) connection \(connection)".utf8)
                let echoed = JoinedStreams.transfer(line, from: streams.client, to: streams.server).received
                guard echoed == line else { continue }
                if streams.server.isResumed { resumed += 1 }
                streams.pump()
                _ = JoinedStreams.read(streams.client)  // takes the tickets
                session = streams.client.session()
                _ = streams.client.shutdown()  // else OpenSSL marks the session not resumable when the stream goes
                outcomes.withLock { $0.append("\(thread)") }
            }
            outcomes.withLock { $0.append("resumed \(resumed)") }
        }

        // Then all 40 worked, and every connection after each thread's first resumed
        let all = outcomes.withLock { $0 }
        #expect(all.filter { !$0.hasPrefix("resumed") }.count == 40)
        #expect(all.filter { $0 == "resumed 9" }.count == 4, "\(all.filter { $0.hasPrefix("resumed") })")
    }

    // MARK: closing

    @Test("close_notify from either side reads as closed on the other, and both shutdowns complete",
          arguments: ["client", "server"])
    func closeNotify(initiator: String) throws {
        // Given an established pair
        let streams = try JoinedStreams(server: Contexts.server(), client: Contexts.verifyingClient())
        let result = streams.handshake()
        try #require(result.client == .done && result.server == .done)
        let (closer, peer) = initiator == "client" ? (streams.client, streams.server) : (streams.server, streams.client)

        // When one side shuts down
        #expect(closer.shutdown() == .sent)
        streams.pump()

        // Then the other reads the end, answers, and the first sees the answer
        #expect(JoinedStreams.read(peer) == .closed)
        #expect(peer.shutdown() == .complete)
        streams.pump()
        #expect(JoinedStreams.read(closer) == .closed)
        #expect(closer.shutdown() == .complete)
    }

    @Test("a stream that ends without close_notify reads as a truncation, not a clean close")
    func truncationIsNotClose() throws {
        // Given an established pair
        let streams = try JoinedStreams(server: Contexts.server(), client: Contexts.verifyingClient())
        let result = streams.handshake()
        try #require(result.client == .done && result.server == .done)
        streams.pump()

        // When the client's network ends with no close_notify
        streams.server.networkDidEnd()

        // Then the server's read fails as an unexpected end
        guard case .failed(let error) = JoinedStreams.read(streams.server) else {
            Issue.record("a truncated stream read as something other than a failure")
            return
        }
        #expect(error.kind == .unexpectedEOF, "\(error)")
    }
}
