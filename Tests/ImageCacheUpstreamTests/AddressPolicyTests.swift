import Testing
@testable import ImageCacheHTTP
@testable import ImageCacheUpstream

@Suite("AddressPolicy", .timeLimit(.minutes(1)))
struct AddressPolicyTests {
    static let refused: [String] = [
        "0.0.0.0", "0.1.2.3", "10.0.0.1", "10.255.255.255", "100.64.0.1", "100.127.255.254", "127.0.0.1", "127.8.9.10",
        "169.254.169.254", "172.16.0.1", "172.31.255.255", "192.0.0.8", "192.168.1.1", "198.18.0.1", "198.19.255.255",
        "224.0.0.1", "239.255.255.250", "240.0.0.1", "255.255.255.255",
        "::", "::1", "fc00::1", "64:ff9b:1::a00:1", "2001:0:4136:e378::1", "fd12:3456::1", "fe80::1", "febf::1", "fec0::1", "ff02::1",
        "::ffff:127.0.0.1", "::ffff:10.1.2.3", "::ffff:169.254.169.254", "::127.0.0.1", "::10.0.0.1",
        "64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "2002:c0a8:0101::1",
        // the rest of the IANA special-purpose registries (documentation, benchmarking, AS112, AMT, 6to4 relay, ...)
        "192.0.2.1", "198.51.100.7", "203.0.113.9", "192.31.196.1", "192.52.193.1", "192.88.99.1", "192.175.48.1",
        "2001:db8::1", "2001:db8:ffff::1", "3fff::1", "2001:2::1", "2001:3::1", "2001:20::1", "2620:4f:8000::1",
        "100::1", "100:0:0:1::1", "5f00::1", "::ffff:192.0.2.1", "64:ff9b::c000:201", "2002:c000:0201::1",
        "2002:c612:0001::1", "::1:2:3:4", "fbff::1", "8000::1", "4000::1",
    ]

    static let allowed: [String] = [
        "1.1.1.1", "8.8.8.8", "9.255.255.255", "11.0.0.1", "100.63.255.255", "100.128.0.1", "126.255.255.255",
        "128.0.0.1", "169.253.1.1", "172.15.255.255", "172.32.0.1", "192.0.1.1", "192.167.1.1", "192.169.1.1",
        "198.17.255.255", "198.20.0.1", "223.255.255.255", "93.184.216.34",
        "2001:4860:4860::8888", "2606:4700::1111", "2001:200::1", "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:0808:0808::1",
    ]

    @Test("refuses loopback, private, link-local, reserved and multicast destinations", arguments: refused)
    func refusesPrivate(_ text: String) throws {
        // Given
        let address = try #require(IPAddress(text))
        // When
        let reason = AddressPolicy.refusal(for: address)
        // Then
        #expect(reason != nil, "\(text) should be refused")
    }

    @Test("allows public destinations, including public IPv4 inside IPv6 forms", arguments: allowed)
    func allowsPublic(_ text: String) throws {
        // Given
        let address = try #require(IPAddress(text))
        // When
        let reason = AddressPolicy.refusal(for: address)
        // Then
        #expect(reason == nil, "\(text) should be allowed: \(reason ?? "")")
    }

    @Test("the reason names the textual address and the range")
    func reasonNamesAddress() throws {
        // Given
        let address = try #require(IPAddress("169.254.169.254"))
        // When
        let reason = try #require(AddressPolicy.refusal(for: address))
        // Then
        #expect(reason.contains("169.254.169.254"))
        #expect(reason.contains("169.254.0.0/16"))
        let sixToFour = try #require(IPAddress("2002:c000:0201::1"))
        #expect(AddressPolicy.refusal(for: sixToFour)
            == "2002:c000:201::1 is in 2002::/16 (6to4, RFC 3056): embedded 192.0.2.1 is in 192.0.2.0/24 (documentation, TEST-NET-1, RFC 5737)")
        #expect(IPAddress("::ffff:127.0.0.1")?.description == "::ffff:127.0.0.1")
        #expect(IPAddress("not an address") == nil)
    }
}
