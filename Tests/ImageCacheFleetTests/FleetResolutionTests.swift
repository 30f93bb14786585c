// Servers named by a name, not an IP literal: the tier resolves them off its thread, again when a connect fails and at
// each probe while a name does not resolve. The resolver is the tests' own (FleetTier's seam: the daemon's is
// getaddrinfo): it answers from a script, or holds a resolution until the test lets it go, and records the thread it
// ran on. Synchronised with the tier's events and the resolver's own calls, never the clock.

import Dispatch
import Foundation
import Synchronization
import Testing
import ImageCacheTestSupport
@testable import ImageCacheFleet

/// A resolver for tests: each name answers from its script in turn (the last answer repeats); an answer may be held
/// (its resolution waits until `letGo`). It records every call and the name of the thread it ran on.
final class ScriptedResolver: Sendable {
    enum Answer: Sendable {
        case address(String)  // an IP literal
        case fails
        /// The address, once the test lets the resolution go.
        case held(String)
    }

    private struct State {
        var scripts: [String: [Answer]]
        var calls: [(host: String, thread: String)] = []
        var released = false
    }

    private let state: Mutex<State>
    private let release = DispatchSemaphore(value: 0)
    /// Yields a host's name when its resolution starts.
    let started: AsyncStream<String>
    private let startedContinuation: AsyncStream<String>.Continuation

    init(_ scripts: [String: [Answer]]) {
        state = Mutex(State(scripts: scripts))
        (started, startedContinuation) = AsyncStream.makeStream(of: String.self)
    }

    deinit { letGo() }

    var resolve: SocketAddress.Resolver {
        { [self] host, port in
            let (answer, released) = state.withLock { state -> (Answer, Bool) in
                state.calls.append((host, Self.threadName()))
                var script = state.scripts[host] ?? [.fails]
                let answer = script.count > 1 ? script.removeFirst() : script[0]
                state.scripts[host] = script
                return (answer, state.released)
            }
            startedContinuation.yield(host)
            switch answer {
            case let .held(literal):
                if !released { release.wait() }
                return SocketAddress.numeric(host: literal, port: port).map { .success($0) }
                    ?? .failure(ResolveError(message: "not a literal: \(literal)"))
            case let .address(literal):
                return SocketAddress.numeric(host: literal, port: port).map { .success($0) }
                    ?? .failure(ResolveError(message: "not a literal: \(literal)"))
            case .fails:
                return .failure(ResolveError(message: "Name or service not known"))
            }
        }
    }

    /// Lets the held resolutions go (those waiting, and any later one).
    func letGo() {
        let first = state.withLock { state in
            defer { state.released = true }
            return !state.released
        }
        if first { for _ in 0..<16 { release.signal() } }
    }

    var calls: [String] { state.withLock { $0.calls.map(\.host) } }
    var threads: Set<String> { state.withLock { Set($0.calls.map(\.thread)) } }

    /// The calling thread's name (/proc/thread-self/comm, where nameThisThread writes it).
    private static func threadName() -> String {
        let text = (try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? ""
        return text.trimmingCharacters(in: .newlines)
    }
}

@Suite(.serialized, .timeLimit(.minutes(1)))
struct FleetResolutionTests {
    @Test func aNameThatDoesNotResolveAtFirstOpensTheBreakerAndTheProbeResolvesItAgainWithoutARestart() async throws {
        // Given a server named `memcached-a.test`, whose name fails to resolve once and then resolves to 127.0.0.1
        // (that second answer held until the test lets it go)
        let memcached = try MemcachedProcess()
        let resolver = ScriptedResolver(["memcached-a.test": [.fails, .held("127.0.0.1")]])
        defer { resolver.letGo() }
        let server = FleetServer(host: "memcached-a.test", port: memcached.port)
        let a = TierUnderTest(servers: [server], resolve: resolver.resolve) { $0.breakerOpenSeconds = 0.2 }
        // When the tier starts, the failed resolution is an outage: the breaker opens at once
        #expect(await a.event { $0 == .nameResolved(server: server.description, address: nil) } != nil)
        #expect(await a.serverState(.down))
        // and the probe looks the name up again (held): meanwhile its keys are unavailable
        var started = resolver.started.makeAsyncIterator()
        #expect(await started.next() == "memcached-a.test")
        #expect(await started.next() == "memcached-a.test")
        let whileDown = await a.lookup("ic1:while-unresolved")
        #expect(whileDown.isUnavailable, "\(whileDown.name)")
        #expect(a.server.state == .probing)
        // Then once it resolves, the probe's `mn` closes the breaker: no restart needed
        resolver.letGo()
        #expect(await a.event { $0 == .nameResolved(server: server.description, address: "127.0.0.1") } != nil)
        #expect(await a.serverState(.up))
        #expect(await a.lookup("ic1:resolved").lease != nil)
        #expect(try memcached.command("mg ic1:resolved s").hasPrefix("HD"))
        #expect(resolver.calls == ["memcached-a.test", "memcached-a.test"])
        #expect(a.server.breakerOpens == 1)
        #expect(a.server.failures == 1)
        // And no resolution ran on the fleet thread
        #expect(resolver.threads == ["icd.fleet-dns"])
    }

