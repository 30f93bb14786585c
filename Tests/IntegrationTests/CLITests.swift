// The imagecached binary itself: its command line contract, configuration errors, start line, and SIGTERM.

import Foundation
import ImageCacheConfig
import Testing
import ImageCacheTestSupport

@Suite("The imagecached command", .timeLimit(.minutes(2)))
struct CLITests {
    /// The built executable, next to the test bundle (swift build --build-tests builds both).
    static var binary: URL {
        let candidates = [
            URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("imagecached"),
            RepositoryPath.at(".build/debug/imagecached"),
        ]
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0.path) } ?? candidates[1]
    }

    /// Runs the binary to completion (with `environment` instead of the test's own, when given); returns (exit
    /// status, stdout, stderr).
    static func run(_ arguments: [String], environment: [String: String]? = nil) async throws -> (Int32, String, String) {
        try await offPool {
            let result = try Subprocess.run(binary.path, arguments, environment: environment)
            return (result.exitCode, result.outputText, result.errorText)
        }
    }

    @Test("--help lists every flag of the table of keys, --config, and the subcommands")
    func help() async throws {
        let (status, stdout, _) = try await CLITests.run(["--help"])
        #expect(status == 0)
        let flags = ConfigKey.all.compactMap(\.flag) + ["--config"]
        #expect(flags.count > 40)
        for flag in flags {
            #expect(stdout.contains("  \(flag)"), "\(flag) missing from --help")
        }
        for subcommand in ["purge", "stats", "prefetch", "config", "sign", "ca"] {
            #expect(stdout.contains("  \(subcommand) "), "\(subcommand) missing from --help")
        }
    }

    @Test("an unknown flag exits 2 naming it; a subcommand's own help still works")
    func unknownFlag() async throws {
        let (status, _, stderr) = try await CLITests.run(["--memory-limmit", "1MiB"])
        #expect(status == 2)
        #expect(stderr.contains("--memory-limmit: unknown flag"), "\(stderr)")
        let (helpStatus, helpOut, _) = try await CLITests.run(["help", "purge"])
        #expect(helpStatus == 0 && helpOut.contains("--all"))
    }

    @Test("a bad value exits non-zero naming the key and the reason", arguments: [
        (["--memory-limit", "lots"], "--memory-limit: 'lots' is not a size"),
        (["--listen", "nowhere"], "--listen: 'nowhere' is not HOST:PORT"),
        (["--config", "/nonexistent/imagecached.yaml"], "cannot read the configuration file"),
        (["--in-flight-limit", "1023KiB"], "--in-flight-limit: must be at least 1MiB"),
        (["--server-write-buffer", "8KiB"], "--server-write-buffer: must be at least 16KiB"),
    ])
    func badValue(arguments: [String], message: String) async throws {
        let (status, _, stderr) = try await CLITests.run(arguments)
        #expect(status == 2)
        #expect(stderr.contains(message), "stderr was: \(stderr)")
    }

    @Test("an environment variable is a setting too, and a bad one is reported by name")
    func environment() async throws {
        let (status, _, stderr) = try await offPool {
            let result = try Subprocess.run(CLITests.binary.path, [],
                                            environment: ["IMAGECACHED_UPSTREAM_QUEUE_ORDER": "sideways", "PATH": "/usr/bin:/bin"])
            return (result.exitCode, "", result.errorText)
        }
        #expect(status == 2)
        #expect(stderr.contains("IMAGECACHED_UPSTREAM_QUEUE_ORDER: 'sideways' is not fifo or lifo"))
    }

    @Test("it starts from a configuration file, logs where it listens, serves, and exits 0 on SIGTERM")
    func startAndStop() async throws {
        // Given an origin and a configuration file that maps / to it
        let origin = try TestOrigin()
        defer { origin.stop() }
        let body = Fixtures.jpeg(size: 5000)
        origin.route("/x.jpg") { _ in Reply(status: 200, headers: [("Content-Type", "image/jpeg"), ("Cache-Control", "max-age=60")], body: body) }
        let config = FileManager.default.temporaryDirectory.appendingPathComponent("imagecached-cli-\(UUID().uuidString).yaml")
        let cacheDirectory = config.path + ".cache"
        try "listen: 127.0.0.1:0\norigin: \(origin.baseURL)\nmemory-limit: 16MiB\ncache-dir: \(cacheDirectory)\n"
            .write(to: config, atomically: true, encoding: .utf8)
        defer {
            try? FileManager.default.removeItem(at: config)
            try? FileManager.default.removeItem(atPath: cacheDirectory)
        }
        let process = try DaemonProcess(["--config", config.path])
        defer { process.kill9() }
        // When: the start line names the port
        let port = try #require(await process.port())
        #expect(process.log.contains("reverse proxy (/ -> \(origin.baseURL))"))
        let image = try await offPool { try TestClient.get(port: port, "/x.jpg") }
        let health = try await offPool { try TestClient.get(port: port, "/_imagecached/health") }
        process.send(SIGTERM)
        // Then
        #expect(await process.waitForExit() == 0)
        expectSameBytes(image.body, body)
        #expect(health.text == "ok\n")
    }

    @Test("config check: a good file exits 0 and says ok; a bad value, an unknown key and an empty file exit 1 with the first error")
    func configCheck() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("imagecached-check-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        func file(_ name: String, _ text: String) throws -> String {
            let url = directory.appendingPathComponent(name)
            try text.write(to: url, atomically: true, encoding: .utf8)
            return url.path
        }
        let good = try file("good.yaml", "listen: 127.0.0.1:9090\norigin: http://img.example\nmemory-limit: 64MiB\n")
        let badValue = try file("bad.yaml", "memory-limit: lots\n")
        let unknown = try file("unknown.yaml", "memory-limmit: 1MiB\n")
        let empty = try file("empty.yaml", "# only a comment\n")
        let (okStatus, okOut, _) = try await CLITests.run(["config", "check", good])
        #expect(okStatus == 0)
        #expect(okOut == "\(good): ok (listen 127.0.0.1:9090, 1 origin(s))\n")
        for (path, message) in [(badValue, "'lots' is not a size"), (unknown, "memory-limmit"), (empty, "the file holds no setting")] {
            let (status, _, stderr) = try await CLITests.run(["config", "check", path])
            #expect(status == 1)
            #expect(stderr.contains(message), "stderr was: \(stderr)")
        }
    }
}
