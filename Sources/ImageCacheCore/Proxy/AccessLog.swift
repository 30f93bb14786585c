// The access log: one line per request, written when its response ends (or is aborted), when `access-log` is on.
// A wrapper around the connection's sink; when the log is off nothing is wrapped, so the hot path pays nothing.
// The line is text for standard error and the same fields as metadata (client, method, target, status, cache,
// bytes, ms, end, and for a transform its canonical options and format class: transform) for structured handlers.

internal import ImageCacheSystem
internal import ImageCacheHTTP
internal import ImageCacheServer
internal import Foundation
internal import Logging
internal import Synchronization

/// Forwards every call to `inner` and logs one line at the end. The state is guarded by a Mutex because calls
/// may come from the connection's loop thread (hits) or the proxy queue (fetches).
final class AccessLogSink: ResponseSink {
    private struct State {
        var status = 0
        var xCache = "-"
        var bytes = 0
        var logged = false
        /// A transform's canonical options and format class (the rendition's text).
        var transform: String?
    }

    private let inner: any ResponseSink
    private let logger: Logger
    private let line: String
    private let client: String
    private let method: String
    private let target: String
    private let started: ContinuousClock.Instant
    private let state = Locked(State())

    var bytesWritten: Int { inner.bytesWritten }
    var executor: (any SinkExecutor)? { inner.executor }
    func whenWritten(_ bytes: Int, _ callback: @escaping @Sendable () -> Void) { inner.whenWritten(bytes, callback) }

    init(wrapping inner: any ResponseSink, request: HTTPRequestHead, client: ClientInfo, logger: Logger) {
        self.inner = inner
        self.logger = logger
        line = "\(client.address) \(request.method) \(request.target.prefix(2000))"
        self.client = client.address
        method = request.method
        target = String(request.target.prefix(2000))
        started = ContinuousClock.now
    }

    func note(_ outcome: CacheOutcome) {
        state.withLock { $0.xCache = outcome.xCache }
        inner.note(outcome)
    }

    /// The request is a transform: its rendition's text (canonical options, format class) goes in the line.
    func describe(transform: String) {
        state.withLock { $0.transform = transform }
    }

    private func started(_ head: HTTPResponseHead) {
        state.withLock { $0.status = head.status }
    }

    private func finish(_ outcome: String) {
        let elapsed = ContinuousClock.now - started
        let milliseconds = elapsed.inSeconds * 1000
        let record: State? = state.withLock { state in
            guard !state.logged else { return nil }
            state.logged = true
            return state
        }
        guard let record else { return }
        let time = String(format: "%.1f", milliseconds)
        // The same fields as metadata, for log handlers that keep structure (journald, JSON).
        var metadata: Logger.Metadata = [
            "client": "\(client)", "method": "\(method)", "target": "\(target)", "status": "\(record.status)",
            "cache": "\(record.xCache)", "bytes": "\(record.bytes)", "ms": "\(time)",
        ]
        if !outcome.isEmpty { metadata["end"] = "\(outcome.dropFirst())" }
        var transform = ""
        if let text = record.transform {
            metadata["transform"] = "\(text)"
            transform = " transform=" + text
        }
        logger.info("\(line) \(record.status) \(record.xCache) \(record.bytes)B \(time)ms\(transform)\(outcome)", metadata: metadata)
    }

    func interim(_ head: HTTPResponseHead) { inner.interim(head) }

    func head(_ head: HTTPResponseHead, bodyLength: Int?) {
        started(head)
        inner.head(head, bodyLength: bodyLength)
    }

    func body(_ chunk: [UInt8]) {
        state.withLock { $0.bytes += chunk.count }
        inner.body(chunk)
    }

    func end() {
        inner.end()
        finish("")
    }

    func respond(_ head: HTTPResponseHead, body: [UInt8]) {
        started(head)
        state.withLock { $0.bytes += body.count }
        inner.respond(head, body: body)
        finish("")
    }

    func respond(_ head: SerializedResponseHead, extra: HTTPHeaders, body: [UInt8]) {
        startedPrepared(head, extra: extra, bodyBytes: body.count)
        inner.respond(head, extra: extra, body: body)
        finish("")
    }

    func respond(_ head: SerializedResponseHead, extra: HTTPHeaders, file: FileBody) {
        startedPrepared(head, extra: extra, bodyBytes: file.length)
        inner.respond(head, extra: extra, file: file)
        finish("")
    }

    func respond(_ head: SerializedResponseHead, extra: HTTPHeaders, part: ArraySlice<UInt8>) {
        startedPrepared(head, extra: extra, bodyBytes: part.count)
        inner.respond(head, extra: extra, part: part)
        finish("")
    }

    private func startedPrepared(_ head: SerializedResponseHead, extra: HTTPHeaders, bodyBytes: Int) {
        state.withLock {
            $0.status = head.status
            $0.bytes += bodyBytes
        }
    }

    func abort() {
        inner.abort()
        finish(" aborted")
    }

    func onCancel(_ callback: @escaping @Sendable () -> Void) {
        inner.onCancel { [weak self] in
            self?.finish(" client gone")
            callback()
        }
    }
}
