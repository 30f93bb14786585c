import Foundation
import Synchronization
import Testing
@testable import ImageCacheServer
import ImageCacheSystem

/// The loop's own thread and its task inbox (the sockets are covered end to end by the integration tests).
@Suite("EventLoop", .timeLimit(.minutes(1)))
struct EventLoopTests {
    /// Signalled when released: tells that a task closure was let go without running it.
    final class ReleaseProbe: Sendable {
        let released: @Sendable () -> Void
        init(_ released: @escaping @Sendable () -> Void) { self.released = released }
        deinit { released() }
    }

    @Test("tasks posted from several threads all run on the loop's thread, each thread's in the order it posted them")
    func tasksRunInOrderOnTheLoop() async throws {
        // Given
        let loop = try EventLoop(index: 0)
        defer { loop.stop() }
        let seen = Locked<[Int: [Int]]>([:])
        let offLoop = Locked(0)
        let perThread = 2_000
        // When: two threads post 2,000 tasks each, concurrently
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            let remaining = Locked(2 * perThread)
            for poster in 0..<2 {
                Thread {
                    for n in 0..<perThread {
                        loop.execute {
                            if !loop.inLoop { offLoop.withLock { $0 += 1 } }
                            seen.withLock { $0[poster, default: []].append(n) }
                            if remaining.withLock({ $0 -= 1; return $0 }) == 0 { done.resume() }
                        }
                    }
                }.start()
            }
        }
        // Then
        #expect(offLoop.withLock { $0 } == 0)
        #expect(seen.withLock { $0[0] } == Array(0..<perThread))
        #expect(seen.withLock { $0[1] } == Array(0..<perThread))
        #expect(!loop.inLoop)
    }

    @Test("a task posted from the loop's own thread runs after the current one, not inside it")
    func taskFromTheLoopIsNotNested() async throws {
        // Given
        let loop = try EventLoop(index: 0)
        defer { loop.stop() }
        let order = Locked<[String]>([])
        // When
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            loop.execute {
                order.withLock { $0.append("outer begins") }
                loop.execute {
                    order.withLock { $0.append("inner") }
                    done.resume()
                }
                order.withLock { $0.append("outer ends") }
            }
        }
        // Then
        #expect(order.withLock { $0 } == ["outer begins", "outer ends", "inner"])
    }

    @Test("stop runs the tasks posted before it; a task posted after it is released without running")
    func stopDropsLaterTasks() async throws {
        // Given
        let loop = try EventLoop(index: 0)
        let ran = Locked<[String]>([])
        let gate = DispatchSemaphore(value: 0)
        // the loop is held in a task until stop and the late task are posted, so they wait in one batch
        await withCheckedContinuation { (holding: CheckedContinuation<Void, Never>) in
            loop.execute { holding.resume(); gate.wait() }
        }
        loop.execute { ran.withLock { $0.append("before stop") } }
        loop.stop()
        // When
        await withCheckedContinuation { (released: CheckedContinuation<Void, Never>) in
            let probe = ReleaseProbe { released.resume() }
            loop.execute { _ = probe; ran.withLock { $0.append("after stop") } }
            gate.signal()
        }
        // Then: released (the continuation resumed) and never run
        #expect(ran.withLock { $0 } == ["before stop"])
        // and so is any task posted later (at once once the thread has gone)
        await withCheckedContinuation { (released: CheckedContinuation<Void, Never>) in
            let probe = ReleaseProbe { released.resume() }
            loop.execute { _ = probe; ran.withLock { $0.append("much later") } }
        }
        #expect(ran.withLock { $0 } == ["before stop"])
    }
}