    @Test func aConnectThatFailsResolvesTheNameAgainAndTheNewAddressIsUsed() async throws {
        // Given a name that first resolves to 127.0.0.2, where nothing listens on the port (refused), then to 127.0.0.1
        let memcached = try MemcachedProcess()
        let resolver = ScriptedResolver(["moved.test": [.address("127.0.0.2"), .address("127.0.0.1")]])
        let server = FleetServer(host: "moved.test", port: memcached.port)
        let a = TierUnderTest(servers: [server], resolve: resolver.resolve) {
            $0.breakerFailures = 1
            $0.breakerOpenSeconds = 0.2
        }
        #expect(await a.event { $0 == .nameResolved(server: server.description, address: "127.0.0.2") } != nil)
        // When the first connect is refused, the breaker opens and the name is resolved again at once
        #expect(await a.serverState(.down))
        #expect(await a.event { $0 == .nameResolved(server: server.description, address: "127.0.0.1") } != nil)
        // Then the probe connects to the new address and closes the breaker; the server is used there
        #expect(await a.serverState(.up))
        #expect(await a.lookup("ic1:moved").lease != nil)
        #expect(try memcached.command("mg ic1:moved s").hasPrefix("HD"))
        #expect(resolver.calls == ["moved.test", "moved.test"])
    }

    @Test func theFleetThreadServesOtherServersWhileANameResolvesSlowly() async throws {
        // Given two servers: one an IP literal, the other a name whose resolution is held by the test
        let fast = try MemcachedProcess(), slow = try MemcachedProcess()
        let resolver = ScriptedResolver(["slow.test": [.held("127.0.0.1")]])
        defer { resolver.letGo() }
        let servers = [FleetServer(host: "127.0.0.1", port: fast.port), FleetServer(host: "slow.test", port: slow.port)]
        let a = TierUnderTest(servers: servers, resolve: resolver.resolve)
        var started = resolver.started.makeAsyncIterator()
        #expect(await started.next() == "slow.test")
        let ring = FleetRing(servers: servers)
        let fastKey = try #require((0..<100).map { "ic1:fast-\($0)" }.first { ring.owner(of: $0) == 0 })
        let slowKey = try #require((0..<100).map { "ic1:slow-\($0)" }.first { ring.owner(of: $0) == 1 })
        // When the name's resolution hangs, the other server's operations go on: a lease, a store, a hit
        let lease = try #require(await a.lookup(fastKey).lease)
        #expect(await a.store(lease, Array("fast".utf8)) == .stored)
        #expect(await a.lookup(fastKey).value?.bytes == Array("fast".utf8))
        // and the named server's keys are unavailable at once (no address yet), without a failure counted
        let unresolved = await a.lookup(slowKey)
        #expect(unresolved.isUnavailable, "\(unresolved.name)")
        #expect(a.tier.stats().servers[1].failures == 0)
        #expect(a.tier.stats().servers[1].state == .up)
        // Then once the resolution answers, the named server is connected and used
        resolver.letGo()
        #expect(await a.event { $0 == .itemSizeMax(server: servers[1].description, bytes: 32 << 20) } != nil)
        #expect(await a.lookup(slowKey).lease != nil)
        #expect(try slow.command("mg \(slowKey) s").hasPrefix("HD"))
        #expect(resolver.calls == ["slow.test"])
        #expect(resolver.threads == ["icd.fleet-dns"])
    }
}
