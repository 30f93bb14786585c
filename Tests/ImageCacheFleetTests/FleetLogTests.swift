// Logs in the tier (FleetLog.swift, FleetClient+Log.swift): the walks over segments as pure machines, then two hosts
// appending to and reading one log on real memcached servers: a log past the old single-value limit, reads that return
// only what is new, and segments that stay bounded.

import Foundation
import Testing
import ImageCacheTestSupport
@testable import ImageCacheFleet

@Suite(.timeLimit(.minutes(1)))
struct FleetLogWalkTests {
    let line = Array("1.000 http://o/a.jpg\n".utf8)

    func append(from segment: Int = 0, segmentBytes: Int = 100) -> FleetLogAppendWalk {
        FleetLogAppendWalk(name: "log", line: line, from: segment, segmentBytes: segmentBytes, nonce: 0xabc)
    }

    @Test func aFirstAppendLooksForSegmentsAndMakesTheFirstWithItsHeader() {
        var walk = append()
        #expect(walk.start() == .size("log.0"))
        #expect(walk.answered(.missing) == .size("log.1"))
        #expect(walk.answered(.missing) == .add("log.0", bytes: Array("#ic1-log abc\n".utf8) + line))
        #expect(walk.answered(.stored) == .done(stored: true, reason: nil))
        #expect(walk.segment == 0)
    }

    @Test func aLineGoesToTheFirstSegmentWithRoomAndANewOneIsMadeAfterTheLast() {
        var walk = append(segmentBytes: 100)
        #expect(walk.start() == .size("log.0"))
        // Segment 0 has room for the line (its 21 bytes fit in 100 with 79 there): appended.
        #expect(walk.answered(.size(79)) == .append("log.0"))
        #expect(walk.answered(.stored) == .done(stored: true, reason: nil))

        var full = append(segmentBytes: 100)
        _ = full.start()
        #expect(full.answered(.size(80)) == .size("log.1"))  // 80 + 21 > 100
        #expect(full.answered(.missing) == .size("log.2"))
        #expect(full.answered(.missing) == .add("log.1", bytes: Array("#ic1-log abc\n".utf8) + line))
        #expect(full.answered(.stored) == .done(stored: true, reason: nil))
        #expect(full.segment == 1)
    }

    @Test func aSegmentGoneUnderAHostIsSkippedWhenALaterOneExists() {
        // The host's cursor says 2; segment 2 expired or was evicted, 3 exists: the line goes on from 3, never into a
        // segment that readers have passed.
        var walk = append(from: 2)
        #expect(walk.start() == .size("log.2"))
        #expect(walk.answered(.missing) == .size("log.3"))
        #expect(walk.answered(.size(40)) == .size("log.3"))
        #expect(walk.answered(.size(40)) == .append("log.3"))
    }

    @Test func anAddThatLosesTheRaceAppendsToWhatTheOtherHostMade() {
        var walk = append()
        _ = walk.start()
        _ = walk.answered(.missing)
        _ = walk.answered(.missing)  // add log.0
        #expect(walk.answered(.notStored) == .size("log.0"))
        #expect(walk.answered(.size(30)) == .append("log.0"))
        #expect(walk.answered(.stored) == .done(stored: true, reason: nil))
    }

    @Test func aServerThatRefusesEveryStoreEndsTheWalkUnstored() {
        var walk = append()
        var action = walk.start()
        var requests = 0
        loop: while requests < 50 {
            requests += 1
            switch action {
            case .done: break loop
            case .size: action = walk.answered(.size(10))
            default: action = walk.answered(.notStored)
            }
        }
        #expect(requests < 50)
        #expect(action == .done(stored: false, reason: "the server did not store the line"))
    }

    @Test func theLastSegmentFullIsALogFullAndNothingIsStored() {
        var walk = append(from: FleetLogLimits.maxSegments - 1)
        #expect(walk.start() == .size("log.\(FleetLogLimits.maxSegments - 1)"))
        #expect(walk.answered(.size(100)) == .done(stored: false, reason: "the log is full (\(FleetLogLimits.maxSegments) segments)"))
    }

    @Test func aCursorPastTheEndStartsAtTheLastSegment() {
        var walk = append(from: FleetLogLimits.maxSegments + 10)
        #expect(walk.start() == .size("log.\(FleetLogLimits.maxSegments - 1)"))
    }

