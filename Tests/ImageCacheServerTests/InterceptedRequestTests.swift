import Testing
@testable import ImageCacheHTTP
@testable import ImageCacheServer

@Suite("InterceptedRequest", .timeLimit(.minutes(1)))
struct InterceptedRequestTests {
    static let target = try! ConnectTarget.parse("images.example:443").get()
    static let other = try! ConnectTarget.parse("images.example:8443").get()

    static func head(_ method: String = "GET", _ target: String, host: String? = "images.example") -> HTTPRequestHead {
        var head = HTTPRequestHead(method: method, target: target)
        if let host { head.headers.add("Host", host) }
        return head
    }

    @Test("what each inner request becomes, or the status that refuses it", arguments: [
        (head("GET", "/a.jpg?x=1"), target, "https://images.example:443/a.jpg?x=1"),
        (head("GET", "/a.jpg", host: "images.example:443"), target, "https://images.example:443/a.jpg"),
        (head("GET", "/a.jpg", host: "IMAGES.example"), target, "https://images.example:443/a.jpg"),
        (head("GET", "/a.jpg", host: nil), target, "https://images.example:443/a.jpg"),
        (head("GET", "https://images.example/a.jpg"), target, "https://images.example/a.jpg"),
        (head("POST", "/upload", host: "images.example:8443"), other, "https://images.example:8443/upload"),
        (head("OPTIONS", "*"), target, "*"),
        (head("GET", "/a.jpg", host: "evil.example"), target, "421"),
        (head("GET", "/a.jpg", host: "images.example:8443"), target, "421"),
        (head("GET", "/a.jpg", host: "images.example"), other, "421"),
        (head("GET", "https://evil.example/a.jpg"), target, "421"),
        (head("GET", "http://images.example/a.jpg"), target, "421"),
        (head("GET", "https://images.example:8443/a.jpg"), target, "421"),
        (head("CONNECT", "evil.example:443"), target, "405"),
    ] as [(HTTPRequestHead, ConnectTarget, String)])
    func rules(head: HTTPRequestHead, target: ConnectTarget, expected: String) {
        switch InterceptedRequest.rewrite(head, for: target) {
        case let .success(rewritten): #expect(rewritten.target == expected)
        case let .failure(error): #expect(String(error.status) == expected, "\(error.reason)")
        }
    }
}
