import Foundation
import ImageCacheTestSupport
import ImageCacheStatus
@testable import ImageCacheHTTP
@testable import ImageCacheStore
import Logging
import Synchronization
import ImageCacheSystem

/// A fresh directory under the system temp directory, removed when the value is released.
final class DiskTestDirectory: Sendable {
    let path: String

    init() {
        path = NSTemporaryDirectory() + "/imagecached-disk-\(UUID().uuidString)"
        keep = false
        try! FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    private let keep: Bool

    /// An existing directory that is kept afterwards (benchmarks reuse their data).
    init(keeping path: String) {
        self.path = path
        keep = true
        try! FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    deinit { if !keep { try? FileManager.default.removeItem(atPath: path) } }

    /// Every directory under the directory, as paths relative to it, sorted.
    var directories: [String] {
        let enumerator = FileManager.default.enumerator(atPath: path)
        var out: [String] = []
        while let item = enumerator?.nextObject() as? String {
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: path + "/" + item, isDirectory: &isDirectory), isDirectory.boolValue {
                out.append(item)
            }
        }
        return out.sorted()
    }

    /// Every regular file under the directory, as paths relative to it, sorted.
    var files: [String] {
        let enumerator = FileManager.default.enumerator(atPath: path)
        var out: [String] = []
        while let item = enumerator?.nextObject() as? String {
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: path + "/" + item, isDirectory: &isDirectory), !isDirectory.boolValue {
                out.append(item)
            }
        }
        return out.sorted()
    }
}

/// A clock the test moves by hand.
final class DiskTestClock: Sendable {
    private let time: Locked<Date>
    init(_ start: Date = Fixture.t0) { time = Locked(start) }
    func advance(by seconds: Double) { time.withLock { $0 = $0.addingTimeInterval(seconds) } }
    var now: @Sendable () -> Date { { self.time.withLock { $0 } } }
}

/// Keeps every log message, to assert on warnings.
final class DiskTestLog: LogHandler, @unchecked Sendable {
    private let lines = Locked<[String]>([])
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .debug

    var messages: [String] { lines.withLock { $0 } }
    var warnings: [String] { messages.filter { $0.hasPrefix("warning ") } }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        lines.withLock { $0.append("\(event.level) \(event.message)") }
    }

    var logger: Logger { Logger(label: "imagecached-disk-test") { _ in self } }
}

extension DiskCache {
    /// `lookup` made synchronous for tests: queues the lookup, waits for the queue, returns what it delivered.
    func lookupNow(_ key: CacheKey, requestFields: HTTPHeaders = HTTPHeaders()) -> DiskLookup? {
        let result = Locked<DiskLookup?>(nil)
        flush()  // let queued writes land first (lookups of a name with a queued write wait for it anyway)
        lookup(key, requestFields: requestFields) { found in result.withLock { $0 = found } }
        flush()
        return result.withLock { $0 }
    }

    /// Waits until the startup loader has finished (each flush lets at least one loader step run).
    func waitForIndex() {
        while !stats.indexLoaded { flush() }
    }

    /// The file an entry for `key` is stored in.
    func path(of key: CacheKey) -> String { filePath(of: DiskEntryFormat.fileName(forKey: key.description)) }
}

extension DiskLookup {
    var entry: CacheEntry? {
        if case let .entry(entry) = self { return entry }
        return nil
    }
}
