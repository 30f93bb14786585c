import Foundation
import ImageCacheHTTP
import ImageCacheUpstream
import Logging
import Synchronization
import Testing
import ImageCacheTestSupport
import ImageCacheSystem

@Suite("CurlOrigin against a local TestOrigin", .timeLimit(.minutes(2)))
struct CurlOriginTests {
    static func makeOrigin(_ adjust: (inout UpstreamSettings) -> Void = { _ in },
                           allowPrivateNetworks: Bool = false) throws -> CurlOrigin {
        var configuration = UpstreamSettings()
        configuration.connectTimeoutSeconds = 5
        configuration.totalTimeoutSeconds = 60
        adjust(&configuration)
        return try CurlOrigin(settings: configuration, allowPrivateNetworks: allowPrivateNetworks,
                              logger: Logger(label: "test.upstream"))
    }

    static func request(_ url: String, maxBodyBytes: Int = 50 << 20, headers: HTTPHeaders = HTTPHeaders()) -> UpstreamRequest {
        UpstreamRequest(url: url, headers: headers, trusted: true, maxBodyBytes: maxBodyBytes)
    }

    @Test("a 200 reports the head, the exact body bytes and .end; request fields reach the origin")
    func bodyBytesExact() async throws {
        // Given
        let server = try TestOrigin()
        defer { server.stop() }
        let image = Fixtures.jpeg(size: 300_000)
        server.route("/a.jpg?w=1") { _ in Reply(status: 200, headers: [("Content-Type", "image/jpeg"), ("ETag", "\"v1\""), ("Connection", "keep-alive, X-Hop"), ("X-Hop", "1")], body: image) }
        let origin = try Self.makeOrigin()
        defer { origin.shutdown() }
        let recorder = TransferRecorder()

        // When
        _ = origin.fetch(Self.request(server.baseURL + "/a.jpg?w=1", headers: ["Accept": "image/webp", "If-None-Match": "\"v0\""]),
                         events: recorder.record)
        let outcome = try await recorder.completion()

        // Then
        #expect(outcome == .end)
        let (head, url) = try #require(recorder.heads.first)
        #expect(recorder.heads.count == 1)
        #expect(head.status == 200)
        #expect(head.headers["Content-Type"] == "image/jpeg")
        #expect(head.headers["ETag"] == "\"v1\"")
        #expect(head.headers["Connection"] == nil && head.headers["X-Hop"] == nil, "hop-by-hop fields are stripped")
        #expect(url == server.baseURL + "/a.jpg?w=1")
        expectSameBytes(recorder.body, image)
        let seen = try #require(server.requests("/a.jpg?w=1").first)
        #expect(seen.method == "GET")
        #expect(seen.header("Accept") == "image/webp")
        #expect(seen.header("If-None-Match") == "\"v0\"")
        #expect(seen.header("User-Agent") == "imagecached/\(imagecachedVersion)")
        #expect(seen.header("Accept-Encoding") == nil, "no Accept-Encoding is added")
        #expect(origin.transfersStarted == 1)
    }

    @Test("with a delivery window, a transfer held back by unconsumed bytes goes on as they are consumed, round after round, byte-exact")
    func deliveryWindow() async throws {
        // Given a 1 MB body and a 64 KiB window
        let server = try TestOrigin()
        defer { server.stop() }
        let image = Fixtures.png(size: 1_000_000)
        server.route("/w.png") { _ in Reply(status: 200, headers: [("Content-Type", "image/png")], body: image) }
        let origin = try Self.makeOrigin()
        defer { origin.shutdown() }
        let recorder = TransferRecorder()
        let window = 64 << 10
        var request = Self.request(server.baseURL + "/w.png")
        request.deliveryWindow = window
        let transfer = origin.fetch(request, events: recorder.record)

        // When the consumer takes the bytes in rounds, each only once a window's worth waits (the handle has paused
        // then: FlowControlTests shows when; a resume that never came would time out here)
        var consumed = 0
        while recorder.outcome == nil {
            let received = try await recorder.body(atLeast: consumed + window)
            transfer.consumed(received - consumed)
            consumed = received
        }

        // Then the body is whole
        #expect(recorder.outcome == .end)
        expectSameBytes(recorder.body, image)
    }

