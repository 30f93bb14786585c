// Data model: one disk entry is one stored variant of a URL, one file: `<dir>/<h[0..1]>/<h[2..3]>/<h>` for the variant
// without Vary, `<dir>/<h[0..1]>/<h[2..3]>/<h>-<v>` for one with Vary; h = lower-case hex SHA-256 of the key's URL
// string (the primary name), v = the first 16 hex digits of SHA-256 of the variant id (Vary.swift). Every variant of a
// URL sits in its URL's shard directory under a name starting with h, so a purge or a lookup before the index is
// loaded finds them all by listing one small directory. The file is a versioned header followed by the body bytes
// (cf. nginx's ngx_http_file_cache_header_t). Pure encoding and decoding, no I/O and no state: whoever holds the bytes
// owns them (the disk queue, in practice).
//
// A rendition of a URL (CacheKey.rendition: a transformed image) is `<h>~<r>`, r the first 16 hex digits of SHA-256
// of the rendition's text: in the source's directory, under a name starting with h, so a purge of the URL finds it by
// the same listing; it is a primary of its own (its lookups, writes and variants never mix with the URL's). Its key
// field holds the URL, a space and the rendition's text.
//
// Layout, version 4 (integers little-endian; a "string" is a u32 byte count and that many UTF-8 bytes):
//
//   offset 0   magic "ICD1"                      4 bytes
//          4   format version                    u16 (4)
//          6   reserved                          u16 (0)
//          8   header length L                   u32: bytes from offset 12 to the end of the header checksum
//         12   key                               string (the normalised URL)
//              variant                           string (the variant id: "" without Vary, else the request field
//                                                values the Vary names, see Vary.swift; the loader reads it with the
//                                                key, and the file name must be the one it gives)
//              status                            u16
//              reason                            string
//              header field count                u32, then per field: name string, value string
//              request time                      u64: bit pattern of the Double timeIntervalSinceReferenceDate
//              response time                     u64: the same
//              body length                       u64
//              body checksum                     u64: XXH3-64 (seed 0) of the body
//   12+L-8     header checksum                   u64: XXH3-64 (seed 0) of bytes [0, 12+L-8)
//   12+L       body                              body length bytes; the file ends there (size = 12 + L + body length)
//
// A 304 changes only the header: the new header is written to a new file, the body bytes are copied after it, and the
// file is renamed over the old one (the body checksum travels unchanged with the body). A reader never sees a mix.
// Any version other than `version` is refused: an old file is a miss and is removed, never migrated (version 2 held
// one response per URL with its Vary key after the times; version 3 named the variant after the key and used XXH64;
// version 4 has the same layout with XXH3 checksums).
//
// Checksums: XXH3-64 from Debian's libxxhash (xxHash 0.8; XXH3.swift is its shim): it catches flipped, zeroed,
// shifted and truncated bytes (what a disk, a crash or a stray write does) at 12-19 GB/s here (the library's XXH64,
// the checksum of the LZ4 and zstd frames that version 3 used from a hand-written Swift copy: 10 GB/s), so every disk
// hit verifies its whole body for a few microseconds. Version 1 used SHA-256 (~1.5 GB/s here: a fifth of a disk
// hit's CPU time). It is not a
// defence against someone who can write the cache directory: they could as well write a matching checksum. File
// names stay SHA-256 of the key, so no URL can be chosen to collide with another's file.

internal import ImageCacheHTTP
internal import Crypto
internal import Foundation

enum DiskEntryFormat {
    static let magic: [UInt8] = Array("ICD1".utf8)
    static let version: UInt16 = 4
    /// Bytes before the header fields: magic, version, reserved, header length.
    static let prefixLength = 12
    /// Bytes of each checksum (an XXH3-64, little-endian).
    static let checksumLength = 8
    /// Largest header accepted when reading; anything larger is taken as corruption.
    static let maxHeaderLength = 1 << 20

