// The one libcurl multi handle and the thread that drives it.
//
// Data model: `multi` (CURLM*) holds every running easy handle; `transfers` maps each CURL* to its `CurlEasy`
// (which keeps it alive), `handles` maps transfer IDs to CURL* for cancellation.
// Ownership: one dedicated thread, "icd.curl", owns `multi`, every added `CurlEasy` and both maps.
// Other threads never touch them: they post `Command`s (add, cancel, shutdown) into `inbox`, a Mutex-guarded
// list, and wake the thread with `curl_multi_wakeup`. The loop is:
//   drain inbox -> curl_multi_perform -> curl_multi_info_read (complete finished transfers) -> tick -> curl_multi_poll
// curl_multi_poll sleeps until socket activity, a wakeup, curl's own next timeout or at most one second (less
// when `tick` asks for it: the owner's queue deadlines). All transfer callbacks and events run on this thread.
// Teardown: `shutdown()` closes the inbox; the thread fails what is still attached with `.cancelled`,
// cleans the multi handle up and exits. `curl_multi_wakeup` is only ever called under the inbox lock while the
// inbox is open, so it never races `curl_multi_cleanup`.

internal import ImageCacheSystem
internal import CCurl
internal import CCurlShim
internal import Foundation
internal import Logging
internal import Synchronization

/// Runs easy handles on one multi handle from one thread. The multi handle is confined to the curl thread.
final class CurlMulti: @unchecked Sendable {
    private enum Command {
        case add(CurlEasy)
        case cancel(UInt64)
        case resume(UInt64)
        case shutdown
    }

    private struct Inbox {
        var commands: [Command] = []
        var closed = false
    }

    // MARK: immutable after init
    private let multi: UnsafeMutableRawPointer
    private let logger: Logger
    private let exited = DispatchSemaphore(value: 0)

    // MARK: shared, guarded by lock
    private let inbox = Locked(Inbox())
    /// The curl thread's pthread, once it runs: lets `shutdown` know not to wait for itself.
    private let threadID = Locked<pthread_t?>(nil)

    // MARK: owned by the curl thread
    private var transfers: [UnsafeMutableRawPointer: CurlEasy] = [:]
    private var handles: [UInt64: UnsafeMutableRawPointer] = [:]
    private var tick: @Sendable () -> Duration? = { nil }
    private var started = false

    /// A connection cache of its own for transfers under the private-network guard. The guard runs when a
    /// connection is opened (CURLOPT_OPENSOCKETFUNCTION), so a guarded transfer must never reuse a connection a
    /// trusted transfer (a configured origin, which may be private) opened: it gets this cache, not the multi's.
    /// Only the curl thread uses it (no share lock functions needed).
    let guardedConnections: UnsafeMutableRawPointer

    /// Makes the multi handle (HTTP/2 multiplexing, connection limits). Call `start` to run it.
    init(maxHostConnections: Int, maxTotalConnections: Int, logger: Logger) throws(CurlError) {
        try CurlGlobal.initialize()
        guard let multi = curl_multi_init() else {
            throw CurlError(code: -1, function: "curl_multi_init", message: "out of memory")
        }
        guard let share = curl_share_init() else {
            curl_multi_cleanup(multi)
            throw CurlError(code: -1, function: "curl_share_init", message: "out of memory")
        }
        let shared = ccurl_share_setopt_long(share, CURLSHOPT_SHARE, Int(CURL_LOCK_DATA_CONNECT.rawValue))
        guard shared == CURLSHE_OK else {
            curl_share_cleanup(share)
            curl_multi_cleanup(multi)
            throw CurlError(code: Int(shared.rawValue), function: "curl_share_setopt", message: String(cString: curl_share_strerror(shared)))
        }
        self.guardedConnections = share
        self.multi = multi
        self.logger = logger
        do {
            try ccurl_multi_setopt_long(multi, CURLMOPT_PIPELINING, CURLPIPE_MULTIPLEX).check("CURLMOPT_PIPELINING")
            try ccurl_multi_setopt_long(multi, CURLMOPT_MAX_HOST_CONNECTIONS, maxHostConnections).check("CURLMOPT_MAX_HOST_CONNECTIONS")
            try ccurl_multi_setopt_long(multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, maxTotalConnections).check("CURLMOPT_MAX_TOTAL_CONNECTIONS")
        } catch {
            curl_multi_cleanup(multi)
            curl_share_cleanup(share)
            throw error
        }
    }

    deinit {
        // The thread holds `self` until it has cleaned up; only a never-started multi is left here.
        if !started {
            curl_multi_cleanup(multi)
            curl_share_cleanup(guardedConnections)
        }
    }

