import Foundation
import Testing
@testable import ImageCacheHTTP
@testable import ImageCacheConfig
@testable import ImageCacheServer
@testable import ImageCacheCore

@Suite("AdminGuard: who may use /_imagecached/", .timeLimit(.minutes(1)))
struct AdminGuardTests {
    static let loopback = ClientInfo(address: "127.0.0.1", isLoopback: true)

    static func verdict(_ headers: HTTPHeaders, path: String = "/_imagecached/stats", client: ClientInfo = loopback,
                        _ configure: (inout Configuration) -> Void = { _ in }) -> Int? {
        var configuration = Configuration()
        configure(&configuration)
        let request = HTTPRequestHead(method: "GET", target: path, headers: headers)
        return AdminGuard.refusal(request, path: path, client: client, configuration: configuration)?.status
    }

    @Test("Host must name the daemon", arguments: [
        ("127.0.0.1:8080", nil), ("127.0.0.1", nil), ("[::1]:8080", nil), ("localhost", nil), ("LocalHost:1", nil),
        ("", nil), ("rebind.attacker.example", 403), ("localhost.attacker.example", 403), ("127.0.0.1.nip.io", 403),
        ("cache.internal", 403),
    ] as [(String, Int?)])
    func host(host: String, expected: Int?) {
        #expect(Self.verdict(["Host": host]) == expected)
    }

    @Test("a name in admin-hosts is the daemon's")
    func adminHosts() {
        #expect(Self.verdict(["Host": "cache.internal:8080"]) { $0.adminHosts = ["cache.internal"] } == nil)
    }

    @Test("cross-site signs are refused; same-origin and direct requests are not", arguments: [
        (["Sec-Fetch-Site": "cross-site"], 403), (["Sec-Fetch-Site": "same-site"], 403), (["Sec-Fetch-Site": "same-origin"], nil),
        (["Sec-Fetch-Site": "none"], nil), (["Origin": "null"], 403), (["Origin": "https://evil.example"], 403),
        (["Origin": "http://127.0.0.1:9999"], 403), (["Origin": "http://127.0.0.1:8080"], nil), (["Origin": "https://127.0.0.1:8080"], 403),
    ] as [(HTTPHeaders, Int?)])
    func crossSite(extra: HTTPHeaders, expected: Int?) {
        var headers: HTTPHeaders = ["Host": "127.0.0.1:8080"]
        for field in extra { headers.add(field.name, field.value) }
        #expect(Self.verdict(headers) == expected)
    }

    @Test("the admin token is required when set, compared whole; health needs none")
    func token() {
        let token = "0123456789abcdef"
        let set: (inout Configuration) -> Void = { $0.adminToken = token }
        #expect(Self.verdict(["Host": "127.0.0.1"], set) == 401)
        #expect(Self.verdict(["Host": "127.0.0.1", "Authorization": "Bearer 0123456789abcdef"], set) == nil)
        #expect(Self.verdict(["Host": "127.0.0.1", "Authorization": "bearer 0123456789abcdef"], set) == nil)
        #expect(Self.verdict(["Host": "127.0.0.1", "Authorization": "Bearer 0123456789abcde"], set) == 401)
        #expect(Self.verdict(["Host": "127.0.0.1", "Authorization": "Bearer 0123456789abcdef0"], set) == 401)
        #expect(Self.verdict(["Host": "127.0.0.1", "Authorization": "Basic 0123456789abcdef"], set) == 401)
        #expect(Self.verdict(["Host": "127.0.0.1"], path: "/_imagecached/health", set) == nil)
        // Basic, as a browser sends it for the status page: any user, the token as the password
        let basic = { (credentials: String) -> HTTPHeaders in ["Host": "127.0.0.1", "Authorization": "Basic " + Data(credentials.utf8).base64EncodedString()] }
        #expect(Self.verdict(basic("admin:0123456789abcdef"), path: "/_imagecached/", set) == nil)
        #expect(Self.verdict(basic(":0123456789abcdef"), set) == nil)
        #expect(Self.verdict(basic("admin:0123456789abcde"), set) == 401)
        #expect(Self.verdict(basic("0123456789abcdef"), set) == 401)
        #expect(Self.verdict(basic("0123456789abcdef:x"), set) == 401)
        #expect(URLSigning.constantTimeEqual(Array("abc".utf8), Array("abc".utf8)))
        #expect(!URLSigning.constantTimeEqual(Array("abc".utf8), Array("abd".utf8)))
        #expect(!URLSigning.constantTimeEqual(Array("abc".utf8), Array("ab".utf8)))
    }

    @Test("a token shorter than 16 characters or passed as a flag is refused by the configuration")
    func tokenConfiguration() throws {
        #expect(throws: ConfigError.self) {
            try Configuration.load(file: nil, environment: ["IMAGECACHED_ADMIN_TOKEN": "short"], flags: [])
        }
        #expect(throws: ConfigError.self) {
            try Configuration.load(file: nil, environment: [:],
                                   flags: [ConfigSetting(key: "admin-token", value: .scalar("0123456789abcdef"), source: "--admin-token")])
        }
        let loaded = try Configuration.load(file: nil, environment: ["IMAGECACHED_ADMIN_TOKEN": " 0123456789abcdef\n"], flags: [])
        #expect(loaded.adminToken == "0123456789abcdef")
    }
}
