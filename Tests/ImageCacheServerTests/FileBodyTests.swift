import Foundation
import Glibc
@testable import ImageCacheSystem
@testable import ImageCacheHTTP
@testable import ImageCacheServer
@testable import ImageCacheStore
import Testing
import ImageCacheTestSupport

@Suite("File bodies (sendfile)", .timeLimit(.minutes(1)))
struct FileBodyTests {
    typealias Machine = Connection.StateMachine
    static let date = "Sun, 06 Nov 1994 08:49:37 GMT"

    /// A FileBody over bytes 10..<(10+length) of a new temporary file holding 0, 1, 2, ... (mod 256).
    static func fileBody(length: Int) throws -> FileBody {
        let path = NSTemporaryDirectory() + "/imagecached-filebody-\(UUID().uuidString)"
        try Data((0..<(length + 20)).map { UInt8(truncatingIfNeeded: $0) }).write(to: URL(fileURLWithPath: path))
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        unlink(path)  // the descriptor keeps the file
        #expect(fd >= 0)
        return FileBody(descriptor: fd, offset: 10, length: length)
    }

    static func prepared() -> SerializedResponseHead {
        SerializedResponseHead(HTTPResponseHead(status: 200, headers: ["Content-Type": "image/jpeg", "Date": date]))
    }

    static func handling(_ request: String) -> Machine {
        var machine = Machine(settings: ServerSettings())
        _ = machine.bytesReceived(Array(request.utf8), date: date)
        return machine
    }

    @Test("a file response is the head with the file's length, then the file; a HEAD gets the head alone")
    func stateMachine() throws {
        let file = try Self.fileBody(length: 5000)
        var machine = Self.handling("GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
        let actions = machine.respond(Self.prepared(), extra: ["X-Cache": "HIT"], file: file, exchange: 1, date: Self.date)
        guard case let .write(head) = actions.first else { Issue.record("no head: \(actions)"); return }
        let text = String(decoding: head.joined(), as: UTF8.self)
        #expect(text.hasPrefix("HTTP/1.1 200 OK\r\n") && text.contains("Content-Length: 5000\r\n") && text.hasSuffix("\r\n\r\n"))
        #expect(actions.dropFirst().first == .sendFile(file))
        #expect(machine.state == .writing(keepAlive: true))

        var headMachine = Self.handling("HEAD /a HTTP/1.1\r\nHost: x\r\n\r\n")
        let headActions = headMachine.respond(Self.prepared(), extra: [:], file: file, exchange: 1, date: Self.date)
        #expect(!headActions.contains(.sendFile(file)))
        #expect(String(decoding: headActions.compactMap { if case let .write(b) = $0 { return b.joined() } else { return nil } }.joined(), as: UTF8.self)
            .contains("Content-Length: 5000\r\n"))
    }

    @Test("a Range part of a stored array is queued as a slice: the head declares its length, the bytes sent point into the array's own storage, and a file slice keeps its region's descriptor open")
    func partsAreShared() throws {
        let stored = [UInt8](repeating: 7, count: 1000) + [1, 2, 3]
        var machine = Self.handling("GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
        let actions = machine.respond(Self.prepared(), extra: [:], part: stored[1000...], exchange: 1, date: Self.date)
        guard case let .write(head) = actions.first else { Issue.record("no head: \(actions)"); return }
        #expect(String(decoding: head.joined(), as: UTF8.self).contains("Content-Length: 3\r\n"))
        #expect(actions.dropFirst().first == .writePart(stored[1000...]))
        var queue = WriteQueue()
        queue.append(stored[1000...])
        var pointed: UnsafeMutableRawPointer?
        let written = try queue.write({ iovecs, _ in
            pointed = iovecs[0].iov_base
            return iovecs[0].iov_len
        }, sendFile: { _, _, _ in 0 })
        #expect(written == 3)
        stored.withUnsafeBytes { #expect(UnsafeRawPointer(pointed) == $0.baseAddress! + 1000, "the part was copied") }
        // A slice of a file region: its own offset and length, the same descriptor, open while the slice lives.
        // (Its region is gone once sliced: the slice alone keeps the descriptor.)
        let slice = try Self.fileBody(length: 500).slice(offset: 100, length: 50)
        #expect(slice.offset == 110 && slice.length == 50 && fcntl(slice.descriptor, F_GETFD) >= 0)
        #expect(slice.readAll() == (110..<160).map { UInt8(truncatingIfNeeded: $0) })
    }

    @Test("the write queue sends bytes up to a file, then the file from where the last partial send stopped, then the rest")
    func writeQueue() throws {
        let file = try Self.fileBody(length: 3000)
        var queue = WriteQueue()
        queue.append(Array("head".utf8))
        queue.append(Array("er".utf8))
        queue.append(file)
        queue.append(Array("tail".utf8))
        #expect(queue.byteCount == 6 + 3000 + 4)
        var calls: [String] = []
        var received: [UInt8] = []
        func step(maxFile: Int) throws -> Int {
            try queue.write { iovecs, fileFollows throws(SystemError) in
                var sent = 0
                for vector in iovecs {
                    let bytes = UnsafeRawBufferPointer(start: vector.iov_base, count: vector.iov_len)
                    received += bytes
                    sent += bytes.count
                }
                calls.append("bytes(\(iovecs.count)\(fileFollows ? ", more" : ""))")
                return sent
            } sendFile: { fd, offset, count throws(SystemError) in
                let take = min(count, maxFile)
                received += try DiskFile.read(fd, count: take, offset: offset)
                calls.append("file(\(offset),\(count))")
                return take
            }
        }
        #expect(try step(maxFile: 0) == 6)          // both byte arrays in one send, stopping at the file
        #expect(try step(maxFile: 1000) == 1000)    // a partial sendfile
        #expect(try step(maxFile: 5000) == 2000)    // the rest of the file, from offset 10 + 1000
        #expect(try step(maxFile: 0) == 4)
        #expect(queue.isEmpty)
        // The head goes with MSG_MORE (a file follows), so it shares segments with the file's first bytes.
        #expect(calls == ["bytes(2, more)", "file(10,3000)", "file(1010,2000)", "bytes(1)"])
        expectSameBytes(received, Array("header".utf8) + (10..<3010).map { UInt8(truncatingIfNeeded: $0) } + Array("tail".utf8))
    }

    @Test("a sink that cannot send files gets the region's bytes; a short file aborts instead")
    func fallback() throws {
        final class Recorder: ResponseSink, @unchecked Sendable {
            var body: [UInt8]?
            var aborted = false
            func head(_ head: HTTPResponseHead, bodyLength: Int?) {}
            func body(_ chunk: [UInt8]) {}
            func end() {}
            func respond(_ head: HTTPResponseHead, body: [UInt8]) { self.body = body }
            func abort() { aborted = true }
            func onCancel(_ callback: @escaping @Sendable () -> Void) {}
        }
        let file = try Self.fileBody(length: 100)
        let sink = Recorder()
        sink.respond(Self.prepared(), extra: [:], file: file)
        #expect(sink.body == (10..<110).map { UInt8(truncatingIfNeeded: $0) })
        let short = FileBody(descriptor: dup(file.descriptor), offset: 10, length: 1000)  // past the end of the file
        let other = Recorder()
        other.respond(Self.prepared(), extra: [:], file: short)
        #expect(other.aborted && other.body == nil)
    }
}
