// What the certificate tests share: a temporary directory per test, the two independent verifiers (swift-certificates'
// `Verifier`, and OpenSSL's `openssl verify` as curl, Python and Node would judge a chain), and a fixed clock.

import Foundation
import ImageCacheTestSupport
import ImageCacheCertificates
import ImageCacheHTTP
import SwiftASN1
import Testing
import X509

/// A directory of its own under the system's temporary directory, removed by `remove()`.
struct TemporaryDirectory {
    let path: String

    init() throws {
        path = FileManager.default.temporaryDirectory.appendingPathComponent("imagecached-ca-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    func remove() { try? FileManager.default.removeItem(atPath: path) }

    func write(_ text: String, to name: String) throws -> String {
        let file = path + "/" + name
        try text.write(toFile: file, atomically: true, encoding: .utf8)
        return file
    }
}

/// Mode bits of a file or directory, and its owner.
func modeAndOwner(_ path: String) throws -> (mode: Int, owner: UInt32) {
    let attributes = try FileManager.default.attributesOfItem(atPath: path)
    return ((attributes[.posixPermissions] as? Int ?? -1) & 0o777, UInt32(attributes[.ownerAccountID] as? Int ?? -1))
}

enum Verifiers {
    /// swift-certificates' verdict on `leaf` with `ca` as the only root: RFC 5280 (name constraints, basic constraints,
    /// validity) and the server identity `host`. nil when it verifies, else the policy failures as text.
    static func swiftCertificates(leafDER: [UInt8], ca: LocalCA, host: InterceptHosts.Host) async throws -> String? {
        let leaf = try Certificate(derEncoded: leafDER)
        let (hostname, address): (String?, String?) = switch host {
        case let .name(name): (name, nil)
        case let .address(address): (nil, address.description)
        }
        var verifier = Verifier(rootCertificates: CertificateStore([ca.certificate])) {
            RFC5280Policy()
            ServerIdentityPolicy(serverHostname: hostname, serverIP: address)
        }
        switch await verifier.validate(leaf: leaf, intermediates: CertificateStore()) {
        case .validCertificate: return nil
        case let .couldNotValidate(failures): return failures.map { "\($0.policyFailureReason)" }.joined(separator: "; ")
        }
    }

    /// `openssl verify -CAfile ca.pem -verify_hostname H (or -verify_ip A) leaf.pem`: nil when it says OK, else its output.
    static func openSSL(leafDER: [UInt8], ca: LocalCA, host: InterceptHosts.Host, in directory: TemporaryDirectory) throws -> String? {
        let caFile = try directory.write(ca.certificatePEM, to: "verify-ca.pem")
        let leafPEM = try PEMDocument(type: "CERTIFICATE", derBytes: leafDER).pemString
        let leafFile = try directory.write(leafPEM + "\n", to: "verify-leaf.pem")
        let check: [String] = switch host {
        case let .name(name): ["-verify_hostname", name]
        case let .address(address): ["-verify_ip", address.description]
        }
        let (status, output) = try run("/usr/bin/openssl", ["verify", "-CAfile", caFile] + check + [leafFile])
        return status == 0 && output.contains(": OK") ? nil : output
    }

    /// Runs a program to completion; its exit status and its output (standard output and error together).
    static func run(_ program: String, _ arguments: [String]) throws -> (Int32, String) {
        try #require(FileManager.default.isExecutableFile(atPath: program), "\(program) missing: run scripts/install-deps --test")
        let result = try Subprocess.run(program, arguments, mergeError: true)
        return (result.exitCode, result.outputText)
    }
}

extension InterceptHosts {
    static func list(_ items: String...) throws -> InterceptHosts { try InterceptHosts.parse(items) }
}

extension InterceptHosts.Host {
    static func host(_ text: String) throws -> InterceptHosts.Host { try #require(InterceptHosts.Host(text)) }
}
