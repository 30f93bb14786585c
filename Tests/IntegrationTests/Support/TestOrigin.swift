// A scriptable HTTP/1.1 origin for integration tests (varnishtest's `server s1 { rxreq; txresp }`).
//
// Usage:
//     let origin = try TestOrigin()                      // listens on 127.0.0.1:<free port>
//     defer { origin.stop() }
//     origin.route("/a.png") { request in Reply(status: 200, headers: [("Content-Type", "image/png")], body: bytes) }
//     let url = origin.baseURL + "/a.png"                // "http://127.0.0.1:PORT/a.png"
//     ... run the code under test ...
//     try await origin.waitForRequests("/a.png", count: 1)
//     #expect(origin.requests("/a.png").first?.header("If-None-Match") == "\"v1\"")
//
// - Routes match the request target exactly (path plus query when present); unknown targets get 404.
//   A route's closure runs on the connection's thread for every request, so it may count, vary or record.
// - Every request is recorded (before the reply is sent) and can be awaited with `waitForRequests`, which
//   resumes a continuation when the count is reached (no polling) or throws `TestOrigin.Timeout`.
// - Keep-alive: a connection serves requests until the client closes it or sends `Connection: close`.
// - `Reply` scripts the response: Content-Length (default) or chunked, a delay before the head, a body dripped in
//   pieces, a reset (RST) after some body bytes, or a `Gate` the origin waits on between head and body, which
//   lets a test observe "head arrived, body not yet" without sleeps.
// Design: blocking POSIX sockets, one accept thread and one thread per connection (fine for tests).
// `stop()` closes the listener and every connection and opens every gate, so no thread stays blocked.

import Foundation
import Synchronization
import ImageCacheSystem

/// A request as the origin received it.
struct RecordedRequest: Sendable {
    var method: String
    /// The request target as sent ("/a.png?w=10").
    var target: String
    var headers: [(String, String)]
    /// The request body (Content-Length framed).
    var body: [UInt8] = []

    /// The first value of `name` (case-insensitive), or nil.
    func header(_ name: String) -> String? {
        headers.first { $0.0.lowercased() == name.lowercased() }?.1
    }
}

/// A barrier a reply waits on before sending its body. Open it from the test.
final class Gate: Sendable {
    private let state = Locked<(open: Bool, waiters: [DispatchSemaphore])>((false, []))

    init() {}

    /// Lets every current and future waiter through.
    func open() {
        let waiters = state.withLock { state -> [DispatchSemaphore] in
            state.open = true
            defer { state.waiters = [] }
            return state.waiters
        }
        waiters.forEach { $0.signal() }
    }

    var isOpen: Bool { state.withLock { $0.open } }

    /// Blocks the calling (origin) thread until `open()`, at most `timeout`.
    func wait(timeout: Duration = .seconds(30)) {
        let semaphore = DispatchSemaphore(value: 0)
        let mustWait = state.withLock { state -> Bool in
            if state.open { return false }
            state.waiters.append(semaphore)
            return true
        }
        if mustWait { _ = semaphore.wait(timeout: .now() + .milliseconds(Int(timeout.components.seconds * 1000))) }
    }
}

/// What the origin answers.
struct Reply: Sendable {
    var status: Int
    var headers: [(String, String)]
    var body: [UInt8]
    /// Transfer-Encoding: chunked instead of Content-Length.
    var chunked = false
    /// Pause before sending the status line.
    var delayBeforeHead: Duration?
    /// Send the body in `chunks` pieces with `interval` between them.
    var drip: (chunks: Int, interval: Duration)?
    /// Send the head (with the full Content-Length) and this many body bytes, then wait for `resetGate` (the test
    /// opens it once its client saw those bytes), then reset the connection (RST).
    var resetAfterBytes: Int?
    var resetGate: Gate?
    /// Wait for this gate after the head is sent and before the body (or after `gateAfterBytes` body bytes).
    var gate: Gate?
    /// With `gate`: send this many body bytes first, then wait for the gate, then the rest (Content-Length framing).
    var gateAfterBytes: Int?
    /// Close the connection after this reply (send `Connection: close` in `headers` too, so the client knows).
    var closeAfter = false
    /// Interim responses (103 Early Hints, ...) sent before the final one: status and fields each.
    var interim: [(status: Int, headers: [(String, String)])] = []
    /// Wait for this gate before sending anything (the interim responses included).
    var gateBeforeHead: Gate?

