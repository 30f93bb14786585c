// A real memcached (Debian's /usr/bin/memcached, installed by scripts/install-deps --test) for the fleet tests, on a
// free loopback port: started, stopped (SIGSTOP/SIGCONT), killed, and read or written directly with the meta protocol
// (to damage a value). Ready when its log says it listens (-vv; the log is drained on a thread of its own).

import Foundation
import ImageCacheSystem

final class FleetMemcached: @unchecked Sendable {
    let port: Int
    private let process: Process
    private let ready = DispatchSemaphore(value: 0)

    struct Failure: Error, CustomStringConvertible { var description: String }

    init() throws {
        var lastError = "not started"
        for _ in 0..<5 {
            let (fd, port) = try makeListeningSocket()
            close(fd)
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/memcached")
            var arguments = ["-l", "127.0.0.1", "-p", String(port), "-U", "0", "-t", "1", "-m", "64", "-I", "32m", "-vv"]
            if geteuid() == 0 { arguments += ["-u", "root"] }
            process.arguments = arguments
            let pipe = Pipe()
            process.standardError = pipe
            process.standardOutput = FileHandle.nullDevice
            guard FileManager.default.isExecutableFile(atPath: "/usr/bin/memcached") else {
                throw Failure(description: "/usr/bin/memcached missing: run scripts/install-deps --test")
            }
            try process.run()
            let ready = DispatchSemaphore(value: 0)
            let log = Locked("")
            let reader = pipe.fileHandleForReading
            Thread.detachNewThread {
                var signalled = false
                while true {
                    let data = reader.availableData
                    if data.isEmpty { break }
                    if !signalled {
                        let text = log.withLock { $0 += String(decoding: data, as: UTF8.self); return $0 }
                        if text.contains("server listening") || text.contains("failed to listen") || text.contains("Address already in use") {
                            signalled = true
                            ready.signal()
                        }
                    }
                }
                if !signalled { ready.signal() }
            }
            _ = ready.wait(timeout: .now() + 20)
            let text = log.withLock { $0 }
            if text.contains("server listening"), process.isRunning {
                self.port = port
                self.process = process
                return
            }
            lastError = text.suffix(300).description
            process.terminate()
            process.waitUntilExit()
        }
        throw Failure(description: "memcached did not start: \(lastError)")
    }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGCONT)
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    func suspend() { kill(process.processIdentifier, SIGSTOP) }
    func resume() { kill(process.processIdentifier, SIGCONT) }

    func kill9() {
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    /// The value of `key` (`mg <key> v`).
    func get(_ key: String) throws -> [UInt8] {
        let fd = try connectLoopback(port: port, timeoutSeconds: 10)
        defer { close(fd) }
        try send(fd, Array("mg \(key) v\r\n".utf8))
        var buffer: [UInt8] = []
        while true {
            if let lineEnd = buffer.firstRange(of: [13, 10]) {
                let line = String(decoding: buffer[..<lineEnd.lowerBound], as: UTF8.self)
                guard line.hasPrefix("VA "), let size = Int(line.split(separator: " ")[1]) else {
                    throw Failure(description: "mg \(key): \(line)")
                }
                let start = lineEnd.upperBound
                if buffer.count >= start + size + 2 { return Array(buffer[start..<(start + size)]) }
            }
            var chunk = [UInt8](repeating: 0, count: 65536)
            let count = recv(fd, &chunk, chunk.count, 0)
            guard count > 0 else { throw Failure(description: "mg \(key): connection closed") }
            buffer += chunk[..<count]
        }
    }

    /// Stores `value` under `key` (`ms <key> <n> F<flags> T<ttl>`).
    func set(_ key: String, value: [UInt8], flags: UInt32, ttl: Int) throws {
        let fd = try connectLoopback(port: port, timeoutSeconds: 10)
        defer { close(fd) }
        try send(fd, Array("ms \(key) \(value.count) F\(flags) T\(ttl)\r\n".utf8) + value + [13, 10])
        var answer = [UInt8](repeating: 0, count: 256)
        let count = recv(fd, &answer, answer.count, 0)
        let line = String(decoding: answer[..<max(count, 0)], as: UTF8.self)
        guard line.hasPrefix("HD") else { throw Failure(description: "ms \(key): \(line)") }
    }

    private func send(_ fd: Int32, _ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard sent > 0 else { throw Failure(description: "send failed: errno \(errno)") }
            offset += sent
        }
    }
}
