import Testing
@testable import ImageCacheHTTP
@testable import ImageCacheStore

@Suite("Renditions: their cache keys and disk file names", .timeLimit(.minutes(1)))
struct RenditionNameTests {
    static let urls = ["http://origin.test/a.jpg", "https://A.test:8443/p/q.png?w=1&h=2", "http://[::1]:8080/i.gif"]
    static let rendition = "rs:fill:300:200:0:0/f:webp"

    static func isLowerHex(_ text: Substring) -> Bool {
        text.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }
    }

    @Test("a rendition's file name is its URL's primary name, \"~\" and 16 hex digits: 81 characters", arguments: urls)
    func fileName(url text: String) throws {
        // Given
        let url = try UpstreamURL.parse(text)
        let key = CacheKey(url, rendition: Self.rendition)
        let primary = DiskEntryFormat.fileName(for: CacheKey(url))
        // When
        let name = DiskEntryFormat.fileName(for: key)
        // Then
        #expect(name.hasPrefix(primary + "~"))
        #expect(name.count == 81)
        #expect(Self.isLowerHex(name.dropFirst(65)))
        // The name from the key's text (the loader's check) is the same
        #expect(DiskEntryFormat.fileName(forKey: key.description) == name)
        #expect(key.description == url.string + " " + Self.rendition)
        // and it does not depend on anything but the URL and the rendition.
        #expect(DiskEntryFormat.fileName(for: CacheKey(try UpstreamURL.parse(text), rendition: Self.rendition)) == name)
    }

    @Test("different renditions of one URL, and one rendition of different URLs, have different names")
    func distinctNames() throws {
        let a = try UpstreamURL.parse("http://origin.test/a.jpg"), b = try UpstreamURL.parse("http://origin.test/b.jpg")
        let names = [
            DiskEntryFormat.fileName(for: CacheKey(a)),
            DiskEntryFormat.fileName(for: CacheKey(a, rendition: "rs:fit:100:0:0:0/f:src")),
            DiskEntryFormat.fileName(for: CacheKey(a, rendition: "rs:fit:100:0:0:0/f:webp")),
            DiskEntryFormat.fileName(for: CacheKey(b, rendition: "rs:fit:100:0:0:0/f:webp")),
        ]
        #expect(Set(names).count == names.count)
    }

    @Test("rendition and variant names are told apart, and both count as entries of their URL for a purge")
    func namePredicates() throws {
        // Given
        let url = try UpstreamURL.parse("http://origin.test/a.jpg")
        let primary = DiskEntryFormat.fileName(for: CacheKey(url))
        let rendition = DiskEntryFormat.fileName(for: CacheKey(url, rendition: Self.rendition))
        let variant = DiskEntryFormat.fileName(for: CacheKey(url), variant: "accept=image/webp")
        let otherPrimary = DiskEntryFormat.fileName(for: CacheKey(try UpstreamURL.parse("http://origin.test/b.jpg")))
        let otherRendition = DiskEntryFormat.fileName(for: CacheKey(try UpstreamURL.parse("http://origin.test/b.jpg"),
                                                                    rendition: Self.rendition))
        // Then: the shapes
        #expect(DiskEntryFormat.isRenditionName(rendition) && !DiskEntryFormat.isVariantName(rendition))
        #expect(DiskEntryFormat.isVariantName(variant) && !DiskEntryFormat.isRenditionName(variant))
        #expect(!DiskEntryFormat.isRenditionName(primary) && !DiskEntryFormat.isVariantName(primary))
        #expect([primary, rendition, variant].allSatisfy(DiskEntryFormat.isEntryName))
        // a rendition is a primary of its own; a variant's primary is its URL's
        #expect(DiskEntryFormat.primaryName(of: rendition) == rendition)
        #expect(DiskEntryFormat.primaryName(of: variant) == primary)
        #expect(DiskEntryFormat.primaryName(of: primary) == primary)
        // a rendition is not one of the URL's Vary variants ...
        #expect(DiskEntryFormat.isVariant(variant, of: primary) && DiskEntryFormat.isVariant(primary, of: primary))
        #expect(!DiskEntryFormat.isVariant(rendition, of: primary))
        // ... but a purge of the URL removes it with the variants, and nothing of another URL
        #expect(DiskEntryFormat.isVariantOrRendition(primary, of: primary))
        #expect(DiskEntryFormat.isVariantOrRendition(variant, of: primary))
        #expect(DiskEntryFormat.isVariantOrRendition(rendition, of: primary))
        #expect(!DiskEntryFormat.isVariantOrRendition(otherPrimary, of: primary))
        #expect(!DiskEntryFormat.isVariantOrRendition(otherRendition, of: primary))
    }

    @Test("names of the wrong shape are not entries", arguments: [
        String(repeating: "a", count: 64) + "~" + String(repeating: "b", count: 15),
        String(repeating: "a", count: 64) + "~" + String(repeating: "b", count: 17),
        String(repeating: "a", count: 64) + "+" + String(repeating: "b", count: 16),
        String(repeating: "a", count: 64) + "~" + String(repeating: "B", count: 16),
        String(repeating: "a", count: 64) + "~" + String(repeating: "g", count: 16),
        String(repeating: "A", count: 64) + "~" + String(repeating: "b", count: 16),
        String(repeating: "a", count: 63) + "~" + String(repeating: "b", count: 17),
        String(repeating: "a", count: 64) + "~" + String(repeating: "b", count: 16) + ".tmp",
    ])
    func malformedNames(name: String) {
        #expect(!DiskEntryFormat.isEntryName(name))
    }

    @Test("a well-formed rendition name is an entry name")
    func wellFormedName() {
        let name = String(repeating: "a", count: 64) + "~" + String(repeating: "0", count: 16)
        #expect(DiskEntryFormat.isEntryName(name) && DiskEntryFormat.isRenditionName(name))
    }

    @Test("keys: renditions of one URL differ from each other and from the URL; source gives the URL's key")
    func keys() throws {
        // Given
        let url = try UpstreamURL.parse("http://origin.test/a.jpg")
        let plain = CacheKey(url)
        let webp = CacheKey(url, rendition: "rs:fit:100:0:0:0/f:webp")
        let avif = CacheKey(url, rendition: "rs:fit:100:0:0:0/f:avif")
        // Then
        #expect(webp != avif && webp != plain && avif != plain)
        #expect(webp == CacheKey(try UpstreamURL.parse("http://ORIGIN.test:80/a.jpg"), rendition: "rs:fit:100:0:0:0/f:webp"))
        #expect(Set([plain, webp, avif, CacheKey(url, rendition: "rs:fit:100:0:0:0/f:webp")]).count == 3)
        #expect(webp.isRendition && !plain.isRendition)
        #expect(webp.source == plain && webp.source.rendition.isEmpty && !webp.source.isRendition)
        #expect(plain.source == plain)
        // An empty rendition is the URL's own key, hash included.
        let empty = CacheKey(url, rendition: "")
        #expect(empty == plain && empty.hashValue == plain.hashValue && !empty.isRendition)
        #expect(plain.description == "http://origin.test/a.jpg")
    }
}
