// The daemon hands its local CA to the proxy (Daemon+LocalCA.swift, InterceptionCell): the CA in intercept-ca-dir is
// the generation in force after the start; a reload that finds the same files keeps it, leaves and all; a reload
// after `ca init --replace` starts a new one without the old leaves; a reload that empties intercept-hosts ends it.
// In process, without sockets: the daemon is built and reloaded, never started.

import Foundation
import Logging
import Testing
import ImageCacheHTTP
import ImageCacheSystem
import ImageCacheServer
import ImageCacheCertificates
@testable import ImageCacheConfig
@testable import ImageCacheCore
@testable import ImageCacheOps

@Suite("Interception generations in the daemon", .timeLimit(.minutes(1)))
struct InterceptGenerationTests {
    @Test("the start's CA is the proxy's generation; a reload keeps it for the same files, starts a new one for a replaced CA, ends it without intercept-hosts")
    func generationsFollowTheCA() throws {
        // Given a configuration intercepting images.test, with its CA directory of its own
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("imagecached-generations-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        var configuration = Configuration()
        configuration.listen = ListenAddress(host: "127.0.0.1", port: 0)
        configuration.diskLimitBytes = 0
        configuration.interceptHosts = try InterceptHosts.parse(["images.test"])
        configuration.interceptCADirectory = root.appendingPathComponent("ca").path
        let next = Locked(configuration)

        // When the daemon is built
        let daemon = try Daemon(configuration: configuration, logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() })
        defer { daemon.stop() }
        daemon.reloadSource = { next.withLock { $0 } }

        // Then the CA it made is the proxy's generation
        let directory = CADirectory(path: configuration.interceptCADirectory)
        let first = try #require(try directory.load())
        let generation = try #require(daemon.proxy.interception.current)
        #expect(generation.fingerprint == first.fingerprint)

        // When a reload finds the same files
        #expect(daemon.reload() == nil)
        // Then the generation is the same one
        #expect(daemon.proxy.interception.current === generation)

        // When the CA is replaced (ca init --replace) and the daemon reloads
        let second = try directory.create(hosts: configuration.interceptHosts, replace: true)
        #expect(daemon.reload() == nil)
        // Then a new generation, for the new CA, is in force
        let replaced = try #require(daemon.proxy.interception.current)
        #expect(replaced !== generation)
        #expect(replaced.fingerprint == second.fingerprint)

        // When intercept-hosts is emptied and the daemon reloads
        next.withLock { $0.interceptHosts = .none }
        #expect(daemon.reload() == nil)
        // Then nothing is intercepted
        #expect(daemon.proxy.interception.current == nil)
    }
}
