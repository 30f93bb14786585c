// A response body that is a region of an open file, sent with sendfile(2): the bytes go from the page cache to the
// socket without a copy into this process (as nginx sends its cache files). The disk tier hands one out only after
// verifying the region's checksum on the same descriptor; stored files are never written in place (a new version is
// a new inode, renamed over the name), so what is sent is what was verified.
//
// Ownership: a FileBody owns its descriptor and closes it when the last reference goes (deinit); a slice (a Range
// request's part) holds the FileBody it was cut from, so the descriptor outlives both. It is immutable; the write
// queue that sends it keeps its own count of bytes sent.

#if canImport(Glibc)
internal import Glibc
#endif

/// `length` bytes at `offset` of the open file `descriptor`, which this object owns.
public final class FileBody: Sendable {
    package let descriptor: Int32
    package let offset: Int
    public let length: Int
    /// The region this one was cut from (its descriptor's owner); nil: this one owns the descriptor.
    private let whole: FileBody?

    /// Takes ownership of `descriptor`.
    package init(descriptor: Int32, offset: Int, length: Int) {
        self.descriptor = descriptor
        self.offset = offset
        self.length = length
        whole = nil
    }

    /// A region of `owner`'s file at the file offset `fileOffset`.
    private init(within owner: FileBody, fileOffset: Int, length: Int) {
        descriptor = owner.descriptor
        offset = fileOffset
        self.length = length
        whole = owner
    }

    /// `length` bytes from `offset` within this region (the caller keeps them inside it), sharing its descriptor.
    package func slice(offset: Int, length: Int) -> FileBody {
        precondition(offset >= 0 && length >= 0 && offset + length <= self.length, "a slice must lie within its region")
        return FileBody(within: whole ?? self, fileOffset: self.offset + offset, length: length)
    }

    deinit { if whole == nil { closeDescriptor(descriptor) } }

    /// The whole region read into memory (for sinks that cannot send a file); nil if the file is shorter or
    /// unreadable.
    public func readAll() -> [UInt8]? {
        guard let bytes = try? FileRead.read(descriptor, count: length, offset: offset), bytes.count == length else { return nil }
        return bytes
    }
}

extension FileBody: Equatable {
    /// The same region object (identity: two objects own two descriptors).
    public static func == (lhs: FileBody, rhs: FileBody) -> Bool { lhs === rhs }
}
