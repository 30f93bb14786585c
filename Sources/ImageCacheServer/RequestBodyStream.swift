// A request body the handler reads as it arrives (`RequestHandler.handle(_:streamedBody:client:sink:)`).
//
// The connection hands it the bytes the parser takes from the socket, in order, then the end, or a failure (the client
// went away, the body was too large, malformed or too slow). The reader says how many bytes it has dealt with
// (`consumed`); the connection stops reading the socket while more than server.write-buffer of them wait (resumed at
// half), so an upload to a slow origin holds its client back instead of filling the daemon's memory.
//
// Ownership: the events and the reader are confined to the connection's loop thread (`deliver` runs there; `read` and
// `consumed` may be called from any thread and hop there). Events that come before a reader is set wait for it.

/// What a streamed request body brings, in order: chunks, then `end` or `failed`.
public enum RequestBodyEvent: Sendable, Equatable {
    case chunk([UInt8])
    case end
    /// The body will not be complete (the reason, for the log).
    case failed(String)
}

/// The body of one request, streamed.
public final class RequestBodyStream: @unchecked Sendable {
    /// The body's Content-Length, or nil for a chunked body.
    public let length: Int?
    private weak var connection: Connection?
    private let exchange: UInt64

    // MARK: confined to the connection's loop
    private var reader: (@Sendable (RequestBodyEvent) -> Void)?
    private var waiting: [RequestBodyEvent] = []

    init(connection: Connection, exchange: UInt64, length: Int?) {
        self.connection = connection
        self.exchange = exchange
        self.length = length
    }

    /// Sets the reader (once); it is called on the connection's loop thread for every event, those that came before
    /// first. After a terminal event nothing more comes.
    public func read(_ reader: @escaping @Sendable (RequestBodyEvent) -> Void) {
        guard let connection else { return reader(.failed("the connection is closed")) }
        connection.onLoop {
            self.reader = reader
            let waiting = self.waiting
            self.waiting = []
            for event in waiting { self.deliver(event) }
        }
    }

    /// The reader has dealt with `bytes` of delivered body (every chunk's count, once): the connection reads on.
    public func consumed(_ bytes: Int) {
        connection?.bodyConsumed(bytes, exchange: exchange)
    }

    /// On the loop thread.
    func deliver(_ event: RequestBodyEvent) {
        guard let reader else {
            waiting.append(event)
            return
        }
        reader(event)
        // After the last event the reader (and what it holds) is let go.
        if case .chunk = event {} else { self.reader = nil }
    }
}
