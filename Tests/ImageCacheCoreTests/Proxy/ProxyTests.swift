// Proxy.handle without sockets or curl (a MockOrigin, MockSinks): which requests forward mode passes through, to an
// origin judged as untrusted, and who may use the forward proxy at all (proxy-allow).

import Foundation
import Logging
import Testing
@testable import ImageCacheHTTP
@testable import ImageCacheConfig
@testable import ImageCacheServer
@testable import ImageCacheUpstream
@testable import ImageCacheCore

@Suite("Proxy: forward mode's methods and proxy-allow", .timeLimit(.minutes(1)))
struct ProxyTests {
    static let loopback = ClientInfo(address: "127.0.0.1", isLoopback: true)
    static let lan = ClientInfo(address: "192.168.1.20", isLoopback: false)

    static func proxy(_ origin: MockOrigin, _ configure: (inout Configuration) -> Void = { _ in }) -> Proxy {
        var configuration = Configuration()
        configure(&configuration)
        return Proxy(configuration: configuration, origin: origin, logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() })
    }

    static func request(_ method: String, _ target: String, _ headers: [(String, String)] = []) -> HTTPRequestHead {
        HTTPRequestHead(method: method, target: target, headers: HTTPHeaders([("Host", "o.test")] + headers))
    }

    @Test("forward POST, PUT and DELETE reach the origin through an untrusted pass-through: method, body and end-to-end fields (Cookie too), the origin's answer back as PASS")
    func forwardMethodsPassed() throws {
        for method in ["POST", "PUT", "DELETE"] {
            // Given the default configuration (forward-non-images pass)
            let origin = MockOrigin()
            let proxy = Self.proxy(origin)
            let sink = MockSink()
            let body = Array("name=a&b=2".utf8)
            // When a loopback client sends the method in absolute form, with a body and a cookie
            #expect(proxy.bodyHandling(for: Self.request(method, "http://o.test/form", [("Content-Length", "10")])) == .stream)
            proxy.handle(Self.request(method, "http://o.test/form", [("Cookie", "session=s1"), ("Content-Type", "application/x-www-form-urlencoded"),
                                                                     ("Proxy-Authorization", "Basic eDp5")]),
                         body: body, client: Self.loopback, sink: sink)
            // Then the origin gets it as sent, judged as any URL a client names (the private-network guard applies)
            let transfer = try #require(origin.next(), "\(method) never reached the origin")
            #expect(transfer.request.method == method)
            #expect(transfer.request.url == "http://o.test/form")
            #expect(transfer.request.trusted == false, "a forward pass-through must not skip the private-network guard")
            #expect(transfer.request.body == body)
            #expect(transfer.request.followsRedirects == false)
            #expect(transfer.request.headers["Cookie"] == "session=s1")
            #expect(transfer.request.headers["Content-Type"] == "application/x-www-form-urlencoded")
            #expect(transfer.request.headers["Proxy-Authorization"] == nil, "hop-by-hop: for this proxy, not the origin")
            // And the client gets the origin's answer, uncached
            transfer.respond(HTTPResponseHead(status: 201, headers: ["Content-Type": "application/json"]), body: Array("{}".utf8))
            #expect(sink.waitForEnd())
            #expect(sink.status == 201 && sink.body == Array("{}".utf8))
            #expect(sink.header("X-Cache") == "PASS")
            #expect(sink.header("Cache-Status") == "imagecached; fwd=method; fwd-status=201")
        }
    }

    @Test("a GET in forward mode keeps forward mode's fields (no Cookie), so its key and its coalescing are those of /fetch")
    func forwardGetKeepsFieldPolicy() throws {
        let origin = MockOrigin()
        let proxy = Self.proxy(origin)
        let sink = MockSink()
        proxy.handle(Self.request("GET", "http://o.test/a.png", [("Cookie", "session=s1"), ("Accept", "image/webp")]),
                     body: [], client: Self.loopback, sink: sink)
        let transfer = try #require(origin.next())
        #expect(transfer.request.headers["Cookie"] == nil)
        #expect(transfer.request.headers["Accept"] == "image/webp")
        #expect(transfer.request.trusted == false)
        transfer.cancel()
    }

    @Test("fetch mode takes GET and HEAD only (501), and so does forward mode under forward-non-images refuse; the origin sees nothing")
    func otherMethodsRefused() {
        let origin = MockOrigin()
        let fetch = "/fetch?url=" + "http://o.test/form".addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        for (configure, target) in [({ (_: inout Configuration) in }, fetch),
                                    ({ (configuration: inout Configuration) in configuration.forwardNonImages = .refuse }, "http://o.test/form")] {
            let proxy = Self.proxy(origin, configure)
            let sink = MockSink()
            proxy.handle(Self.request("POST", target), body: Array("x".utf8), client: Self.loopback, sink: sink)
            #expect(sink.status == 501, "\(target)")
            #expect(sink.header("Allow") == "GET, HEAD")
            if case let .refuse(error) = proxy.bodyHandling(for: Self.request("POST", target, [("Content-Length", "1")])) {
                #expect(error.status == 501)
            } else {
                Issue.record("a POST's body to \(target) is not refused at its head")
            }
        }
        #expect(origin.fetchCount == 0)
    }

    @Test("TRACE in forward mode is under pass-trace as in reverse mode: 405 while it is off")
    func forwardTrace() throws {
        let origin = MockOrigin()
        let sink = MockSink()
        Self.proxy(origin).handle(Self.request("TRACE", "http://o.test/"), body: [], client: Self.loopback, sink: sink)
        #expect(sink.status == 405)
        #expect(origin.fetchCount == 0)
    }

    @Test("proxy-allow: a forward request or CONNECT from a client outside it gets 403 naming the key, whatever its method; origin-form requests are not proxy requests")
    func proxyAllow() throws {
        let origin = MockOrigin()
        let proxy = Self.proxy(origin)
        // A LAN client's forward GET and POST, and its CONNECT: refused before anything else
        for (method, target) in [("GET", "http://o.test/a.png"), ("POST", "http://o.test/form"), ("CONNECT", "o.test:443")] {
            let sink = MockSink()
            proxy.handle(Self.request(method, target), body: [], client: Self.lan, sink: sink)
            #expect(sink.status == 403, "\(method)")
            #expect(String(decoding: sink.body, as: UTF8.self).contains("proxy-allow"), "\(method)")
            #expect(String(decoding: sink.body, as: UTF8.self).contains("192.168.1.20"), "\(method)")
        }
        #expect(origin.fetchCount == 0)
        // The same client's /fetch request is not a proxy request
        let fetch = MockSink()
        proxy.handle(Self.request("GET", "/fetch?url=" + "http://o.test/a.png".addingPercentEncoding(withAllowedCharacters: .alphanumerics)!),
                     body: [], client: Self.lan, sink: fetch)
        let transfer = try #require(origin.next(), "/fetch from a LAN client never reached the origin")
        transfer.cancel()
        // Widened to the LAN, the forward request goes through; an IPv4-mapped address counts as its IPv4 address
        let widened = Self.proxy(origin) { $0.proxyAllow = [AddressRange("192.168.1.0/24")!] }
        widened.handle(Self.request("GET", "http://o.test/b.png"), body: [], client: ClientInfo(address: "::ffff:192.168.1.20", isLoopback: false),
                       sink: MockSink())
        let allowed = try #require(origin.next(), "a client in proxy-allow was refused")
        #expect(allowed.request.url == "http://o.test/b.png")
        allowed.cancel()
    }

    @Test("the open-proxy warning: a range beyond loopback in proxy-allow with a listen address beyond loopback, or systemd's sockets")
    func openProxyWarning() {
        let loopback = ProxyAllow(AddressRange.loopback)
        let lan = ProxyAllow(AddressRange.loopback + [AddressRange("10.0.0.0/8")!])
        #expect(loopback.openProxyWarning(listenHost: "0.0.0.0") == nil)
        #expect(lan.openProxyWarning(listenHost: "127.0.0.1") == nil)
        #expect(lan.openProxyWarning(listenHost: "[::1]") == nil)
        #expect(lan.openProxyWarning(listenHost: "localhost") == nil)
        #expect(lan.openProxyWarning(listenHost: "0.0.0.0")?.contains("open proxy: proxy-allow lets 10.0.0.0/8") == true)
        #expect(lan.openProxyWarning(listenHost: nil)?.contains("sockets from systemd") == true)
        #expect(ProxyAllow([AddressRange("127.0.0.0/7")!]).openProxyWarning(listenHost: "0.0.0.0") != nil, "127/7 reaches past loopback")
        #expect(ProxyAllow([AddressRange("::/0")!]).openProxyWarning(listenHost: "[::]") != nil)
    }
}
