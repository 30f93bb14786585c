import Dispatch
import Foundation
import Logging
import Synchronization
import Testing
@testable import ImageCacheSystem
@testable import ImageCacheHTTP
@testable import ImageCacheServer
import ImageCacheTestSupport

/// A `RequestHandler` made of a closure.
struct ClosureHandler: RequestHandler {
    let body: @Sendable (HTTPRequestHead, [UInt8], ClientInfo, any ResponseSink) -> Void
    func handle(_ request: HTTPRequestHead, body: [UInt8], client: ClientInfo, sink: any ResponseSink) {
        self.body(request, body, client, sink)
    }
}

/// Routes used by the tests:
///   /later      answered from another queue
///   /stream     head(bodyLength: nil), three chunks from another queue, end
///   /abort      head(bodyLength: 100), 10 bytes, abort
///   anything else: "METHOD target loopback=<bool>" at once
func standardHandler() -> ClosureHandler {
    ClosureHandler { request, body, client, sink in
        switch request.target {
        case "/later":
            DispatchQueue.global().async {
                sink.respond(HTTPResponseHead(status: 200), body: Array("later".utf8))
            }
        case "/stream":
            sink.head(HTTPResponseHead(status: 200, headers: ["Content-Type": "text/plain"]), bodyLength: nil)
            DispatchQueue.global().async {
                sink.body(Array("hello ".utf8))
                sink.body(Array("streaming ".utf8))
                sink.body(Array("world".utf8))
                sink.end()
            }
        case "/abort":
            sink.head(HTTPResponseHead(status: 200), bodyLength: 100)
            sink.body([UInt8](repeating: 120, count: 10))
            DispatchQueue.global().async { sink.abort() }
        default:
            let text = "\(request.method) \(request.target) loopback=\(client.isLoopback) body=\(String(decoding: body, as: UTF8.self))"
            sink.respond(HTTPResponseHead(status: 200), body: Array(text.utf8))
        }
    }
}

/// A running listener on 127.0.0.1 with a free port, stopped by `stop()`.
final class TestServer: Sendable {
    let listener: Listener
    let port: Int

    init(handler: any RequestHandler = standardHandler(), configuration: ServerSettings = ServerSettings()) throws {
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        listener = Listener(settings: configuration, handler: handler, logger: logger)
        port = try listener.start(address: ListenAddress(host: "127.0.0.1", port: 0))
    }

    func client() throws -> RawHTTPClient { try RawHTTPClient(port: port) }

    /// Stops the listener off the cooperative pool (stop waits for the connections' loops).
    func stop() async { _ = try? await offPool { self.listener.stop() } }
}

/// Starts a server, runs `body` (blocking client code) on its own thread, then stops the server.
func withServer<T: Sendable>(handler: any RequestHandler = standardHandler(), configuration: ServerSettings = ServerSettings(),
                             _ body: @escaping @Sendable (TestServer) throws -> T) async throws -> T {
    let server = try TestServer(handler: handler, configuration: configuration)
    do {
        let result = try await offPool { try body(server) }
        await server.stop()
        return result
    } catch {
        await server.stop()
        throw error
    }
}

@Suite("Server", .timeLimit(.minutes(2)))
struct ServerTests {
    @Test("serves two requests on one keep-alive connection")
    func keepAlive() async throws {
        // Given
        let (first, second, open) = try await withServer { server in
            let client = try server.client()
            // When
            try client.send("GET /one HTTP/1.1\r\nHost: x\r\n\r\n")
            let first = try client.readResponse()
            try client.send("GET /two HTTP/1.1\r\nHost: x\r\n\r\n")
            return (first, try client.readResponse(), server.listener.connectionCount)
        }
        // Then
        #expect(first.status == 200)
        #expect(first.bodyText == "GET /one loopback=true body=")
        #expect(first.header("date") != nil)
        #expect(second.bodyText == "GET /two loopback=true body=")
        #expect(open == 1)
    }

