// The fuzz targets: each takes arbitrary bytes, runs one parser over them, and checks what it can cheaply check about
// the result (a round trip, a bound, an idempotence). A broken check is a `fatalError` naming it, which libFuzzer
// reports as a crash, as it does a trap. Pure: no I/O, no clock, no shared state (the routing target's memo aside,
// which only repeats answers); so the same input always takes the same path.
//
// Used three ways (docs/reliability.md, Fuzzing): by libFuzzer (`scripts/fuzz`, the `imagecached-fuzz` executable
// built with `--sanitize=fuzzer`), by the same executable built normally (it replays files), and by
// `FuzzCorpusTests`, which replays the committed corpora in every test run.

/// One fuzz target.
public enum FuzzTarget: String, CaseIterable, Sendable {
    /// HTTPParser (requests, Content-Length and chunked bodies, pipelining, limits).
    case requestParser = "request-parser"
    /// ResponseHeadParser and Content-Length of a response.
    case responseHead = "response-head"
    /// Cache-Control, and targeted fields (RFC 9213) as Structured Fields Dictionaries.
    case cacheControl = "cache-control"
    /// UpstreamURL: parsing and normalisation of absolute URLs and of origin-form targets.
    case url = "url"
    /// Route.resolve: forward, fetch, reverse, signed and transform requests against fixed settings.
    case routing = "routing"
    /// RangeAnswer: Range and If-Range against a stored response.
    case range = "range"
    /// TransformPath and TransformOptions: imgproxy URLs and processing options.
    case transformOptions = "transform-options"
    /// URLSigning and TransformSigning: signed fetch URLs (query and camo forms), imgproxy signatures, keys.
    case signedURL = "signed-url"
    /// The configuration loader: YAML, environment variables and the daemon's flags.
    case config = "config"
    /// ConnectTarget: the authority form of a CONNECT.
    case connectTarget = "connect-target"

    /// Runs the target over `bytes`; returns normally unless a check fails (then it traps).
    public func run(_ bytes: [UInt8]) {
        switch self {
        case .requestParser: HTTPFuzz.requestParser(bytes)
        case .responseHead: HTTPFuzz.responseHead(bytes)
        case .cacheControl: HTTPFuzz.cacheControl(bytes)
        case .url: URLFuzz.url(bytes)
        case .routing: URLFuzz.routing(bytes)
        case .range: HTTPFuzz.range(bytes)
        case .transformOptions: TransformFuzz.transformOptions(bytes)
        case .signedURL: URLFuzz.signedURL(bytes)
        case .config: ConfigFuzz.config(bytes)
        case .connectTarget: URLFuzz.connectTarget(bytes)
        }
    }
}

/// A check of the fuzzed code: a failure traps with `message` (libFuzzer then saves the input).
@inline(__always)
func expect(_ condition: Bool, _ message: @autoclosure () -> String, file: StaticString = #fileID, line: UInt = #line) {
    if !condition { fatalError("fuzz check failed: \(message())", file: file, line: line) }
}

extension Array where Element == UInt8 {
    /// The bytes as text (invalid UTF-8 becomes U+FFFD, as every parser here sees a String).
    var text: String { String(decoding: self, as: UTF8.self) }

    /// The bytes as lines: split at LF, a CR before it dropped, empty lines kept.
    var lines: [String] {
        split(separator: 10, omittingEmptySubsequences: false).map { line in
            String(decoding: line.last == 13 ? line.dropLast() : line, as: UTF8.self)
        }
    }
}
