// CONNECT in the connection's state machine: the head goes to the handler, the answer is a refusal that closes or a
// 200 with no framing field, and the tunnel starts only once the 200 is written, with the bytes that came early.

import Testing
@testable import ImageCacheHTTP
@testable import ImageCacheServer

@Suite("Connection.StateMachine: CONNECT", .timeLimit(.minutes(1)))
struct ConnectStateMachineTests {
    typealias Machine = Connection.StateMachine
    static let date = ConnectionStateMachineTests.date
    static let head = "CONNECT images.example:443 HTTP/1.1\r\nHost: images.example:443\r\n\r\n"

    static func connected(_ actions: [Machine.Action]) -> [(target: String, exchange: UInt64)] {
        actions.compactMap { action in
            if case let .connect(head, exchange) = action { return (head.target, exchange) }
            return nil
        }
    }

    @Test("a CONNECT head goes to the handler's connect, not handle; bytes after it wait (an early ClientHello)")
    func connectIsHandedOver() {
        var machine = Machine(settings: ServerSettings())
        let actions = machine.bytesReceived(Array((Self.head).utf8) + [0x16, 0x03, 0x01], date: Self.date)
        #expect(Self.connected(actions).map(\.target) == ["images.example:443"])
        #expect(ConnectionStateMachineTests.handled(actions).isEmpty)
        #expect(actions.first == .cancelReadTimer)
        // More bytes before the answer: buffered, nothing happens
        #expect(machine.bytesReceived([0x00, 0x01], date: Self.date) == [])
    }

    @Test("accepted: the 200 carries no Content-Length or Transfer-Encoding, and the tunnel starts on drain with every early byte")
    func acceptedStartsTunnelOnDrain() {
        var machine = Machine(settings: ServerSettings())
        _ = machine.bytesReceived(Array(Self.head.utf8) + [0x16, 0x03], date: Self.date)
        let accepted = machine.connectAccepted(exchange: 1)
        #expect(ConnectionStateMachineTests.written(accepted ?? []) == "HTTP/1.1 200 Connection established\r\n\r\n")
        #expect(machine.state == .switching(intercept: false))
        // Bytes while the 200 is written: still the tunnel's
        #expect(machine.bytesReceived([0x01], date: Self.date) == [])
        #expect(machine.writesDrained(date: Self.date) == [.startTunnel(leftover: [0x16, 0x03, 0x01])])
        #expect(machine.state == .tunnelled)
        // The machine takes no more bytes: they are the tunnel's
        #expect(machine.bytesReceived(Array("GET / HTTP/1.1\r\n\r\n".utf8), date: Self.date) == [])
    }

    @Test("refused: the status and reason go out with Connection: close, the connection lingers, early bytes are never parsed")
    func refusedCloses() {
        var machine = Machine(settings: ServerSettings())
        // The early bytes are a second request: it must never be handled
        _ = machine.bytesReceived(Array((Self.head + "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n").utf8), date: Self.date)
        let refused = machine.connectRefused(status: 403, reason: "port 25 is not in connect-ports (443)", exchange: 1, date: Self.date)
        let text = ConnectionStateMachineTests.written(refused)
        #expect(text.hasPrefix("HTTP/1.1 403 "))
        #expect(text.contains("Connection: close"))
        #expect(text.hasSuffix("port 25 is not in connect-ports (443)\n"))
        let drained = machine.writesDrained(date: Self.date)
        #expect(drained.contains(.shutdownWrite))
        #expect(ConnectionStateMachineTests.handled(drained).isEmpty)
        #expect(machine.state == .lingering)
    }

    @Test("an answer for another exchange, or after the client left, is ignored")
    func staleAnswersIgnored() {
        var machine = Machine(settings: ServerSettings())
        _ = machine.bytesReceived(Array(Self.head.utf8), date: Self.date)
        #expect(machine.connectAccepted(exchange: 2) == nil)
        #expect(machine.connectRefused(status: 403, reason: "x", exchange: 2, date: Self.date) == [])
        #expect(machine.readClosed() == [.cancelExchange, .close])
        #expect(machine.connectAccepted(exchange: 1) == nil)
    }

    @Test("a CONNECT with a body is refused with 400")
    func bodyRefused() {
        var machine = Machine(settings: ServerSettings())
        let actions = machine.bytesReceived(Array("CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\nContent-Length: 2\r\n\r\nhi".utf8), date: Self.date)
        #expect(Self.connected(actions).isEmpty)
        #expect(ConnectionStateMachineTests.written(actions).hasPrefix("HTTP/1.1 400 "))
        #expect(ConnectionStateMachineTests.written(actions).contains("must not have a body"))
    }

    @Test("the parser hands out the bytes after a complete request and is empty after")
    func takeBuffered() {
        var parser = HTTPParser(settings: ServerSettings())
        parser.feed(Array((Self.head + "\u{16}abc").utf8))
        guard case .request? = parser.next() else { Issue.record("no request"); return }
        #expect(parser.takeBuffered() == [0x16, 0x61, 0x62, 0x63])
        #expect(parser.bufferedByteCount == 0)
        #expect(parser.takeBuffered() == [])
    }
}

@Suite("Tunnel.Machine", .timeLimit(.minutes(1)))
struct TunnelMachineTests {
    typealias Machine = Tunnel.Machine

    @Test("a flow stops reading its source at the limit and resumes at half")
    func backpressure() {
        var machine = Machine(limit: 64 << 10)
        #expect(machine.received(40 << 10, from: .upstream) == [])
        #expect(machine.received(24 << 10, from: .upstream) == [.suspendReading(.upstream)])
        #expect(!machine.mayRead(.upstream))
        #expect(machine.mayRead(.client), "the other direction is not held back")
        #expect(machine.sent(31 << 10, to: .client) == [], "33 KiB still queued: over half")
        #expect(machine.sent(1 << 10, to: .client) == [.resumeReading(.upstream)])
        #expect(machine.mayRead(.upstream))
    }

    @Test("a FIN is passed on once its flow has drained, the other flow goes on, and both shut closes")
    func halfClose() {
        var machine = Machine(limit: 64 << 10)
        _ = machine.received(100, from: .client)
        #expect(machine.readEnded(.client) == [], "100 bytes still to write upstream")
        #expect(machine.sent(100, to: .upstream) == [.shutdownWrite(.upstream)])
        #expect(!machine.mayRead(.client))
        #expect(machine.mayRead(.upstream))
        _ = machine.received(10, from: .upstream)
        #expect(machine.sent(10, to: .client) == [])
        #expect(machine.readEnded(.upstream) == [.shutdownWrite(.client), .close(.closed)])
        #expect(machine.closed)
        #expect(machine.received(1, from: .client) == [], "nothing after close")
    }

    @Test("an error, the idle timeout, a stalled write and a stop close at once with their reason, once")
    func closes() {
        for (event, end) in [({ (m: inout Machine) in m.failed() }, TunnelReport.End.error),
                             ({ (m: inout Machine) in m.idleTimedOut() }, .idle),
                             ({ (m: inout Machine) in m.writeTimedOut() }, .error),
                             ({ (m: inout Machine) in m.stop() }, .shutdown)] {
            var machine = Machine(limit: 1024)
            _ = machine.received(10, from: .client)
            #expect(event(&machine) == [.close(end)])
            #expect(event(&machine) == [])
            #expect(machine.stop() == [])
        }
    }
}
