import Testing
@testable import ImageCacheHTTP
@testable import ImageCacheServer
@testable import ImageCacheStore
import ImageCacheTestSupport

@Suite("Serialised response heads", .timeLimit(.minutes(1)))
struct SerializedHeadTests {
    static let date = "Sun, 06 Nov 1994 08:49:37 GMT"

    static let stored: [HTTPHeaders] = [
        ["Content-Type": "image/png", "Content-Length": "3", "ETag": "\"v1\"", "Date": "Mon, 07 Nov 1994 08:49:37 GMT",
         "Cache-Control": "max-age=60"],
        ["content-type": "image/jpeg", "Connection": "X-Private", "X-Private": "1", "Keep-Alive": "timeout=5",
         "Age": "10", "X-Cache": "HIT from upstream", "Vary": "Accept"],
        HTTPHeaders([("Content-Type", "image/gif"), ("Cache-Status", "cdn; hit"), ("Set-Thing", "a"), ("Set-Thing", "b")]),
        HTTPHeaders(),
    ]

    static let requests: [ResponseWriter.Request] = [
        .init(version: .http1_1, isHEAD: false, keepAlive: true),
        .init(version: .http1_1, isHEAD: true, keepAlive: true),
        .init(version: .http1_1, isHEAD: false, keepAlive: false),
        .init(version: .http1_0, isHEAD: false, keepAlive: true),
        .init(version: .http1_0, isHEAD: false, keepAlive: false),
    ]

    @Test("a prepared head plus its extra fields renders the same bytes and framing as the head rendered whole",
          arguments: [200, 203, 204, 304])
    func sameAsWhole(status: Int) {
        for headers in Self.stored {
            for request in Self.requests {
                // Given
                let prepared = SerializedResponseHead(HTTPResponseHead(status: status, headers: headers),
                                                      excluding: CacheEntry.perResponseFields)
                let extra: HTTPHeaders = ["Age": "5", "Cache-Status": "imagecached; hit; ttl=55", "X-Cache": "HIT"]
                var whole = HTTPResponseHead(status: status, headers: prepared.headers)
                for field in extra { whole.headers.add(field.name, field.value) }
                var slow = ResponseWriter(request: request)
                var fast = ResponseWriter(request: request)
                // When
                let slowBytes = slow.head(whole, bodyLength: 1234, date: Self.date)
                let fastBytes = fast.head(prepared, extra: extra, bodyLength: 1234, date: Self.date)
                // Then
                #expect(fastBytes.count == 2)
                expectSameBytes(fastBytes[0], prepared.bytes)
                #expect(String(decoding: Array(fastBytes.joined()), as: UTF8.self) == String(decoding: slowBytes, as: UTF8.self))
                #expect(fast == slow)
            }
        }
    }

    @Test("the prepared bytes leave out hop-by-hop fields, Content-Length and the per-response fields")
    func excluded() {
        // Given
        let head = HTTPResponseHead(status: 200, headers: Self.stored[1])
        // When
        let prepared = SerializedResponseHead(head, excluding: CacheEntry.perResponseFields)
        // Then
        #expect(String(decoding: prepared.bytes, as: UTF8.self) == "HTTP/1.1 200 OK\r\ncontent-type: image/jpeg\r\nVary: Accept\r\n")
        #expect(prepared.headers == ["content-type": "image/jpeg", "Vary": "Accept"])
        #expect(!prepared.hasDate)
    }

    @Test("a whole response from a prepared head writes head and body in one batch, HEAD without the body")
    func stateMachineRespond() {
        for (method, expectBody) in [("GET", true), ("HEAD", false)] {
            // Given
            var machine = Connection.StateMachine(settings: ServerSettings())
            _ = machine.bytesReceived(Array("\(method) /a HTTP/1.1\r\nHost: x\r\n\r\n".utf8), date: Self.date)
            let prepared = SerializedResponseHead(HTTPResponseHead(status: 200, headers: Self.stored[0]))
            // When
            let actions = machine.respond(prepared, extra: ["X-Cache": "HIT"], body: [1, 2, 3], exchange: 1, date: Self.date)
            // Then
            guard case let .write(buffers) = actions.first, actions.count == 1 else {
                Issue.record("expected one write, got \(actions)")
                continue
            }
            let text = String(decoding: Array(buffers.joined()), as: UTF8.self)
            #expect(text.hasPrefix("HTTP/1.1 200 OK\r\nContent-Type: image/png\r\n"))
            #expect(text.contains("X-Cache: HIT\r\nContent-Length: 3\r\n\r\n"))
            #expect(!text.contains("Date: \(Self.date)"))  // the stored Date is kept
            #expect(text.hasSuffix("\r\n\r\n\u{1}\u{2}\u{3}") == expectBody)
            #expect(machine.state == .writing(keepAlive: true))
        }
    }
}
