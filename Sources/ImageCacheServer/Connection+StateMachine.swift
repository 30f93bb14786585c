// The life of one client connection as a pure state machine: events in, actions out. No I/O, no Dispatch;
// `Connection` feeds it what its sources report and performs the actions it returns, in order.
//
// States and their valid transitions:
//
//   idle         no byte of a request yet; idle timer armed.
//                bytes -> readingHead (header timer) | handling (whole request at once) | writing (refused)
//                EOF/read error/idle timeout -> closed
//   readingHead  a request has started, its head is incomplete; header timer armed (not re-armed by bytes,
//                so a slow trickle of header bytes still times out).
//                head complete -> readingBody | handling;  refused -> writing(close);  timeout -> writing(close) with 408
//   readingBody  head complete, body arriving; body timer armed once (not re-armed by reads, so a body trickled a
//                byte at a time still times out).
//                body complete -> handling;  refused -> writing(close);  timeout -> writing(close) with 408;
//                EOF -> closed
//   handling     the handler owns the response (exchange id). Reads continue so that a client's close is
//                noticed; the bytes are buffered for the next request (reading is suspended once a full request
//                line and header section are buffered). Sink calls frame the response through `ResponseWriter`.
//                A streamed body (`bodyOpen`): the handler has the head and reads the body as it arrives; reads go
//                to the parser and its body bytes to the handler's `RequestBodyStream`; reading is suspended while
//                more than server.write-buffer of them is not consumed (resumed at half); the body timer runs on.
//                Such an exchange never keeps the connection alive (the response may end before the body).
//                body end -> handling;  body refused (413, bad chunk) or timed out (408) -> the stream fails and
//                the exchange is cancelled: the error is answered if no head went out, else the connection resets.
//                The body timer is stopped while reading is suspended (the handler, not the client, is slow) and
//                re-armed on resume. A response that ends first ends the stream (failed) for its reader.
//                end -> writing(keepAlive);  abort -> closed;  EOF/read error/write error/write timeout -> closed
//                after `cancelExchange` (the handler's onCancel callbacks).
//   writing      the response has ended; waiting for the write queue to drain.
//                drained + keep-alive -> idle/readingHead/handling (the next pipelined request is parsed only now)
//                drained + close -> lingering;  EOF/errors -> closed
//   lingering    the last response is written and the write side is shut down; reads are discarded until the
//                client closes or the linger timer fires (closing with unread bytes would reset the connection
//                and could destroy the response before the client reads it).  EOF/timeout -> closed
//   closed       final.
//
// CONNECT (RFC 9110 9.3.6): a complete CONNECT head is an exchange in `handling` whose answer is not a response but
// `connectRefused` (the error goes out with Connection: close, so bytes after the head are never read as HTTP) or
// `connectAccepted`. Bytes that arrive meanwhile wait in the parser (an early TLS ClientHello).
//   switching    "200 Connection established" is being written.  drained -> tunnelled, with `startTunnel` carrying the
//                bytes that came after the head;  EOF/errors -> closed
//   tunnelled    the connection's bytes are the tunnel's (Tunnel.swift); the machine takes no more events. Final but
//                for `stop`/errors -> closed.
// A CONNECT with a body is refused (400).

internal import ImageCacheSystem
internal import ImageCacheHTTP

extension Connection {
    struct StateMachine {
        enum State: Equatable {
            case idle
            case readingHead
            case readingBody
            case handling(Exchange)
            case writing(keepAlive: Bool)
            case lingering
            /// The 200 is being written; `intercept`: TLS is terminated here after it (else a blind tunnel).
            case switching(intercept: Bool)
            case tunnelled
            case closed
        }

        /// One request being answered.
        struct Exchange: Equatable {
            /// Identifies the exchange to sink calls, which may arrive late, after the connection moved on.
            let id: UInt64
            var writer: ResponseWriter
            var responseStarted = false
            /// A streamed request body is still arriving.
            var bodyOpen = false
            /// Streamed body bytes delivered and not yet consumed by the handler.
            var bodyUnconsumed = 0
            /// A CONNECT: answered by `connectRefused` or `connectAccepted`, never by a response sink.
            var isConnect = false
        }

