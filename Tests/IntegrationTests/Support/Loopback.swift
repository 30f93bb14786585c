// The one place tests open a client socket to 127.0.0.1.

import Foundation

struct LoopbackConnectError: Error, CustomStringConvertible {
    var function: String
    var code: Int32
    var description: String { "\(function) to 127.0.0.1 failed: errno \(code) (\(String(cString: strerror(code))))" }
}

/// A blocking TCP socket connected to 127.0.0.1:`port`, close-on-exec, with receive and send timeouts so a bug fails
/// a test instead of hanging it. On failure the socket is closed here and nothing is returned (so no caller can close
/// it a second time and hit another test's socket reusing the number).
/// `receiveBuffer` fixes SO_RCVBUF (before connecting, so autotuning is off): a client that reads nothing then holds
/// little in its kernel buffer and the sender's backlog stays in the sender.
func connectLoopback(port: Int, timeoutSeconds: Int, receiveBuffer: Int? = nil) throws(LoopbackConnectError) -> Int32 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { throw LoopbackConnectError(function: "socket", code: errno) }
    if var size = receiveBuffer.map(Int32.init) {
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
    }
    var timeout = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let result = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard result == 0 else {
        let code = errno
        close(fd)
        throw LoopbackConnectError(function: "connect", code: code)
    }
    return fd
}
