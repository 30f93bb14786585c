// A TCP relay on 127.0.0.1 that holds every chunk for `delay` before passing it on, both ways: a slow network path to
// a server (the fleet tests put it in front of memcached). One thread per direction per connection; `delay` can be
// changed while it runs. Stopped (listener and relays closed) on `stop` or deinit.

import Foundation
import ImageCacheSystem

final class DelayProxy: @unchecked Sendable {
    let port: Int
    private let listenFD: Int32
    private let target: Int
    private let delayMilliseconds = Locked(0)
    private let open = Locked<[Int32]>([])
    private let stopped = Locked(false)

    var delay: Duration {
        get { .milliseconds(delayMilliseconds.withLock { $0 }) }
        set { delayMilliseconds.withLock { $0 = Int(newValue.components.seconds * 1000 + newValue.components.attoseconds / 1_000_000_000_000_000) } }
    }

    init(to targetPort: Int, delay: Duration) throws {
        (listenFD, port) = try makeListeningSocket()
        target = targetPort
        self.delay = delay
        Thread.detachNewThread { [self] in acceptLoop() }
    }

    deinit { stop() }

    func stop() {
        guard !stopped.withLock({ let was = $0; $0 = true; return was }) else { return }
        shutdown(listenFD, Int32(SHUT_RDWR))
        close(listenFD)
        for fd in open.withLock({ $0 }) { shutdown(fd, Int32(SHUT_RDWR)) }
    }

    private func acceptLoop() {
        while !stopped.withLock({ $0 }) {
            let client = accept(listenFD, nil, nil)
            guard client >= 0 else { return }
            guard let upstream = try? connectLoopback(port: target, timeoutSeconds: 60) else {
                close(client)
                continue
            }
            open.withLock { $0 += [client, upstream] }
            Thread.detachNewThread { [self] in relay(from: client, to: upstream) }
            Thread.detachNewThread { [self] in relay(from: upstream, to: client) }
        }
    }

    private func relay(from source: Int32, to destination: Int32) {
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(source, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { break }
            let pause = delayMilliseconds.withLock { $0 }
            if pause > 0 { usleep(UInt32(pause * 1000)) }
            var offset = 0
            while offset < count {
                let sent = buffer[offset..<count].withUnsafeBytes { send(destination, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                guard sent > 0 else { break }
                offset += sent
            }
        }
        shutdown(destination, Int32(SHUT_WR))
    }
}