        /// Timers on the read side (the write timer belongs to `Connection`, which sees partial writes).
        enum ReadTimer: Equatable {
            case idle
            case header
            case body
            case linger
        }

        enum Action: Equatable {
            case armReadTimer(ReadTimer, seconds: Double)
            case cancelReadTimer
            case suspendReading
            case resumeReading
            /// Queue these buffers for writing, in order.
            case write([[UInt8]])
            /// Send a file region after what is queued (sendfile).
            case sendFile(FileBody)
            /// Queue these bytes of a larger array (a Range part of a stored body): shared, not copied.
            case writePart(ArraySlice<UInt8>)
            /// Give the request to the handler; always the last action of its batch.
            case handle(HTTPRequestHead, body: [UInt8], exchange: UInt64)
            /// Make the stream of the exchange's request body (`length`: its Content-Length).
            case openBody(length: Int?, exchange: UInt64)
            /// Hand an event of the request body to its stream.
            case deliverBody(RequestBodyEvent)
            /// Give a request whose body is streamed to the handler (after `openBody`); the last action of its batch.
            case handleStreamed(HTTPRequestHead, exchange: UInt64)
            /// Give a CONNECT to the handler; the last action of its batch.
            case connect(HTTPRequestHead, exchange: UInt64)
            /// The 200 is written: from now on the connection's bytes are the tunnel's, `leftover` (what the client sent
            /// after its CONNECT head) first.
            case startTunnel(leftover: [UInt8])
            /// The 200 of an intercepted CONNECT is written: from now on the connection's bytes go through a TLS server
            /// stream, `leftover` (an early ClientHello) first, and its requests are the tunnel's (InterceptedRequest).
            case startTLS(leftover: [UInt8])
            /// Run the onCancel callbacks registered for the current exchange.
            case cancelExchange
            /// Log a refused request at `.notice`.
            case logRefused(HTTPParser.ParseError)
            /// Shut down the write side (FIN) and keep reading.
            case shutdownWrite
            /// Close the socket now.
            case close
            /// Close the socket now with a reset (RST), so that a client reading a close-delimited body cannot take
            /// the end of the connection for the end of the body.
            case reset
        }

        /// What to do with an onCancel callback registered for an exchange.
        enum CancelRegistration: Equatable {
            case store
            case runNow
            case drop
        }

        private(set) var state: State = .idle
        private var parser: HTTPParser
        private let settings: ServerSettings
        private var nextExchangeID: UInt64 = 1
        /// The exchange whose client went away (onCancel registered late for it runs at once).
        private var cancelledExchange: UInt64?
        private(set) var readingSuspended = false

        /// Seconds a closing connection keeps draining reads before closing.
        static let lingerSeconds: Double = 2

        /// `bodyDecision` answers, for a head that announces a body, whether it is read, streamed or refused (HTTPParser).
        /// The tunnel this connection's requests belong to once a CONNECT was intercepted (shared with the parser's body
        /// decision, which sees heads first).
        let authority: InterceptedAuthority

        init(settings: ServerSettings, authority: InterceptedAuthority = InterceptedAuthority(),
             bodyDecision: @escaping HTTPParser.BodyDecision = { _ in .read }) {
            self.settings = settings
            self.authority = authority
            self.parser = HTTPParser(settings: settings, bodyDecision: bodyDecision)
        }

        /// Bytes held while the current request is handled; reading stops beyond this.
        private var bufferLimit: Int { settings.maxRequestLineBytes + settings.maxHeaderBytes }

        /// The actions to run once the connection is set up.
        mutating func start() -> [Action] {
            [.armReadTimer(.idle, seconds: settings.idleTimeoutSeconds)]
        }

        // MARK: - Read side

        mutating func bytesReceived(_ bytes: some Collection<UInt8>, date: String) -> [Action] {
            switch state {
            case .idle, .readingHead, .readingBody:
                parser.feed(bytes)
                return parseNext(date: date)
            case let .handling(exchange) where exchange.bodyOpen:
                parser.feed(bytes)
                return pumpBody(date: date)
            case .handling, .writing, .switching:
                parser.feed(bytes)
                if parser.bufferedByteCount >= bufferLimit && !readingSuspended {
                    readingSuspended = true
                    return [.suspendReading]
                }
                return []
            case .lingering, .tunnelled, .closed:
                return []
            }
        }

