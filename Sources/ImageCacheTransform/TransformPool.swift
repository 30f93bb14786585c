// TransformPool: the workers that run transforms, a bounded queue in front of them, and a queue timeout.
//
//   submit(job) ── a worker free? ──> run on it (a thread of its own: libvips blocks while it works)
//        │ all busy: queue holds < transform-queue? ──> wait in order; refused with 503 once it has waited
//        │                                             transform-queue-timeout
//        └ queue full ──> 503 at once ("the transform queue is full")
//
// Workers: `transform-workers` (default: the CPUs this process may use, sched_getaffinity), each job one libvips
// thread (VipsRuntime.start's threadsPerImage), so at most that many images are decoded at once and the memory they
// take is bounded by workers x the largest image the limits admit.
//
// Ownership: `state` (Mutex) holds the queue and the busy count; the callbacks run on the worker threads (or, for a
// refusal or timeout, on the caller's or the timer's thread) and must hop to their owner's queue themselves.

internal import ImageCacheSystem
internal import Foundation
internal import Dispatch
internal import Synchronization

public final class TransformPool: Sendable {
    public struct Job: Sendable {
        public var source: [UInt8]
        public var spec: TransformSpec
        /// Called once, on a worker thread (or with a 503 failure on any thread).
        public var completion: @Sendable (Result<TransformedImage, TransformFailure>, _ seconds: Double) -> Void
        public init(source: [UInt8], spec: TransformSpec,
                    completion: @escaping @Sendable (Result<TransformedImage, TransformFailure>, Double) -> Void) {
            self.source = source
            self.spec = spec
            self.completion = completion
        }
    }

    private struct Waiting {
        var id: UInt64
        var job: Job
    }

    private struct State {
        var busy = 0
        var waiting: [Waiting] = []
        var nextID: UInt64 = 0
    }

    public let workers: Int
    public let queueLimit: Int
    public let queueTimeout: Duration
    private let state = Mutex(State())
    private let threads: DispatchQueue
    private let timers = DispatchQueue(label: "imagecached.transform.timers")
    /// Runs a job; injected by tests of the queue (the default is libvips).
    private let run: @Sendable (Job) -> Result<TransformedImage, TransformFailure>

    public init(workers: Int, queueLimit: Int, queueTimeout: Duration,
                run: @escaping @Sendable (Job) -> Result<TransformedImage, TransformFailure> = { Transformer.run($0.source, $0.spec) }) {
        self.workers = max(1, workers)
        self.queueLimit = max(0, queueLimit)
        self.queueTimeout = queueTimeout
        self.run = run
        threads = DispatchQueue(label: "imagecached.transform", attributes: .concurrent)
    }

    /// Jobs running now.
    public var running: Int { state.withLock { $0.busy } }
    /// Jobs waiting for a worker.
    public var queued: Int { state.withLock { $0.waiting.count } }

    /// The CPUs this process may use: its affinity mask (Cpus_allowed in /proc/self/status), lowered by a cgroup v2
    /// CPU quota (cpu.max) when one is set; at least 1.
    public static func usableCPUs() -> Int {
        var count = ProcessInfo.processInfo.activeProcessorCount
        if let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
           let line = status.split(separator: "\n").first(where: { $0.hasPrefix("Cpus_allowed:") }) {
            let mask = line.dropFirst("Cpus_allowed:".count).filter { $0.isHexDigit }
            let allowed = mask.reduce(0) { $0 + (Int(String($1), radix: 16) ?? 0).nonzeroBitCount }
            if allowed > 0 { count = min(count, allowed) }
        }
        if let quota = try? String(contentsOfFile: "/sys/fs/cgroup/cpu.max", encoding: .utf8) {
            let parts = quota.split(separator: " ").map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
            if parts.count == 2, let limit = Double(parts[0]), let period = Double(parts[1]), period > 0 {
                count = min(count, Int((limit / period).rounded(.up)))
            }
        }
        return max(1, count)
    }

    /// Starts `job` now, queues it, or refuses it (503, at once).
    public func submit(_ job: Job) {
        enum Step { case start, queued(UInt64), full }
        let step: Step = state.withLock { state in
            if state.busy < workers {
                state.busy += 1
                return .start
            }
            guard state.waiting.count < queueLimit else { return .full }
            state.nextID += 1
            state.waiting.append(Waiting(id: state.nextID, job: job))
            return .queued(state.nextID)
        }
        switch step {
        case .start:
            start(job)
        case let .queued(id):
            timers.asyncAfter(deadline: .now() + queueTimeout.inSeconds) { [self] in expire(id) }
        case .full:
            job.completion(.failure(TransformFailure(status: 503, reason: "the transform queue is full (transform-queue: \(queueLimit) waiting, \(workers) workers busy)", label: "queue_full")), 0)
        }
    }

    private func expire(_ id: UInt64) {
        let expired: Job? = state.withLock { state in
            guard let index = state.waiting.firstIndex(where: { $0.id == id }) else { return nil }
            return state.waiting.remove(at: index).job
        }
        expired?.completion(.failure(TransformFailure(status: 503, reason: "the transform waited longer than transform-queue-timeout (\(queueTimeout.inSeconds)s) for a worker", label: "queue_timeout")), 0)
    }

    private func start(_ job: Job) {
        threads.async { [self] in
            var next: Job? = job
            while let current = next {
                let started = ContinuousClock.now
                let result = run(current)
                let elapsed = ContinuousClock.now - started
                current.completion(result, Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
                next = state.withLock { state in
                    if state.waiting.isEmpty {
                        state.busy -= 1
                        return nil
                    }
                    return state.waiting.removeFirst().job
                }
            }
        }
    }
}
