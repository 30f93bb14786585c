// FleetEnvelope: a stored response as the fleet tier (memcached, ImageCacheFleet) holds it, and the rules for what a
// value read from there may be. Pure; no I/O.
//
// Rules
//   - The key is "ic1:" and the entry's disk file name (DiskEntryFormat.fileName: SHA-256 of the URL, "~r" for a
//     rendition): at most 4 + 81 bytes of [0-9a-f~-:], well within memcached's 250, and the same for every host.
//     The URL's first response is shared, with or without Vary (not Vary: *): one value per URL, whatever variant
//     the winner's request selected; the variant (its VaryKey: the request field values it was selected with) is in
//     the value, and a host serves it only to requests that select it (the others fetch their own variant, as before
//     the fleet). So `Vary: Origin` or `Vary: Accept-Encoding` on images costs nothing to the many clients that send
//     the same fields (or none), and a client that differs is served exactly as without a fleet.
//   - The value is the disk entry's bytes (DiskEntryFormat v4): the versioned, checksummed header with the full key
//     and the variant, then the body. Reading one verifies the magic, the version, the header checksum, the key (the
//     full URL and rendition, not just its hash), the variant, the length and the body checksum: a damaged, truncated,
//     foreign or older-format value is refused (the caller deletes it and counts it), never served. Nothing read
//     from a value names a file.
//   - Markers are values with their own client flags (`Flags`), never decoded as entries: a pass marker says "the
//     response could not be shared; fetch it yourself" to the hosts waiting on the lease.
//   - A value's memcached TTL is the entry's remaining freshness (whole seconds, at least 1), at most a day
//     (`maxSharedSeconds`): the tier drops it when it goes stale, so a server that comes back after an outage holds
//     nothing older than the rules allow; and no value outlives the hosts' memory of a purge of its URL (the purge log,
//     Core's FleetPurges, keeps every purge at least that long). An entry with no freshness left is not shared (its
//     waiters get a pass marker). An image fresh for longer is fetched again fleet-wide (once) daily.

public import ImageCacheHTTP
public import Foundation

public enum FleetEnvelope {
    /// The client flags of a fleet value: what it is.
    public enum Flags {
        /// A stored response (DiskEntryFormat v4 bytes).
        public static let entry: UInt32 = 4
        /// A pass marker: the winner's response could not be shared (no-store, private, Vary: *, too large, an error, a
        /// failed fetch); the bytes are a one-line reason.
        public static let pass: UInt32 = 1
    }

    /// Why a value is not a usable entry (logged with the key).
    public struct Refusal: Error, CustomStringConvertible {
        public var description: String
        init(_ description: String) { self.description = description }
    }

    /// The fleet key of `key`'s own response.
    public static func key(for key: CacheKey) -> String { "ic1:" + DiskEntryFormat.fileName(for: key) }

    /// The value for `entry`: its header and body as the disk writes them.
    public static func encode(_ entry: CacheEntry) -> [UInt8] {
        var bytes = DiskEntryFormat.encodeHeader(key: entry.key.description, variant: entry.variantID, head: entry.head,
                                                 requestTime: entry.requestTime, responseTime: entry.responseTime,
                                                 bodyLength: entry.body.count,
                                                 bodyChecksum: DiskEntryFormat.checksum(entry.body))
        bytes.append(contentsOf: entry.body)
        return bytes
    }

    /// The entry a value read for `key` holds, verified whole; a refusal when it is damaged or not `key`'s.
    public static func decode(_ bytes: [UInt8], for key: CacheKey, policy: FreshnessPolicy) throws(Refusal) -> CacheEntry {
        let header: DiskEntryFormat.Header
        do {
            header = try DiskEntryFormat.decodeHeader(bytes[...])
        } catch {
            throw Refusal(error.description)
        }
        guard header.key == key.description else { throw Refusal("holds another key (\(header.key.prefix(200)))") }
        if let vary = header.vary {
            // The variant must be what the response's own Vary names select (a value whose variant disagrees with its
            // head is not one this daemon wrote). (A rendition made for Accept has `Vary: Accept` and no variant: its
            // key names the format it chose.)
            guard !vary.matchesNothing,
                  VaryKey.make(response: header.head, request: HTTPHeaders())?.names == vary.names else {
                throw Refusal("its variant does not match its Vary field")
            }
        } else if !key.isRendition, !header.head.headers.tokens("Vary").isEmpty {
            throw Refusal("varies (Vary) but holds no variant")
        }
        guard bytes.count == header.fileSize else {
            throw Refusal("\(bytes.count) bytes where the header says \(header.fileSize)")
        }
        let body = Array(bytes[header.bodyOffset...])
        guard DiskEntryFormat.checksum(body) == header.bodyChecksum else { throw Refusal("body checksum mismatch") }
        return CacheEntry(key: key, head: header.head, body: body, requestTime: header.requestTime,
                          responseTime: header.responseTime, vary: header.vary, policy: policy)
    }

    /// The longest a value stays in the fleet, seconds (a day): shorter than a purge is remembered (FleetPurges keeps
    /// its log and its memory of each purge an hour longer).
    public static let maxSharedSeconds = 24 * 3600

    /// Whether `entry` may be shared through the fleet at `now`, and for how long (the memcached TTL, seconds): its
    /// own response (with its Vary variant, not Vary: *), with freshness left. nil: not shared (the waiters get a pass
    /// marker).
    public static func sharedTTL(of entry: CacheEntry, now: Date) -> Int? {
        guard entry.vary?.matchesNothing != true, entry.variantID == (entry.vary?.id ?? "") else { return nil }
        let remaining = entry.freshnessLifetime - Freshness.currentAge(entry, now: now)
        guard remaining >= 1 else { return nil }
        return min(Int(remaining.rounded(.down)), maxSharedSeconds)
    }
}