        /// The client closed its side (read returned 0) or reading failed.
        mutating func readClosed() -> [Action] {
            clientGone()
        }

        /// Writing failed (the peer reset the connection).
        mutating func writeFailed() -> [Action] {
            clientGone()
        }

        /// The client did not accept written bytes within the write timeout.
        mutating func writeTimedOut() -> [Action] {
            clientGone()
        }

        mutating func readTimerFired(_ timer: ReadTimer, date: String) -> [Action] {
            switch (state, timer) {
            case (.idle, .idle), (.lingering, .linger):
                return close()
            case (.readingHead, .header):
                return refuse(HTTPParser.ParseError(status: 408, reason: "request head not received within \(Self.seconds(settings.headerTimeoutSeconds)) seconds"), date: date)
            case (.readingBody, .body):
                return refuse(HTTPParser.ParseError(status: 408, reason: "request body not received within \(Self.seconds(settings.bodyTimeoutSeconds)) seconds"), date: date)
            case let (.handling(exchange), .body) where exchange.bodyOpen:
                return bodyFailed(HTTPParser.ParseError(status: 408, reason: "request body not received within \(Self.seconds(settings.bodyTimeoutSeconds)) seconds"), date: date)
            default:
                return []  // a timer that was re-armed or is stale
            }
        }

        /// The server is stopping: close at once, cancelling a pending exchange.
        mutating func stop() -> [Action] {
            clientGone()
        }

        // MARK: - Write side

        /// The write queue is empty. Moves on from `writing` and `switching`; otherwise nothing to do.
        mutating func writesDrained(date: String) -> [Action] {
            if case let .switching(intercept) = state {
                readingSuspended = false
                let leftover = parser.takeBuffered()
                if intercept {
                    // The client's requests come again, inside TLS, and belong to the tunnel.
                    state = .idle
                    return [.startTLS(leftover: leftover), .armReadTimer(.idle, seconds: settings.idleTimeoutSeconds)]
                }
                state = .tunnelled
                return [.startTunnel(leftover: leftover)]
            }
            guard case let .writing(keepAlive) = state else { return [] }
            if keepAlive {
                state = .idle
                var actions: [Action] = []
                if readingSuspended {
                    readingSuspended = false
                    actions.append(.resumeReading)
                }
                return actions + parseNext(date: date)
            }
            state = .lingering
            var actions: [Action] = [.shutdownWrite, .armReadTimer(.linger, seconds: Self.lingerSeconds)]
            if readingSuspended {
                readingSuspended = false
                actions.append(.resumeReading)
            }
            return actions
        }

        // MARK: - Response sink

        /// An interim response before the head: written for an HTTP/1.1 client (HTTP/1.0 defines none, RFC 9110 15.2).
        mutating func responseInterim(_ head: HTTPResponseHead, exchange id: UInt64) -> [Action] {
            guard case let .handling(exchange) = state, exchange.id == id, !exchange.responseStarted,
                  exchange.writer.request.version == .http1_1, (102..<200).contains(head.status) else { return [] }
            var interim = head
            HopByHop.strip(&interim.headers)
            interim.headers.remove("Content-Length")
            return [.write([interim.serialized(version: .http1_1)])]
        }

        mutating func responseHead(_ head: HTTPResponseHead, bodyLength: Int?, exchange id: UInt64, date: String) -> [Action] {
            guard case var .handling(exchange) = state, exchange.id == id, !exchange.responseStarted else { return [] }
            let bytes = exchange.writer.head(head, bodyLength: bodyLength, date: date)
            exchange.responseStarted = true
            state = .handling(exchange)
            return [.write([bytes])]
        }

        mutating func responseBody(_ chunk: [UInt8], exchange id: UInt64) -> [Action] {
            guard case var .handling(exchange) = state, exchange.id == id, exchange.responseStarted else { return [] }
            let buffers = exchange.writer.body(chunk)
            state = .handling(exchange)
            return buffers.isEmpty ? [] : [.write(buffers)]
        }