    @Test("an empty 204 body still reports the head, then .end; the client's User-Agent wins")
    func emptyBody() async throws {
        // Given
        let server = try TestOrigin()
        defer { server.stop() }
        server.route("/empty") { _ in Reply(status: 204) }
        let origin = try Self.makeOrigin()
        defer { origin.shutdown() }
        let recorder = TransferRecorder()

        // When
        _ = origin.fetch(Self.request(server.baseURL + "/empty", headers: ["User-Agent": "client/1"]), events: recorder.record)

        // Then
        #expect(try await recorder.completion() == .end)
        #expect(recorder.heads.map(\.0.status) == [204])
        #expect(recorder.body.isEmpty)
        #expect(server.requests("/empty").first?.header("User-Agent") == "client/1")
    }

    @Test("50 concurrent transfers all complete with their own bytes")
    func fiftyConcurrent() async throws {
        // Given
        let server = try TestOrigin()
        defer { server.stop() }
        for i in 0..<50 {
            let body = Fixtures.png(size: 10_000 + i * 997)
            server.route("/img/\(i)") { _ in .ok(body) }
        }
        let origin = try Self.makeOrigin()
        defer { origin.shutdown() }

        // When
        let recorders = (0..<50).map { _ in TransferRecorder() }
        for (i, recorder) in recorders.enumerated() {
            _ = origin.fetch(Self.request(server.baseURL + "/img/\(i)"), events: recorder.record)
        }

        // Then
        for (i, recorder) in recorders.enumerated() {
            #expect(try await recorder.completion() == .end)
            expectSameBytes(recorder.body, Fixtures.png(size: 10_000 + i * 997))
        }
        #expect(origin.transfersStarted == 50)
        #expect(origin.activeTransfers == 0)
    }

    @Test("the head is reported before the origin releases the body (streaming)")
    func headBeforeBody() async throws {
        // Given
        let server = try TestOrigin()
        defer { server.stop() }
        let gate = Gate()
        let image = Fixtures.gif(size: 5000)
        server.route("/gated") { _ in Reply(status: 200, headers: [("Content-Type", "image/gif")], body: image, gate: gate) }
        let origin = try Self.makeOrigin()
        defer { origin.shutdown() }
        let recorder = TransferRecorder()

        // When
        _ = origin.fetch(Self.request(server.baseURL + "/gated"), events: recorder.record)
        let head = try await recorder.head()

        // Then
        #expect(head?.0.status == 200)
        #expect(!gate.isOpen)
        #expect(recorder.bodyEventCount == 0)
        gate.open()
        #expect(try await recorder.completion() == .end)
        expectSameBytes(recorder.body, image)
    }

    @Test("redirects are followed and only the final head is reported, with the final URL")
    func redirectFollowed() async throws {
        // Given
        let server = try TestOrigin()
        defer { server.stop() }
        server.route("/r1") { _ in .redirect(302, to: "/r2") }
        server.route("/r2") { _ in .redirect(301, to: server.baseURL + "/final.png") }
        server.route("/final.png") { _ in .ok(Fixtures.png(size: 2000)) }
        let origin = try Self.makeOrigin()
        defer { origin.shutdown() }
        let recorder = TransferRecorder()

        // When
        _ = origin.fetch(Self.request(server.baseURL + "/r1"), events: recorder.record)

        // Then
        #expect(try await recorder.completion() == .end)
        #expect(recorder.heads.count == 1)
        #expect(recorder.heads.first?.0.status == 200)
        #expect(recorder.heads.first?.1 == server.baseURL + "/final.png")
        expectSameBytes(recorder.body, Fixtures.png(size: 2000))
        #expect(server.requestCount("/r2") == 1)
    }

