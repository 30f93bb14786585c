internal import ImageCacheSystem
internal import ImageCacheHTTP
internal import ImageCacheConfig
internal import ImageCacheServer
internal import ImageCacheStore
package import ImageCacheStatus
public import Foundation
internal import Synchronization

/// Counts one response's outcome (as noted before its head: `note`; none noted, the daemon's own error answer) and
/// body bytes, then forwards every call. Wraps the sink of every request that leaves the connection's loop (misses,
/// stale, bypass, disk); fresh memory hits are counted where they are answered, without a wrapper.
final class MetricsSink: ResponseSink {
    private let inner: any ResponseSink
    private let metrics: ProxyMetrics
    private let countsBody: Bool
    /// The outcome, once the head went out (index into ServedOutcome.allCases; -1 before).
    private let outcome = Atomic<Int>(-1)

    init(wrapping inner: any ResponseSink, metrics: ProxyMetrics, isHead: Bool) {
        self.inner = inner
        self.metrics = metrics
        countsBody = !isHead
    }

    func note(_ outcome: CacheOutcome) {
        started(outcome.served)
        inner.note(outcome)
    }

    /// The head goes out: counted as the noted outcome, or as an error when none was noted.
    private func started() { started(.error) }

    private func started(_ outcome: ServedOutcome) {
        let index = ServedOutcome.allCases.firstIndex(of: outcome)!
        guard self.outcome.compareExchange(expected: -1, desired: index, ordering: .relaxed).exchanged else { return }
        metrics.served(outcome)
    }

    private func count(_ bytes: Int) {
        let index = outcome.load(ordering: .relaxed)
        guard countsBody, index >= 0, bytes > 0 else { return }
        metrics.servedBytes(ServedOutcome.allCases[index], bytes)
    }

    func interim(_ head: HTTPResponseHead) { inner.interim(head) }

    func head(_ head: HTTPResponseHead, bodyLength: Int?) {
        started()
        inner.head(head, bodyLength: bodyLength)
    }

    func body(_ chunk: [UInt8]) {
        count(chunk.count)
        inner.body(chunk)
    }

    func end() { inner.end() }

    func respond(_ head: HTTPResponseHead, body: [UInt8]) {
        started()
        if ![304, 416].contains(head.status) { count(body.count) }
        inner.respond(head, body: body)
    }

    /// Passes the prepared head through, so a hit answered through this sink keeps the serialised fast path.
    func respond(_ head: SerializedResponseHead, extra: HTTPHeaders, body: [UInt8]) {
        startedPrepared(head, extra: extra, bodyBytes: body.count)
        inner.respond(head, extra: extra, body: body)
    }

    func respond(_ head: SerializedResponseHead, extra: HTTPHeaders, file: FileBody) {
        startedPrepared(head, extra: extra, bodyBytes: file.length)
        inner.respond(head, extra: extra, file: file)
    }

    func respond(_ head: SerializedResponseHead, extra: HTTPHeaders, part: ArraySlice<UInt8>) {
        startedPrepared(head, extra: extra, bodyBytes: part.count)
        inner.respond(head, extra: extra, part: part)
    }

    private func startedPrepared(_ head: SerializedResponseHead, extra: HTTPHeaders, bodyBytes: Int) {
        started()
        if ![304, 416].contains(head.status) { count(bodyBytes) }
    }

    func abort() { inner.abort() }

    func onCancel(_ callback: @escaping @Sendable () -> Void) { inner.onCancel(callback) }
    var executor: (any SinkExecutor)? { inner.executor }
    var bytesWritten: Int { inner.bytesWritten }
    func whenWritten(_ bytes: Int, _ callback: @escaping @Sendable () -> Void) { inner.whenWritten(bytes, callback) }
}
