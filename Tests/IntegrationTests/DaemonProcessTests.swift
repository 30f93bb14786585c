// The binary as systemd runs it: notifications, socket activation, SIGTERM drain, SIGHUP reload, the stats and
// prefetch subcommands, the unit files and `make install`.

import Foundation
import Testing
@testable import ImageCacheStatus
@testable import ImageCacheCore
import ImageCacheTestSupport

@Suite("The daemon process under systemd's contract", .timeLimit(.minutes(2)))
struct DaemonProcessTests {
    static let png = Fixtures.png(size: 40_000)

    static func image(gate: Gate? = nil) -> Reply {
        Reply(status: 200, headers: [("Content-Type", "image/png"), ("Cache-Control", "max-age=600")], body: png, gate: gate)
    }

    /// A configuration file mapping / to `origin`, removed at the end of the test by the caller.
    static func configFile(_ origin: TestOrigin, extra: String = "") throws -> URL {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("imagecached-proc-\(UUID().uuidString).yaml")
        try "listen: 127.0.0.1:0\norigin: \(origin.baseURL)\nmemory-limit: 16MiB\ndisk-limit: 0\n\(extra)"
            .write(to: file, atomically: true, encoding: .utf8)
        return file
    }

    static func stats(port: Int) async throws -> DaemonStats {
        let response = try await offPool { try TestClient.get(port: port, "/_imagecached/stats") }
        return try DaemonStats.decode(Data(response.body))
    }

