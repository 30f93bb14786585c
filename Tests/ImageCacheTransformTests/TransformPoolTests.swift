import Foundation
import Synchronization
import Testing
@testable import ImageCacheTransform
import ImageCacheSystem

/// A latch the pool's workers block on until the test opens it (the pool's `run` is synchronous, on a thread of its
/// own). Guarded by its condition.
final class WorkerGate: @unchecked Sendable {
    private let condition = NSCondition()
    private var isOpen = false

    func wait() {
        condition.lock()
        while !isOpen { condition.wait() }
        condition.unlock()
    }

    func open() {
        condition.lock()
        isOpen = true
        condition.broadcast()
        condition.unlock()
    }
}

// The pool's workers are threads of their own: tests that hold them blocked do not starve Swift's cooperative pool.
@Suite("TransformPool: workers, a bounded queue and its timeout", .timeLimit(.minutes(1)))
struct TransformPoolTests {
    enum Event: Sendable, Hashable {
        case started(Int)
        case finished(Int, status: Int, label: String)
    }

    /// A pool whose jobs report when they start, wait for `gate`, then finish with a marker result (status 200,
    /// label "ran"); every start and completion goes to the returned stream.
    static func pool(workers: Int, queueLimit: Int, queueTimeout: Duration, gate: WorkerGate)
        -> (TransformPool, AsyncStream<Event>, @Sendable (Int) -> Void) {
        let (events, sink) = AsyncStream<Event>.makeStream()
        let pool = TransformPool(workers: workers, queueLimit: queueLimit, queueTimeout: queueTimeout) { job in
            sink.yield(.started(Int(job.source[0])))
            gate.wait()
            return .failure(TransformFailure(status: 200, reason: "ran", label: "ran"))
        }
        let submit: @Sendable (Int) -> Void = { id in
            let spec = TransformSpec(options: TransformOptions(), format: .png, limits: TransformLimits())
            pool.submit(TransformPool.Job(source: [UInt8(id)], spec: spec) { result, _ in
                switch result {
                case .success: sink.yield(.finished(id, status: 0, label: "success"))
                case let .failure(failure): sink.yield(.finished(id, status: failure.status, label: failure.label))
                }
            })
        }
        return (pool, events, submit)
    }

    @Test("with every worker busy and the queue full, a submission is refused at once with 503 queue_full")
    func queueFull() async throws {
        // Given: one worker, one place in the queue
        let gate = WorkerGate()
        defer { gate.open() }
        let (pool, events, submit) = Self.pool(workers: 1, queueLimit: 1, queueTimeout: .seconds(60), gate: gate)
        var iterator = events.makeAsyncIterator()
        // When: the first runs (held), the second waits, the third finds no room
        submit(1)
        #expect(await iterator.next() == .started(1))
        submit(2)
        #expect(pool.running == 1 && pool.queued == 1)
        submit(3)
        // Then: the refusal comes before anything else happens (job 1 is still held)
        #expect(await iterator.next() == .finished(3, status: 503, label: "queue_full"))
        #expect(pool.running == 1 && pool.queued == 1)
        // and once the worker is free the queued job runs; the refused one never does.
        gate.open()
        #expect(await iterator.next() == .finished(1, status: 200, label: "ran"))
        #expect(await iterator.next() == .started(2))
        #expect(await iterator.next() == .finished(2, status: 200, label: "ran"))
    }

    @Test("a queued job withdrawn before a worker takes it never runs nor completes; one a worker has taken cannot be withdrawn")
    func withdraw() async throws {
        // Given: one worker held by job 1, jobs 2 and 3 queued
        let gate = WorkerGate()
        defer { gate.open() }
        let (events, sink) = AsyncStream<Event>.makeStream()
        let pool = TransformPool(workers: 1, queueLimit: 4, queueTimeout: .seconds(60)) { job in
            sink.yield(.started(Int(job.source[0])))
            gate.wait()
            return .failure(TransformFailure(status: 200, reason: "ran", label: "ran"))
        }
        let spec = TransformSpec(options: TransformOptions(), format: .png, limits: TransformLimits())
        func submit(_ id: Int) -> UInt64? {
            pool.submit(TransformPool.Job(source: [UInt8(id)], spec: spec) { _, _ in sink.yield(.finished(id, status: 200, label: "ran")) })
        }
        var iterator = events.makeAsyncIterator()
        let first = try #require(submit(1))
        #expect(await iterator.next() == .started(1))
        _ = submit(2)
        let third = try #require(submit(3))
        // When: 3 is withdrawn while queued, 1 while running
        #expect(pool.withdraw(third))
        #expect(!pool.withdraw(first))
        #expect(pool.queued == 1)
        // Then: 1 and 2 run and complete; 3 never appears
        gate.open()
        #expect(await iterator.next() == .finished(1, status: 200, label: "ran"))
        #expect(await iterator.next() == .started(2))
        #expect(await iterator.next() == .finished(2, status: 200, label: "ran"))
        // (the worker calls a job's completion before it counts itself free: `running` is not asserted here)
        #expect(pool.queued == 0)
        #expect(!pool.withdraw(third))
    }