    @Test func anOtherAnswerEndsTheWalk() {
        var walk = append()
        _ = walk.start()
        #expect(walk.answered(.other("SERVER_ERROR out of memory")) == .done(stored: false, reason: "SERVER_ERROR out of memory"))
    }

    @Test func segmentBytesAreAQuarterOfASmallItemSizeMax() {
        #expect(FleetLogLimits.segmentBytes(itemSizeMax: nil) == 64 << 10)
        #expect(FleetLogLimits.segmentBytes(itemSizeMax: 1 << 20) == 64 << 10)
        #expect(FleetLogLimits.segmentBytes(itemSizeMax: 128 << 10) == 32 << 10)
        #expect(FleetLogLimits.segmentBytes(itemSizeMax: 1024) == 1024)
    }

    // MARK: reads

    func segment(_ nonce: String, _ lines: String) -> [UInt8] { Array("#ic1-log \(nonce)\n\(lines)".utf8) }

    @Test func aFirstReadReturnsEveryLineAndTheNextOnlyWhatWasAppended() {
        var walk = FleetLogReadWalk(name: "log", cursor: FleetLogCursor())
        let first = segment("a1", "1 x\n2 y\n")
        #expect(walk.start() == .size("log.0"))
        #expect(walk.answered(.size(first.count)) == .read("log.0", bytes: first.count))
        #expect(walk.answered(.value(first)) == .size("log.1"))
        guard case let .done(cursor) = walk.answered(.missing) else { Issue.record("not done"); return }
        #expect(String(decoding: walk.appended, as: UTF8.self) == "1 x\n2 y\n")
        #expect(cursor.offset == first.count && cursor.nonce == "a1" && cursor.segment == 0)

        // Nothing new: the size alone is asked, and the next segment's existence.
        var idle = FleetLogReadWalk(name: "log", cursor: cursor)
        _ = idle.start()
        #expect(idle.answered(.size(first.count)) == .size("log.1"))
        #expect(idle.answered(.missing) == .done(cursor))
        #expect(idle.appended.isEmpty)

        // A line appended: only it comes back.
        let grown = first + Array("3 z\n".utf8)
        var next = FleetLogReadWalk(name: "log", cursor: cursor)
        _ = next.start()
        #expect(next.answered(.size(grown.count)) == .read("log.0", bytes: grown.count))
        _ = next.answered(.value(grown))
        _ = next.answered(.missing)
        #expect(String(decoding: next.appended, as: UTF8.self) == "3 z\n")
    }

    @Test func aReadGoesOnIntoTheNextSegmentsFromTheirStart() {
        var cursor = FleetLogCursor()
        cursor.segment = 0
        cursor.offset = segment("a1", "1 x\n").count
        cursor.nonce = "a1"
        cursor.appendSegment = 4
        var walk = FleetLogReadWalk(name: "log", cursor: cursor)
        let zero = segment("a1", "1 x\n2 y\n"), one = segment("b2", "3 z\n")
        _ = walk.start()
        #expect(walk.answered(.size(zero.count)) == .read("log.0", bytes: zero.count))
        #expect(walk.answered(.value(zero)) == .size("log.1"))
        #expect(walk.answered(.size(one.count)) == .read("log.1", bytes: one.count))
        #expect(walk.answered(.value(one)) == .size("log.2"))
        guard case let .done(end) = walk.answered(.missing) else { Issue.record("not done"); return }
        #expect(String(decoding: walk.appended, as: UTF8.self) == "2 y\n3 z\n")
        #expect(end.segment == 1 && end.nonce == "b2" && end.offset == one.count && end.appendSegment == 4)
    }

    @Test func aSegmentMadeAnewIsReadWhole() {
        var cursor = FleetLogCursor()
        cursor.offset = segment("a1", "1 x\n2 y\n").count
        cursor.nonce = "a1"
        // Evicted and made again by another host: a new nonce, and a size that happens to be larger.
        let again = segment("c3", "9 new\n10 newer\n")
        var walk = FleetLogReadWalk(name: "log", cursor: cursor)
        _ = walk.start()
        _ = walk.answered(.size(again.count))
        _ = walk.answered(.value(again))
        _ = walk.answered(.missing)
        #expect(String(decoding: walk.appended, as: UTF8.self) == "9 new\n10 newer\n")
    }

    @Test func aValueWithoutTheHeaderIsNotALogAndGivesNothing() {
        var walk = FleetLogReadWalk(name: "log", cursor: FleetLogCursor())
        _ = walk.start()
        _ = walk.answered(.size(12))
        _ = walk.answered(.value(Array("1.0 http://x".utf8)))
        _ = walk.answered(.missing)
        #expect(walk.appended.isEmpty)
    }

