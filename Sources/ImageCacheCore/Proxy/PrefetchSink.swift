internal import ImageCacheSystem
internal import ImageCacheHTTP
internal import ImageCacheConfig
internal import ImageCacheServer
internal import Dispatch
internal import Foundation
internal import Logging

/// Receives one prefetched response, counts its body and reports once: (status, X-Cache, bytes, failure or nil).
final class PrefetchSink: ResponseSink, @unchecked Sendable {
    private let lock = NSLock()
    private var status = 0
    private var xCache = "-"
    private var bytes = 0
    private var reported = false
    private let report: @Sendable (Int, String, Int, String?) -> Void

    init(report: @escaping @Sendable (Int, String, Int, String?) -> Void) {
        self.report = report
    }

    private func finish(failure: String?) {
        let result: (Int, String, Int)? = lock.withLock {
            guard !reported else { return nil }
            reported = true
            return (status, xCache, bytes)
        }
        guard let (status, xCache, bytes) = result else { return }
        let why = failure ?? (status >= 400 ? "answered \(status)" : nil)
        report(status, xCache, bytes, why)
    }

    func note(_ outcome: CacheOutcome) { lock.withLock { xCache = outcome.xCache } }

    private func started(_ head: HTTPResponseHead) { lock.withLock { status = head.status } }

    func head(_ head: HTTPResponseHead, bodyLength: Int?) { started(head) }
    func body(_ chunk: [UInt8]) { lock.withLock { bytes += chunk.count } }
    func end() { finish(failure: nil) }
    func respond(_ head: HTTPResponseHead, body: [UInt8]) {
        started(head)
        lock.withLock { bytes += body.count }
        let reason = head.status >= 400 ? String(decoding: body, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines) : nil
        finish(failure: reason.map { "answered \(head.status): \($0)" })
    }
    /// A large stored body sent from its file: counted, never read (a prefetch only warms the cache).
    func respond(_ head: SerializedResponseHead, extra: HTTPHeaders, file: FileBody) {
        lock.withLock {
            status = head.status
            bytes += file.length
        }
        finish(failure: nil)
    }
    func abort() { finish(failure: "the transfer broke off") }
    func onCancel(_ callback: @escaping @Sendable () -> Void) {}
}
