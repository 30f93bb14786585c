// DaemonStatsTests: the /_imagecached/stats document as scripts and `imagecached stats` read it: its keys, and
// documents from daemons that sent fewer of them.

import Foundation
import Testing
@testable import ImageCacheStatus

@Suite("DaemonStats: the stats document's JSON", .timeLimit(.minutes(1)))
struct DaemonStatsTests {
    @Test("the tiers' and the pixel cache's own stats structs are the document's: the keys scripts read are kept")
    func tierKeys() throws {
        // Given stats whose tiers and pixel cache are the structs the caches fill
        var stats = DaemonStats()
        stats.memory = MemoryCacheStats(bytes: 10, entries: 1, limitBytes: 100, evictions: 2)
        var disk = DiskCacheStats(bytes: 20, entries: 3, limitBytes: 200, evicted: 4, expired: 5)
        disk.indexLoaded = true
        disk.bodiesVerified = 6
        stats.disk = disk
        var transforms = DaemonStats.Transforms()
        transforms.pixelCache = PixelCacheStats(bytes: 30, limitBytes: 300, entries: 7, hits: 8, misses: 9, evictions: 1)
        stats.transforms = transforms
        // When the document is written
        let object = try #require(try JSONSerialization.jsonObject(with: Data(stats.json())) as? [String: Any])
        // Then each part carries the keys it always had (the disk's evictions under that name), and reads back equal
        let memory = try #require(object["memory"] as? [String: Any])
        #expect(Set(memory.keys) == ["bytes", "entries", "limitBytes", "evictions"])
        let diskObject = try #require(object["disk"] as? [String: Any])
        #expect(diskObject["evictions"] as? Int == 4 && diskObject["evicted"] == nil && diskObject["expired"] as? Int == 5)
        #expect(Set(diskObject.keys).isSuperset(of: ["bytes", "entries", "limitBytes", "evictions", "expired", "writeErrors",
                                                     "removedCorrupt", "indexLoaded"]))
        let pixelCache = try #require((object["transforms"] as? [String: Any])?["pixelCache"] as? [String: Any])
        #expect(Set(pixelCache.keys) == ["bytes", "limitBytes", "entries", "hits", "misses", "evictions"])
        #expect(try DaemonStats.decode(Data(stats.json())) == stats)
    }

    @Test("a disk tier from a daemon that did not send the index's load time or the bodies verified still reads")
    func olderDiskTier() throws {
        // Given the disk part as daemons before them wrote it
        let json = #"{"bytes": 20, "entries": 3, "limitBytes": 200, "evictions": 4, "expired": 5, "writeErrors": 0, "removedCorrupt": 1, "indexLoaded": true}"#
        // When
        let disk = try JSONDecoder().decode(DiskCacheStats.self, from: Data(json.utf8))
        // Then
        #expect(disk.evicted == 4 && disk.removedCorrupt == 1 && disk.indexLoaded && disk.bodiesVerified == 0 && disk.indexLoadSeconds == nil)
    }

    @Test("the fleet part from a daemon that did not count catch-up refusals still reads, and every count reads back")
    func olderFleetPart() throws {
        // Given the fleet part as the daemons before the count wrote it
        let json = #"{"servers": [{"address": "10.0.0.5:11211", "state": "up", "operations": 9, "failures": 0, "timeouts": 0, "breakerOpens": 0, "bytesRead": 1, "bytesWritten": 2}], "hits": 3, "leaseWins": 4, "takeovers": 0, "waits": 1, "passMarkers": 0, "passMarkersSeen": 0, "stored": 4, "lostLeases": 0, "releases": 0, "unavailable": 2, "damaged": 0, "purgedRefused": 1, "leasesHeld": 0, "bytesRead": 500}"#
        // When
        let fleet = try JSONDecoder().decode(DaemonStats.Fleet.self, from: Data(json.utf8))
        // Then
        #expect(fleet.hits == 3 && fleet.leaseWins == 4 && fleet.unavailable == 2 && fleet.purgedRefused == 1 && fleet.bytesRead == 500)
        #expect(fleet.catchUpRefused == 0 && fleet.servers.first?.address == "10.0.0.5:11211")
        // And a whole fleet part reads back equal
        var full = fleet
        full.catchUpRefused = 7
        full.leasesHeld = 2
        var stats = DaemonStats()
        stats.fleet = full
        #expect(try DaemonStats.decode(Data(stats.json())) == stats)
    }
}
