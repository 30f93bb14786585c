// One non-blocking TCP connection to a memcached server: its socket, the bytes waiting to go out, the parser of what
// comes back and the requests waiting for their answers, in the order they were sent.
//
// Data model: `pending` is a FIFO of requests (serial number, the answer expected: `O<opaque>` echoed, `MN` or a
// stats answer, and the work the answer completes); memcached answers a connection's requests in order, so the first
// answer read belongs to the first pending request, and the opaque token checks it. `output` is a queue of byte
// chunks: small requests are appended to the last chunk (one send carries a batch of pipelined requests), a large
// value stays the caller's array (never copied), `outputOffset` is how much of the first chunk went out. `serial`s
// grow by one per request, so a deadline names its request by (connection id, serial) and a request is still pending
// iff its serial is at least the first pending one's.
//
// Ownership: created, used and closed by the fleet thread only (FleetClient); not Sendable. The fleet thread owns the
// epoll registration (`watchingWrite` records which events it asked for). The socket is closed exactly once, by
// `close()`.

#if canImport(Glibc)
internal import Glibc
#endif
internal import ImageCacheSystem

final class FleetConnection {
    enum Role: String {
        /// Lookups, lease checks and refreshes, deletes, stores and reads of values up to the bulk threshold.
        case control
        /// Stores and reads of larger values, so a lease poll never waits behind them.
        case bulk
    }

    enum Phase {
        case connecting
        case open
        case closed
    }

    /// The answer a request waits for.
    enum Expectation: Equatable {
        case opaque(UInt32)
        case noop
        case stats
    }

    struct Request {
        let serial: UInt64
        let expects: Expectation
        let work: FleetWork
        /// Its own time to be answered, seconds, counted from when it is first in line (FleetClient.armDeadline).
        let seconds: Double
    }

    /// Chunks smaller than this are merged into the last queued one.
    private static let coalesceBytes = 64 << 10

    let id: UInt64
    let role: Role
    let link: FleetLink
    let fd: Int32
    private(set) var phase = Phase.connecting
    var parser: MetaResponseParser
    /// Whether the fleet thread registered EPOLLOUT for it.
    var watchingWrite = true
    /// Queued in the fleet thread's list of connections to flush at the end of the turn.
    var isDirty = false

    private var pending: [Request] = []
    private var head = 0
    private var output: [[UInt8]] = []
    private var outputOffset = 0
    private var nextOpaque: UInt32 = 1
    private var nextSerial: UInt64 = 1

    /// Opens a socket and starts connecting it to `address` (non-blocking, TCP_NODELAY, close-on-exec).
    init(id: UInt64, role: Role, link: FleetLink, address: SocketAddress, maxValueBytes: Int) throws(SystemError) {
        let fd = try syscall("socket") {
            socket(address.family, Int32(SOCK_STREAM.rawValue | SOCK_NONBLOCK.rawValue | SOCK_CLOEXEC.rawValue), 0)
        }
        var one: Int32 = 1
        _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        let (result, code) = address.withSockaddr { pointer, length in
            let result = connect(fd, pointer, length)
            return (result, errno)
        }
        // EINPROGRESS is the usual answer of a non-blocking connect (EINTR: it goes on in the background); EPOLLOUT
        // says when it is done.
        guard result == 0 || code == EINPROGRESS || code == EINTR else {
            closeDescriptor(fd)
            throw SystemError(errno: code, function: "connect")
        }
        self.id = id
        self.role = role
        self.link = link
        self.fd = fd
        self.parser = MetaResponseParser(maxValueBytes: maxValueBytes)
    }

    var isClosed: Bool { phase == .closed }
    var hasPending: Bool { head < pending.count }
    var pendingCount: Int { pending.count - head }
    var hasOutput: Bool { !output.isEmpty }

    /// The connect's outcome once the socket is writable: 0, or the errno it failed with.
    func finishConnect() -> Int32 {
        var error: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 else { return errno }
        if error == 0 { phase = .open }
        return error
    }