    @Test("with NOTIFY_SOCKET it sends READY=1 once listening, then STATUS=, WATCHDOG=1, RELOADING=1 on SIGHUP, then STOPPING=1 on SIGTERM")
    func notifications() async throws {
        // Given a notification socket and a daemon told about it
        let origin = try TestOrigin()
        defer { origin.stop() }
        let config = try DaemonProcessTests.configFile(origin)
        defer { try? FileManager.default.removeItem(at: config) }
        let notify = try NotifySocket()
        let process = try DaemonProcess(["--config", config.path], environment: ["NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "200000"])
        defer { process.kill9() }
        // When
        let ready = await notify.receive(until: "READY=1")
        let port = await process.port()
        let watchdog = await notify.receive(until: "WATCHDOG=1")
        process.send(SIGHUP)
        let reload = await notify.receive(until: "READY=1")
        process.send(SIGTERM)
        let stopping = await notify.receive(until: "STOPPING=1")
        let status = await process.waitForExit()
        // Then
        #expect(watchdog != nil, "no WATCHDOG=1 at half of WATCHDOG_USEC")
        let messages = (ready ?? []) + (watchdog ?? []) + (reload ?? []) + (stopping ?? [])
        let readyIndex = try #require(messages.firstIndex { $0.contains("READY=1") })
        let statusIndex = try #require(messages.firstIndex { $0.contains("STATUS=serving on port") })
        let stoppingIndex = try #require(messages.firstIndex { $0.contains("STOPPING=1") })
        #expect(readyIndex <= statusIndex)
        #expect(statusIndex < stoppingIndex)
        #expect(messages.contains { $0.contains("RELOADING=1") })
        #expect(messages[readyIndex].contains("MAINPID=\(process.pid)"))
        #expect(port != nil)
        #expect(status == 0)
    }

    @Test("socket activation: with LISTEN_FDS=1 and LISTEN_PID it serves on fd 3, not on its listen address")
    func socketActivation() async throws {
        // Given a listening socket made by "systemd" and a listen address that is never bound
        let origin = try TestOrigin()
        defer { origin.stop() }
        origin.route("/a.png") { _ in DaemonProcessTests.image() }
        let config = try DaemonProcessTests.configFile(origin)
        defer { try? FileManager.default.removeItem(at: config) }
        let (fd, port) = try makeListeningSocket()
        defer { close(fd) }
        // When
        let process = try DaemonProcess(["--config", config.path, "--listen", "127.0.0.1:1"], listeningFD: fd)
        defer { process.kill9() }
        #expect(await process.waitForLog("1 socket(s) from systemd (fd 3), first on port \(port)"), "\(process.log)")
        let first = try await offPool { try TestClient.get(port: port, "/a.png") }
        let second = try await offPool { try TestClient.get(port: port, "/a.png") }
        process.send(SIGTERM)
        // Then
        #expect(first.status == 200)
        expectSameBytes(first.body, DaemonProcessTests.png)
        #expect(second.header("X-Cache") == "HIT")
        #expect(await process.waitForExit() == 0)
    }

    @Test("socket activation with a socket named tls (imagecached-tls.socket): it serves HTTPS there with tls-cert and tls-key, whatever the order of the sockets")
    func socketActivationTLS() async throws {
        let origin = try TestOrigin()
        defer { origin.stop() }
        origin.route("/a.png") { _ in DaemonProcessTests.image() }
        let config = try DaemonProcessTests.configFile(origin)
        defer { try? FileManager.default.removeItem(at: config) }
        let directory = try TestPKI.makeDirectory()
        let ca = try TestPKI.makeCA(named: "activation-ca", commonName: "activation test CA", permittedDNS: nil, in: directory)
        let leaf = try TestPKI.issueLeaf(named: "activation", dnsNames: ["localhost"], by: ca, in: directory)
        let (tlsFD, tlsPort) = try makeListeningSocket()
        defer { close(tlsFD) }
        let (plainFD, plainPort) = try makeListeningSocket()
        defer { close(plainFD) }
        // The tls socket first: the plain one is still the main listener
        let process = try DaemonProcess(["--config", config.path, "--listen", "127.0.0.1:1",
                                         "--tls-cert", leaf.certificateFile.path, "--tls-key", leaf.keyFile.path],
                                        listeningFDs: [tlsFD, plainFD], names: ["tls", "imagecached.socket"])
        defer { process.kill9() }
        #expect(await process.waitForLog("2 socket(s) from systemd"), "\(process.log)")
        let plain = try await offPool { try TestClient.get(port: plainPort, "/a.png") }
        #expect(plain.status == 200)
        let https = try await offPool { () -> (Int32, [UInt8]) in
            let curl = Process()
            curl.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
            curl.arguments = ["-s", "--noproxy", "*", "--cacert", ca.certificateFile.path, "--max-time", "10",
                              "https://localhost:\(tlsPort)/a.png"]
            let out = Pipe()
            curl.standardOutput = out
            try curl.run()
            let body = out.fileHandleForReading.readDataToEndOfFile()
            curl.waitUntilExit()
            return (curl.terminationStatus, Array(body))
        }
        process.send(SIGTERM)
        #expect(https.0 == 0)
        expectSameBytes(https.1, DaemonProcessTests.png)
        #expect(await process.waitForExit() == 0)
    }

    @Test("one event loop per allowed CPU, each pinned to its own CPU by default; unpinned with --server-cpu-affinity off; a narrower mask (taskset) means fewer loops")
    func loopsFollowTheCPUMask() async throws {
        let origin = try TestOrigin()
        defer { origin.stop() }
        origin.route("/a.png") { _ in DaemonProcessTests.image() }
        let config = try DaemonProcessTests.configFile(origin)
        defer { try? FileManager.default.removeItem(at: config) }
        let allowed = allowedCPUsOfThisProcess()
        try #require(!allowed.isEmpty)

        // Default (auto): loop i on the i-th allowed CPU, and it serves
        let pinned = try DaemonProcess(["--config", config.path])
        defer { pinned.kill9() }
        let port = try #require(await pinned.port())
        let response = try await offPool { try TestClient.get(port: port, "/a.png") }
        expectSameBytes(response.body, DaemonProcessTests.png)
        let pinnedLoops = pinned.loopCPUs()
        #expect(pinnedLoops.count == allowed.count, "\(pinnedLoops)")
        for (index, cpu) in allowed.enumerated() {
            #expect(pinnedLoops["icd.loop.\(index)"] == [cpu], "\(pinnedLoops)")
        }

        // off: every loop may run on every allowed CPU
        let unpinned = try DaemonProcess(["--config", config.path, "--server-cpu-affinity", "off"])
        defer { unpinned.kill9() }
        #expect(await unpinned.port() != nil)
        let unpinnedLoops = unpinned.loopCPUs()
        #expect(unpinnedLoops.count == allowed.count)
        #expect(unpinnedLoops.values.allSatisfy { $0 == allowed }, "\(unpinnedLoops)")

        // Under taskset -c <last allowed CPU>: one loop, on that CPU, and it serves
        let last = try #require(allowed.last)
        let narrowed = try DaemonProcess(["--config", config.path], cpus: String(last))
        defer { narrowed.kill9() }
        let narrowedPort = try #require(await narrowed.port())
        let narrowedResponse = try await offPool { try TestClient.get(port: narrowedPort, "/a.png") }
        expectSameBytes(narrowedResponse.body, DaemonProcessTests.png)
        #expect(narrowed.loopCPUs() == ["icd.loop.0": [last]])

        // A value that is neither auto nor off is refused with the reason
        let refused = try DaemonProcess(["--config", config.path, "--server-cpu-affinity", "always"])
        defer { refused.kill9() }
        #expect(await refused.waitForExit() == 2, "a configuration error exits 2")
        #expect(refused.log.contains("--server-cpu-affinity: 'always' is not auto or off"), "\(refused.log)")
    }

    @Test("SIGTERM during a slow transfer lets it finish, then the daemon exits 0")
    func sigtermDrains() async throws {
        // Given an origin that holds the body after its first 8 KB
        let origin = try TestOrigin()
        defer { origin.stop() }
        let gate = Gate()
        origin.route("/slow.png") { _ in
            var reply = DaemonProcessTests.image(gate: gate)
            reply.gateAfterBytes = 8192
            return reply
        }
        let config = try DaemonProcessTests.configFile(origin, extra: "shutdown-timeout: 20s\n")
        defer { try? FileManager.default.removeItem(at: config) }
        let process = try DaemonProcess(["--config", config.path])
        defer { process.kill9() }
        let port = try #require(await process.port())
        let client = try TestConnection(port: port)
        try client.request("/slow.png")
        try await origin.waitForRequests("/slow.png", count: 1)
        // When: SIGTERM arrives mid-body, then the origin finishes
        process.send(SIGTERM)
        #expect(await process.waitForLog("stopping (requests in flight get up to 20.0 s)"))
        #expect(await process.waitForExit(timeout: 0.5) == nil, "exited with a response in flight")
        gate.open()
        let response = try await client.response()
        // Then
        #expect(response.status == 200)
        #expect(response.complete)
        expectSameBytes(response.body, DaemonProcessTests.png)
        #expect(await process.waitForExit() == 0)
        #expect(process.log.contains("stopped"))
    }

    @Test("SIGHUP applies a changed memory limit, and a broken file is refused with the reason in the log")
    func sighupReloads() async throws {
        // Given a daemon started from a file with memory-limit 16MiB
        let origin = try TestOrigin()
        defer { origin.stop() }
        let config = try DaemonProcessTests.configFile(origin)
        defer { try? FileManager.default.removeItem(at: config) }
        let process = try DaemonProcess(["--config", config.path])
        defer { process.kill9() }
        let port = try #require(await process.port())
        let before = try await DaemonProcessTests.stats(port: port)
        // When the file says 8MiB and the daemon gets SIGHUP
        try "listen: 127.0.0.1:0\norigin: \(origin.baseURL)\nmemory-limit: 8MiB\ndisk-limit: 0\n".write(to: config, atomically: true, encoding: .utf8)
        process.send(SIGHUP)
        #expect(await process.waitForLog("reloaded: memory limit 8388608 bytes"))
        let after = try await DaemonProcessTests.stats(port: port)
        // When the file is broken and the daemon gets SIGHUP again
        try "memory-limit: lots\n".write(to: config, atomically: true, encoding: .utf8)
        process.send(SIGHUP)
        #expect(await process.waitForLog("reload refused"))
        let refused = try await DaemonProcessTests.stats(port: port)
        // When the file is empty (being written) and the daemon gets SIGHUP again
        try "# nothing yet\n".write(to: config, atomically: true, encoding: .utf8)
        process.send(SIGHUP)
        #expect(await process.waitForLog("the file holds no setting"))
        let empty = try await DaemonProcessTests.stats(port: port)
        let stillServing = try await offPool { try TestClient.get(port: port, "/_imagecached/health") }
        process.send(SIGTERM)
        // Then
        #expect(before.memory.limitBytes == 16 << 20)
        #expect(after.memory.limitBytes == 8 << 20)
        #expect(refused.memory.limitBytes == 8 << 20)
        #expect(refused.reloadFailures == 1)
        #expect(empty.memory.limitBytes == 8 << 20, "an empty file must not reset the configuration to its defaults")
        #expect(empty.reloadFailures == 2)
        #expect(stillServing.status == 200)
        #expect(process.log.contains("'lots' is not a size"))
        #expect(await process.waitForExit() == 0)
    }

    @Test("imagecached prefetch warms N URLs with N origin requests, then none; a failed URL is named and exits 1; stats summarises")
    func prefetchAndStatsCommands() async throws {
        // Given a daemon and a list of 6 URLs
        let origin = try TestOrigin()
        defer { origin.stop() }
        let paths = (0..<6).map { "/w\($0).png" }
        for path in paths { origin.route(path) { _ in DaemonProcessTests.image() } }
        let config = try DaemonProcessTests.configFile(origin)
        defer { try? FileManager.default.removeItem(at: config) }
        let process = try DaemonProcess(["--config", config.path])
        defer { process.kill9() }
        let port = try #require(await process.port())
        let list = FileManager.default.temporaryDirectory.appendingPathComponent("imagecached-urls-\(UUID().uuidString).txt")
        defer { try? FileManager.default.removeItem(at: list) }
        try (paths.map { origin.baseURL + $0 }.joined(separator: "\n") + "\n").write(to: list, atomically: true, encoding: .utf8)
        let address = "127.0.0.1:\(port)"
        // When
        let (firstStatus, firstOut, _) = try await CLITests.run(["prefetch", list.path, "--address", address])
        let afterFirst = paths.map { origin.requestCount($0) }
        let (secondStatus, secondOut, _) = try await CLITests.run(["prefetch", list.path, "--address", address])
        try (origin.baseURL + "/absent.png\n" + origin.baseURL + paths[0] + "\n").write(to: list, atomically: true, encoding: .utf8)
        let (failedStatus, failedOut, _) = try await CLITests.run(["prefetch", list.path, "--address", address])
        let (stdinStatus, stdinOut) = try await offPool { () -> (Int32, String) in
            let process = Process()
            process.executableURL = CLITests.binary
            process.arguments = ["prefetch", "-", "--address", address]
            let input = Pipe(), output = Pipe()
            process.standardInput = input
            process.standardOutput = output
            process.standardError = FileHandle.nullDevice
            try process.run()
            input.fileHandleForWriting.write(Data((origin.baseURL + paths[1] + "\n" + origin.baseURL + paths[2] + "\n").utf8))
            try input.fileHandleForWriting.close()
            let data = output.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            return (process.terminationStatus, String(decoding: data, as: UTF8.self))
        }
        let (statsStatus, statsOut, _) = try await CLITests.run(["stats", "--address", address])
        process.send(SIGTERM)
        // Then
        #expect(firstStatus == 0)
        #expect(firstOut.contains("prefetched 6 of 6 URLs"), "\(firstOut)")
        #expect(afterFirst == [1, 1, 1, 1, 1, 1])
        #expect(secondStatus == 0)
        #expect(secondOut.contains("prefetched 6 of 6 URLs"))
        #expect(paths.map { origin.requestCount($0) } == [1, 1, 1, 1, 1, 1])
        #expect(failedStatus == 1)
        #expect(failedOut.contains("1 failed"))
        #expect(failedOut.contains("failed: \(origin.baseURL)/absent.png"))
        #expect(stdinStatus == 0)
        #expect(stdinOut.contains("prefetched 2 of 2 URLs"), "\(stdinOut)")
        #expect(statsStatus == 0)
        #expect(statsOut.contains("requests      16, hit ratio 56."), "\(statsOut)")  // 9 hits of 16 requests (6 misses, 1 error)
        #expect(statsOut.contains("127.0.0.1: 7 transfers"))
        #expect(statsOut.contains("coalescing"))
        #expect(await process.waitForExit() == 0)
    }

    /// The units as `make install` writes them (ExecStart naming an executable that exists), in a new temporary
    /// directory that the caller removes; returns the directory and the service's text.
    static func installedUnits() throws -> (directory: URL, service: String) {
        let root = RepositoryPath.root
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("imagecached-units-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let service = try String(contentsOf: root.appendingPathComponent("systemd/imagecached.service"), encoding: .utf8)
            .replacingOccurrences(of: "/usr/local/bin/imagecached", with: CLITests.binary.path)
        try service.write(to: directory.appendingPathComponent("imagecached.service"), atomically: true, encoding: .utf8)
        for socket in ["imagecached.socket", "imagecached-tls.socket", "imagecached-memcached.service"] {
            try FileManager.default.copyItem(at: root.appendingPathComponent("systemd/\(socket)"),
                                             to: directory.appendingPathComponent(socket))
        }
        return (directory, service)
    }

    /// Runs `systemd-analyze arguments` in `directory`; returns its exit status and its output (stdout and stderr).
    static func systemdAnalyze(_ arguments: [String], in directory: URL) async throws -> (Int32, String) {
        let analyze = "/usr/bin/systemd-analyze"
        try #require(FileManager.default.isExecutableFile(atPath: analyze), "systemd-analyze missing: run scripts/install-deps")
        return try await offPool { () -> (Int32, String) in
            let process = Process()
            process.executableURL = URL(fileURLWithPath: analyze)
            process.arguments = arguments
            process.currentDirectoryURL = directory
            let pipe = Pipe()
            process.standardOutput = pipe
            process.standardError = pipe
            try process.run()
            let data = pipe.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            return (process.terminationStatus, String(decoding: data, as: UTF8.self))
        }
    }

    @Test("systemd-analyze verify accepts the units (the daemon's, its sockets, and the fleet's memcached)")
    func unitsVerify() async throws {
        // Given the units as make install writes them
        let (directory, service) = try DaemonProcessTests.installedUnits()
        defer { try? FileManager.default.removeItem(at: directory) }
        // When
        let (status, output) = try await DaemonProcessTests.systemdAnalyze(["verify", "imagecached.service", "imagecached.socket", "imagecached-tls.socket",
                                                                            "imagecached-memcached.service"],
                                                                           in: directory)
        // Then
        #expect(status == 0, "\(output)")
        #expect(output.isEmpty, "\(output)")
        #expect(service.contains("Type=notify"))
        #expect(service.contains("ExecReload=/bin/kill -HUP $MAINPID"))
    }

    @Test("systemd-analyze security rates the service's sandbox 2.0 or lower (OK), from 5.5 MEDIUM")
    func unitSecurityExposure() async throws {
        // Given the service as make install writes it
        let (directory, _) = try DaemonProcessTests.installedUnits()
        defer { try? FileManager.default.removeItem(at: directory) }
        // When (--threshold is on systemd's scale of 0 to 100: over 20, the exit status is not 0)
        let (status, output) = try await DaemonProcessTests.systemdAnalyze(
            ["security", "--offline=yes", "--threshold=20", "--no-pager", "imagecached.service"], in: directory)
        // Then ("→ Overall exposure level for imagecached.service: 1.2 OK 🙂")
        let line = output.split(separator: "\n").first { $0.contains("Overall exposure level for imagecached.service:") }
        let level = line.flatMap { $0.split(separator: ":").last?.split(separator: " ").first }.flatMap { Double($0) }
        #expect(status == 0, "\(output)")
        let exposure = try #require(level, "no overall exposure level in:\n\(output)")
        #expect(exposure <= 2.0, "\(output)")
    }

    @Test("make install puts the binary, the units, the configuration and the manual under DESTDIR and PREFIX")
    func makeInstall() async throws {
        let root = RepositoryPath.root
        let destdir = FileManager.default.temporaryDirectory.appendingPathComponent("imagecached-destdir-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: destdir) }
        // When (BINARY: the debug build, so the test does not make a release build)
        let (status, output) = try await offPool { () -> (Int32, String) in
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/make")
            process.arguments = ["-C", root.path, "install", "DESTDIR=\(destdir.path)", "PREFIX=/usr", "BINARY=\(CLITests.binary.path)"]
            let pipe = Pipe()
            process.standardOutput = pipe
            process.standardError = pipe
            try process.run()
            let data = pipe.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            return (process.terminationStatus, String(decoding: data, as: UTF8.self))
        }
        // Then
        #expect(status == 0, "\(output)")
        let files = FileManager.default
        #expect(files.isExecutableFile(atPath: destdir.path + "/usr/bin/imagecached"))
        #expect(files.fileExists(atPath: destdir.path + "/etc/imagecached/imagecached.yaml"))
        #expect(files.fileExists(atPath: destdir.path + "/usr/lib/systemd/system/imagecached.socket"))
        #expect(files.fileExists(atPath: destdir.path + "/usr/lib/systemd/system/imagecached-tls.socket"))
        #expect(files.fileExists(atPath: destdir.path + "/usr/share/doc/imagecached/README.md"))
        #expect(files.fileExists(atPath: destdir.path + "/usr/share/doc/imagecached/docs/configuration.md"))
        #expect(files.fileExists(atPath: destdir.path + "/usr/share/doc/imagecached/docs/status-page.png"))
        let service = try String(contentsOfFile: destdir.path + "/usr/lib/systemd/system/imagecached.service", encoding: .utf8)
        #expect(service.contains("ExecStart=/usr/bin/imagecached --config /etc/imagecached/imagecached.yaml"))
    }
}
