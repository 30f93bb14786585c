// The startup loader's progress in `DiskIndex` (the loader itself is DiskCache+Index.swift). A value inside
// `DiskIndex`, guarded by the same lock (`DiskCache.withIndex`); only the loader's steps on the serial queue change it.

internal import ImageCacheSystem

extension DiskIndex {
    /// Transitions: `waiting` -> `scanning` (the first step lists the top-level shard directories) -> `loaded`
    /// (after the last shard, once the loader has logged it). Each state carries its own data.
    /// Invariant: `loaded` is final; while `scanning`, `shards` are the directories still to scan, popped from
    /// the end (listed in descending order, so scanned in ascending order).
    enum LoadState: Sendable {
        /// Before the loader's first step: nothing listed yet.
        case waiting
        /// Shard directories still to scan, and when the scan began.
        case scanning(shards: [String], since: ContinuousClock.Instant)
        /// Every shard scanned; how long it took (wall time).
        case loaded(seconds: Double)

        /// What the loader does next.
        enum Step: Equatable {
            /// Scan this top-level shard directory, then step again.
            case scan(String)
            /// Every shard is scanned: log, mark loaded (`finish`), sweep if over the limit.
            case finish(seconds: Double)
            /// Loaded already: nothing.
            case none
        }

        var isLoaded: Bool {
            if case .loaded = self { true } else { false }
        }

        /// The loader's wall time; nil until it finishes.
        var seconds: Double? {
            if case let .loaded(seconds) = self { seconds } else { nil }
        }

        /// Takes the loader's next step: on the first, the shards are what `listed` (the cache root's names) holds
        /// that are shard names (`DiskIndex.isShardName`), and the scan starts at `now`.
        mutating func next(listed: [String]?, now: ContinuousClock.Instant) -> Step {
            switch self {
            case .loaded:
                return .none
            case .waiting:
                self = .scanning(shards: (listed ?? []).filter(DiskIndex.isShardName).sorted(by: >), since: now)
                return next(listed: listed, now: now)
            case .scanning(var shards, let since):
                guard let shard = shards.popLast() else { return .finish(seconds: (now - since).inSeconds) }
                self = .scanning(shards: shards, since: since)
                return .scan(shard)
            }
        }

        /// The loader has logged its result: loaded, in `seconds`.
        mutating func finish(seconds: Double) {
            self = .loaded(seconds: seconds)
        }
    }
}
