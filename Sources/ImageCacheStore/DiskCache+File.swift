// File system calls of the disk tier, each through `syscall` (EINTR retried, errno -> SystemError). Stateless helpers;
// the caller owns the descriptors: the disk queue, a lookup, or a FileBody for the one descriptor it was handed.

internal import ImageCacheSystem
internal import Foundation
#if canImport(Glibc)
internal import Glibc
#endif

/// What `fstat` says about an open entry file.
struct FileStatus {
    var size: Int
    /// Seconds since 1970 (the entry's last use as recorded on disk).
    var mtime: Double
    var identity: FileIdentity
}

/// One version of one file: a rename puts another inode under the name, and any write, truncate or metadata change
/// moves ctime, which no caller can set back. A body verified at an identity is the same body at that identity.
struct FileIdentity: Hashable, Sendable {
    var device: UInt64
    var inode: UInt64
    var size: Int
    var changeSeconds: Int
    var changeNanoseconds: Int

    /// How old a ctime must be (wall clock) before a version may be trusted as verified. File systems without
    /// fine-grained change times stamp ctime from a coarse clock (a tick of a few ms), so a change within the same
    /// tick as the previous one can leave ctime as it was; a second later, any change gets a later ctime.
    static let settleSeconds = 1

    /// Whether this version's ctime is at least `settleSeconds` older than `now` (the wall clock; tests inject one).
    func isSettled(now: Date) -> Bool {
        let change = Double(changeSeconds) + Double(changeNanoseconds) / 1e9
        return now.timeIntervalSince1970 - change >= Double(Self.settleSeconds)
    }
}

