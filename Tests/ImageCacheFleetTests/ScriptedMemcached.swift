// A fake memcached that answers from a script, for what a real one never does on cue: a value that vanishes between
// a lookup and its read, a wrong opaque token, a malformed answer. Listens on 127.0.0.1 (a free port); each
// connection is served by a thread of its own with blocking reads. The script maps a request line, without its
// ` O<token>`, to the answers to give it in turn ("$O" in an answer is replaced by the request's `O<token>`); a line it
// does not know gets `ERROR`.

import Foundation

final class ScriptedMemcached: @unchecked Sendable {
    let port: Int
    private let listenFD: Int32
    private let lock = NSLock()
    // MARK: guarded by lock
    private var script: [String: [String]]
    private var seen: [String] = []
    private var clientFDs: [Int32] = []

    init(_ script: [String: [String]]) throws {
        self.script = script
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) } }
        guard bound == 0, listen(fd, 16) == 0 else {
            close(fd)
            throw POSIXError(.init(rawValue: errno) ?? .EIO)
        }
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        port = Int(UInt16(bigEndian: address.sin_port))
        listenFD = fd
        // The accept thread holds the server weakly (its last owner's release shuts the socket down, which ends the
        // thread) and closes the listening socket itself, so no accept meets a closed or reused descriptor.
        Thread { [weak self, fd] in
            while true {
                let client = accept(fd, nil, nil)
                if client < 0, errno == EINTR { continue }
                guard client >= 0 else { break }
                guard let self else {
                    close(client)
                    break
                }
                self.lock.withLock { self.clientFDs.append(client) }
                Thread { [self] in self.serve(client) }.start()
            }
            close(fd)
        }.start()
    }

    deinit {
        shutdown(listenFD, Int32(SHUT_RDWR))
        // Under the lock: a serving thread closes its descriptor under it too, so none of these is closed (and its
        // number reused by another test) meanwhile.
        lock.withLock { for fd in clientFDs { shutdown(fd, Int32(SHUT_RDWR)) } }
    }

    /// The request lines received so far (with their tokens), in order.
    var requests: [String] { lock.withLock { seen } }

    private func serve(_ fd: Int32) {
        defer {
            lock.withLock {
                clientFDs.removeAll { $0 == fd }
                close(fd)
            }
        }
        var pending: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { return }
            pending += buffer[0..<n]
            while let end = pending.firstIndex(of: 10) {
                let line = String(decoding: pending[..<end], as: UTF8.self).trimmingCharacters(in: .newlines)
                pending.removeSubrange(...end)
                let answer = self.answer(to: line)
                let sent = Array(answer.utf8).withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                if sent < 0 { return }
            }
        }
    }

    private func answer(to line: String) -> String {
        var words = line.split(separator: " ").map(String.init)
        let token = words.last(where: { $0.hasPrefix("O") }).map { String($0.dropFirst()) } ?? ""
        words.removeAll { $0.hasPrefix("O") }
        let key = words.joined(separator: " ")
        return lock.withLock {
            seen.append(line)
            guard var answers = script[key], !answers.isEmpty else { return "ERROR\r\n" }
            let answer = answers.removeFirst()
            script[key] = answers
            return answer.replacingOccurrences(of: "$O", with: "O" + token)
        }
    }
}
