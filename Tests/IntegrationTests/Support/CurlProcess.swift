// Runs the real curl binary as a client of the daemon (`curl -x http://127.0.0.1:PORT URL`): what a program pointed at
// the proxy does. The proxy variables of the test's own environment are left out, so only `-x` decides.

import Foundation
import ImageCacheTestSupport
import ImageCacheSystem

struct CurlResult: Sendable {
    /// The final response's status (interim 1xx heads skipped), its fields and body.
    var status: Int
    var headers: [(String, String)]
    var body: [UInt8]
    var exitStatus: Int32
    var stderr: String

    func header(_ name: String) -> String? { headers.first { $0.0.lowercased() == name.lowercased() }?.1 }
    var text: String { String(decoding: body, as: UTF8.self) }
}

enum CurlProcess {
    /// `curl -sS -i --noproxy "" -x http://127.0.0.1:<proxyPort> <arguments>`, off the Swift concurrency pool.
    /// `input`: bytes written to curl's standard input (for `--data-binary @-`).
    static func run(proxyPort: Int, _ arguments: [String], input: [UInt8]? = nil) async throws -> CurlResult {
        try await offPool {
            let result = try Subprocess.run(
                "/usr/bin/curl", ["-sS", "-i", "--noproxy", "", "-x", "http://127.0.0.1:\(proxyPort)", "--max-time", "30"] + arguments,
                environment: ProcessInfo.processInfo.environment.filter { !$0.key.lowercased().hasSuffix("_proxy") },
                input: input ?? [])
            return parse(result.output, exitStatus: result.exitCode, stderr: result.errorText)
        }
    }

    /// Splits `curl -i` output into the final head and the body.
    private static func parse(_ output: [UInt8], exitStatus: Int32, stderr: String) -> CurlResult {
        var rest = output[...]
        var result = CurlResult(status: 0, headers: [], body: [], exitStatus: exitStatus, stderr: stderr)
        while let end = rest.firstRange(of: [13, 10, 13, 10]) {
            let lines = String(decoding: rest[..<end.lowerBound], as: UTF8.self).components(separatedBy: "\r\n")
            rest = rest[end.upperBound...]
            let status = lines.first.flatMap { $0.split(separator: " ").dropFirst().first }.flatMap { Int($0) } ?? 0
            result.status = status
            result.headers = lines.dropFirst().compactMap { line in
                guard let colon = line.firstIndex(of: ":") else { return nil }
                return (String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
            }
            if !(100..<200).contains(status) { break }
        }
        result.body = Array(rest)
        return result
    }
}
