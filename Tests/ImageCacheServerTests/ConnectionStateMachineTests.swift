import Testing
@testable import ImageCacheHTTP
@testable import ImageCacheServer

@Suite("Connection.StateMachine", .timeLimit(.minutes(1)))
struct ConnectionStateMachineTests {
    typealias Machine = Connection.StateMachine
    static let date = "Sun, 06 Nov 1994 08:49:37 GMT"

    static func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    /// The text of every `.write` in `actions`, concatenated.
    static func written(_ actions: [Machine.Action]) -> String {
        actions.reduce(into: "") { text, action in
            if case let .write(buffers) = action {
                for buffer in buffers { text += String(decoding: buffer, as: UTF8.self) }
            }
        }
    }

    static func handled(_ actions: [Machine.Action]) -> [(target: String, exchange: UInt64)] {
        actions.compactMap { action in
            if case let .handle(head, _, exchange) = action { return (head.target, exchange) }
            return nil
        }
    }

    @Test("a complete request goes to the handler and the read timer stops")
    func requestIsHandled() {
        // Given
        var machine = Machine(settings: ServerSettings())
        // When
        let actions = machine.bytesReceived(Self.bytes("GET /a HTTP/1.1\r\nHost: x\r\n\r\n"), date: Self.date)
        // Then
        #expect(actions.first == .cancelReadTimer)
        #expect(Self.handled(actions).map(\.target) == ["/a"])
        #expect(machine.state == .handling(.init(id: 1, writer: ResponseWriter(request: .init(version: .http1_1, isHEAD: false, keepAlive: true)))))
    }

