// systemd integration without libsystemd: the two small protocols a Type=notify service speaks.
//
//   Notification (sd_notify(3)): datagrams "READY=1", "STATUS=...", "STOPPING=1", "RELOADING=1", "WATCHDOG=1" sent to
//   the AF_UNIX datagram socket named by $NOTIFY_SOCKET (a path, or "@name" in the abstract namespace).
//   Nothing is sent when the variable is not set (not started by systemd).
//
//   Socket activation (sd_listen_fds(3)): when $LISTEN_PID is this process and $LISTEN_FDS is N, descriptors 3..3+N-1
//   are sockets systemd already bound and listens on; the daemon serves on them instead of binding `listen`. The
//   variables are removed once read (as sd_listen_fds(1) does) so that no child inherits them.
//
//   Watchdog (sd_watchdog_enabled(3)): with WatchdogSec= set, $WATCHDOG_USEC is the interval; Daemon pings at half of it.

internal import ImageCacheSystem
#if canImport(Glibc)
internal import Glibc
#elseif canImport(Darwin)
internal import Darwin
#endif
internal import Foundation

/// Sends sd_notify messages. Thread-safe (each send is one sendto on a socket made for it).
public struct SystemdNotifier: Sendable {
    /// $NOTIFY_SOCKET, nil when not run by systemd with Type=notify.
    public let socketPath: String?

    public init() {
        self.init(environment: ProcessInfo.processInfo.environment)
    }

    public init(environment: [String: String]) {
        socketPath = environment["NOTIFY_SOCKET"].flatMap { $0.isEmpty ? nil : $0 }
    }

    public var isEnabled: Bool { socketPath != nil }

    /// Sends `message` ("READY=1\nSTATUS=serving"). Failures are returned, never fatal.
    @discardableResult
    public func notify(_ message: String) -> Bool {
        guard let socketPath else { return false }
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { closeDescriptor(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        var path = Array(socketPath.utf8)
        let abstract = path.first == UInt8(ascii: "@")
        if abstract { path[0] = 0 }
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard path.count < capacity else { return false }
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            for (index, byte) in path.enumerated() { buffer[index] = byte }
        }
        // An abstract name is exactly its bytes; a path is NUL-terminated (sun_path is zeroed).
        let length = MemoryLayout<sa_family_t>.size + path.count + (abstract ? 0 : 1)
        let bytes = Array(message.utf8)
        let sent = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { addressPointer in
                bytes.withUnsafeBytes { sendto(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL), addressPointer, socklen_t(length)) }
            }
        }
        return sent == bytes.count
    }

    /// The watchdog interval in seconds when systemd asks for pings ($WATCHDOG_USEC, for this process).
    public static func watchdogInterval() -> Double? { watchdogInterval(environment: ProcessInfo.processInfo.environment) }

    public static func watchdogInterval(environment: [String: String]) -> Double? {
        if let pid = environment["WATCHDOG_PID"].flatMap(Int32.init), pid != getpid() { return nil }
        guard let usec = environment["WATCHDOG_USEC"].flatMap(UInt64.init), usec > 0 else { return nil }
        return Double(usec) / 1_000_000
    }
}

public enum SystemdSocketActivation {
    /// The first passed descriptor (SD_LISTEN_FDS_START).
    static let firstDescriptor: Int32 = 3

    /// The listening descriptors systemd passed to this process, or [] when none; clears the variables.
    public static func takeListeningDescriptors() -> [Int32] {
        let environment = ProcessInfo.processInfo.environment
        defer {
            unsetenv("LISTEN_PID")
            unsetenv("LISTEN_FDS")
            unsetenv("LISTEN_FDNAMES")
        }
        return descriptors(environment: environment, pid: getpid())
    }

    /// As `takeListeningDescriptors`, with each descriptor's name (LISTEN_FDNAMES, FileDescriptorName= in the unit;
    /// "" when unnamed).
    public static func takeListeningSockets() -> (descriptors: [Int32], names: [String]) {
        let names = Self.names(environment: ProcessInfo.processInfo.environment)
        return (takeListeningDescriptors(), names)
    }

    /// Pure: the names of the passed descriptors, in order (LISTEN_FDNAMES, colon-separated).
    public static func names(environment: [String: String]) -> [String] {
        environment["LISTEN_FDNAMES"].map { $0.split(separator: ":", omittingEmptySubsequences: false).map(String.init) } ?? []
    }

    /// Pure: the descriptors `environment` names for process `pid`.
    public static func descriptors(environment: [String: String], pid: Int32) -> [Int32] {
        guard let listenPID = environment["LISTEN_PID"].flatMap(Int32.init), listenPID == pid,
              let count = environment["LISTEN_FDS"].flatMap(Int32.init), count > 0, count < 1024 else { return [] }
        return (0..<count).map { firstDescriptor + $0 }
    }

    /// Marks a passed descriptor close-on-exec (systemd passes them without).
    static func adopt(_ fd: Int32) {
        _ = fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) | FD_CLOEXEC)
    }
}
