// swift-tools-version:6.0
import PackageDescription

let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("InternalImportsByDefault"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

let package = Package(
    name: "imagecached",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "imagecached", targets: ["imagecached"]),
        .library(name: "ImageCacheCore", targets: [
            "ImageCacheSystem", "ImageCacheHTTP", "ImageCacheStatus", "ImageCacheTransform", "ImageCacheServer", "ImageCacheStore",
            "ImageCacheUpstream", "ImageCacheConfig", "ImageCacheCertificates", "ImageCacheCore", "ImageCacheOps", "ImageCacheTLS", "ImageCacheFleet",
        ]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        // DER and PEM for the local CA's certificates (X509 builds on it).
        .package(url: "https://github.com/apple/swift-asn1", from: "1.7.4"),
        // X.509 for the local CA and its leaves: name constraints, signing with a P-256 key, and a Verifier (tests).
        .package(url: "https://github.com/apple/swift-certificates", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.3"),
        // RFC 9651 Structured Fields: the targeted cache-control fields (RFC 9213) are Dictionaries.
        .package(url: "https://github.com/apple/swift-http-structured-headers", from: "1.7.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/jpsim/Yams", from: "6.2.2"),
    ],
    targets: [
        // libcurl, found through pkg-config (Debian: libcurl4-openssl-dev).
        .systemLibrary(
            name: "CCurl",
            pkgConfig: "libcurl",
            providers: [.apt(["libcurl4-openssl-dev"])]
        ),
        // xxHash 0.8 (Debian: libxxhash-dev): XXH3, the disk format's checksums.
        .systemLibrary(
            name: "CXXHash",
            pkgConfig: "libxxhash",
            providers: [.apt(["libxxhash-dev"])]
        ),
        // libvips 8.14+ (Debian: libvips-dev): image transforms. Only the C shim sees its headers.
        .systemLibrary(
            name: "CVips",
            pkgConfig: "vips",
            providers: [.apt(["libvips-dev"])]
        ),
        // OpenSSL 3 (Debian: libssl-dev): the TLS engine (docs/architecture.md, TLS engine). Only ImageCacheTLS/OpenSSL/
        // imports it.
        .systemLibrary(
            name: "COpenSSL",
            pkgConfig: "openssl",
            providers: [.apt(["libssl-dev"])]
        ),
        // <sys/epoll.h>, which Glibc's Swift module leaves out (the server's event loops), and three inline helpers
        // (the CPUs allowed, thread pinning, the malloc mmap threshold) for the server and the operations layer.
        .systemLibrary(name: "CEpoll"),
        // Typed one-line forwarders for libcurl's variadic functions.
        .target(name: "CCurlShim", dependencies: ["CCurl"]),
        // Typed one-line forwarders for OpenSSL's function-like macros (SSL_CTX_set_mode, ...).
        .target(name: "COpenSSLShim", dependencies: ["COpenSSL"]),
        // Typed wrappers for libvips's variadic functions; its public header is plain C (no glib).
        .target(name: "CVipsShim", dependencies: ["CVips"]),
        // The layers, lowest first; a dependency that points up is a build error (docs/architecture.md).
        .target(name: "ImageCacheSystem", swiftSettings: swiftSettings),
        .target(
            name: "ImageCacheHTTP",
            dependencies: [
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "RawStructuredFieldValues", package: "swift-http-structured-headers"),
            ],
            swiftSettings: swiftSettings
        ),
        // The stats documents (/stats, /stats/history, /metrics) and the status page: pure values and renderers, no
        // I/O. Below the layers that fill them: the tiers and the pixel cache fill their own stats structs here.
        .target(name: "ImageCacheStatus", dependencies: ["ImageCacheHTTP"], swiftSettings: swiftSettings),
        .target(
            name: "ImageCacheTransform",
            dependencies: ["ImageCacheSystem", "ImageCacheHTTP", "ImageCacheStatus", "CVipsShim"],
            swiftSettings: swiftSettings
        ),
        // TLS on buffers the caller moves (OpenSSL behind a BIO pair): contexts, identities, streams, verification.
        .target(name: "ImageCacheTLS", dependencies: ["COpenSSL", "COpenSSLShim"], swiftSettings: swiftSettings),
        .target(
            name: "ImageCacheServer",
            dependencies: ["ImageCacheSystem", "ImageCacheHTTP", "ImageCacheTLS", "CEpoll",
                           .product(name: "Logging", package: "swift-log")],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "ImageCacheStore",
            dependencies: ["ImageCacheSystem", "ImageCacheHTTP", "ImageCacheStatus", "CXXHash",
                           .product(name: "Crypto", package: "swift-crypto"),
                           .product(name: "Logging", package: "swift-log")],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "ImageCacheUpstream",
            dependencies: ["ImageCacheSystem", "ImageCacheHTTP", "CCurl", "CCurlShim",
                           .product(name: "Logging", package: "swift-log")],
            swiftSettings: swiftSettings
        ),
        // The local CA (interception's certificates): pure Swift on swift-crypto's P-256 and swift-certificates' X509;
        // files through Foundation and POSIX calls only.
        .target(
            name: "ImageCacheCertificates",
            dependencies: ["ImageCacheSystem", "ImageCacheHTTP",
                           .product(name: "X509", package: "swift-certificates"),
                           .product(name: "SwiftASN1", package: "swift-asn1"),
                           .product(name: "Crypto", package: "swift-crypto")],
            swiftSettings: swiftSettings
        ),
        // The fleet's shared tier on memcached (meta protocol leases): its own thread and sockets, a rendezvous ring, a
        // breaker per server. Bytes and keys only: the core gives it entries in its checksummed format.
        .target(
            name: "ImageCacheFleet",
            dependencies: ["ImageCacheSystem", "CEpoll", "CXXHash", .product(name: "Logging", package: "swift-log")],
            swiftSettings: swiftSettings
        ),
        // Above the layers it configures: each owns its settings and their defaults; this one builds them from the keys.
        .target(
            name: "ImageCacheConfig",
            dependencies: ["ImageCacheHTTP", "ImageCacheServer", "ImageCacheStore", "ImageCacheUpstream", "ImageCacheTransform", "ImageCacheFleet",
                           .product(name: "Yams", package: "Yams")],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "ImageCacheCore",
            dependencies: ["ImageCacheSystem", "ImageCacheHTTP", "ImageCacheStatus", "ImageCacheConfig", "ImageCacheServer",
                           "ImageCacheStore", "ImageCacheUpstream", "ImageCacheTransform", "ImageCacheTLS", "ImageCacheCertificates", "ImageCacheFleet",
                           .product(name: "Logging", package: "swift-log")],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "ImageCacheOps",
            dependencies: ["ImageCacheSystem", "ImageCacheHTTP", "ImageCacheStatus", "ImageCacheConfig", "ImageCacheServer",
                           "ImageCacheStore", "ImageCacheUpstream", "ImageCacheTransform", "ImageCacheCertificates", "ImageCacheTLS", "ImageCacheCore", "ImageCacheFleet", "CEpoll",
                           .product(name: "Logging", package: "swift-log")],
            swiftSettings: swiftSettings
        ),
        // The fuzz targets (docs/reliability.md, Fuzzing): plain functions over bytes, in the root package so that they
        // see its `package` API. A normal build makes `imagecached-fuzz` a replay tool; `scripts/fuzz` builds it with
        // libFuzzer.
        .target(
            name: "ImageCacheFuzz",
            dependencies: ["ImageCacheHTTP", "ImageCacheConfig", "ImageCacheTransform", "ImageCacheCore",
                           .product(name: "RawStructuredFieldValues", package: "swift-http-structured-headers")],
            swiftSettings: swiftSettings
        ),
        .executableTarget(name: "imagecached-fuzz", dependencies: ["ImageCacheFuzz"], swiftSettings: swiftSettings),
        .executableTarget(
            name: "imagecached",
            dependencies: [
                "ImageCacheHTTP", "ImageCacheStatus", "ImageCacheServer", "ImageCacheConfig", "ImageCacheTransform", "ImageCacheCore",
                "ImageCacheCertificates", "ImageCacheOps",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        // What the test targets share: RepositoryPath, byte comparisons that never make Swift Testing diff two
        // bodies, and the store's fixtures (keys, heads, entries at a fixed time).
        .target(
            name: "ImageCacheTestSupport",
            dependencies: ["ImageCacheSystem", "ImageCacheHTTP", "ImageCacheStore", .product(name: "Crypto", package: "swift-crypto")],
            path: "Tests/TestSupport",
            swiftSettings: swiftSettings
        ),
        // One unit-test target per library target, named after it (docs/reliability.md); the integration tests run the
        // whole daemon.
        .testTarget(name: "ImageCacheHTTPTests", dependencies: ["ImageCacheTestSupport", "ImageCacheHTTP"],
                    swiftSettings: swiftSettings),
        .testTarget(name: "ImageCacheTLSTests", dependencies: ["ImageCacheTestSupport", "ImageCacheSystem", "ImageCacheTLS"],
                    swiftSettings: swiftSettings),
        .testTarget(name: "ImageCacheStatusTests", dependencies: ["ImageCacheHTTP", "ImageCacheStatus"],
                    swiftSettings: swiftSettings),
        .testTarget(name: "ImageCacheStoreTests",
                    dependencies: ["ImageCacheTestSupport", "ImageCacheSystem", "ImageCacheHTTP", "ImageCacheStatus", "ImageCacheStore",
                                   .product(name: "Logging", package: "swift-log")],
                    swiftSettings: swiftSettings),
        .testTarget(name: "ImageCacheTransformTests",
                    dependencies: ["ImageCacheTestSupport", "ImageCacheSystem", "ImageCacheHTTP", "ImageCacheTransform"],
                    swiftSettings: swiftSettings),
        .testTarget(name: "ImageCacheConfigTests",
                    dependencies: ["ImageCacheTestSupport", "ImageCacheHTTP", "ImageCacheConfig", "ImageCacheServer", "ImageCacheStore", "ImageCacheFleet",
                                   "ImageCacheUpstream", "ImageCacheTransform"],
                    swiftSettings: swiftSettings),
        .testTarget(name: "ImageCacheServerTests",
                    dependencies: ["ImageCacheTestSupport", "ImageCacheSystem", "ImageCacheHTTP", "ImageCacheServer", "ImageCacheStore"],
                    swiftSettings: swiftSettings),
        .testTarget(name: "ImageCacheUpstreamTests",
                    dependencies: ["ImageCacheTestSupport", "ImageCacheSystem", "ImageCacheHTTP", "ImageCacheUpstream"],
                    swiftSettings: swiftSettings),
        .testTarget(name: "ImageCacheFleetTests",
                    dependencies: ["ImageCacheTestSupport", "ImageCacheSystem", "ImageCacheFleet",
                                   .product(name: "Logging", package: "swift-log")],
                    swiftSettings: swiftSettings),
        .testTarget(name: "ImageCacheCoreTests",
                    dependencies: ["ImageCacheTestSupport", "ImageCacheSystem", "ImageCacheHTTP", "ImageCacheStatus", "ImageCacheConfig",
                                   "ImageCacheServer", "ImageCacheStore", "ImageCacheUpstream", "ImageCacheTransform", "ImageCacheTLS",
                                   "ImageCacheCertificates", "ImageCacheCore", "ImageCacheFleet"],
                    swiftSettings: swiftSettings),
        .testTarget(name: "ImageCacheOpsTests",
                    dependencies: ["ImageCacheTestSupport", "ImageCacheSystem", "ImageCacheStatus", "ImageCacheConfig", "ImageCacheStore",
                                   "ImageCacheCore", "ImageCacheOps"],
                    swiftSettings: swiftSettings),
        .testTarget(name: "ImageCacheCertificatesTests",
                    dependencies: ["ImageCacheTestSupport", "ImageCacheHTTP", "ImageCacheCertificates",
                                   .product(name: "X509", package: "swift-certificates"),
                                   .product(name: "SwiftASN1", package: "swift-asn1"),
                                   .product(name: "Crypto", package: "swift-crypto")],
                    swiftSettings: swiftSettings),
        .testTarget(name: "ImageCacheFuzzTests", dependencies: ["ImageCacheTestSupport", "ImageCacheFuzz"],
                    swiftSettings: swiftSettings),
        // The repository's own documents: every relative link in the README and docs/ resolves.
        .testTarget(name: "DocsTests", dependencies: ["ImageCacheTestSupport"], swiftSettings: swiftSettings),
        .testTarget(
            name: "IntegrationTests",
            dependencies: ["ImageCacheTestSupport", "ImageCacheSystem", "ImageCacheHTTP", "ImageCacheStatus", "ImageCacheConfig", "ImageCacheServer", "ImageCacheStore", "ImageCacheUpstream", "ImageCacheTransform", "ImageCacheCertificates", "ImageCacheTLS", "ImageCacheCore", "ImageCacheOps", "ImageCacheFleet"],
            swiftSettings: swiftSettings
        ),
    ],
    swiftLanguageModes: [.v6]
)
