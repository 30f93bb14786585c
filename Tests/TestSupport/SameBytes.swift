// Byte comparisons for tests. `#expect(a == b)` on two byte arrays makes Swift Testing compute a Myers diff of them
// for its failure message: on two 300 KB bodies that differ in length that took a core for over ten minutes and
// stalled a whole run out of reach of its time limits. Compare bodies with `expectSameBytes`, which reports what a
// reader needs (both sizes, both SHA-256 digests and the first offset where they differ) in linear time.

public import Testing
internal import Crypto

/// Expects `actual` to hold exactly the bytes of `expected`; on a mismatch records one issue naming both sizes, both
/// SHA-256 digests and the first differing offset (with the byte on each side).
public func expectSameBytes(_ actual: some Collection<UInt8>, _ expected: some Collection<UInt8>,
                            _ comment: Comment? = nil, sourceLocation: SourceLocation = #_sourceLocation) {
    guard let difference = byteDifference(actual, expected) else { return }
    let text = comment.map { "\($0.rawValue): " } ?? ""
    Issue.record(Comment(rawValue: text + difference), sourceLocation: sourceLocation)
}

/// `expectSameBytes` for a precondition of the rest of the test: throws after recording the issue.
public func requireSameBytes(_ actual: some Collection<UInt8>, _ expected: some Collection<UInt8>,
                             _ comment: Comment? = nil, sourceLocation: SourceLocation = #_sourceLocation) throws {
    guard let difference = byteDifference(actual, expected) else { return }
    let text = comment.map { "\($0.rawValue): " } ?? ""
    Issue.record(Comment(rawValue: text + difference), sourceLocation: sourceLocation)
    throw BytesDiffer(description: difference)
}

/// Nil when the two hold the same bytes; otherwise one line: "bytes differ at offset 8192 (0x41 here, 0x00
/// expected); 300000 bytes (SHA-256 1a2b3c4d…) vs 299000 expected (SHA-256 5e6f7a8b…)".
public func byteDifference(_ actual: some Collection<UInt8>, _ expected: some Collection<UInt8>) -> String? {
    var offset = 0
    var a = actual.makeIterator(), b = expected.makeIterator()
    while true {
        let x = a.next(), y = b.next()
        if x == nil && y == nil { return nil }
        if x != y {
            let here = x.map { "0x" + hex($0) } ?? "end", there = y.map { "0x" + hex($0) } ?? "end"
            return "bytes differ at offset \(offset) (\(here) here, \(there) expected); \(actual.count) bytes "
                + "(SHA-256 \(digest(actual))) vs \(expected.count) expected (SHA-256 \(digest(expected)))"
        }
        offset += 1
    }
}

/// Thrown by `requireSameBytes`.
public struct BytesDiffer: Error, CustomStringConvertible {
    public let description: String
}

private func digest(_ bytes: some Collection<UInt8>) -> String {
    SHA256.hash(data: Array(bytes)).prefix(8).map(hex).joined() + "…"
}

private func hex(_ byte: UInt8) -> String {
    let digits = Array("0123456789abcdef")
    return String([digits[Int(byte >> 4)], digits[Int(byte & 0xf)]])
}