        mutating func responseEnd(exchange id: UInt64) -> [Action] {
            guard case var .handling(exchange) = state, exchange.id == id, exchange.responseStarted else { return [] }
            let buffers = exchange.writer.end()
            return (buffers.isEmpty ? [] : [.write(buffers)]) + ended(exchange)
        }

        /// A whole response: head and body go out in one write.
        mutating func respond(_ head: HTTPResponseHead, body: [UInt8], exchange id: UInt64, date: String) -> [Action] {
            guard case var .handling(exchange) = state, exchange.id == id, !exchange.responseStarted else { return [] }
            var buffers = [exchange.writer.head(head, bodyLength: body.count, date: date)]
            buffers += exchange.writer.body(body)
            buffers += exchange.writer.end()
            return [.write(buffers)] + ended(exchange)
        }

        /// A whole response whose head was serialised once: the prepared bytes, the rest of the head and the body go
        /// out in one write, none of them copied.
        mutating func respond(_ prepared: SerializedResponseHead, extra: HTTPHeaders, body: [UInt8], exchange id: UInt64,
                              date: String) -> [Action] {
            guard case var .handling(exchange) = state, exchange.id == id, !exchange.responseStarted else { return [] }
            var buffers = exchange.writer.head(prepared, extra: extra, bodyLength: body.count, date: date)
            buffers += exchange.writer.body(body)
            buffers += exchange.writer.end()
            return [.write(buffers)] + ended(exchange)
        }

        /// A whole response whose body is a file region: the head, then the file, then whatever ends the body.
        mutating func respond(_ prepared: SerializedResponseHead, extra: HTTPHeaders, file: FileBody, exchange id: UInt64,
                              date: String) -> [Action] {
            respond(prepared, extra: extra, bodyLength: file.length, body: .sendFile(file), exchange: id, date: date)
        }

        /// A whole response whose body is a part of a stored array: the head, then the part (shared), then the end.
        mutating func respond(_ prepared: SerializedResponseHead, extra: HTTPHeaders, part: ArraySlice<UInt8>,
                              exchange id: UInt64, date: String) -> [Action] {
            respond(prepared, extra: extra, bodyLength: part.count, body: .writePart(part), exchange: id, date: date)
        }

        /// A whole response whose body of `bodyLength` bytes goes out as one action (`body`: a file region or a part
        /// of an array) after the head, when the response has a body (not for HEAD or a bodyless status).
        private mutating func respond(_ prepared: SerializedResponseHead, extra: HTTPHeaders, bodyLength: Int, body: Action,
                                      exchange id: UInt64, date: String) -> [Action] {
            guard case var .handling(exchange) = state, exchange.id == id, !exchange.responseStarted else { return [] }
            var actions: [Action] = [.write(exchange.writer.head(prepared, extra: extra, bodyLength: bodyLength, date: date))]
            if exchange.writer.fileBody(bodyLength) { actions.append(body) }
            let end = exchange.writer.end()
            if !end.isEmpty { actions.append(.write(end)) }
            return actions + ended(exchange)
        }

        /// The handler gave up: close at once so the client sees a truncated response.
        mutating func abort(exchange id: UInt64) -> [Action] {
            guard case let .handling(exchange) = state, exchange.id == id else { return [] }
            if state == .closed { return [] }
            state = .closed
            return (exchange.bodyOpen ? [.deliverBody(.failed("the response was aborted"))] : []) + [.reset]
        }

        /// The exchange's response is written: on to `writing`. A streamed body still open ends for its reader (the rest
        /// of it is never read: such a connection closes after the response).
        private mutating func ended(_ exchange: Exchange) -> [Action] {
            state = .writing(keepAlive: exchange.writer.keepAlive)
            guard exchange.bodyOpen else { return [] }
            return [.deliverBody(.failed("the response ended before the request body")), .cancelReadTimer]
        }

        /// The handler dealt with `bytes` of the streamed body: reading resumes once at most half a window waits.
        mutating func bodyConsumed(_ bytes: Int, exchange id: UInt64) -> [Action] {
            guard case var .handling(exchange) = state, exchange.id == id, exchange.bodyOpen else { return [] }
            exchange.bodyUnconsumed = max(0, exchange.bodyUnconsumed - bytes)
            state = .handling(exchange)
            guard readingSuspended, exchange.bodyUnconsumed <= settings.writeBufferBytes / 2 else { return [] }
            readingSuspended = false
            // The body timer measures the client: it ran only while the connection was read.
            return [.resumeReading, .armReadTimer(.body, seconds: settings.bodyTimeoutSeconds)]
        }