    @Test func aLogThatIsNotThereIsMissing() {
        var walk = FleetLogReadWalk(name: "log", cursor: FleetLogCursor())
        _ = walk.start()
        #expect(walk.answered(.missing) == .size("log.1"))
        #expect(walk.answered(.missing) == .done(FleetLogCursor()))
        #expect(walk.missing && walk.appended.isEmpty)
    }

    @Test func aLogTheServerLostIsMadeAgainFromSegmentZeroAndReadFromThere() {
        // An appender whose latest segment was 3: 3 and 4 are gone (a restart), so the log starts again at 0, where
        // every reader looks first
        var walk = append(from: 3)
        #expect(walk.start() == .size("log.3"))
        #expect(walk.answered(.missing) == .size("log.4"))
        #expect(walk.answered(.missing) == .size("log.0"))
        #expect(walk.answered(.missing) == .size("log.1"))
        #expect(walk.answered(.missing) == .add("log.0", bytes: Array("#ic1-log abc\n".utf8) + line))
        // A reader whose cursor was on 3 reads the new log from 0
        var cursor = FleetLogCursor()
        cursor.segment = 3
        cursor.offset = 500
        cursor.nonce = "a1"
        var read = FleetLogReadWalk(name: "log", cursor: cursor)
        let zero = segment("d4", "7 new\n")
        #expect(read.start() == .size("log.3"))
        #expect(read.answered(.missing) == .size("log.4"))
        #expect(read.answered(.missing) == .size("log.0"))
        #expect(read.answered(.size(zero.count)) == .read("log.0", bytes: zero.count))
        #expect(read.answered(.value(zero)) == .size("log.1"))
        guard case let .done(end) = read.answered(.missing) else { Issue.record("not done"); return }
        #expect(String(decoding: read.appended, as: UTF8.self) == "7 new\n")
        #expect(end.segment == 0 && end.nonce == "d4")
        // A reader whose segment is there and unchanged, with no next one, just ends (no walk back)
        var idle = FleetLogReadWalk(name: "log", cursor: end)
        _ = idle.start()
        #expect(idle.answered(.size(zero.count)) == .size("log.1"))
        #expect(idle.answered(.missing) == .done(end))
    }

    @Test func aReadStopsAfterAboutAMegabyteAndTheNextGoesOnFromThere() {
        var walk = FleetLogReadWalk(name: "log", cursor: FleetLogCursor())
        let big = segment("e5", String(repeating: "1 x\n", count: FleetLogLimits.readBytesPerWalk / 4 + 1))
        _ = walk.start()
        _ = walk.answered(.size(big.count))
        #expect(walk.answered(.value(big)) == .size("log.1"))
        // Segment 1 exists, but this read has its megabyte: it ends at the end of segment 0
        guard case let .done(cursor) = walk.answered(.size(100)) else { Issue.record("not done"); return }
        #expect(walk.stoppedEarly)
        #expect(cursor.segment == 0 && cursor.offset == big.count)
        var next = FleetLogReadWalk(name: "log", cursor: cursor)
        _ = next.start()
        #expect(next.answered(.size(big.count)) == .size("log.1"))
        #expect(next.answered(.size(100)) == .read("log.1", bytes: 100))
    }

    @Test func aFailedReadKeepsWhatItRead() {
        var walk = FleetLogReadWalk(name: "log", cursor: FleetLogCursor())
        let zero = segment("a1", "1 x\n")
        _ = walk.start()
        _ = walk.answered(.size(zero.count))
        _ = walk.answered(.value(zero))
        guard case let .done(cursor) = walk.answered(.other("connection reset")) else { Issue.record("not done"); return }
        #expect(String(decoding: walk.appended, as: UTF8.self) == "1 x\n")
        #expect(cursor.offset == zero.count)
    }

    @Test func headersAreParsedStrictly() {
        #expect(FleetLogLimits.parseHeader(Array("#ic1-log ff\nrest".utf8))! == (nonce: "ff", length: 12))
        #expect(FleetLogLimits.parseHeader(Array("#ic1-log \nrest".utf8)) == nil)
        #expect(FleetLogLimits.parseHeader(Array("#ic1-log ff".utf8)) == nil)
        #expect(FleetLogLimits.parseHeader(Array("#ic2-log ff\n".utf8)) == nil)
    }
}

