// SourceCollector: a rendition job's source, collected whole from whatever answers the source request through the
// cache (a memory hit, a disk hit read from its file, a fetch's stream), with transform-max-source-bytes enforced as the
// bytes arrive.

internal import ImageCacheSystem
internal import ImageCacheHTTP
internal import ImageCacheServer
internal import ImageCacheStore
internal import Foundation

/// Receives the source's response (a hit, a disk hit read from its file, or a fetch's stream) and hands over its
/// whole body once, or why not. Thread-safe: its calls come from whichever queue answers the source request.
final class SourceCollector: ResponseSink, @unchecked Sendable {
    typealias Source = RenditionMachine.Source
    typealias Failure = RenditionMachine.SourceFailure

    private let lock = NSLock()
    private var head: HTTPResponseHead?
    private var body: [UInt8] = []
    /// When the origin answered for the source (its outcome, told before its head).
    private var received: CacheOutcome.Received?
    private var reported = false
    /// What whoever answers the source request runs when this client leaves (`abandon`).
    private var cancelCallbacks: [@Sendable () -> Void] = []
    private var abandoned = false
    private let limit: Int
    /// Told of each chunk of the body as it arrives (a fleet lease kept alive by the job's progress).
    private let progress: (@Sendable () -> Void)?
    private let report: @Sendable (Result<Source, Failure>) -> Void

    init(limit: Int, progress: (@Sendable () -> Void)? = nil, report: @escaping @Sendable (Result<Source, Failure>) -> Void) {
        self.limit = limit
        self.progress = progress
        self.report = report
    }

    /// Ends the collection without a report (the job gave up on it: its deadline); bytes arriving later are dropped.
    /// The source's fetch goes on for the cache.
    func drop() {
        lock.withLock {
            reported = true
            body = []
        }
    }

    /// Ends the collection without a report and leaves the source's fetch as a client that hangs up does (every
    /// client of a job gone): the fetch, if no other client waits on it, stops unless complete-abandoned-fetches.
    func abandon() {
        let callbacks: [@Sendable () -> Void] = lock.withLock {
            reported = true
            abandoned = true
            body = []
            defer { cancelCallbacks = [] }
            return cancelCallbacks
        }
        for callback in callbacks { callback() }
    }

    private func finish(_ result: Result<Source, Failure>) {
        let first = lock.withLock { () -> Bool in
            guard !reported else { return false }
            reported = true
            body = []
            return true
        }
        if first { report(result) }
    }

    private func tooLarge(_ count: Int) -> Failure {
        Failure(status: 413, reason: "the source is over transform-max-source-bytes (\(limit) bytes; at least \(count) arrived)", label: "source_bytes")
    }

    func head(_ head: HTTPResponseHead, bodyLength: Int?) {
        if let bodyLength, bodyLength > limit { return finish(.failure(tooLarge(bodyLength))) }
        lock.withLock { self.head = head }
    }

    func body(_ chunk: [UInt8]) {
        progress?()
        let over: Int? = lock.withLock {
            guard !reported else { return nil }
            if body.isEmpty { body = chunk } else { body += chunk }
            return body.count > limit ? body.count : nil
        }
        if let over { finish(.failure(tooLarge(over))) }
    }

    func end() {
        let result: Result<Source, Failure>? = lock.withLock {
            guard !reported, let head else { return nil }
            return .success(Source(head: head, body: body, received: received))
        }
        if let result { finish(result) } else { finish(.failure(Failure(status: 502, reason: "the source response ended without a head", label: "source_failed"))) }
    }

    func respond(_ head: HTTPResponseHead, body: [UInt8]) {
        if head.status >= 400 || head.status < 200 {
            let text = String(decoding: body.prefix(300), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            // The cache refused the source's type: an SVG is a transform limit (422 naming it), others a bad source.
            if head.status == 502 && text.hasPrefix("upstream sent image/svg+xml") {
                return finish(.failure(Failure(status: 422, reason: "SVG sources are refused (transform-allow-svg, and allow-svg for the source itself, are off)", label: "svg")))
            }
            if head.status != 404 && head.status != 410 {
                return finish(.failure(Failure(status: head.status == 413 ? 413 : 502,
                                               reason: "the source could not be fetched (\(head.status)\(text.isEmpty ? "" : ": " + text))",
                                               label: "source_failed")))
            }
        }
        if body.count > limit { return finish(.failure(tooLarge(body.count))) }
        finish(.success(Source(head: head, body: body, received: lock.withLock { received })))
    }

    func respond(_ head: SerializedResponseHead, extra: HTTPHeaders, body: [UInt8]) {
        var full = HTTPResponseHead(status: head.status, reason: head.reason, headers: head.headers)
        for field in extra { full.headers.add(field.name, field.value) }
        respond(full, body: body)
    }

    func respond(_ head: SerializedResponseHead, extra: HTTPHeaders, file: FileBody) {
        guard !lock.withLock({ reported }) else { return }
        guard file.length <= limit else { return finish(.failure(tooLarge(file.length))) }
        guard let bytes = file.readAll() else {
            return finish(.failure(Failure(status: 502, reason: "the stored source could not be read from disk", label: "source_failed")))
        }
        respond(head, extra: extra, body: bytes)
    }

    func respond(_ head: SerializedResponseHead, extra: HTTPHeaders, part: ArraySlice<UInt8>) {
        respond(head, extra: extra, body: Array(part))
    }

    func abort() {
        finish(.failure(Failure(status: 502, reason: "the source transfer broke off", label: "source_failed")))
    }

    func note(_ outcome: CacheOutcome) {
        lock.withLock { received = outcome.received }
    }

    func onCancel(_ callback: @escaping @Sendable () -> Void) {
        let now: Bool = lock.withLock {
            if abandoned { return true }
            cancelCallbacks.append(callback)
            return false
        }
        if now { callback() }
    }
}