    init(status: Int = 200, headers: [(String, String)] = [], body: [UInt8] = [], chunked: Bool = false,
         delayBeforeHead: Duration? = nil, drip: (chunks: Int, interval: Duration)? = nil,
         resetAfterBytes: Int? = nil, resetGate: Gate? = nil, gate: Gate? = nil) {
        self.status = status
        self.headers = headers
        self.body = body
        self.chunked = chunked
        self.delayBeforeHead = delayBeforeHead
        self.drip = drip
        self.resetAfterBytes = resetAfterBytes
        self.resetGate = resetGate
        self.gate = gate
    }

    static func ok(_ body: [UInt8], contentType: String = "image/png") -> Reply {
        Reply(status: 200, headers: [("Content-Type", contentType)], body: body)
    }

    static func redirect(_ status: Int = 302, to location: String) -> Reply {
        Reply(status: status, headers: [("Location", location)], body: Array("moved".utf8))
    }
}

final class TestOrigin: @unchecked Sendable {
    struct Timeout: Error, CustomStringConvertible {
        var target: String
        var wanted: Int
        var seen: Int
        var description: String { "waited for \(wanted) requests to \(target), saw \(seen)" }
    }

    private struct Waiter {
        var target: String
        var count: Int
        var continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var routes: [String: @Sendable (RecordedRequest) -> Reply] = [:]
        var recorded: [RecordedRequest] = []
        var waiters: [UInt64: Waiter] = [:]
        var nextWaiter: UInt64 = 0
        var connections: Set<Int32> = []
        var gates: [Gate] = []
        var stopped = false
        /// Called with each request head as soon as it is read, before its body.
        var headSeen: (@Sendable (RecordedRequest) -> Void)?
    }

    let port: Int
    var baseURL: String { "http://\(host):\(port)" }
    private let listenFD: Int32
    private let state = Locked(State())

    /// The address it listens on ("127.0.0.1", or another loopback address such as "127.0.0.2").
    let host: String

    /// Binds `host`:0 (default 127.0.0.1) and starts accepting.
    init(host: String = "127.0.0.1") throws {
        self.host = host
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr(host)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 256) == 0 else {
            let code = errno
            close(fd)
            throw POSIXError(.init(rawValue: code) ?? .EIO)
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        listenFD = fd
        port = Int(UInt16(bigEndian: address.sin_port))
        let thread = Thread { [self] in acceptLoop() }
        thread.name = "TestOrigin.accept"
        thread.start()
    }

    deinit { stop() }

    /// Answers requests to `target` (path plus query when present) with `reply`.
    func route(_ target: String, _ reply: @escaping @Sendable (RecordedRequest) -> Reply) {
        state.withLock { $0.routes[target] = reply }
    }

    /// Calls `callback` (on the connection's thread) with every request head as soon as it is read, before its body:
    /// how a test sees a request under way whose body has not all arrived.
    func onRequestHead(_ callback: @escaping @Sendable (RecordedRequest) -> Void) {
        state.withLock { $0.headSeen = callback }
    }

    /// Every request received for `target`, in arrival order.
    func requests(_ target: String) -> [RecordedRequest] {
        state.withLock { $0.recorded.filter { $0.target == target } }
    }

    func requestCount(_ target: String) -> Int { requests(target).count }

    /// Every request received, in arrival order.
    var allRequests: [RecordedRequest] { state.withLock { $0.recorded } }