    @Test("a trusted transfer that follows redirects refuses a hop to another private host, even over a warm pooled connection to it")
    func trustedRedirectHopJudged() async throws {
        // Given origin A (127.0.0.1) redirecting to origin B (127.0.0.2), and a warm keep-alive connection to B
        let a = try TestOrigin(), b = try TestOrigin(host: "127.0.0.2")
        defer {
            a.stop()
            b.stop()
        }
        b.route("/warm.png") { _ in .ok(Fixtures.png()) }
        b.route("/secret.png") { _ in .ok(Fixtures.png()) }
        a.route("/hop.png") { _ in .redirect(302, to: b.baseURL + "/secret.png") }
        let origin = try Self.makeOrigin()
        defer { origin.shutdown() }
        let warm = TransferRecorder()
        _ = origin.fetch(Self.request(b.baseURL + "/warm.png"), events: warm.record)
        #expect(try await warm.completion() == .end)
        // When
        let hop = TransferRecorder()
        _ = origin.fetch(Self.request(a.baseURL + "/hop.png"), events: hop.record)
        // Then the hop is judged by its peer, reused connection or not
        #expect(try await hop.completion() == .failed(.refusedDestination(address: "127.0.0.2")))
        #expect(b.requestCount("/secret.png") == 0)
    }

    @Test("a trusted transfer follows a same-host redirect whether or not its first hop reused a connection", arguments: [false, true])
    func trustedSameHostRedirect(warmFirst: Bool) async throws {
        let server = try TestOrigin()
        defer { server.stop() }
        server.route("/warm.png") { _ in .ok(Fixtures.png()) }
        server.route("/moved.png") { _ in
            var reply = Reply.redirect(302, to: "/final.png")
            reply.headers.append(("Connection", "close"))
            reply.closeAfter = true
            return reply
        }
        server.route("/final.png") { _ in .ok(Fixtures.png(size: 3000)) }
        let origin = try Self.makeOrigin()
        defer { origin.shutdown() }
        if warmFirst {
            let warm = TransferRecorder()
            _ = origin.fetch(Self.request(server.baseURL + "/warm.png"), events: warm.record)
            #expect(try await warm.completion() == .end)
        }
        let moved = TransferRecorder()
        _ = origin.fetch(Self.request(server.baseURL + "/moved.png"), events: moved.record)
        #expect(try await moved.completion() == .end)
        expectSameBytes(moved.body, Fixtures.png(size: 3000))
        #expect(server.requestCount("/final.png") == 1)
    }

    @Test("told not to follow, a redirect is the final head, with its own body")
    func redirectNotFollowed() async throws {
        let server = try TestOrigin()
        defer { server.stop() }
        server.route("/r1") { _ in .redirect(301, to: "/final.png") }
        let origin = try Self.makeOrigin()
        defer { origin.shutdown() }
        let recorder = TransferRecorder()
        var request = Self.request(server.baseURL + "/r1")
        request.followsRedirects = false
        _ = origin.fetch(request, events: recorder.record)
        #expect(try await recorder.completion() == .end)
        #expect(recorder.heads.map(\.0.status) == [301])
        #expect(recorder.heads.first?.0.headers["Location"] == "/final.png")
        #expect(recorder.body == Array("moved".utf8))
        #expect(server.requestCount("/final.png") == 0)
    }