    @Test("answers pipelined requests in order, even when one is answered from another queue")
    func pipelining() async throws {
        // Given
        let responses = try await withServer { server in
            let client = try server.client()
            // When
            try client.send("GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /later HTTP/1.1\r\nHost: x\r\n\r\n"
                + "POST /c HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
            return try (0..<3).map { _ in try client.readResponse() }
        }
        // Then
        #expect(responses.map(\.bodyText) == ["GET /a loopback=true body=", "later", "POST /c loopback=true body=abc"])
    }

    @Test("closes an HTTP/1.0 connection after the response")
    func http10Closes() async throws {
        // Given
        let (response, closed) = try await withServer { server in
            let client = try server.client()
            // When
            try client.send("GET /old HTTP/1.0\r\n\r\n")
            return (try client.readResponse(), try client.isClosedByServer())
        }
        // Then
        #expect(response.bodyText == "GET /old loopback=true body=")
        #expect(response.header("connection") == "close")
        #expect(closed)
    }

    @Test("streams a body of unknown length with chunked encoding")
    func chunkedStreaming() async throws {
        // Given
        let (response, after) = try await withServer { server in
            let client = try server.client()
            // When
            try client.send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
            let response = try client.readResponse()
            try client.send("GET /after HTTP/1.1\r\nHost: x\r\n\r\n")
            return (response, try client.readResponse())
        }
        // Then
        #expect(response.header("transfer-encoding") == "chunked")
        #expect(response.bodyText == "hello streaming world")
        #expect(after.bodyText == "GET /after loopback=true body=")
    }

    @Test("sends no body for HEAD and keeps the connection usable")
    func headHasNoBody() async throws {
        // Given
        let (head, next) = try await withServer { server in
            let client = try server.client()
            // When
            try client.send("HEAD /h HTTP/1.1\r\nHost: x\r\n\r\n")
            let head = try client.readResponse(headRequest: true)
            try client.send("GET /g HTTP/1.1\r\nHost: x\r\n\r\n")
            return (head, try client.readResponse())
        }
        // Then
        #expect(head.status == 200)
        #expect(head.header("content-length") == "27")
        #expect(next.bodyText == "GET /g loopback=true body=")
    }

    @Test("abort leaves a truncated body and a closed connection")
    func abortTruncates() async throws {
        // Given
        let raw = try await withServer { server in
            let client = try server.client()
            // When
            try client.send("GET /abort HTTP/1.1\r\nHost: x\r\n\r\n")
            return String(decoding: try client.readUntilClose(), as: UTF8.self)
        }
        // Then
        #expect(raw.hasPrefix("HTTP/1.1 200 OK\r\n"))
        #expect(raw.contains("Content-Length: 100\r\n"))
        #expect(raw.hasSuffix("\r\n\r\n" + String(repeating: "x", count: 10)))
    }

    @Test("a file cut short after it was verified ends the response short and closed, never padded; the server keeps serving")
    func fileCutShort() async throws {
        // Given a 1 MB file region handed out, then the file cut to its first 100,000 bytes; and a whole one
        let bytes = (0..<1_000_010).map { UInt8(truncatingIfNeeded: $0 % 251) }
        let cut = try ServerTests.fileBody(bytes, offset: 10, keeping: 10 + 100_000)
        let whole = try ServerTests.fileBody(bytes, offset: 10)
        let handler = ClosureHandler { request, _, _, sink in
            let head = SerializedResponseHead(HTTPResponseHead(status: 200, headers: ["Content-Type": "image/png"]))
            sink.respond(head, extra: [:], file: request.target == "/cut" ? cut : whole)
        }
        // Not withServer: a connection stuck sending would make stopping the server wait forever, so a failure
        // here leaves it running.
        let server = try TestServer(handler: handler)
        // When
        let (raw, next) = try await offPool {
            let client = try server.client()
            try client.send("GET /cut HTTP/1.1\r\nHost: x\r\n\r\n")
            let raw = try client.readUntilClose()
            let other = try server.client()
            try other.send("GET /whole HTTP/1.1\r\nHost: x\r\n\r\n")
            return (raw, try other.readResponse())
        }
        await server.stop()
        // Then the client got the head and exactly the bytes the file still had, then the end of the connection
        // (sendfile found the file's new end: the connection closes, never waits for or makes up the rest)
        let headEnd = try #require(raw.firstRange(of: Array("\r\n\r\n".utf8)))
        let head = String(decoding: raw[..<headEnd.lowerBound], as: UTF8.self)
        #expect(head.hasPrefix("HTTP/1.1 200 OK\r\n") && head.contains("Content-Length: 1000000"))
        #expect(Array(raw[headEnd.upperBound...]) == Array(bytes[10..<100_010]))
        #expect(next.status == 200 && next.body == Array(bytes[10...]))
    }

    /// A FileBody over `bytes[offset...]` in a new temporary file (unlinked: the descriptor keeps it), which is then
    /// cut to `keeping` bytes if given.
    static func fileBody(_ bytes: [UInt8], offset: Int, keeping: Int? = nil) throws -> FileBody {
        let path = NSTemporaryDirectory() + "imagecached-server-\(UUID().uuidString)"
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        defer { unlink(path) }
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        try #require(fd >= 0)
        let file = FileBody(descriptor: fd, offset: offset, length: bytes.count - offset)
        if let keeping { try #require(truncate(path, off_t(keeping)) == 0) }
        return file
    }

    @Test("answers a malformed request with 400 and closes, then serves the next connection")
    func malformedRequest() async throws {
        // Given
        let (refused, closed, served) = try await withServer { server in
            let bad = try server.client()
            // When
            try bad.send("GET / HTTP/1.1\r\nHost : x\r\n\r\n")
            let refused = try bad.readResponse()
            let closed = try bad.isClosedByServer()
            let good = try server.client()
            try good.send("GET /fine HTTP/1.1\r\nHost: x\r\n\r\n")
            return (refused, closed, try good.readResponse())
        }
        // Then
        #expect(refused.status == 400)
        #expect(refused.header("connection") == "close")
        #expect(refused.bodyText == "whitespace before colon in header field\n")
        #expect(closed)
        #expect(served.status == 200)
    }

    @Test("answers a huge header section with 431")
    func hugeHeader() async throws {
        // Given
        let (response, closed) = try await withServer { server in
            let client = try server.client()
            // When
            try client.send("GET / HTTP/1.1\r\nHost: x\r\nX-Big: \(String(repeating: "b", count: 20_000))\r\n\r\n")
            return (try client.readResponse(), try client.isClosedByServer())
        }
        // Then
        #expect(response.status == 431)
        #expect(response.bodyText == "header section too large (limit 16384 bytes)\n")
        #expect(closed)
    }

    @Test("answers a request line over the limit with 414")
    func longRequestLine() async throws {
        // Given
        let response = try await withServer { server in
            let client = try server.client()
            // When
            try client.send("GET /\(String(repeating: "a", count: 9000)) HTTP/1.1\r\nHost: x\r\n\r\n")
            return try client.readResponse()
        }
        // Then
        #expect(response.status == 414)
        #expect(response.bodyText == "request line too long (limit 8192 bytes)\n")
    }

    @Test("runs onCancel when the client disconnects while the handler is pending")
    func cancelOnDisconnect() async throws {
        // Given
        let received = DispatchSemaphore(value: 0)
        let cancelled = DispatchSemaphore(value: 0)
        let handler = ClosureHandler { _, _, _, sink in
            sink.onCancel { cancelled.signal() }
            received.signal()
        }
        let (wasReceived, wasCancelled) = try await withServer(handler: handler) { server in
            let client = try server.client()
            try client.send("GET /pending HTTP/1.1\r\nHost: x\r\n\r\n")
            let wasReceived = received.wait(timeout: .now() + 5) == .success
            // When
            client.shutdownBoth()
            return (wasReceived, cancelled.wait(timeout: .now() + 5) == .success)
        }
        // Then
        #expect(wasReceived)
        #expect(wasCancelled)
    }

    @Test("serves 200 concurrent connections, each with its own response")
    func manyConnections() async throws {
        // Given: a handler that answers nobody until all 200 requests are in
        let count = 200
        let waiting = Locked<[(String, any ResponseSink)]>([])
        let handler = ClosureHandler { request, _, _, sink in
            let ready: [(String, any ResponseSink)]? = waiting.withLock { list in
                list.append((request.target, sink))
                return list.count == count ? list : nil
            }
            for (target, sink) in ready ?? [] {
                DispatchQueue.global().async { sink.respond(HTTPResponseHead(status: 200), body: Array(target.utf8)) }
            }
        }
        let (bodies, open) = try await withServer(handler: handler) { server in
            // When
            let clients = try (0..<count).map { index in
                let client = try server.client()
                try client.send("GET /\(index) HTTP/1.1\r\nHost: x\r\n\r\n")
                return client
            }
            return (try clients.map { try $0.readResponse().bodyText }, server.listener.connectionCount)
        }
        // Then
        #expect(bodies == (0..<count).map { "/\($0)" })
        #expect(open == count)
    }

    @Test("sends 100 Continue before reading an expected body")
    func expectContinue() async throws {
        // Given
        let (interim, final) = try await withServer { server in
            let client = try server.client()
            // When
            try client.send("PUT /up HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n")
            let interim = try client.readResponse()
            try client.send("data")
            return (interim, try client.readResponse())
        }
        // Then
        #expect(interim.status == 100)
        #expect(final.bodyText == "PUT /up loopback=true body=data")
    }

    @Test("closes a connection whose head does not arrive in time with 408")
    func headerTimeout() async throws {
        // Given
        var configuration = ServerSettings()
        configuration.headerTimeoutSeconds = 0.2
        let (response, closed) = try await withServer(configuration: configuration) { server in
            let client = try server.client()
            // When
            try client.send("GET / HTTP/1.1\r\nHost: x\r\n")
            return (try client.readResponse(), try client.isClosedByServer())
        }
        // Then
        #expect(response.status == 408)
        #expect(closed)
    }

    @Test("stop closes open connections and the listening socket")
    func stopClosesEverything() async throws {
        // Given a server that counts the requests it handles
        let handled = Locked(0)
        let standard = standardHandler()
        let server = try TestServer(handler: ClosureHandler { request, body, client, sink in
            handled.withLock { $0 += 1 }
            standard.handle(request, body: body, client: client, sink: sink)
        })
        let (closed, open) = try await offPool {
            let client = try server.client()
            try client.send("GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
            _ = try client.readResponse()
            // When
            server.listener.stop()
            // A request to the old port reaches nobody, or (if a parallel test's server took the port) somebody else.
            if let late = try? server.client() {
                try? late.send("GET /after-stop HTTP/1.1\r\nHost: x\r\n\r\n")
                _ = try? late.readResponse()
            }
            return (try client.isClosedByServer(), server.listener.connectionCount)
        }
        // Then
        #expect(closed)
        #expect(open == 0)
        #expect(handled.withLock { $0 } == 1, "a request reached the stopped listener")
    }

    @Test("writes a body larger than the socket buffer through partial writes")
    func largeBody() async throws {
        // Given
        let big = (0..<(4 << 20)).map { UInt8(truncatingIfNeeded: $0 % 251) }
        let handler = ClosureHandler { _, _, _, sink in sink.respond(HTTPResponseHead(status: 200), body: big) }
        let (response, next) = try await withServer(handler: handler) { server in
            let client = try server.client()
            // When
            try client.send("GET /big HTTP/1.1\r\nHost: x\r\n\r\nGET /big HTTP/1.1\r\nHost: x\r\n\r\n")
            return (try client.readResponse(), try client.readResponse())
        }
        // Then
        expectSameBytes(response.body, big)
        #expect(next.body.count == big.count)
    }

    @Test("closes a client over the connection limit at once")
    func connectionLimit() async throws {
        // Given
        var configuration = ServerSettings()
        configuration.maxConnections = 1
        let (served, overLimitClosed) = try await withServer(configuration: configuration) { server in
            let first = try server.client()
            try first.send("GET /first HTTP/1.1\r\nHost: x\r\n\r\n")
            let served = try first.readResponse()
            // When
            let second = try server.client()
            return (served, try second.isClosedByServer())
        }
        // Then
        #expect(served.status == 200)
        #expect(overLimitClosed)
    }

    @Test("the loop probe (the systemd watchdog's) completes only once every event loop has run it: a wedged loop holds it back")
    func loopProbeWaitsForEveryLoop() async throws {
        // Given: loop 0 is wedged in a task
        let server = try TestServer()
        let loops = server.listener.eventLoops
        let gate = DispatchSemaphore(value: 0)
        await withCheckedContinuation { (wedged: CheckedContinuation<Void, Never>) in
            loops[0].execute { wedged.resume(); gate.wait() }
        }
        // When: the probe is posted, and every other loop has come round to it (a task posted after it has run)
        let group = DispatchGroup()
        server.listener.probeLoops(group)
        for loop in loops.dropFirst() {
            await withCheckedContinuation { (after: CheckedContinuation<Void, Never>) in loop.execute { after.resume() } }
        }
        let answeredWhileWedged = group.wait(timeout: .now()) == .success
        gate.signal()
        // Then: it completes once loop 0 is free again
        await withCheckedContinuation { (answered: CheckedContinuation<Void, Never>) in
            group.notify(queue: .global()) { answered.resume() }
        }
        #expect(!answeredWhileWedged)
        await server.stop()
    }

    @Test("the event loops' threads carry their names, as ps -L, top -H and perf show them")
    func loopThreadsAreNamed() async throws {
        // Given
        let server = try TestServer()
        let loops = server.listener.eventLoops
        // When: each loop has run a task (its thread names itself before anything else)
        for loop in loops {
            await withCheckedContinuation { (ran: CheckedContinuation<Void, Never>) in loop.execute { ran.resume() } }
        }
        let names = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").compactMap { task in
            try? String(contentsOfFile: "/proc/self/task/\(task)/comm", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        }
        await server.stop()
        // Then
        #expect(names.contains("icd.loop.0"))
    }
}
