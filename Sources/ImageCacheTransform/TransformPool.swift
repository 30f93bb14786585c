// TransformPool: the workers that run transforms, a bounded queue in front of them, and a queue timeout.
//
//   submit(job) ── a worker free? ──> run on it (`transform-workers` threads of their own, started with the pool:
//        │                            libvips blocks while it works, and Dispatch's shared pool must not wait on it)
//        │ all busy: queue holds < transform-queue? ──> wait in order; refused with 503 once it has waited
//        │                                             transform-queue-timeout
//        └ queue full ──> 503 at once ("the transform queue is full")
//   withdraw(ticket) ── still queued? ──> out of the queue, its completion never called (a job whose clients all left)
//   a worker takes a job ──> its `started` callback, then the transform, then its completion
//
// Workers: `transform-workers` (default: the CPUs this process may use, Proxy.defaultTransformWorkers), each job one libvips
// thread (VipsRuntime.start's threadsPerImage), so at most that many images are decoded at once and the memory they
// take is bounded by workers x the largest image the limits admit.
//
// Ownership: `Shared.condition` guards the queue, the busy count and the stop flag; the worker threads hold `Shared`
// (not the pool) and end when the pool goes. The callbacks run on the worker threads (or, for a refusal or timeout,
// on the caller's or the timer's thread) and must hop to their owner's queue themselves.

internal import ImageCacheSystem
internal import Foundation
internal import Dispatch
internal import Synchronization

public final class TransformPool: Sendable {
    public struct Job: Sendable {
        public var source: [UInt8]
        public var spec: TransformSpec
        /// Called once, on a worker thread (or with a 503 failure on any thread); never for a withdrawn job.
        public var completion: @Sendable (Result<TransformedImage, TransformFailure>, _ seconds: Double) -> Void
        /// Called on the worker thread as it takes the job, before it runs.
        public var started: (@Sendable () -> Void)?
        public init(source: [UInt8], spec: TransformSpec, started: (@Sendable () -> Void)? = nil,
                    completion: @escaping @Sendable (Result<TransformedImage, TransformFailure>, Double) -> Void) {
            self.source = source
            self.spec = spec
            self.started = started
            self.completion = completion
        }
    }

    /// What the pool and its threads share, guarded by `condition`.
    private final class Shared: @unchecked Sendable {
        struct Waiting {
            var id: UInt64
            var job: Job
        }
        let condition = NSCondition()
        var waiting: [Waiting] = []
        var busy = 0
        var nextID: UInt64 = 0
        var stopped = false
    }

    public let workers: Int
    public let queueLimit: Int
    public let queueTimeout: Duration
    private let shared = Shared()
    private let timers = DispatchQueue(label: "imagecached.transform.timers")

    /// `run`: what a worker does with a job; injected by tests of the queue (the default is libvips).
    public init(workers: Int, queueLimit: Int, queueTimeout: Duration,
                run: @escaping @Sendable (Job) -> Result<TransformedImage, TransformFailure> = { Transformer.run($0.source, $0.spec) }) {
        self.workers = max(1, workers)
        self.queueLimit = max(0, queueLimit)
        self.queueTimeout = queueTimeout
        for index in 0..<self.workers {
            let shared = shared
            let thread = Thread { TransformPool.work(shared, run: run) }
            thread.name = "icd.transform.\(index)"
            thread.start()
        }
    }

    deinit {
        shared.condition.lock()
        shared.stopped = true
        shared.condition.broadcast()
        shared.condition.unlock()
    }

    /// Jobs running now.
    public var running: Int { locked { $0.busy } }
    /// Jobs waiting for a worker.
    public var queued: Int { locked { $0.waiting.count } }

    private func locked<T>(_ body: (Shared) -> T) -> T {
        shared.condition.lock()
        defer { shared.condition.unlock() }
        return body(shared)
    }

    /// Hands `job` to a free worker, queues it, or refuses it (503, at once). Returns its ticket for `withdraw` (nil:
    /// refused).
    @discardableResult
    public func submit(_ job: Job) -> UInt64? {
        let id: UInt64? = locked { shared in
            // Free workers take from the queue at once; past them, `queueLimit` jobs may wait.
            guard shared.waiting.count < workers - shared.busy + queueLimit else { return nil }
            shared.nextID += 1
            shared.waiting.append(Shared.Waiting(id: shared.nextID, job: job))
            shared.condition.signal()
            return shared.nextID
        }
        guard let id else {
            job.completion(.failure(TransformFailure(status: 503, reason: "the transform queue is full (transform-queue: \(queueLimit) waiting, \(workers) workers busy)", label: "queue_full")), 0)
            return nil
        }
        timers.asyncAfter(deadline: .now() + queueTimeout.inSeconds) { [weak self] in self?.expire(id) }
        return id
    }

    /// Takes a job out of the queue if no worker has taken it (true); its completion is never called then.
    public func withdraw(_ ticket: UInt64) -> Bool {
        locked { shared in
            guard let index = shared.waiting.firstIndex(where: { $0.id == ticket }) else { return false }
            shared.waiting.remove(at: index)
            return true
        }
    }

    private func expire(_ id: UInt64) {
        let expired: Job? = locked { shared in
            guard let index = shared.waiting.firstIndex(where: { $0.id == id }) else { return nil }
            return shared.waiting.remove(at: index).job
        }
        expired?.completion(.failure(TransformFailure(status: 503, reason: "the transform waited longer than transform-queue-timeout (\(queueTimeout.inSeconds)s) for a worker", label: "queue_timeout")), 0)
    }

    /// A worker thread: takes the oldest waiting job, runs it, reports it; ends when the pool goes.
    private static func work(_ shared: Shared, run: @Sendable (Job) -> Result<TransformedImage, TransformFailure>) {
        while true {
            shared.condition.lock()
            while shared.waiting.isEmpty && !shared.stopped { shared.condition.wait() }
            if shared.stopped {
                shared.condition.unlock()
                return
            }
            let job = shared.waiting.removeFirst().job
            shared.busy += 1
            shared.condition.unlock()
            job.started?()
            let started = ContinuousClock.now
            let result = run(job)
            let elapsed = ContinuousClock.now - started
            job.completion(result, elapsed.inSeconds)
            shared.condition.lock()
            shared.busy -= 1
            shared.condition.unlock()
        }
    }
}
