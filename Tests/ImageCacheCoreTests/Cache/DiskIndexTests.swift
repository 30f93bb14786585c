import Foundation
@testable import ImageCacheSystem
@testable import ImageCacheStore
import Testing

/// The disk index's parts and rules as pure values: no files, no queues, no lock.
@Suite("DiskIndex", .timeLimit(.minutes(1)))
struct DiskIndexTests {
    static func identity(inode: UInt64 = 1, size: Int = 10, ctime: Int = 100, nanoseconds: Int = 0) -> FileIdentity {
        FileIdentity(device: 1, inode: inode, size: size, changeSeconds: ctime, changeNanoseconds: nanoseconds)
    }

    static let head = DiskIndex.Head(DiskCacheTests.entry("h", bytes: 0))

    static func version(_ identity: FileIdentity = identity(), head: DiskIndex.Head? = head, checkedAt: Double = 0)
        -> DiskIndex.VerifiedVersion
    {
        DiskIndex.VerifiedVersion(identity: identity, head: head, bodyOffset: 0, bodyLength: 10, file: nil, checkedAt: checkedAt)
    }

    // MARK: - What a lookup checks

    enum Expected { case trusted, header, headerAndBody }

    @Test("a lookup reads nothing of the version verified before while its head is kept, the header once the head was dropped, and checks everything of any other version",
          arguments: [
              (identity(), Optional(version()), Expected.trusted),
              (identity(), version(head: nil), .header),
              (identity(inode: 2), version(), .headerAndBody),
              (identity(size: 11), version(), .headerAndBody),
              (identity(nanoseconds: 1), version(), .headerAndBody),
              (identity(), nil, .headerAndBody),
          ])
    func lookupCheck(opened: FileIdentity, before: DiskIndex.VerifiedVersion?, expected: Expected) {
        // When a lookup opens `opened` and the record holds `before`
        let check = DiskIndex.VerifiedVersion.check(opened: opened, verifiedBefore: before)
        // Then it checks what the version verified before does not vouch for
        switch (check, expected) {
        case let (.trusted(version), .trusted): #expect(version.identity == opened && version.head === Self.head)
        case (.header, .header), (.headerAndBody, .headerAndBody): break
        default: Issue.record("\(check) instead of \(expected)")
        }
    }

    @Test("a verified version is kept for later lookups only once its ctime is a second old, stamped with the time it was checked")
    func settledVersion() {
        // Given a version whose ctime is 100 s
        let version = Self.version(Self.identity(ctime: 100))
        // When a lookup checked it half a second, then a second, after that ctime
        let early = version.settled(file: nil, checkedAt: Date(timeIntervalSince1970: 100.5))
        let settled = version.settled(file: nil, checkedAt: Date(timeIntervalSince1970: 101))
        // Then the early one is not kept, and the settled one is, checked at that time
        #expect(early == nil)
        #expect(settled?.checkedAt == 101 && settled?.identity == version.identity)
    }
}