    func takeOpaque() -> UInt32 {
        defer { nextOpaque = nextOpaque == UInt32.max ? 1 : nextOpaque + 1 }
        return nextOpaque
    }

    /// Queues a request's bytes and the work its answer completes (`seconds`: its own time to be answered once first
    /// in line); returns its serial.
    func enqueue(_ work: FleetWork, expects: Expectation, seconds: Double, parts: [[UInt8]]) -> UInt64 {
        let serial = nextSerial
        nextSerial += 1
        pending.append(Request(serial: serial, expects: expects, work: work, seconds: seconds))
        for part in parts where !part.isEmpty {
            if part.count < Self.coalesceBytes, let last = output.indices.last, output[last].count < Self.coalesceBytes {
                output[last].append(contentsOf: part)
            } else {
                output.append(part)
            }
        }
        return serial
    }

    /// The first request waiting for its answer.
    var first: Request? { hasPending ? pending[head] : nil }

    func isPending(serial: UInt64) -> Bool {
        hasPending && serial >= pending[head].serial
    }

    /// Takes the first pending request for `response`, checking that the answer is the kind it waits for.
    func match(_ response: MetaResponse) throws(MetaProtocolError) -> Request {
        guard hasPending else { throw MetaProtocolError("an answer nothing asked for: \(MetaOutcome.describe(response))") }
        let request = pending[head]
        switch (request.expects, response.status) {
        case (_, .serverError), (_, .clientError), (_, .error):
            break  // error lines carry no opaque: they answer the first request
        case let (.opaque(expected), _):
            guard response.carriesOpaque else {
                throw MetaProtocolError("\(MetaOutcome.describe(response)) where a meta answer was expected")
            }
            guard response.flags.opaque == expected else {
                throw MetaProtocolError("opaque \(response.flags.opaque.map(String.init) ?? "none") where O\(expected) was expected")
            }
        case (.noop, .noop), (.stats, .stats):
            break
        case (.noop, _), (.stats, _):
            throw MetaProtocolError("\(MetaOutcome.describe(response)) where \(request.expects) was expected")
        }
        head += 1
        if head == pending.count {
            pending.removeAll(keepingCapacity: true)
            head = 0
        } else if head >= 64, head * 2 >= pending.count {
            pending.removeFirst(head)
            head = 0
        }
        return request
    }

    /// Removes and returns every pending request (the connection is closing).
    func takePending() -> [Request] {
        defer {
            pending = []
            head = 0
        }
        return Array(pending[head...])
    }

    /// Sends what it can; returns the bytes sent and whether everything queued went out.
    func flush() throws(SystemError) -> (written: Int, drained: Bool) {
        var written = 0
        while let first = output.first {
            let (count, code) = first.withUnsafeBytes { bytes in
                let count = send(fd, bytes.baseAddress! + outputOffset, bytes.count - outputOffset, Int32(MSG_NOSIGNAL))
                return (count, errno)
            }
            if count < 0 {
                if code == EINTR { continue }
                if code == EAGAIN || code == EWOULDBLOCK { return (written, false) }
                throw SystemError(errno: code, function: "send")
            }
            written += count
            outputOffset += count
            if outputOffset == first.count {
                output.removeFirst()
                outputOffset = 0
            }
        }
        return (written, true)
    }

    /// Reads into `buffer`: the bytes read (0 at the end of the stream), nil when the socket has nothing now.
    func receive(into buffer: UnsafeMutableRawBufferPointer) throws(SystemError) -> Int? {
        while true {
            let count = recv(fd, buffer.baseAddress, buffer.count, 0)
            if count >= 0 { return count }
            let code = errno
            if code == EINTR { continue }
            if code == EAGAIN || code == EWOULDBLOCK { return nil }
            throw SystemError(errno: code, function: "recv")
        }
    }

    func close() {
        guard phase != .closed else { return }
        phase = .closed
        output = []
        closeDescriptor(fd)
    }
}