    @Test("any method reaches the origin as named, with its body byte-exact and no Content-Type or Expect of curl's own",
          arguments: ["POST", "PUT", "PATCH", "DELETE", "PROPFIND"])
    func methodsAndBodies(method: String) async throws {
        let server = try TestOrigin()
        defer { server.stop() }
        server.route("/doc") { request in Reply(status: 201, headers: [("Location", "/doc/1")], body: Array("made \(request.method)".utf8)) }
        let origin = try Self.makeOrigin()
        defer { origin.shutdown() }
        let body = Fixtures.jpeg(size: 2_000_000)   // over curl's threshold for Expect: 100-continue
        let recorder = TransferRecorder()
        _ = origin.fetch(UpstreamRequest(url: server.baseURL + "/doc", method: method, body: body, followsRedirects: false,
                                         headers: ["X-Trace": "t1"], trusted: true), events: recorder.record)
        #expect(try await recorder.completion() == .end)
        #expect(recorder.heads.first?.0.status == 201)
        #expect(recorder.body == Array("made \(method)".utf8))
        let seen = try #require(server.requests("/doc").first)
        #expect(seen.method == method)
        expectSameBytes(seen.body, body)
        #expect(seen.header("Content-Length") == String(body.count))
        #expect(seen.header("Content-Type") == nil && seen.header("Expect") == nil)
        #expect(seen.header("X-Trace") == "t1")
    }

    @Test("a method without a body (OPTIONS, DELETE) sends none; an empty POST sends Content-Length: 0")
    func methodsWithoutBodies() async throws {
        let server = try TestOrigin()
        defer { server.stop() }
        server.route("/doc") { _ in Reply(status: 204) }
        let origin = try Self.makeOrigin()
        defer { origin.shutdown() }
        for (method, body) in [("OPTIONS", nil), ("DELETE", nil), ("POST", [UInt8]())] as [(String, [UInt8]?)] {
            let recorder = TransferRecorder()
            _ = origin.fetch(UpstreamRequest(url: server.baseURL + "/doc", method: method, body: body, trusted: true),
                             events: recorder.record)
            #expect(try await recorder.completion() == .end)
            #expect(recorder.heads.first?.0.status == 204)
        }
        let seen = server.requests("/doc")
        #expect(seen.map(\.method) == ["OPTIONS", "DELETE", "POST"])
        #expect(seen.map { $0.header("Content-Length") } == [nil, nil, "0"])
    }

    @Test("a response with both Transfer-Encoding and Content-Length is framed by the encoding: its Content-Length is dropped, the body whole")
    func transferEncodingWinsOverLength() async throws {
        let server = try TestOrigin()
        defer { server.stop() }
        let reply = Reply(status: 200, headers: [("Content-Type", "image/png"), ("Content-Length", "10")], body: Fixtures.png(size: 3000),
                          chunked: true)
        server.route("/both.png") { _ in reply }
        let origin = try Self.makeOrigin()
        defer { origin.shutdown() }
        let recorder = TransferRecorder()
        _ = origin.fetch(Self.request(server.baseURL + "/both.png"), events: recorder.record)
        #expect(try await recorder.completion() == .end)
        #expect(recorder.heads.first?.0.headers["Content-Length"] == nil)
        expectSameBytes(recorder.body, Fixtures.png(size: 3000))
    }

    @Test("a response in a transfer coding other than chunked fails before its head (a clean error, not a body cut short)")
    func unknownTransferCoding() async throws {
        let server = try TestOrigin()
        defer { server.stop() }
        let reply = Reply(status: 200, headers: [("Content-Type", "image/png"), ("Transfer-Encoding", "x-squeeze")],
                          body: Fixtures.png(size: 3000))
        server.route("/odd.png") { _ in reply }
        let origin = try Self.makeOrigin()
        defer { origin.shutdown() }
        let recorder = TransferRecorder()
        _ = origin.fetch(Self.request(server.baseURL + "/odd.png"), events: recorder.record)
        guard case let .failed(.broken(why)) = try await recorder.completion() else {
            Issue.record("the transfer did not fail as broken")
            return
        }
        #expect(why.contains("x-squeeze") && recorder.heads.isEmpty)
    }

