// The fleet.* keys: what a user writes is what the tier gets, and a value that is not one is refused with its reason.

import Foundation
import Testing
@testable import ImageCacheConfig
@testable import ImageCacheFleet

@Suite("fleet.* keys", .timeLimit(.minutes(1)))
struct FleetKeysTests {
    static func apply(_ key: String, _ value: String) throws -> Configuration {
        var configuration = Configuration()
        try configuration.apply(ConfigSetting(key: key, value: .scalar(value), source: "--" + key.replacingOccurrences(of: ".", with: "-")))
        return configuration
    }

    @Test("no servers by default: no fleet, today's single-host daemon")
    func defaults() {
        let fleet = Configuration().fleet
        #expect(!fleet.isEnabled)
        #expect(fleet.itemMaxBytes == 1 << 20 && fleet.leaseSeconds == 5 && fleet.waitSeconds == 10 && fleet.deadlineSeconds == 0.05)
    }

    @Test("--fleet-servers takes a list of host:port, IPv6 in brackets")
    func servers() throws {
        let configuration = try Self.apply("fleet.servers", "10.0.0.5:11211, [fd00::7]:11212,cache-3:11211")
        #expect(configuration.fleet.servers.map(\.description) == ["10.0.0.5:11211", "[fd00::7]:11212", "cache-3:11211"])
        #expect(configuration.fleet.isEnabled)
    }

    @Test("a server without a port, with a bad one, or listed twice is refused, naming it")
    func badServers() {
        for (value, named) in [("10.0.0.5", "10.0.0.5"), ("10.0.0.5:0", "10.0.0.5:0"), ("a:1,a:1", "a:1")] {
            #expect {
                _ = try Self.apply("fleet.servers", value)
            } throws: { error in
                "\(error)".contains(named) && "\(error)".contains("fleet.servers")
            }
        }
    }

    @Test("the lease is whole seconds, at least 2 (a 1 s lease cannot be kept alive on memcached's 1 s clock); item-max at least 1KiB")
    func leaseAndItemMax() throws {
        #expect(try Self.apply("fleet.lease", "2500ms").fleet.leaseSeconds == 3)
        #expect(try Self.apply("fleet.lease", "1s").fleet.leaseSeconds == 2)
        #expect(try Self.apply("fleet.item-max", "32MiB").fleet.itemMaxBytes == 32 << 20)
        #expect(throws: ConfigError.self) { _ = try Self.apply("fleet.item-max", "100") }
        #expect(try Self.apply("fleet.wait", "0").fleet.waitSeconds == 0)
        // At most an hour (memcached would read a TTL over 30 days as a time in the past: no lease would hold).
        #expect(try Self.apply("fleet.lease", "1h").fleet.leaseSeconds == 3600)
        #expect(throws: ConfigError.self) { _ = try Self.apply("fleet.lease", "3601s") }
    }
}