    @Test("a streamed body: the head goes to the handler at once with the bytes so far, then each read's bytes; reading (and the body timer) stops past a write buffer not consumed and resumes at half; the end stops the body timer; the connection is not kept")
    func streamedBody() {
        // Given a handler that streams every body, and a 16 KiB write buffer
        var configuration = ServerSettings()
        configuration.writeBufferBytes = 16 << 10
        var machine = Machine(settings: configuration, bodyDecision: { _ in .stream })
        // When the head and 10 KiB of a 40 KiB body arrive
        let head = "PUT /u HTTP/1.1\r\nHost: x\r\nContent-Length: 40960\r\n\r\n"
        let first = machine.bytesReceived(Self.bytes(head) + Array(repeating: 1, count: 10 << 10), date: Self.date)
        // Then
        #expect(first == [.armReadTimer(.body, seconds: 30), .openBody(length: 40960, exchange: 1),
                          .deliverBody(.chunk(Array(repeating: 1, count: 10 << 10))),
                          .handleStreamed(HTTPRequestHead(method: "PUT", target: "/u", headers: ["Host": "x", "Content-Length": "40960"]), exchange: 1)])
        // 10 KiB more: 20 KiB waits, over the buffer: reading stops
        let second = machine.bytesReceived(Array(repeating: 2, count: 10 << 10), date: Self.date)
        #expect(second == [.deliverBody(.chunk(Array(repeating: 2, count: 10 << 10))), .suspendReading, .cancelReadTimer])
        #expect(machine.bodyConsumed(4 << 10, exchange: 1) == [], "16 KiB wait: more than half a buffer")
        #expect(machine.bodyConsumed(12 << 10, exchange: 1) == [.resumeReading, .armReadTimer(.body, seconds: 30)])
        // The rest: the end, the body timer stops
        let last = machine.bytesReceived(Array(repeating: 3, count: 20 << 10), date: Self.date)
        #expect(last == [.deliverBody(.chunk(Array(repeating: 3, count: 20 << 10))), .deliverBody(.end), .cancelReadTimer])
        #expect(machine.bodyConsumed(40 << 10, exchange: 1) == [], "after the end nothing is resumed")
        // The response ends the exchange and the connection
        _ = machine.respond(HTTPResponseHead(status: 201), body: [], exchange: 1, date: Self.date)
        #expect(machine.state == .writing(keepAlive: false))
    }

    @Test("a streamed body: a body that fails in the head's own bytes is refused, never handled; a response that ends before the body ends the body's stream")
    func streamedBodyEdges() {
        var configuration = ServerSettings()
        configuration.maxRequestBodyBytes = 8
        var early = Machine(settings: configuration, bodyDecision: { _ in .stream })
        let refused = early.bytesReceived(Self.bytes("POST /u HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n20\r\n"), date: Self.date)
        #expect(!refused.contains { if case .handleStreamed = $0 { true } else { false } })
        #expect(Self.written(refused).hasPrefix("HTTP/1.1 413 "))

        var answered = Machine(settings: ServerSettings(), bodyDecision: { _ in .stream })
        _ = answered.bytesReceived(Self.bytes("PUT /u HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc"), date: Self.date)
        let actions = answered.respond(HTTPResponseHead(status: 403), body: Self.bytes("no"), exchange: 1, date: Self.date)
        #expect(actions.suffix(2) == [.deliverBody(.failed("the response ended before the request body")), .cancelReadTimer])
        #expect(answered.state == .writing(keepAlive: false))
        #expect(answered.bytesReceived(Self.bytes("defgh"), date: Self.date).allSatisfy { if case .deliverBody = $0 { false } else { true } })
    }

    @Test("a streamed body that times out or grows past its limit fails its stream and is answered 408 / 413; with the response begun, the connection resets; a client that leaves fails it too")
    func streamedBodyFails() {
        var configuration = ServerSettings()
        configuration.maxRequestBodyBytes = 8
        let head = "POST /u HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        var slow = Machine(settings: configuration, bodyDecision: { _ in .stream })
        _ = slow.bytesReceived(Self.bytes(head + "3\r\nabc\r\n"), date: Self.date)
        let timedOut = slow.readTimerFired(.body, date: Self.date)
        #expect(timedOut.prefix(2) == [.deliverBody(.failed("request body not received within 30 seconds")), .cancelExchange])
        #expect(Self.written(timedOut).hasPrefix("HTTP/1.1 408 "))

        var large = Machine(settings: configuration, bodyDecision: { _ in .stream })
        _ = large.bytesReceived(Self.bytes(head + "3\r\nabc\r\n"), date: Self.date)
        _ = large.responseHead(HTTPResponseHead(status: 200), bodyLength: nil, exchange: 1, date: Self.date)
        let tooLarge = large.bytesReceived(Self.bytes("9\r\n"), date: Self.date)
        #expect(tooLarge.first == .deliverBody(.failed("request body too large (limit 8 bytes)")))
        #expect(tooLarge.last == .reset && large.state == .closed)

        var left = Machine(settings: configuration, bodyDecision: { _ in .stream })
        _ = left.bytesReceived(Self.bytes(head), date: Self.date)
        #expect(left.readClosed() == [.deliverBody(.failed("the client went away")), .cancelExchange, .close])
    }

    @Test("a partial head arms the header timer once")
    func headerTimerArmedOnFirstByte() {
        // Given
        var machine = Machine(settings: ServerSettings())
        // When
        let first = machine.bytesReceived(Self.bytes("GET /a HT"), date: Self.date)
        let second = machine.bytesReceived(Self.bytes("TP/1.1\r\n"), date: Self.date)
        // Then
        #expect(first == [.armReadTimer(.header, seconds: 10)])
        #expect(second == [])
        #expect(machine.state == .readingHead)
    }

    @Test("an HTTP/1.1 connection is kept alive after the response is written")
    func keepAlive() {
        // Given
        var machine = Machine(settings: ServerSettings())
        _ = machine.bytesReceived(Self.bytes("GET /a HTTP/1.1\r\nHost: x\r\n\r\n"), date: Self.date)
        // When
        let respond = machine.respond(HTTPResponseHead(status: 200), body: Self.bytes("hi"), exchange: 1, date: Self.date)
        let drained = machine.writesDrained(date: Self.date)
        // Then
        #expect(Self.written(respond) == "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nDate: \(Self.date)\r\n\r\nhi")
        #expect(drained == [.armReadTimer(.idle, seconds: 60)])
        #expect(machine.state == .idle)
    }

    @Test("Connection: close gets Connection: close and a lingering close after the write")
    func connectionClose() {
        // Given
        var machine = Machine(settings: ServerSettings())
        _ = machine.bytesReceived(Self.bytes("GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"), date: Self.date)
        // When
        let respond = machine.respond(HTTPResponseHead(status: 204), body: [], exchange: 1, date: Self.date)
        let drained = machine.writesDrained(date: Self.date)
        // Then
        #expect(Self.written(respond) == "HTTP/1.1 204 No Content\r\nDate: \(Self.date)\r\nConnection: close\r\n\r\n")
        #expect(drained == [.shutdownWrite, .armReadTimer(.linger, seconds: Machine.lingerSeconds)])
        #expect(machine.state == .lingering)
    }

    @Test("HTTP/1.0 keep-alive is answered with Connection: keep-alive")
    func http10KeepAlive() {
        // Given
        var machine = Machine(settings: ServerSettings())
        _ = machine.bytesReceived(Self.bytes("GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"), date: Self.date)
        // When
        let respond = machine.respond(HTTPResponseHead(status: 200), body: Self.bytes("x"), exchange: 1, date: Self.date)
        // Then
        #expect(Self.written(respond).contains("Connection: keep-alive\r\n"))
        #expect(machine.state == .writing(keepAlive: true))
    }

    @Test("an HTTP/1.0 stream of unknown length is close-delimited")
    func http10Streaming() {
        // Given
        var machine = Machine(settings: ServerSettings())
        _ = machine.bytesReceived(Self.bytes("GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"), date: Self.date)
        // When
        let head = machine.responseHead(HTTPResponseHead(status: 200), bodyLength: nil, exchange: 1, date: Self.date)
        let body = machine.responseBody(Self.bytes("abc"), exchange: 1)
        let end = machine.responseEnd(exchange: 1)
        // Then
        #expect(Self.written(head) == "HTTP/1.1 200 OK\r\nDate: \(Self.date)\r\nConnection: close\r\n\r\n")
        #expect(Self.written(body) == "abc")
        #expect(end == [])
        #expect(machine.state == .writing(keepAlive: false))
    }

    @Test("an HTTP/1.1 stream of unknown length is chunked and hop-by-hop fields are removed")
    func chunkedStreaming() {
        // Given
        var machine = Machine(settings: ServerSettings())
        _ = machine.bytesReceived(Self.bytes("GET /a HTTP/1.1\r\nHost: x\r\n\r\n"), date: Self.date)
        // When
        let head = machine.responseHead(HTTPResponseHead(status: 200, headers: ["Keep-Alive": "timeout=5", "X-A": "1"]),
                                        bodyLength: nil, exchange: 1, date: Self.date)
        let body = machine.responseBody(Self.bytes("0123456789abcdefg"), exchange: 1)
        let end = machine.responseEnd(exchange: 1)
        // Then
        #expect(Self.written(head) == "HTTP/1.1 200 OK\r\nX-A: 1\r\nTransfer-Encoding: chunked\r\nDate: \(Self.date)\r\n\r\n")
        #expect(Self.written(body) == "11\r\n0123456789abcdefg\r\n")
        #expect(Self.written(end) == "0\r\n\r\n")
        #expect(machine.state == .writing(keepAlive: true))
    }

    @Test("a HEAD response carries the head only, Content-Length kept")
    func headRequest() {
        // Given
        var machine = Machine(settings: ServerSettings())
        _ = machine.bytesReceived(Self.bytes("HEAD /a HTTP/1.1\r\nHost: x\r\n\r\n"), date: Self.date)
        // When
        let respond = machine.respond(HTTPResponseHead(status: 200), body: Self.bytes("hello"), exchange: 1, date: Self.date)
        // Then
        #expect(Self.written(respond) == "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nDate: \(Self.date)\r\n\r\n")
    }

    @Test("pipelined requests are handled one at a time, in order")
    func pipelining() {
        // Given
        var machine = Machine(settings: ServerSettings())
        let both = Self.bytes("GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\n\r\n")
        // When
        let first = machine.bytesReceived(both, date: Self.date)
        let afterRespond = machine.respond(HTTPResponseHead(status: 200), body: [], exchange: 1, date: Self.date)
        let afterDrain = machine.writesDrained(date: Self.date)
        // Then
        #expect(Self.handled(first).map(\.target) == ["/1"])
        #expect(Self.handled(afterRespond).isEmpty)
        #expect(Self.handled(afterDrain).map(\.target) == ["/2"])
        #expect(Self.handled(afterDrain).map(\.exchange) == [2])
    }

    @Test("a late call for an earlier exchange is ignored")
    func staleSinkCallIgnored() {
        // Given
        var machine = Machine(settings: ServerSettings())
        _ = machine.bytesReceived(Self.bytes("GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\n\r\n"), date: Self.date)
        _ = machine.respond(HTTPResponseHead(status: 200), body: [], exchange: 1, date: Self.date)
        _ = machine.writesDrained(date: Self.date)
        // When
        let stale = machine.responseBody(Self.bytes("late"), exchange: 1) + machine.abort(exchange: 1)
        // Then
        #expect(stale == [])
        #expect(machine.registerCancel(exchange: 1) == .drop)
        #expect(machine.registerCancel(exchange: 2) == .store)
    }

    @Test("the client closing while the handler is pending cancels the exchange")
    func cancelOnPeerClose() {
        // Given
        var machine = Machine(settings: ServerSettings())
        _ = machine.bytesReceived(Self.bytes("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"), date: Self.date)
        #expect(machine.registerCancel(exchange: 1) == .store)
        // When
        let actions = machine.readClosed()
        // Then
        #expect(actions == [.cancelExchange, .close])
        #expect(machine.state == .closed)
        #expect(machine.registerCancel(exchange: 1) == .runNow)
        #expect(machine.respond(HTTPResponseHead(status: 200), body: [], exchange: 1, date: Self.date) == [])
    }

    @Test("the client closing after the response ended does not cancel")
    func closeAfterResponseIsNotCancel() {
        // Given
        var machine = Machine(settings: ServerSettings())
        _ = machine.bytesReceived(Self.bytes("GET /a HTTP/1.1\r\nHost: x\r\n\r\n"), date: Self.date)
        _ = machine.respond(HTTPResponseHead(status: 200), body: Self.bytes("x"), exchange: 1, date: Self.date)
        // When
        let actions = machine.readClosed()
        // Then
        #expect(actions == [.close])
        #expect(machine.registerCancel(exchange: 1) == .drop)
    }

    @Test("abort resets the connection at once without running onCancel")
    func abortCloses() {
        // Given
        var machine = Machine(settings: ServerSettings())
        _ = machine.bytesReceived(Self.bytes("GET /a HTTP/1.1\r\nHost: x\r\n\r\n"), date: Self.date)
        _ = machine.responseHead(HTTPResponseHead(status: 200), bodyLength: 10, exchange: 1, date: Self.date)
        // When
        let actions = machine.abort(exchange: 1)
        // Then
        #expect(actions == [.reset])
        #expect(machine.state == .closed)
    }

    @Test("a refused request is answered with its status and Connection: close, then the connection lingers")
    func refusedRequest() {
        // Given
        var machine = Machine(settings: ServerSettings())
        // When
        let actions = machine.bytesReceived(Self.bytes("GET / HTTP/1.1\r\n\r\n"), date: Self.date)
        let drained = machine.writesDrained(date: Self.date)
        // Then
        let error = HTTPParser.ParseError(status: 400, reason: "missing Host header")
        #expect(actions.contains(.logRefused(error)))
        #expect(Self.written(actions) == "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\nCache-Control: no-store\r\n"
            + "Content-Length: 20\r\nDate: \(Self.date)\r\nConnection: close\r\n\r\nmissing Host header\n")
        #expect(drained.first == .shutdownWrite)
    }

    @Test("a head not complete within the header timeout gets 408")
    func headerTimeout() {
        // Given
        var machine = Machine(settings: ServerSettings())
        _ = machine.bytesReceived(Self.bytes("GET / HTTP/1.1\r\n"), date: Self.date)
        // When
        let stale = machine.readTimerFired(.idle, date: Self.date)
        let actions = machine.readTimerFired(.header, date: Self.date)
        // Then
        #expect(stale == [])
        #expect(Self.written(actions).hasPrefix("HTTP/1.1 408 Request Timeout\r\n"))
        #expect(machine.state == .writing(keepAlive: false))
    }

    @Test("a body arms the body timer once: bytes do not extend it, and when it fires the client gets 408")
    func bodyTimeout() {
        // Given a head announcing 10 body bytes
        var configuration = ServerSettings()
        configuration.bodyTimeoutSeconds = 5
        var machine = Machine(settings: configuration)
        let head = machine.bytesReceived(Self.bytes("POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n"), date: Self.date)
        // When bytes trickle in, then the timer fires
        let trickle = machine.bytesReceived(Self.bytes("a"), date: Self.date)
        let idle = machine.readTimerFired(.idle, date: Self.date)
        let fired = machine.readTimerFired(.body, date: Self.date)
        // Then
        #expect(head == [.armReadTimer(.body, seconds: 5)])
        #expect(trickle == [])
        #expect(idle == [])
        #expect(Self.written(fired).hasPrefix("HTTP/1.1 408 Request Timeout\r\n"))
        #expect(Self.written(fired).hasSuffix("request body not received within 5 seconds\n"))
        #expect(machine.state == .writing(keepAlive: false))
    }

    @Test("an idle keep-alive connection closes when the idle timer fires")
    func idleTimeout() {
        // Given
        var machine = Machine(settings: ServerSettings())
        // When
        let actions = machine.readTimerFired(.idle, date: Self.date)
        // Then
        #expect(actions == [.close])
    }

    @Test("reading stops while a full header section is buffered during handling, and resumes after")
    func readingSuspendedWhenBufferFull() {
        // Given
        var configuration = ServerSettings()
        configuration.maxRequestLineBytes = 32
        configuration.maxHeaderBytes = 64
        var machine = Machine(settings: configuration)
        _ = machine.bytesReceived(Self.bytes("GET /a HTTP/1.1\r\nHost: x\r\n\r\n"), date: Self.date)
        // When
        let small = machine.bytesReceived([UInt8](repeating: 65, count: 50), date: Self.date)
        let full = machine.bytesReceived([UInt8](repeating: 65, count: 50), date: Self.date)
        _ = machine.respond(HTTPResponseHead(status: 200), body: [], exchange: 1, date: Self.date)
        let drained = machine.writesDrained(date: Self.date)
        // Then
        #expect(small == [])
        #expect(full == [.suspendReading])
        #expect(drained.first == .resumeReading)
        #expect(Self.written(drained).hasPrefix("HTTP/1.1 414"))
    }

    @Test("Expect: 100-continue gets 100 Continue before the body is read")
    func expectContinue() {
        // Given
        var machine = Machine(settings: ServerSettings())
        // When
        let actions = machine.bytesReceived(Self.bytes("PUT /a HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"), date: Self.date)
        let body = machine.bytesReceived(Self.bytes("ok"), date: Self.date)
        // Then
        #expect(Self.written(actions) == "HTTP/1.1 100 Continue\r\n\r\n")
        #expect(machine.state != .readingHead)
        #expect(Self.handled(body).map(\.target) == ["/a"])
    }
}