    @Test("a job's started callback comes as a worker takes it, before it runs; never for a job withdrawn or refused")
    func startedCallback() async throws {
        // Given: one worker, one place in the queue, every callback recorded in order
        let gate = WorkerGate()
        defer { gate.open() }
        let (events, sink) = AsyncStream<String>.makeStream()
        let pool = TransformPool(workers: 1, queueLimit: 1, queueTimeout: .seconds(60)) { job in
            sink.yield("run \(job.source[0])")
            gate.wait()
            return .failure(TransformFailure(status: 200, reason: "ran", label: "ran"))
        }
        let spec = TransformSpec(options: TransformOptions(), format: .png, limits: TransformLimits())
        func submit(_ id: Int) -> UInt64? {
            pool.submit(TransformPool.Job(source: [UInt8(id)], spec: spec, started: { sink.yield("started \(id)") }) { result, _ in
                if case let .failure(failure) = result { sink.yield("done \(id) \(failure.label)") }
            })
        }
        var iterator = events.makeAsyncIterator()
        // When: 1 runs (held), 2 waits and is withdrawn, 3 waits, 4 finds no room
        _ = submit(1)
        #expect(await iterator.next() == "started 1")
        #expect(await iterator.next() == "run 1")
        let second = try #require(submit(2))
        #expect(pool.withdraw(second))
        _ = submit(3)
        #expect(submit(4) == nil)
        // Then: 4's refusal, then 1 ends, then 3 starts and runs; 2 and 4 never start
        #expect(await iterator.next() == "done 4 queue_full")
        gate.open()
        #expect(await iterator.next() == "done 1 ran")
        #expect(await iterator.next() == "started 3")
        #expect(await iterator.next() == "run 3")
        #expect(await iterator.next() == "done 3 ran")
    }

    @Test("the refusal's reason names the queue")
    func queueFullReason() {
        // Given: no queue at all and the only worker held
        let gate = WorkerGate()
        defer { gate.open() }
        let failures = Locked<[TransformFailure]>([])
        let pool = TransformPool(workers: 1, queueLimit: 0, queueTimeout: .seconds(60)) { _ in
            gate.wait()
            return .failure(TransformFailure(status: 200, reason: "ran", label: "ran"))
        }
        let spec = TransformSpec(options: TransformOptions(), format: .png, limits: TransformLimits())
        pool.submit(TransformPool.Job(source: [1], spec: spec) { _, _ in })
        // When
        pool.submit(TransformPool.Job(source: [2], spec: spec) { result, seconds in
            if case let .failure(failure) = result { failures.withLock { $0.append(failure) } }
            #expect(seconds == 0)
        })
        // Then: answered synchronously, on the caller's thread
        let failure = failures.withLock { $0.first }
        #expect(failure?.status == 503 && failure?.label == "queue_full")
        #expect(failure?.reason.contains("transform queue is full") == true)
    }

    @Test("a queued job that waits longer than the queue timeout is refused with 503 queue_timeout while the first runs")
    func queueTimeout() async throws {
        // Given: one worker held by the first job, a queue with room
        let gate = WorkerGate()
        defer { gate.open() }
        let (pool, events, submit) = Self.pool(workers: 1, queueLimit: 4, queueTimeout: .milliseconds(50), gate: gate)
        var iterator = events.makeAsyncIterator()
        submit(1)
        #expect(await iterator.next() == .started(1))
        // When
        submit(2)
        #expect(pool.queued == 1)
        // Then: job 2 is refused while job 1 is still held (the gate is shut until after this event)
        #expect(await iterator.next() == .finished(2, status: 503, label: "queue_timeout"))
        #expect(pool.queued == 0 && pool.running == 1)
        // and job 1 completes normally once released; job 2 never ran.
        gate.open()
        #expect(await iterator.next() == .finished(1, status: 200, label: "ran"))
        submit(3)
        #expect(await iterator.next() == .started(3))
        #expect(await iterator.next() == .finished(3, status: 200, label: "ran"))
    }

    @Test("queued jobs run in submission order")
    func submissionOrder() async throws {
        // Given: one worker held, five jobs queued behind it
        let gate = WorkerGate()
        defer { gate.open() }
        let (pool, events, submit) = Self.pool(workers: 1, queueLimit: 8, queueTimeout: .seconds(60), gate: gate)
        var iterator = events.makeAsyncIterator()
        submit(0)
        #expect(await iterator.next() == .started(0))
        for id in 1...5 { submit(id) }
        #expect(pool.queued == 5)
        // When
        gate.open()
        // Then
        var order: [Event] = []
        for _ in 0..<11 { if let event = await iterator.next() { order.append(event) } }
        let expected: [Event] = [.finished(0, status: 200, label: "ran")]
            + (1...5).flatMap { [Event.started($0), .finished($0, status: 200, label: "ran")] }
        #expect(order == expected)
    }

    @Test("each worker runs one job at once: two workers start two jobs before either ends, the third waits")
    func workersInParallel() async throws {
        // Given
        let gate = WorkerGate()
        defer { gate.open() }
        let (pool, events, submit) = Self.pool(workers: 2, queueLimit: 4, queueTimeout: .seconds(60), gate: gate)
        var iterator = events.makeAsyncIterator()
        // When
        submit(1)
        submit(2)
        submit(3)
        // Then: both held jobs have started (on a 2-CPU machine this await takes ~1 s: the two blocked workers fill
        // libdispatch's global pool and it adds a thread for this task only after a while) (neither could finish: the gate is shut) and the third is queued
        let first = await iterator.next(), second = await iterator.next()
        #expect(Set([first, second]) == [.started(1), .started(2)])
        #expect(pool.running == 2 && pool.queued == 1)
        gate.open()
        var finished: Set<Int> = []
        while finished.count < 3, let event = await iterator.next() {
            if case let .finished(id, status, _) = event, status == 200 { finished.insert(id) }
        }
        #expect(finished == [1, 2, 3])
    }
}
