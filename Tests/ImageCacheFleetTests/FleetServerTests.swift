import Testing
import ImageCacheFleet

@Suite(.timeLimit(.minutes(1)))
struct FleetServerTests {
    @Test func parsesHostAndPort() {
        #expect(FleetServer(parsing: "10.0.0.5:11211") == FleetServer(host: "10.0.0.5", port: 11211))
        #expect(FleetServer(parsing: "[::1]:11211")?.description == "[::1]:11211")
        #expect(FleetServer(parsing: "cache-1.internal:11211")?.host == "cache-1.internal")
    }

    @Test func refusesWhatIsNotHostAndPort() {
        for text in ["10.0.0.5", ":11211", "10.0.0.5:0", "10.0.0.5:70000", "::1:11211", "[::1]11211", "a b:1", "h:x"] {
            #expect(FleetServer(parsing: text) == nil, "\(text)")
        }
    }
}