        // MARK: - CONNECT

        /// The handler refused the tunnel: the error, then close.
        mutating func connectRefused(status: Int, reason: String, exchange id: UInt64, date: String) -> [Action] {
            guard case let .handling(exchange) = state, exchange.id == id, exchange.isConnect else { return [] }
            return refuse(HTTPParser.ParseError(status: status, reason: reason), date: date)
        }

        /// The handler opened the tunnel: the 200 goes out; once it is written the tunnel starts. False: the exchange is
        /// over (the client went away), and the tunnel must not start.
        mutating func connectAccepted(exchange id: UInt64, intercept: ConnectTarget? = nil) -> [Action]? {
            guard case let .handling(exchange) = state, exchange.id == id, exchange.isConnect else { return nil }
            authority.target = intercept
            state = .switching(intercept: intercept != nil)
            return [.write([ResponseWriter.connectEstablished])]
        }

        mutating func registerCancel(exchange id: UInt64) -> CancelRegistration {
            if case let .handling(exchange) = state, exchange.id == id { return .store }
            return cancelledExchange == id ? .runNow : .drop
        }

        // MARK: - Internals

        private mutating func parseNext(date: String) -> [Action] {
            var actions: [Action] = []
            while true {
                switch parser.next() {
                case nil:
                    let before = state
                    if parser.isReadingBody {
                        state = .readingBody
                        if before != .readingBody {
                            actions.append(.armReadTimer(.body, seconds: settings.bodyTimeoutSeconds))
                        }
                    } else if parser.isReadingHead {
                        state = .readingHead
                        if before != .readingHead {
                            actions.append(.armReadTimer(.header, seconds: settings.headerTimeoutSeconds))
                        }
                    } else {
                        state = .idle
                        if before != .idle || actions.isEmpty {
                            actions.append(.armReadTimer(.idle, seconds: settings.idleTimeoutSeconds))
                        }
                    }
                    return actions
                case .continueExpected:
                    actions.append(.write([ResponseWriter.continueResponse]))
                case let .streamedRequest(original, bodyLength):
                    let head: HTTPRequestHead
                    switch intercepted(original) {
                    case let .success(rewritten): head = rewritten
                    case let .failure(error): return actions + refuse(error, date: date)
                    }
                    let id = nextExchangeID
                    nextExchangeID += 1
                    // The response may end before the body: the connection is not kept (the rest is not read).
                    let writer = ResponseWriter(request: .init(version: head.version, isHEAD: head.method == "HEAD", keepAlive: false))
                    state = .handling(Exchange(id: id, writer: writer, bodyOpen: true))
                    if !actions.contains(.armReadTimer(.body, seconds: settings.bodyTimeoutSeconds)) {
                        actions.append(.armReadTimer(.body, seconds: settings.bodyTimeoutSeconds))
                    }
                    actions.append(.openBody(length: bodyLength, exchange: id))
                    actions += pumpBody(date: date)
                    // Not when the body already failed in these bytes: the request is refused, not handled.
                    if case let .handling(current) = state, current.id == id { actions.append(.handleStreamed(head, exchange: id)) }
                    return actions
                case .bodyChunk, .bodyEnd:
                    preconditionFailure("body events come only while an exchange streams its body (pumpBody)")
                case let .request(original, _) where authority.target != nil && original.method == "CONNECT":
                    if case let .failure(refusal) = InterceptedRequest.rewrite(original, for: authority.target!) {
                        return actions + refuse(refusal, date: date)   // 405 with its Allow field
                    }
                    return actions + refuse(HTTPParser.ParseError(status: 405, reason: "CONNECT is not allowed inside an intercepted tunnel"), date: date)
                case let .request(head, body) where head.method == "CONNECT":
                    guard body.isEmpty else {
                        return actions + refuse(HTTPParser.ParseError(status: 400, reason: "a CONNECT request must not have a body"), date: date)
                    }
                    let id = nextExchangeID
                    nextExchangeID += 1
                    let writer = ResponseWriter(request: .init(version: head.version, isHEAD: false, keepAlive: false))
                    state = .handling(Exchange(id: id, writer: writer, isConnect: true))
                    actions.append(.cancelReadTimer)
                    actions.append(.connect(head, exchange: id))
                    return actions
                case let .request(original, body):
                    let head: HTTPRequestHead
                    switch intercepted(original) {
                    case let .success(rewritten): head = rewritten
                    case let .failure(error): return actions + refuse(error, date: date)
                    }
                    let id = nextExchangeID
                    nextExchangeID += 1
                    let writer = ResponseWriter(request: .init(version: head.version, isHEAD: head.method == "HEAD",
                                                               keepAlive: head.keepAlive))
                    state = .handling(Exchange(id: id, writer: writer))
                    actions.append(.cancelReadTimer)
                    actions.append(.handle(head, body: body, exchange: id))
                    return actions
                case let .error(error):
                    return actions + refuse(error, date: date)
                }
            }
        }