package enum DiskFile {
    /// First read of a header; most headers fit, larger ones cost one more pread.
    static let headerReadSize = 4096
    /// Chunk used to hash or copy a body.
    static let chunkSize = 256 << 10

    /// open(2) with O_CLOEXEC.
    static func open(_ path: String, _ flags: Int32, mode: mode_t = 0) throws(SystemError) -> Int32 {
        try syscall("open") { Glibc.open(path, flags | O_CLOEXEC, mode) }
    }

    static func unlink(_ path: String) throws(SystemError) {
        try syscall("unlink") { Glibc.unlink(path) }
    }

    /// Up to `count` bytes from `offset`; fewer only at the end of the file.
    /// The array is filled by pread itself (no zeroing first: a body is read once per disk hit).
    static func read(_ fd: Int32, count: Int, offset: Int) throws(SystemError) -> [UInt8] {
        try FileRead.read(fd, count: count, offset: offset)
    }

    /// Fills `buffer` from `offset`; returns the bytes read (fewer only at the end of the file).
    static func read(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, offset: Int) throws(SystemError) -> Int {
        try FileRead.read(fd, into: buffer, offset: offset)
    }

    static func write(_ fd: Int32, _ bytes: [UInt8]) throws(SystemError) {
        try bytes.withUnsafeBytes { raw in Result { () throws(SystemError) in try write(fd, raw) } }.get()
    }

    static func write(_ fd: Int32, _ raw: UnsafeRawBufferPointer) throws(SystemError) {
        var done = 0
        while done < raw.count {
            done += try syscall("write") { Glibc.write(fd, raw.baseAddress! + done, raw.count - done) }
        }
    }

    /// Copies `count` bytes at `offset` of `source` to the current position of `destination`.
    static func copy(from source: Int32, offset: Int, count: Int, to destination: Int32) throws(SystemError) {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: min(max(count, 1), chunkSize), alignment: 16)
        defer { buffer.deallocate() }
        var done = 0
        while done < count {
            let chunk = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<min(buffer.count, count - done)])
            let got = try read(source, into: chunk, offset: offset + done)
            guard got == chunk.count else { throw SystemError(errno: EIO, function: "pread (stored body shorter than its header says)") }
            try write(destination, UnsafeRawBufferPointer(chunk))
            done += got
        }
    }

    /// Size, mtime (seconds since 1970) and identity of an open file.
    static func status(_ fd: Int32) throws(SystemError) -> FileStatus {
        var info = stat()
        try syscall("fstat") { fstat(fd, &info) }
        let identity = FileIdentity(device: UInt64(info.st_dev), inode: UInt64(info.st_ino), size: Int(info.st_size),
                                    changeSeconds: info.st_ctim.tv_sec, changeNanoseconds: info.st_ctim.tv_nsec)
        return FileStatus(size: Int(info.st_size), mtime: Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1e9,
                          identity: identity)
    }

    /// The inode of an open file (nil if fstat fails).
    static func inode(_ fd: Int32) -> UInt64? {
        var info = stat()
        return fstat(fd, &info) == 0 ? UInt64(info.st_ino) : nil
    }

    /// The inode `path` names now (nil if nothing is there or stat fails).
    static func inode(atPath path: String) -> UInt64? {
        var info = stat()
        return stat(path, &info) == 0 ? UInt64(info.st_ino) : nil
    }

    /// Sets access and modification time to `seconds` (the last use; atime is never read).
    static func setModificationTime(_ fd: Int32, _ seconds: Double) throws(SystemError) {
        let whole = seconds.rounded(.down)
        let time = timespec(tv_sec: Int(whole), tv_nsec: Int((seconds - whole) * 1e9))
        let times = [time, time]
        try syscall("futimens") { futimens(fd, times) }
    }

    /// Reads and verifies the header of an open entry file (not the body).
    /// Throws `DiskEntryFormat.Failure` for a bad file, `SystemError` for a failed call.
    static func readHeader(_ fd: Int32, status: FileStatus? = nil) throws -> (DiskEntryFormat.Header, FileStatus) {
        var buffer = [UInt8](unsafeUninitializedCapacity: headerReadSize) { _, initialized in initialized = headerReadSize }
        return try readHeader(fd, buffer: &buffer, status: status)
    }

    /// The file's status (`known`, else fstat), one pread of up to `headerReadSize` bytes into `buffer` (`got` of
    /// them), and where the header ends (`end`, from the verified prefix): the first step of every header read.
    private static func readPrefix(_ fd: Int32, buffer: inout [UInt8], status known: FileStatus? = nil) throws
        -> (FileStatus, got: Int, end: Int)
    {
        let status = try known ?? status(fd)
        let got = try buffer.withUnsafeMutableBytes { raw in
            Result { () throws(SystemError) in
                try read(fd, into: UnsafeMutableRawBufferPointer(rebasing: raw[0..<headerReadSize]), offset: 0)
            }
        }.get()
        let headerLength = try DiskEntryFormat.decodePrefix(buffer[0..<got])
        return (status, got, DiskEntryFormat.prefixLength + headerLength)
    }

    /// As `readHeader(_:)`, reusing `buffer` (at least `headerReadSize` bytes) for the first read.
    static func readHeader(_ fd: Int32, buffer: inout [UInt8], status known: FileStatus? = nil) throws
        -> (DiskEntryFormat.Header, FileStatus)
    {
        let (status, got, end) = try readPrefix(fd, buffer: &buffer, status: known)
        if end <= got { return (try DiskEntryFormat.decodeHeader(buffer[0..<end]), status) }
        guard end <= status.size else { throw DiskEntryFormat.Failure("truncated header") }
        let whole = try read(fd, count: end, offset: 0)
        return (try DiskEntryFormat.decodeHeader(whole[...]), status)
    }

    /// The loader's cheap read: size, mtime, and the checksum-verified key and body length from the first pread.
    static func readIndexFields(_ fd: Int32, buffer: inout [UInt8]) throws
        -> (key: String, variant: String, fileSize: Int, actualSize: Int, mtime: Double)
    {
        let (status, got, end) = try readPrefix(fd, buffer: &buffer)
        let (size, mtime) = (status.size, status.mtime)
        let fields: (key: String, variant: String, bodyOffset: Int, bodyLength: Int)
        if end <= got {
            fields = try DiskEntryFormat.decodeIndexFields(buffer[0..<end])
        } else {
            guard end <= size else { throw DiskEntryFormat.Failure("truncated header") }
            fields = try DiskEntryFormat.decodeIndexFields(try read(fd, count: end, offset: 0)[...])
        }
        return (fields.key, fields.variant, fields.bodyOffset + fields.bodyLength, size, mtime)
    }

    /// Bodies up to this size are read whole on a disk hit when memory would keep them (one pread, verified in
    /// memory); larger ones are verified through a buffer and sent from the file.
    package static let wholeReadLimit = 256 << 10

    /// Hashes the body and compares it with the header's checksum, without keeping it (the caller sends it from the
    /// file with sendfile): read through a buffer of up to 256 KiB, in chunks. A version is verified once (see
    /// FileIdentity), so the copy is paid once per file version; reading rather than mapping turns a device error or
    /// a file cut short by another process into an error return (a miss), where a mapping would raise SIGBUS.
    static func verifyBody(_ fd: Int32, header: DiskEntryFormat.Header) throws {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: max(1, min(chunkSize, header.bodyLength)), alignment: 16)
        defer { buffer.deallocate() }
        let hasher = XXH3.Hasher()
        var done = 0
        while done < header.bodyLength {
            let chunk = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<min(chunkSize, header.bodyLength - done)])
            let got = try read(fd, into: chunk, offset: header.bodyOffset + done)
            guard got == chunk.count else { throw DiskEntryFormat.Failure("body truncated") }
            hasher.update(UnsafeRawBufferPointer(chunk))
            done += got
        }
        guard hasher.finalize() == header.bodyChecksum else { throw DiskEntryFormat.Failure("body checksum mismatch") }
    }

    /// mkdir -p (mode 0755).
    static func makeDirectories(_ path: String) throws(SystemError) {
        var isDirectory = stat()
        if stat(path, &isDirectory) == 0, isDirectory.st_mode & S_IFMT == S_IFDIR { return }
        let parent = (path as NSString).deletingLastPathComponent
        if !parent.isEmpty, parent != path { try makeDirectories(parent) }
        do {
            try syscall("mkdir") { mkdir(path, 0o755) }
        } catch where error.errno == EEXIST {}
    }

    /// rmdir of each directory in turn while they are empty (rmdir(2) refuses a directory with anything in it, so
    /// nothing is listed); stops at the first that stays. That failure is the expected outcome and is not reported.
    static func removeIfEmpty(_ directories: String...) {
        for directory in directories where rmdir(directory) != 0 { return }
    }

    static func syncDirectory(_ path: String) throws(SystemError) {
        let fd = try open(path, O_RDONLY | O_DIRECTORY)
        defer { closeDescriptor(fd) }
        try syscall("fsync") { fsync(fd) }
    }

    /// The names in a directory (no "." or ".."); nil when it cannot be opened.
    static func list(_ path: String) -> [String]? {
        guard let directory = opendir(path) else { return nil }
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafePointer(to: &entry.pointee.d_name) { pointer in
                pointer.withMemoryRebound(to: CChar.self, capacity: MemoryLayout.size(ofValue: entry.pointee.d_name)) {
                    String(cString: $0)
                }
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }
}