    /// Starts the curl thread. `tick` runs on it at every loop turn and returns how soon it wants to run again.
    func start(tick: @escaping @Sendable () -> Duration?) {
        precondition(!started, "CurlMulti started twice")
        started = true
        self.tick = tick
        let thread = Thread { [self] in
            nameThisThread("icd.curl")  // Thread.name set before start is lost on Linux, and allows 15 bytes
            run()
        }
        thread.start()
    }

    /// Hands `easy` to the curl thread. False when the multi is shut down (the caller still owns `easy`).
    func add(_ easy: CurlEasy) -> Bool {
        post(.add(easy))
    }

    /// Removes the transfer `id` without further events. No-op when it already ended.
    func cancel(_ id: UInt64) {
        _ = post(.cancel(id))
    }

    /// Resumes receiving for the transfer `id` (curl_easy_pause on the curl thread). No-op when it ended. (Pausing
    /// needs no command: `FlowControl` makes the write callback pause at the next bytes.)
    func resume(_ id: UInt64) {
        _ = post(.resume(id))
    }

    /// Fails every attached transfer with `.cancelled`, stops the thread and waits for it (unless called on it).
    func shutdown() {
        let wasOpen = inbox.withLock { inbox -> Bool in
            guard !inbox.closed else { return false }
            inbox.commands.append(.shutdown)
            curl_multi_wakeup(multi)
            inbox.closed = true
            return true
        }
        guard wasOpen, started else { return }
        let onCurlThread = threadID.withLock { id in id.map { pthread_equal($0, pthread_self()) != 0 } ?? false }
        if !onCurlThread { exited.wait() }
    }

    private func post(_ command: Command) -> Bool {
        inbox.withLock { inbox in
            guard !inbox.closed else { return false }
            inbox.commands.append(command)
            curl_multi_wakeup(multi)
            return true
        }
    }

    // MARK: the curl thread

    private func run() {
        threadID.withLock { $0 = pthread_self() }
        var running: Int32 = 0
        while true {
            let commands = inbox.withLock { inbox in
                defer { inbox.commands = [] }
                return inbox.commands
            }
            for command in commands {
                switch command {
                case let .add(easy):
                    attach(easy)
                case let .cancel(id):
                    if let handle = handles[id] { detach(handle) }
                case let .resume(id):
                    // CURLPAUSE_CONT is 0 (a curl.h macro Swift does not import). Resuming delivers the bytes the
                    // write callback refused, through it, before curl_easy_pause returns; unless paused again.
                    if let handle = handles[id] { _ = curl_easy_pause(handle, 0) }
                case .shutdown:
                    for (handle, easy) in transfers {
                        detach(handle)
                        easy.finish(.failed(.cancelled))
                    }
                    curl_multi_cleanup(multi)
                    // Still in use only if an easy handle outlives the multi; then it is left to process exit.
                    _ = curl_share_cleanup(guardedConnections)
                    exited.signal()
                    return
                }
            }

            let performed = curl_multi_perform(multi, &running)
            if performed != CURLM_OK {
                logger.error("curl_multi_perform failed", metadata: ["code": "\(performed.rawValue)"])
            }
            readFinished()

            var timeoutMS: Int32 = 1000
            if let wanted = tick() {
                let ms = wanted.components.seconds * 1000 + wanted.components.attoseconds / 1_000_000_000_000_000
                timeoutMS = Int32(clamping: min(max(ms + 1, 0), 1000))
            }
            _ = curl_multi_poll(multi, nil, 0, timeoutMS, nil)
        }
    }

    private func attach(_ easy: CurlEasy) {
        let code = curl_multi_add_handle(multi, easy.handle)
        guard code == CURLM_OK else {
            let message = String(cString: curl_multi_strerror(code))
            easy.finish(.failed(.other("curl_multi_add_handle failed: \(message)")))
            return
        }
        transfers[easy.handle] = easy
        handles[easy.id] = easy.handle
    }

    @discardableResult
    private func detach(_ handle: UnsafeMutableRawPointer) -> CurlEasy? {
        guard let easy = transfers.removeValue(forKey: handle) else { return nil }
        handles[easy.id] = nil
        let code = curl_multi_remove_handle(multi, handle)
        if code != CURLM_OK {
            logger.error("curl_multi_remove_handle failed", metadata: ["code": "\(code.rawValue)"])
        }
        return easy
    }

    private func readFinished() {
        var queued: Int32 = 0
        while let message = curl_multi_info_read(multi, &queued) {
            guard message.pointee.msg == CURLMSG_DONE, let handle = message.pointee.easy_handle else { continue }
            let result = message.pointee.data.result   // read before remove_handle frees the message
            // A dial's socket is taken before remove_handle, which closes a connect-only connection.
            transfers[handle]?.takeDialledSocket(result)
            guard let easy = detach(handle) else { continue }
            if easy.retriesOnFreshConnection(after: result) {
                attach(easy)
            } else {
                easy.complete(result)
            }
        }
    }
}