    /// Returns once `count` requests for `target` have arrived; throws `Timeout` after `timeout`.
    func waitForRequests(_ target: String, count: Int, timeout: Duration = .seconds(10)) async throws {
        let id = state.withLock { state -> UInt64 in
            state.nextWaiter += 1
            return state.nextWaiter
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let satisfied = state.withLock { state -> Bool in
                    if state.recorded.lazy.filter({ $0.target == target }).count >= count { return true }
                    state.waiters[id] = Waiter(target: target, count: count, continuation: continuation)
                    return false
                }
                if satisfied {
                    continuation.resume()
                    return
                }
                Task { [weak self] in
                    try? await Task.sleep(for: timeout)
                    self?.failWaiter(id)
                }
            }
        } onCancel: {
            failWaiter(id)
        }
    }

    private func failWaiter(_ id: UInt64) {
        let found = state.withLock { state -> (Waiter, Int)? in
            guard let waiter = state.waiters.removeValue(forKey: id) else { return nil }
            return (waiter, state.recorded.filter { $0.target == waiter.target }.count)
        }
        if let (waiter, seen) = found {
            waiter.continuation.resume(throwing: Timeout(target: waiter.target, wanted: waiter.count, seen: seen))
        }
    }

    /// Closes the listener and every connection; opens every gate a reply used.
    func stop() {
        let gates = state.withLock { state -> [Gate] in
            guard !state.stopped else { return [] }
            state.stopped = true
            shutdown(listenFD, Int32(SHUT_RDWR))
            // Under the lock: a connection's thread removes its fd here before closing it, so every fd in the set is
            // still ours (outside the lock it could be closed and reused by another test's socket meanwhile).
            for fd in state.connections { shutdown(fd, Int32(SHUT_RDWR)) }
            return state.gates
        }
        gates.forEach { $0.open() }
    }

    // MARK: connection threads

    private func acceptLoop() {
        while true {
            let fd = accept(listenFD, nil, nil)
            if fd < 0 {
                if errno == EINTR || errno == ECONNABORTED { continue }
                break
            }
            let accepted = state.withLock { state -> Bool in
                guard !state.stopped else { return false }
                state.connections.insert(fd)
                return true
            }
            guard accepted else {
                close(fd)
                break
            }
            var one: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            let thread = Thread { [self] in serve(fd) }
            thread.name = "TestOrigin.connection"
            thread.start()
        }
        close(listenFD)
    }

    private func serve(_ fd: Int32) {
        var buffer: [UInt8] = []
        defer {
            state.withLock { _ = $0.connections.remove(fd) }
            close(fd)
        }
        while let request = readRequest(fd, &buffer) {
            let handler = state.withLock { state -> (@Sendable (RecordedRequest) -> Reply)? in
                state.recorded.append(request)
                return state.routes[request.target]
            }
            resumeWaiters()
            let reply = handler?(request) ?? Reply(status: 404, headers: [("Content-Type", "text/plain")], body: Array("not found".utf8))
            for gate in [reply.gate, reply.gateBeforeHead].compactMap({ $0 }) { state.withLock { $0.gates.append(gate) } }
            guard send(reply, for: request, on: fd) else { return }
            if reply.closeAfter || request.header("Connection")?.lowercased() == "close" { return }
        }
    }

    private func resumeWaiters() {
        let ready = state.withLock { state -> [CheckedContinuation<Void, any Error>] in
            var ready: [CheckedContinuation<Void, any Error>] = []
            for (id, waiter) in state.waiters where state.recorded.lazy.filter({ $0.target == waiter.target }).count >= waiter.count {
                ready.append(waiter.continuation)
                state.waiters[id] = nil
            }
            return ready
        }
        ready.forEach { $0.resume() }
    }

    /// Reads one request head and its body (Content-Length or chunked). Nil at EOF or on garbage.
    private func readRequest(_ fd: Int32, _ buffer: inout [UInt8]) -> RecordedRequest? {
        let terminator: [UInt8] = [13, 10, 13, 10]
        var end: Int?
        while true {
            if buffer.count >= 4, let range = buffer.firstRange(of: terminator) {
                end = range.upperBound
                break
            }
            guard receive(fd, into: &buffer) else { return nil }
        }
        guard let end else { return nil }
        let text = String(decoding: buffer[..<(end - 4)], as: UTF8.self)
        buffer.removeFirst(end)
        let lines = text.components(separatedBy: "\r\n")
        let parts = lines[0].split(separator: " ")
        guard parts.count >= 2 else { return nil }
        var headers: [(String, String)] = []
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers.append((String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)))
        }
        var request = RecordedRequest(method: String(parts[0]), target: String(parts[1]), headers: headers)
        state.withLock { $0.headSeen }?(request)
        if request.header("Transfer-Encoding")?.lowercased() == "chunked" {
            while true {
                guard let line = readLine(fd, &buffer), let size = Int(line.split(separator: ";")[0].trimmingCharacters(in: .whitespaces), radix: 16)
                else { return nil }
                while buffer.count < size + 2 {
                    guard receive(fd, into: &buffer) else { return nil }
                }
                request.body += buffer[..<size]
                buffer.removeFirst(size + 2)
                if size == 0 {
                    // Trailers: none expected; the empty line was the 2 bytes after the last chunk.
                    return request
                }
            }
        }
        if let length = request.header("Content-Length").flatMap(Int.init), length > 0 {
            while buffer.count < length {
                guard receive(fd, into: &buffer) else { return nil }
            }
            request.body = Array(buffer[..<length])
            buffer.removeFirst(length)
        }
        return request
    }

    /// One CRLF-terminated line from the connection (without its CRLF).
    private func readLine(_ fd: Int32, _ buffer: inout [UInt8]) -> String? {
        while true {
            if let range = buffer.firstRange(of: [13, 10]) {
                let line = String(decoding: buffer[..<range.lowerBound], as: UTF8.self)
                buffer.removeFirst(range.upperBound)
                return line
            }
            guard receive(fd, into: &buffer) else { return nil }
        }
    }

    private func receive(_ fd: Int32, into buffer: inout [UInt8]) -> Bool {
        var chunk = [UInt8](repeating: 0, count: 16 << 10)
        let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        if n < 0 && errno == EINTR { return true }
        guard n > 0 else { return false }
        buffer.append(contentsOf: chunk[..<n])
        return true
    }

    /// Writes `reply`; false when the connection must close.
    private func send(_ reply: Reply, for request: RecordedRequest, on fd: Int32) -> Bool {
        if let delay = reply.delayBeforeHead { Thread.sleep(forTimeInterval: delay.seconds) }
        reply.gateBeforeHead?.wait()
        let bodyless = request.method == "HEAD" || reply.status == 204 || reply.status == 304 || reply.status < 200
        var head = ""
        for (status, fields) in reply.interim {
            head += "HTTP/1.1 \(status) \(reason(status))\r\n"
            for (name, value) in fields { head += "\(name): \(value)\r\n" }
            head += "\r\n"
        }
        head += "HTTP/1.1 \(reply.status) \(reason(reply.status))\r\n"
        for (name, value) in reply.headers { head += "\(name): \(value)\r\n" }
        let hasLength = reply.headers.contains { $0.0.lowercased() == "content-length" }
        if reply.chunked {
            head += "Transfer-Encoding: chunked\r\n"
        } else if !hasLength && !(reply.status == 204 || reply.status == 304 || reply.status < 200) {
            head += "Content-Length: \(reply.body.count)\r\n"
        }
        head += "\r\n"
        guard write(fd, Array(head.utf8)) else { return false }
        if let split = reply.gateAfterBytes, let gate = reply.gate, !bodyless, !reply.chunked {
            guard write(fd, Array(reply.body.prefix(split))) else { return false }
            gate.wait()
            return write(fd, Array(reply.body.dropFirst(split)))
        }
        reply.gate?.wait()
        if bodyless { return true }

        if let resetAfter = reply.resetAfterBytes {
            let sent = Array(reply.body.prefix(resetAfter))
            _ = write(fd, reply.chunked ? Array(String(sent.count, radix: 16).utf8) + [13, 10] + sent + [13, 10] : sent)
            // The test says when its client has the bytes: a reset that overtook them would make a different test.
            precondition(reply.resetGate != nil, "resetAfterBytes needs a resetGate")
            reply.resetGate?.wait()
            var linger = Foundation.linger(l_onoff: 1, l_linger: 0)
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Foundation.linger>.size))
            return false   // serve() closes: RST
        }

        let pieces = reply.drip.map { max($0.chunks, 1) } ?? 1
        let pieceSize = max((reply.body.count + pieces - 1) / pieces, 1)
        var offset = 0
        var first = true
        while offset < reply.body.count {
            if !first, let drip = reply.drip { Thread.sleep(forTimeInterval: drip.interval.seconds) }
            first = false
            let piece = Array(reply.body[offset..<min(offset + pieceSize, reply.body.count)])
            offset += piece.count
            let framed = reply.chunked ? Array(String(piece.count, radix: 16).utf8) + [13, 10] + piece + [13, 10] : piece
            guard write(fd, framed) else { return false }
        }
        if reply.chunked { guard write(fd, Array("0\r\n\r\n".utf8)) else { return false } }
        return true
    }

    private func write(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        var sent = 0
        while sent < bytes.count {
            let n = bytes.withUnsafeBytes { Foundation.send(fd, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL)) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return false }
            sent += n
        }
        return true
    }

    private func reason(_ status: Int) -> String {
        switch status {
        case 200: "OK"
        case 301: "Moved Permanently"
        case 302: "Found"
        case 304: "Not Modified"
        case 404: "Not Found"
        default: "Status"
        }
    }
}

extension Duration {
    /// As seconds, for Thread.sleep.
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