@Suite(.serialized, .timeLimit(.minutes(2)))
struct FleetLogTests {
    func append(_ host: TierUnderTest, _ name: String, _ line: String) async -> (Int, Int) {
        await handOver { handed in
            host.tier.appendToLog(name, line: Array(line.utf8), createTTLSeconds: 600) { handed(($0, $1)) }
        }
    }

    func read(_ host: TierUnderTest, _ name: String) async -> [FleetLogRead] {
        await handOver { host.tier.readLog(name, completion: $0) }
    }

    func lines(_ read: FleetLogRead) -> [String] {
        String(decoding: read.appended, as: UTF8.self).split(separator: "\n").map(String.init)
    }

    @Test func aLogLargerThanOneValueIsKeptInBoundedSegmentsAndReadOnceByEachHost() async throws {
        // Given two servers with memcached's default item size (1 MiB) and two hosts
        let servers = [try MemcachedProcess(itemSizeMax: "1m"), try MemcachedProcess(itemSizeMax: "1m")]
        let a = TierUnderTest(servers), b = TierUnderTest(servers)
        // When A appends 1,200 lines of 1 KiB (1.2 MB, past what one value could hold), 8 at a time
        let filler = String(repeating: "x", count: 1000)
        var next = 0
        while next < 1200 {
            let batch = (next..<next + 8).map { "\($0) http://origin.test/\(filler)\n" }
            let results = await withTaskGroup(of: (Int, Int).self) { group in
                for line in batch { group.addTask { await self.append(a, "ic1:log:t", line) } }
                return await group.reduce(into: []) { $0.append($1) }
            }
            for result in results { #expect(result == (2, 2), "line \(next): \(result)") }
            next += 8
        }
        // Then B's first read returns about a megabyte from each server (FleetLogLimits.readBytesPerWalk), the second
        // the rest: every line once, in each server's order
        let first = await read(b, "ic1:log:t")
        let second = await read(b, "ic1:log:t")
        #expect(first.count == 2 && second.count == 2)
        for (one, two) in zip(first, second) {
            #expect(one.failure == nil && two.failure == nil, "\(one.failure ?? "") \(two.failure ?? "")")
            #expect(one.appended.count >= FleetLogLimits.readBytesPerWalk && one.appended.count < 1200 * 1000)
            #expect(!one.complete && two.complete)
            let got = lines(one) + lines(two)
            #expect(got.count == 1200)
            #expect(got.map { Int($0.split(separator: " ")[0]) ?? -1 }.sorted() == Array(0..<1200))
        }
        // And each segment holds at most 64 KiB plus the lines of one batch that raced past the size check
        for server in servers {
            var segment = 0, total = 0
            while let value = try? server.value("ic1:log:t.\(segment)"), !value.isEmpty {
                #expect(value.count <= (64 << 10) + 8 * 1100, "segment \(segment): \(value.count) bytes")
                total += value.count
                segment += 1
            }
            #expect(segment >= 19, "\(segment) segments")
            #expect(total >= 1200 * 1000)
        }
        // When nothing was appended, B's next read returns nothing; after one more line, exactly that line
        for server in await read(b, "ic1:log:t") { #expect(server.appended.isEmpty && server.failure == nil) }
        #expect(await append(b, "ic1:log:t", "last http://origin.test/z\n") == (2, 2))
        let after = await read(b, "ic1:log:t")
        for server in after { #expect(lines(server) == ["last http://origin.test/z"]) }
        // And A, which never read, gets all 1,201 lines from each server, in two reads
        let all = zip(await read(a, "ic1:log:t"), await read(a, "ic1:log:t")).map { lines($0) + lines($1) }
        for server in all { #expect(server.count == 1201) }
    }

    @Test func aServerDownMissesTheLineAndTheOthersStillHaveIt() async throws {
        // Given two servers, one stopped for good
        let servers = [try MemcachedProcess(itemSizeMax: "1m"), try MemcachedProcess(itemSizeMax: "1m")]
        let a = TierUnderTest(servers) { $0.deadlineSeconds = 0.5 }
        servers[1].kill9()
        // When a line is appended, then read
        #expect(await append(a, "ic1:log:d", "1 http://origin.test/a\n") == (1, 2))
        let reads = await read(a, "ic1:log:d")
        // Then the live server returns it and the dead one says why it could not be read
        #expect(lines(reads[0]) == ["1 http://origin.test/a"])
        #expect(reads[1].failure != nil)
    }
}
