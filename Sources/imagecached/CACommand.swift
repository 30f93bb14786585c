// `imagecached ca`: the local CA that interception signs with (docs/operations.md, The local CA).
//   ca init [--replace]    make it for intercept-hosts (from the configuration, as the daemon reads it: --daemon-config
//                          or IMAGECACHED_CONFIG, the environment); refuses when one is there unless --replace
//   ca path                print its certificate's path
//   ca install             (root) copy the certificate into Debian's trust store and run update-ca-certificates
// Each takes --intercept-ca-dir DIR (default: the configuration's, else $STATE_DIRECTORY/ca, XDG state, ~/.local/state).
// Exits 2 on a configuration error, 1 when the CA cannot be made, found or installed (the CAError's fix printed).

import ImageCacheHTTP
import ImageCacheConfig
import ImageCacheCertificates
import ArgumentParser
import Foundation

struct CA: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ca", abstract: "The local CA for intercepted tunnels: make it, print where it is, add it to the system's trust store.",
        subcommands: [Init.self, Path.self, Install.self])

    /// Where the CA is, and the configuration it is made for.
    struct Options: ParsableArguments {
        @Option(name: .customLong("intercept-ca-dir"), help: ArgumentHelp("The CA's directory. Default: intercept-ca-dir from the configuration, else $STATE_DIRECTORY/ca, $XDG_STATE_HOME/imagecached/ca or ~/.local/state/imagecached/ca.", valueName: "DIR"))
        var directory: String?
        @Option(name: .customLong("daemon-config"), help: "The daemon's configuration file (default $IMAGECACHED_CONFIG), for intercept-hosts and intercept-ca-dir.")
        var daemonConfig: String?

        /// The configuration as the daemon would read it (file, environment), with --intercept-ca-dir over it.
        func configuration() throws -> Configuration {
            let environment = ProcessInfo.processInfo.environment
            let flags = directory.map { [ConfigSetting(key: "intercept-ca-dir", value: .scalar($0), source: "--intercept-ca-dir")] } ?? []
            do {
                return try Configuration.load(file: daemonConfig ?? environment["IMAGECACHED_CONFIG"], environment: environment, flags: flags)
            } catch {
                CA.fail(error, status: 2)
            }
        }
    }

    /// Prints "imagecached: <why>" and exits with `status`.
    static func fail(_ why: Any, status: Int32 = 1) -> Never {
        FileHandle.standardError.write(Data("imagecached: \(why)\n".utf8))
        Foundation.exit(status)
    }

    /// `imagecached ca init`.
    struct Init: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Make the local CA for intercept-hosts (name constraints for exactly those hosts, unless * is listed).",
            discussion: "Refuses when a CA is there already, unless --replace: then every client must trust the new certificate, and a running daemon takes it up on SIGHUP.")

        @OptionGroup var options: Options
        @Flag(help: "Replace the CA that is there (its key is overwritten).")
        var replace = false

        func run() throws {
            let configuration = try options.configuration()
            let directory = CADirectory(path: configuration.interceptCADirectory)
            let previous = replace ? (try? directory.readCertificate())?.fingerprint : nil
            let ca: LocalCA
            do {
                ca = try directory.create(hosts: configuration.interceptHosts, replace: replace)
            } catch {
                CA.fail(error)
            }
            print("\(previous == nil ? "made" : "replaced") the local CA in \(directory.path) for intercept-hosts \(configuration.interceptHosts)")
            print("certificate: \(directory.certificatePath)")
            print("key:         \(directory.keyPath) (mode 0600: keep it secret)")
            print("SHA-256:     \(ca.fingerprint)")
            print("constraints: \(ca.constraintSummary)")
            print("valid until: \(ca.notAfter.formatted(.iso8601.year().month().day()))")
            if let previous { print("replaced:    SHA-256 \(previous) (clients trusting it must trust the new one; send the daemon SIGHUP)") }
            print("trust it:    imagecached ca install (as root), or point clients at \(directory.certificatePath)")
        }
    }

    /// `imagecached ca path`.
    struct Path: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print the path of the local CA's certificate (what clients trust); exits 1 when there is none.")

        @OptionGroup var options: Options

        func run() throws {
            let directory = CADirectory(path: try options.configuration().interceptCADirectory)
            do {
                _ = try directory.readCertificate()
            } catch {
                CA.fail(error)
            }
            print(directory.certificatePath)
        }
    }

    /// `imagecached ca install`.
    struct Install: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Add the local CA's certificate to the system's trust store (Debian: update-ca-certificates). Needs root.",
            discussion: "Copies ca.pem to /usr/local/share/ca-certificates/imagecached-<first 8 hex digits of its SHA-256>.crt and runs update-ca-certificates. Programs that read the system store (curl, Python's ssl, Node with --use-openssl-ca) then trust it; browsers keep stores of their own.")

        static let systemTrustDirectory = "/usr/local/share/ca-certificates"
        static let systemUpdateCommand = "/usr/sbin/update-ca-certificates"

        @OptionGroup var options: Options
        @Option(name: .customLong("trust-dir"), help: .hidden)
        var trustDirectory: String = Install.systemTrustDirectory
        @Option(name: .customLong("update-command"), help: .hidden)
        var updateCommand: String = Install.systemUpdateCommand

        func run() throws {
            if geteuid() != 0 && trustDirectory == Install.systemTrustDirectory {
                CA.fail("ca install writes \(trustDirectory) and runs update-ca-certificates: run it as root (sudo imagecached ca install)")
            }
            let directory = CADirectory(path: try options.configuration().interceptCADirectory)
            let certificate: (pem: String, fingerprint: String)
            do {
                certificate = try directory.readCertificate()
            } catch {
                CA.fail(error)
            }
            let short = String(certificate.fingerprint.replacingOccurrences(of: ":", with: "").lowercased().prefix(8))
            let name = "imagecached-\(short).crt"
            let destination = trustDirectory + "/" + name
            do {
                try FileManager.default.createDirectory(atPath: trustDirectory, withIntermediateDirectories: true,
                                                        attributes: [.posixPermissions: 0o755])
                try Data(certificate.pem.utf8).write(to: URL(fileURLWithPath: destination), options: .atomic)
                try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: destination)
            } catch {
                CA.fail("cannot write \(destination): \(error.localizedDescription)")
            }
            let (status, output) = Install.run(updateCommand)
            guard status == 0 else {
                CA.fail("\(updateCommand) failed (exit \(status)): \(output.trimmingCharacters(in: .whitespacesAndNewlines))")
            }
            print("installed \(directory.certificatePath) as \(destination) (SHA-256 \(certificate.fingerprint))")
            if !output.isEmpty { print(output.trimmingCharacters(in: .whitespacesAndNewlines)) }
            let others = ((try? FileManager.default.contentsOfDirectory(atPath: trustDirectory)) ?? [])
                .filter { $0.hasPrefix("imagecached-") && $0.hasSuffix(".crt") && $0 != name }.sorted()
            for other in others {
                print("also trusted: \(trustDirectory)/\(other) (an earlier CA? remove it and run update-ca-certificates)")
            }
        }

        /// Runs `command` (a path, no arguments); its exit status and output.
        static func run(_ command: String) -> (Int32, String) {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: command)
            let pipe = Pipe()
            process.standardOutput = pipe
            process.standardError = pipe
            do {
                try process.run()
            } catch {
                return (127, "cannot run \(command): \(error.localizedDescription)")
            }
            let data = pipe.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            return (process.terminationStatus, String(decoding: data, as: UTF8.self))
        }
    }
}