    @Test("more redirects than the limit fail with .tooManyRedirects and no head")
    func tooManyRedirects() async throws {
        // Given
        let server = try TestOrigin()
        defer { server.stop() }
        server.route("/loop") { _ in .redirect(302, to: "/loop") }
        let origin = try Self.makeOrigin { $0.maxRedirects = 2 }
        defer { origin.shutdown() }
        let recorder = TransferRecorder()

        // When
        _ = origin.fetch(Self.request(server.baseURL + "/loop"), events: recorder.record)

        // Then
        #expect(try await recorder.completion() == .failed(.tooManyRedirects(2)))
        #expect(recorder.heads.isEmpty)
        #expect(server.requestCount("/loop") == 3)
    }

    @Test("a body over maxBodyBytes fails with .tooLarge", arguments: [false, true])
    func tooLarge(chunked: Bool) async throws {
        // Given
        let server = try TestOrigin()
        defer { server.stop() }
        server.route("/big") { _ in Reply(status: 200, headers: [("Content-Type", "image/png")], body: Fixtures.png(size: 200_000), chunked: chunked) }
        let origin = try Self.makeOrigin()
        defer { origin.shutdown() }
        let recorder = TransferRecorder()

        // When
        _ = origin.fetch(Self.request(server.baseURL + "/big", maxBodyBytes: 50_000), events: recorder.record)

        // Then
        #expect(try await recorder.completion() == .failed(.tooLarge(limit: 50_000)))
        #expect(recorder.body.count <= 50_000)
        if !chunked { #expect(recorder.heads.isEmpty, "Content-Length over the limit fails before the head") }
    }

    @Test("a connection reset mid-body fails with .broken after some body")
    func resetMidBody() async throws {
        // Given
        let server = try TestOrigin()
        defer { server.stop() }
        let reset = Gate()
        server.route("/reset") { _ in
            Reply(status: 200, headers: [("Content-Type", "image/png")], body: Fixtures.png(size: 100_000),
                  resetAfterBytes: 10_000, resetGate: reset)
        }
        let origin = try Self.makeOrigin()
        defer { origin.shutdown() }
        let recorder = TransferRecorder()

        // When the origin resets the connection once the first 10,000 body bytes have been delivered (the gate opens
        // from the event stream, not from the test's task)
        let delivered = Locked(0)
        _ = origin.fetch(Self.request(server.baseURL + "/reset")) { event in
            recorder.record(event)
            if case let .body(bytes) = event, delivered.withLock({ $0 += bytes.count; return $0 }) >= 10_000 { reset.open() }
        }
        let outcome = try await recorder.completion()

        // Then
        guard case .failed(.broken) = outcome else {
            Issue.record("expected .broken, got \(outcome)")
            return
        }
        #expect(recorder.heads.count == 1)
        expectSameBytes(recorder.body, Array(Fixtures.png(size: 100_000).prefix(10_000)))
    }

    @Test("a closed port fails with .connect")
    func connectionRefused() async throws {
        // Given: a port that was free a moment ago
        let server = try TestOrigin()
        let url = server.baseURL + "/x"
        server.stop()
        let origin = try Self.makeOrigin()
        defer { origin.shutdown() }
        let recorder = TransferRecorder()

        // When
        _ = origin.fetch(Self.request(url), events: recorder.record)
        let outcome = try await recorder.completion()

        // Then
        guard case .failed(.connect) = outcome else {
            Issue.record("expected .connect, got \(outcome)")
            return
        }
    }

    @Test("an untrusted request to loopback is refused at connect time unless private networks are allowed")
    func refusedDestination() async throws {
        // Given
        let server = try TestOrigin()
        defer { server.stop() }
        server.route("/secret") { _ in .ok(Fixtures.png()) }
        let strict = try Self.makeOrigin()
        let lenient = try Self.makeOrigin(allowPrivateNetworks: true)
        defer {
            strict.shutdown()
            lenient.shutdown()
        }
        var untrusted = Self.request(server.baseURL + "/secret")
        untrusted.trusted = false
        let refused = TransferRecorder()
        let allowed = TransferRecorder()

        // When
        _ = strict.fetch(untrusted, events: refused.record)
        _ = lenient.fetch(untrusted, events: allowed.record)

        // Then
        #expect(try await refused.completion() == .failed(.refusedDestination(address: "127.0.0.1")))
        #expect(try await allowed.completion() == .end)
        #expect(server.requestCount("/secret") == 1)
    }

    @Test("bytes an origin sends past its Content-Length, left on a kept connection, do not fail the next request: it is sent again on a fresh connection")
    func excessBytesOnAKeptConnection() async throws {
        // Given an origin that declares 100 bytes fewer than it sends, the last 100 only after the transfer has ended
        let server = try TestOrigin()
        defer { server.stop() }
        let image = Fixtures.png(size: 5_000)
        let gate = Gate()
        server.route("/long.png") { _ in
            var reply = Reply(status: 200, headers: [("Content-Type", "image/png"), ("Content-Length", String(image.count - 100))],
                              body: image, gate: gate)
            reply.gateAfterBytes = image.count - 100
            return reply
        }
        server.route("/next.png") { _ in .ok(Fixtures.png(size: 700)) }
        let origin = try Self.makeOrigin()
        defer { origin.shutdown() }
        let first = TransferRecorder()
        _ = origin.fetch(Self.request(server.baseURL + "/long.png"), events: first.record)
        #expect(try await first.completion() == .end)
        expectSameBytes(first.body, image.prefix(image.count - 100))
        gate.open()   // the excess now waits on the idle kept connection
        // When the next request goes to the same origin
        let next = TransferRecorder()
        _ = origin.fetch(Self.request(server.baseURL + "/next.png"), events: next.record)
        // Then it gets its own response
        #expect(try await next.completion() == .end)
        expectSameBytes(next.body, Fixtures.png(size: 700))
    }

    @Test("after cancel() no further events arrive")
    func cancelStopsEvents() async throws {
        // Given
        let server = try TestOrigin()
        defer { server.stop() }
        let gate = Gate()
        server.route("/slow") { _ in Reply(status: 200, headers: [("Content-Type", "image/png")], body: Fixtures.png(size: 100_000), gate: gate) }
        server.route("/after") { _ in .ok(Fixtures.png(size: 10)) }
        let origin = try Self.makeOrigin()
        defer { origin.shutdown() }
        let recorder = TransferRecorder()
        let transfer = origin.fetch(Self.request(server.baseURL + "/slow"), events: recorder.record)
        _ = try await recorder.head()

        // When
        transfer.cancel()
        gate.open()
        // A later transfer through the same curl thread completes after the cancel has been processed.
        let later = TransferRecorder()
        _ = origin.fetch(Self.request(server.baseURL + "/after"), events: later.record)
        #expect(try await later.completion() == .end)

        // Then
        #expect(recorder.events.count == 1, "only the head, got \(recorder.events.count) events")
        #expect(recorder.outcome == nil)
        #expect(origin.activeTransfers == 0)
        transfer.cancel()   // idempotent
    }

    @Test("with one transfer slot, the second transfer reaches the origin only after the first has finished")
    func queueCap() async throws {
        // Given
        let server = try TestOrigin()
        defer { server.stop() }
        let gate = Gate()
        let first = TransferRecorder()
        let firstEndedBeforeSecondArrived = Locked<Bool?>(nil)
        server.route("/first") { _ in Reply(status: 200, body: Fixtures.png(size: 1000), gate: gate) }
        server.route("/second") { _ in
            firstEndedBeforeSecondArrived.withLock { $0 = first.outcome == .end }
            return .ok(Fixtures.png(size: 1000))
        }
        let origin = try Self.makeOrigin { $0.maxConcurrentTransfers = 1 }
        defer { origin.shutdown() }
        let second = TransferRecorder()

        // When
        _ = origin.fetch(Self.request(server.baseURL + "/first"), events: first.record)
        try await server.waitForRequests("/first", count: 1)
        _ = origin.fetch(Self.request(server.baseURL + "/second"), events: second.record)

        // Then
        #expect(origin.activeTransfers == 1)
        #expect(origin.queuedTransfers == 1)
        #expect(server.requestCount("/second") == 0)
        gate.open()
        #expect(try await first.completion() == .end)
        #expect(try await second.completion() == .end)
        #expect(firstEndedBeforeSecondArrived.withLock { $0 } == true)
        #expect(origin.transfersStarted == 2)
    }

    @Test("a transfer waiting longer than the queue timeout fails with .queueTimeout")
    func queueTimeout() async throws {
        // Given
        let server = try TestOrigin()
        defer { server.stop() }
        let gate = Gate()
        server.route("/hold") { _ in Reply(status: 200, body: [1, 2, 3], gate: gate) }
        let origin = try Self.makeOrigin {
            $0.maxConcurrentTransfers = 1
            $0.queueTimeoutSeconds = 0.2
        }
        defer { origin.shutdown() }
        let holder = TransferRecorder()
        let waiter = TransferRecorder()
        _ = origin.fetch(Self.request(server.baseURL + "/hold"), events: holder.record)
        try await server.waitForRequests("/hold", count: 1)

        // When
        _ = origin.fetch(Self.request(server.baseURL + "/never"), events: waiter.record)

        // Then
        #expect(try await waiter.completion(timeout: .seconds(5)) == .failed(.queueTimeout))
        #expect(server.requestCount("/never") == 0)
        gate.open()
        #expect(try await holder.completion() == .end)
    }

    @Test("shutdown fails running and waiting transfers with .cancelled; later fetches fail too")
    func shutdownCancelsEverything() async throws {
        // Given
        let server = try TestOrigin()
        defer { server.stop() }
        let gate = Gate()
        server.route("/hold") { _ in Reply(status: 200, body: [1, 2, 3], gate: gate) }
        let origin = try Self.makeOrigin { $0.maxConcurrentTransfers = 1 }
        let running = TransferRecorder()
        let waiting = TransferRecorder()
        _ = origin.fetch(Self.request(server.baseURL + "/hold"), events: running.record)
        try await server.waitForRequests("/hold", count: 1)
        _ = origin.fetch(Self.request(server.baseURL + "/hold"), events: waiting.record)

        // When
        origin.shutdown()
        let late = TransferRecorder()
        _ = origin.fetch(Self.request(server.baseURL + "/hold"), events: late.record)

        // Then
        #expect(try await running.completion() == .failed(.cancelled))
        #expect(try await waiting.completion() == .failed(.cancelled))
        #expect(try await late.completion() == .failed(.cancelled))
        gate.open()
    }

    @Test("an unsupported scheme fails with .badURL")
    func badURL() async throws {
        // Given
        let origin = try Self.makeOrigin()
        defer { origin.shutdown() }
        let recorder = TransferRecorder()

        // When
        _ = origin.fetch(Self.request("ftp://127.0.0.1/x.png"), events: recorder.record)
        let outcome = try await recorder.completion()

        // Then
        guard case .failed(.badURL) = outcome else {
            Issue.record("expected .badURL, got \(outcome)")
            return
        }
    }
}

/// Byte equality that reports sizes, not megabytes of array literals.
func expectSameBytes(_ got: [UInt8], _ expected: [UInt8], sourceLocation: SourceLocation = #_sourceLocation) {
    if got == expected { return }
    let firstDifference = zip(got, expected).enumerated().first { $0.element.0 != $0.element.1 }?.offset ?? min(got.count, expected.count)
    Issue.record("got \(got.count) bytes, expected \(expected.count); first difference at \(firstDifference)", sourceLocation: sourceLocation)
}