    /// Why a file is not a usable entry; `description` goes to the log with the path.
    struct Failure: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }

    /// The decoded header of a stored entry.
    struct Header: Sendable {
        var key: String
        /// The variant id ("" without Vary).
        var variant: String
        var head: HTTPResponseHead
        var requestTime: Date
        var responseTime: Date
        var vary: VaryKey? { VaryKey(id: variant) }
        var bodyLength: Int
        var bodyChecksum: UInt64
        /// Offset of the first body byte in the file (12 + header length).
        var bodyOffset: Int
        /// The size the file must have.
        var fileSize: Int { bodyOffset + bodyLength }
    }

    // MARK: - Checksums and names

    static func checksum(_ bytes: [UInt8]) -> UInt64 { XXH3.hash(bytes) }

    static func checksum(_ bytes: ArraySlice<UInt8>) -> UInt64 { XXH3.hash(bytes) }

    static func checksum(_ buffer: UnsafeRawBufferPointer) -> UInt64 { XXH3.hash(buffer) }

    /// Lower-case hex SHA-256 of the key's URL string: the file name; for a rendition's key ("URL TEXT"), the URL's
    /// name, "~" and 16 hex digits of the text's SHA-256.
    static func fileName(forKey key: String) -> String {
        if let space = key.firstIndex(of: " ") {
            return fileName(forKey: String(key[..<space])) + "~" + variantSuffix(String(key[key.index(after: space)...]))
        }
        var hasher = SHA256()
        var key = key
        key.withUTF8 { hasher.update(bufferPointer: UnsafeRawBufferPointer($0)) }
        return hex(hasher.finalize())
    }

    /// `fileName(forKey: key.description)`, without building the URL string: the hash is fed the string's parts
    /// (once per memory miss, on the connection's loop thread).
    static func fileName(for key: CacheKey) -> String {
        if key.isRendition { return fileName(for: key.source) + "~" + variantSuffix(key.rendition) }
        var hasher = SHA256()
        key.url.forEachPart { part in
            var part = part
            part.withUTF8 { hasher.update(bufferPointer: UnsafeRawBufferPointer($0)) }
        }
        return hex(hasher.finalize())
    }

    private static func hex(_ digest: SHA256.Digest) -> String {
        String(unsafeUninitializedCapacity: 2 * SHA256.Digest.byteCount) { out in
            var i = 0
            func digit(_ nibble: UInt8) -> UInt8 { nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") + nibble - 10 }
            for byte in digest {
                out[i] = digit(byte >> 4)
                out[i + 1] = digit(byte & 0xF)
                i += 2
            }
            return i
        }
    }

    /// The file name of `key`'s variant `variant` ("" without Vary): the primary name, or it, "-" and 16 hex digits
    /// of the variant id's SHA-256.
    static func fileName(for key: CacheKey, variant: String) -> String {
        variant.isEmpty ? fileName(for: key) : fileName(for: key) + "-" + variantSuffix(variant)
    }

    /// `fileName(for:variant:)` from the key's URL string (the loader checks names with it).
    static func fileName(forKey key: String, variant: String) -> String {
        variant.isEmpty ? fileName(forKey: key) : fileName(forKey: key) + "-" + variantSuffix(variant)
    }

    private static func variantSuffix(_ variant: String) -> String {
        String(hex(SHA256.hash(data: Array(variant.utf8))).prefix(16))
    }

    /// The primary name of an entry file name: the URL's for a variant, its own for a rendition.
    static func primaryName(of name: String) -> String { isRenditionName(name) ? name : String(name.prefix(64)) }

    /// Whether `name` looks like an entry file name: 64 lower-case hex digits, optionally "-" (a variant) or "~" (a
    /// rendition) and 16 more.
    static func isEntryName(_ name: String) -> Bool {
        let utf8 = name.utf8
        func isHex(_ b: UInt8) -> Bool { (b >= 0x30 && b <= 0x39) || (b >= 0x61 && b <= 0x66) }
        switch utf8.count {
        case 64: return utf8.allSatisfy(isHex)
        case 81:
            let mark = utf8.dropFirst(64).first
            return utf8.prefix(64).allSatisfy(isHex) && (mark == 0x2D || mark == 0x7E) && utf8.suffix(16).allSatisfy(isHex)
        default: return false
        }
    }

    /// A Vary variant's name (primary, "-", 16 hex digits).
    static func isVariantName(_ name: String) -> Bool { name.utf8.count == 81 && name.utf8.dropFirst(64).first == 0x2D }
    /// A rendition's name (source primary, "~", 16 hex digits).
    static func isRenditionName(_ name: String) -> Bool { name.utf8.count == 81 && name.utf8.dropFirst(64).first == 0x7E }

    /// Whether `file` is `primary` or one of its variants' names.
    static func isVariant(_ file: String, of primary: String) -> Bool {
        file == primary || (isVariantName(file) && file.hasPrefix(primary))
    }

    /// Whether `file` is `primary`, one of its variants or one of its renditions (everything a purge of the URL removes).
    static func isVariantOrRendition(_ file: String, of primary: String) -> Bool {
        file == primary || (file.utf8.count == 81 && file.hasPrefix(primary) && (isVariantName(file) || isRenditionName(file)))
    }

    // MARK: - Encoding

    /// The header bytes (prefix through header checksum) for `entry` with a body of `bodyLength` bytes whose
    /// `checksum` is `bodyChecksum`. The body is not included.
    static func encodeHeader(key: String, variant: String, head: HTTPResponseHead, requestTime: Date, responseTime: Date,
                             bodyLength: Int, bodyChecksum: UInt64) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256 + key.utf8.count + head.headers.count * 48)
        out.append(contentsOf: magic)
        appendInteger(version, to: &out)
        appendInteger(UInt16(0), to: &out)
        appendInteger(UInt32(0), to: &out)  // header length, patched below
        appendString(key, to: &out)
        appendString(variant, to: &out)
        appendInteger(UInt16(truncatingIfNeeded: head.status), to: &out)
        appendString(head.reason, to: &out)
        appendInteger(UInt32(head.headers.count), to: &out)
        for field in head.headers {
            appendString(field.name, to: &out)
            appendString(field.value, to: &out)
        }
        appendInteger(requestTime.timeIntervalSinceReferenceDate.bitPattern, to: &out)
        appendInteger(responseTime.timeIntervalSinceReferenceDate.bitPattern, to: &out)
        appendInteger(UInt64(bodyLength), to: &out)
        appendInteger(bodyChecksum, to: &out)
        let headerLength = UInt32(out.count + checksumLength - prefixLength)
        withUnsafeBytes(of: headerLength.littleEndian) { raw in
            for (n, byte) in raw.enumerated() { out[8 + n] = byte }
        }
        appendInteger(checksum(out), to: &out)
        return out
    }

    private static func appendInteger<T: FixedWidthInteger>(_ value: T, to out: inout [UInt8]) {
        withUnsafeBytes(of: value.littleEndian) { out.append(contentsOf: $0) }
    }

    private static func appendString(_ string: String, to out: inout [UInt8]) {
        appendInteger(UInt32(string.utf8.count), to: &out)
        out.append(contentsOf: string.utf8)
    }

    // MARK: - Decoding

    /// Checks the prefix (first `prefixLength` bytes) and returns the header length L.
    static func decodePrefix(_ bytes: ArraySlice<UInt8>) throws(Failure) -> Int {
        guard bytes.count >= prefixLength else { throw Failure("shorter than the \(prefixLength)-byte prefix") }
        let start = bytes.startIndex
        guard bytes[start..<(start + 4)].elementsEqual(magic) else { throw Failure("not an imagecached entry (bad magic)") }
        let version = UInt16(bytes[start + 4]) | UInt16(bytes[start + 5]) << 8
        guard version == DiskEntryFormat.version else {
            throw Failure("unsupported format version \(version) (this build reads \(DiskEntryFormat.version))")
        }
        var length = 0
        for n in 0..<4 { length |= Int(bytes[start + 8 + n]) << (8 * n) }
        guard length >= checksumLength * 2, length <= maxHeaderLength else { throw Failure("implausible header length \(length)") }
        return length
    }

    /// Decodes and verifies a whole header: `bytes` holds at least the first 12 + L bytes of the file.
    static func decodeHeader(_ bytes: ArraySlice<UInt8>) throws(Failure) -> Header {
        let headerLength = try decodePrefix(bytes)
        let end = bytes.startIndex + prefixLength + headerLength
        guard bytes.endIndex >= end else { throw Failure("truncated header") }
        let checksumStart = end - checksumLength
        guard checksum(bytes[bytes.startIndex..<checksumStart]) == littleEndian(bytes[checksumStart..<end]) else {
            throw Failure("header checksum mismatch")
        }
        var reader = Reader(bytes: bytes[(bytes.startIndex + prefixLength)..<checksumStart])
        let key = try reader.string()
        let variant = try reader.string()
        let status = Int(try reader.integer(UInt16.self))
        let reason = try reader.string()
        let fieldCount = Int(try reader.integer(UInt32.self))
        var headers = HTTPHeaders()
        for _ in 0..<fieldCount {
            let name = try reader.string()
            headers.add(name, try reader.string())
        }
        let requestTime = Date(timeIntervalSinceReferenceDate: Double(bitPattern: try reader.integer(UInt64.self)))
        let responseTime = Date(timeIntervalSinceReferenceDate: Double(bitPattern: try reader.integer(UInt64.self)))
        let bodyLength = try reader.integer(UInt64.self)
        guard bodyLength <= UInt64(Int.max / 2) else { throw Failure("implausible body length \(bodyLength)") }
        let bodyChecksum = try reader.integer(UInt64.self)
        guard reader.isAtEnd else { throw Failure("unexpected bytes after the header fields") }
        return Header(key: key, variant: variant, head: HTTPResponseHead(status: status, reason: reason, headers: headers),
                      requestTime: requestTime, responseTime: responseTime, bodyLength: Int(bodyLength),
                      bodyChecksum: bodyChecksum, bodyOffset: prefixLength + headerLength)
    }

    /// What the startup loader needs from a header, verified by the header checksum but not otherwise parsed:
    /// the key and variant (first fields) and the body length (fixed place before the two checksums).
    static func decodeIndexFields(_ bytes: ArraySlice<UInt8>) throws(Failure)
        -> (key: String, variant: String, bodyOffset: Int, bodyLength: Int)
    {
        let headerLength = try decodePrefix(bytes)
        let start = bytes.startIndex
        let end = start + prefixLength + headerLength
        guard bytes.endIndex >= end else { throw Failure("truncated header") }
        let checksumStart = end - checksumLength
        guard checksum(bytes[start..<checksumStart]) == littleEndian(bytes[checksumStart..<end]) else {
            throw Failure("header checksum mismatch")
        }
        var reader = Reader(bytes: bytes[(start + prefixLength)..<checksumStart])
        let key = try reader.string()
        let variant = try reader.string()
        var lengthReader = Reader(bytes: bytes[(checksumStart - checksumLength - 8)..<(checksumStart - checksumLength)])
        let bodyLength = try lengthReader.integer(UInt64.self)
        guard bodyLength <= UInt64(Int.max / 2) else { throw Failure("implausible body length \(bodyLength)") }
        return (key, variant, prefixLength + headerLength, Int(bodyLength))
    }

    /// The 8 bytes of a stored checksum as an integer.
    private static func littleEndian(_ bytes: ArraySlice<UInt8>) -> UInt64 {
        bytes.reversed().reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
    }

    /// Bounds-checked little-endian reader over the header fields.
    private struct Reader {
        var bytes: ArraySlice<UInt8>
        var index: Int
        init(bytes: ArraySlice<UInt8>) {
            self.bytes = bytes
            self.index = bytes.startIndex
        }
        var isAtEnd: Bool { index == bytes.endIndex }

        mutating func bytes(_ count: Int) throws(Failure) -> ArraySlice<UInt8> {
            guard count >= 0, bytes.endIndex - index >= count else { throw Failure("header field runs past the header") }
            defer { index += count }
            return bytes[index..<(index + count)]
        }

        mutating func integer<T: FixedWidthInteger & UnsignedInteger>(_: T.Type) throws(Failure) -> T {
            var value: T = 0
            for (n, byte) in try bytes(MemoryLayout<T>.size).enumerated() { value |= T(byte) << (8 * n) }
            return value
        }

        mutating func string() throws(Failure) -> String {
            let count = Int(try integer(UInt32.self))
            let raw = try bytes(count)
            guard let string = String(validating: raw, as: UTF8.self) else { throw Failure("header string is not UTF-8") }
            return string
        }
    }
}
