// Proxy, the disk hit path: a memory miss asks the disk tier straight from the connection's loop thread, and a fresh
// (or allowed stale) entry is answered from the disk's read queue without the proxy queue or a Fetch: one that fits
// the memory tier from the array it was read and verified into (then promoted), a larger one from its file with
// sendfile after the lookup verified it in place (FileBody):
//
//   connection loop             disk read queue (concurrent)                    proxy queue
//   memory miss ── lookup ───>  open, pread, verify checksums ── fresh ──> promote into memory, respond
//        │                                                   └ stale / stream / vary / nil ──> coalescer.dispatch(answer)
//        └ index knows the key is absent ── at once ───────────────────────────────────────────> coalescer.dispatch(nil)
//
// Anything the hit path cannot finish goes to `Coalescer.dispatch` with the answer in hand, so the disk is read once per
// request: a coalesced fetch may start from it (revalidate the stale copy, stream the large body, or go upstream).
// Concurrent misses of one key each read the file (reads are cheap and need no order); the origin is still asked
// once, through the coalescer.

internal import ImageCacheSystem
internal import ImageCacheServer
internal import ImageCacheStore
internal import Dispatch
internal import Foundation

extension Proxy {
    /// Called on the disk's read queue with a lookup's answer (or on the connection's loop thread when the index knew at
    /// once that the key is absent, or answered from a descriptor it kept open).
    /// `otherVariants`: the memory tier holds variants of the URL, none of them this request's.
    func diskAnswered(_ result: DiskLookup?, request: ClientRequest, key: CacheKey, sink: any ResponseSink,
                      removalsSeen: UInt64, otherVariants: Bool) {
        let stored: CacheEntry?, file: FileBody?
        switch result {
        case let .entry(entry): (stored, file) = (entry, nil)
        case let .stream(head, body): (stored, file) = (head, body)
        case nil: (stored, file) = (nil, nil)
        }
        let time = now()
        let decision = CacheDecision.decide(stored: stored, otherVariants: otherVariants, request: request.cacheControl,
                                            now: time, defaultStaleWhileRevalidate: request.staleWhileRevalidate)
        // Read whole only when the memory tier admits it (then promoted); else sent from its file.
        if case .serve = decision, let stored, file == nil { store.promote(stored, removalsSeen: removalsSeen) }
        act(on: decision, stored: stored, request: request, key: key, sink: sink, now: time, tier: "disk", file: file,
            probe: .answered(result, removalsSeen: removalsSeen))
    }
}