        /// Inside an intercepted tunnel, the forward request a head stands for (InterceptedRequest); else the head.
        private func intercepted(_ head: HTTPRequestHead) -> Result<HTTPRequestHead, HTTPParser.ParseError> {
            guard let target = authority.target else { return .success(head) }
            return InterceptedRequest.rewrite(head, for: target)
        }

        /// Answers a refused request with its status and closes once it is written.
        private mutating func refuse(_ error: HTTPParser.ParseError, date: String) -> [Action] {
            state = .writing(keepAlive: false)
            return [.cancelReadTimer, .logRefused(error), .write([ResponseWriter.errorResponse(error, date: date)])]
        }

        private mutating func clientGone() -> [Action] {
            if case let .handling(exchange) = state {
                cancelledExchange = exchange.id
                state = .closed
                let failed: [Action] = exchange.bodyOpen ? [.deliverBody(.failed("the client went away"))] : []
                return failed + [.cancelExchange, .close]
            }
            return close()
        }

        /// Hands the streamed body's bytes the parser has to the handler's stream; stops reading while more than a
        /// window of them waits to be consumed.
        private mutating func pumpBody(date: String) -> [Action] {
            var actions: [Action] = []
            while case var .handling(exchange) = state, exchange.bodyOpen {
                switch parser.next() {
                case let .bodyChunk(chunk)?:
                    exchange.bodyUnconsumed += chunk.count
                    state = .handling(exchange)
                    actions.append(.deliverBody(.chunk(chunk)))
                case .bodyEnd?:
                    exchange.bodyOpen = false
                    state = .handling(exchange)
                    actions.append(.deliverBody(.end))
                    actions.append(.cancelReadTimer)
                    if readingSuspended {
                        readingSuspended = false
                        actions.append(.resumeReading)
                    }
                case let .error(error)?:
                    return actions + bodyFailed(error, date: date)
                case nil:
                    if exchange.bodyUnconsumed > settings.writeBufferBytes && !readingSuspended {
                        // Held back by the handler (a slow origin), not by the client: no body timer meanwhile.
                        readingSuspended = true
                        actions.append(.suspendReading)
                        actions.append(.cancelReadTimer)
                    }
                    return actions
                case .request?, .streamedRequest?, .continueExpected?:
                    preconditionFailure("the parser returns the body's end before another request")
                }
            }
            return actions
        }

        /// The streamed body cannot be completed (too large, malformed, too slow): its stream fails, the exchange is
        /// cancelled, and the client gets the error, or a reset when its response had begun.
        private mutating func bodyFailed(_ error: HTTPParser.ParseError, date: String) -> [Action] {
            guard case let .handling(exchange) = state else { return [] }
            cancelledExchange = exchange.id
            let failed: [Action] = [.deliverBody(.failed(error.reason)), .cancelExchange]
            if exchange.responseStarted {
                state = .closed
                return failed + [.logRefused(error), .reset]
            }
            return failed + refuse(error, date: date)
        }

        private mutating func close() -> [Action] {
            if state == .closed { return [] }
            state = .closed
            return [.close]
        }

        private static func seconds(_ value: Double) -> String {
            value == value.rounded() ? String(Int(value)) : String(value)
        }
    }
}
