import Foundation
import Testing
import ImageCacheHTTP
import ImageCacheTestSupport
@testable import ImageCacheTransform

/// The real transformer (libvips, in this process) over the fixtures, for every path through it: each resizing type,
/// gravity (compass, offsets, focal point, smart), crop, trim, rotate, auto-orientation, blur, sharpen, quality,
/// padding, extend, background, alpha flattened or kept, grey sources, animations kept animated or made still, SVG, and
/// every output format. Each result's SHA-256 is compared with the table below: a change to the transformer that is
/// meant to keep renditions (their entity tags and cached bytes) as they were must leave every row as it is. A row
/// changes only with a change meant to change that rendition, which says so.
///
/// Each case runs three ways, which must give the same bytes (PixelCache.swift says why): without a pixel cache, with
/// one large enough to keep sources decoded whole (shared by every case, so its levels are hit as well as made), and
/// with one too small for that (JPEG and PNG levels shrunk on load or box-averaged from a streamed decode).
///
/// Determinism (checked with three runs in separate processes, libvips 8.14, one thread per image as the daemon
/// runs it): every format's encoder, AVIF (libheif with libaom) included, gave the same bytes on every run, so every
/// row is a hash of the encoded bytes.
@Suite("Transformer: renditions are the bytes of the committed table, with or without a pixel cache", .timeLimit(.minutes(3)))
struct RenditionGoldenTests {
    struct Case: Sendable, CustomTestStringConvertible {
        /// A file in Tests/Fixtures, or a source made here: "made.tiff", "made.webp", "made-anim.webp", "made.avif".
        var source: String
        var options: String
        /// nil: the source's format.
        var format: ImageOutputFormat?
        /// WIDTHxHEIGHT of the result (of one frame), then "xN" for N frames.
        var size: String
        var sha256: String
        var testDescription: String { "\(source) \(options.isEmpty ? "-" : options) -> \(format?.rawValue ?? "source format")" }
    }

    static let cases: [Case] = [
        // Resizing types, sizes, enlarge, dpr
        Case(source: "photo.jpg", options: "", format: .jpeg, size: "640x427", sha256: "60e9f39976d53598f8d56b61dfe74452ed63eab59ace1708a52a3e594b6e38e5"),
        Case(source: "photo.jpg", options: "rs:fit:200:200", format: .jpeg, size: "200x133", sha256: "791c3706c27c2b557eb45e81a4f210d1ca89cb2c64dd6474b878f4d061db1500"),
        Case(source: "photo.jpg", options: "rs:fill:200:200", format: .jpeg, size: "200x200", sha256: "59ba70ad296e89669e98fc4f1656213670e8261b3d27af7bd368b81d78f61b4f"),
        Case(source: "photo.jpg", options: "rs:fill-down:800:600", format: .jpeg, size: "569x427", sha256: "c0cba52408b77cdc1dbf6ee292cc25330e656074e1bb1b153163b4c46a7ddcda"),
        Case(source: "photo.jpg", options: "rs:force:200:300", format: .jpeg, size: "200x300", sha256: "13956ed879556c0451c6fbc33b991dc9a683f801f6498e2d9a0090c2be795dbf"),
        Case(source: "photo.jpg", options: "rs:auto:300:200", format: .webp, size: "300x200", sha256: "a0cbfa2ffca9e5ec48bcf35d5259029b577017fd0f48a7ac9c5bdcb5fd3fc6f9"),
        Case(source: "photo.jpg", options: "w:1000/el:1", format: .jpeg, size: "1000x667", sha256: "3bbc86082e64c16dd0da3b82177e8d3ca47f0b85697a28c972786e659f765f25"),
        Case(source: "photo.jpg", options: "h:50/dpr:3", format: .jpeg, size: "225x150", sha256: "ff52ed0bafbe4d5f50e1ffb5a1b77041a069d1619104ac7a24b3d2c01bca31dc"),
        Case(source: "photo.jpg", options: "w:100", format: .jpeg, size: "100x67", sha256: "1c85d54083e2232abf0f20e362b32df5a9d0ef88961ab72e344d28d02824b368"),
        Case(source: "photo.jpg", options: "h:20", format: .png, size: "30x20", sha256: "ef2e19ef42d13be2e7d7f0bf4e096dd07d835c1ea7a0a7693a9c62767836b43d"),
        // Gravity: compass with offsets, focal point, smart (shrink-on-load and the window in one pass)
        Case(source: "photo.jpg", options: "rs:fill:150:150/g:nowe:10:5", format: .jpeg, size: "150x150", sha256: "cd677e3442bf39ab74fb9882d3b405141eaad7f42ec1b2ea08def1ea2c0ee2eb"),
        Case(source: "photo.jpg", options: "rs:fill:150:150/g:soea", format: .jpeg, size: "150x150", sha256: "314e8edbbb05fcd8d34c5670b63c44490488e5e7388d1423d2bed1967f1b2661"),
        Case(source: "photo.jpg", options: "rs:fill:150:150/g:fp:0.3:0.7", format: .jpeg, size: "150x150", sha256: "454028ff053e0349c402bb9bcde9f5bb948b2762cf3cd49ac7913d57f2650a0a"),
        Case(source: "photo.jpg", options: "rs:fill:150:150/g:sm", format: .jpeg, size: "150x150", sha256: "a11bccb0eed7fb3d2357f87bc4f3765509a52c02df3310b2f7d8765085dc0b3f"),
        Case(source: "photo.jpg", options: "rs:fill:60:40/g:sm", format: .jpeg, size: "60x40", sha256: "0e857c3d4c0a031e8f1b822ad949449a888a3bfa1747b204924f67415f302a3a"),
        // Crop (pixels, fractions, its own gravity, smart) and trim: the decoded-whole path
        Case(source: "photo.jpg", options: "c:300:200:ea", format: .jpeg, size: "300x200", sha256: "7129038107fceacce49b36d1e1a4108396fd1fddeb8f21476a3454f697b9c941"),
        Case(source: "photo.jpg", options: "c:0.5:0.5:sm/rs:fit:100:100", format: .jpeg, size: "100x67", sha256: "421111f44bac38451e86bb27ded6c008f28729b9e1d43b1b5f9cabb3029ed58b"),
        Case(source: "photo.jpg", options: "c:0.25:0:fp:0.2:0.5/g:so", format: .png, size: "160x427", sha256: "1c8297fadfeeda71451a5bbd65a1e86d9cd29a92cb07089ea6741caaf4a27647"),
        Case(source: "photo.jpg", options: "c:200:200:so/rot:90", format: .jpeg, size: "200x200", sha256: "c254444c800bcd9393b993290289e57170d2a90d6da5b8d82bb292b12bea66a5"),
        Case(source: "bordered.png", options: "t:10", format: .png, size: "100x80", sha256: "3c395f88e00446fe89530299456bdee624166e5f840708fc9c586d71a6adc783"),
        Case(source: "bordered.png", options: "t:10:ffffff/w:100", format: .jpeg, size: "100x80", sha256: "1ebce51f6c2de8a8b0eedf7ecd869581c26400dcd3a2fc683f4592777023d67c"),
        Case(source: "alpha.png", options: "t:0/w:50", format: .png, size: "50x50", sha256: "eb342b48b42dc21276268d6b5a82a69d5e9dbb5c878e46a3cba378b6e981db4a"),
        // Rotate (a quarter turn evaluated first), auto-orientation of an EXIF-rotated JPEG, on and off
        Case(source: "photo.jpg", options: "rot:90/w:100", format: .jpeg, size: "100x150", sha256: "cd473d2a3748a23525029d35ba1a9c8bc8e72d03171ed2cd68ffcffe2b1f30d5"),
        Case(source: "photo.jpg", options: "rot:180/rs:fill:120:80", format: .jpeg, size: "120x80", sha256: "027eb128d96e47c25f8608a0cbc7690f53f8839b7286c2880032e5acfcc79eac"),
        Case(source: "photo.jpg", options: "rot:270/rs:fill:90:60/g:sm", format: .jpeg, size: "90x60", sha256: "8955c2724dfd9842a3e94db805ae12b76223703091ef61dd14818fee7437e2aa"),
        Case(source: "rotated.jpg", options: "w:100", format: .jpeg, size: "100x150", sha256: "e89035b6ed37cd1889a1e81f6d4b7300edd005ef89c127e4d55f3559be01e79d"),
        Case(source: "rotated.jpg", options: "w:100/ar:0", format: .jpeg, size: "100x67", sha256: "292ecc08efa93053ca6304b5222dfa13cc93e3d48f288a884ff10891cf023849"),
        Case(source: "rotated.jpg", options: "c:100:100:no", format: .png, size: "100x100", sha256: "404acb9acd71b12afafa6fe41a4155e0365872d701b5cc2b70185a05f8557512"),
        Case(source: "rotated.jpg", options: "rs:fill:80:80/g:sm", format: .webp, size: "80x80", sha256: "c9aa016e7690e5ff3ed8929e63cfff5228e362892d0b4126ead63475c62426f3"),
        Case(source: "rotated.jpg", options: "rot:270/rs:fill:60:90", format: .jpeg, size: "60x90", sha256: "667494a463a3d7f7b833193d3003a875eff882524f34fa2e358678c2caf6c0f4"),
        Case(source: "rotated.jpg", options: "", format: nil, size: "200x300", sha256: "54719578ff339feefff2ffb95b909bfdd8c64bb0d7f2198c6eb9d4f1de4b9a78"),
        // Blur, sharpen, quality, metadata kept
        Case(source: "photo.jpg", options: "bl:2/w:200", format: .jpeg, size: "200x133", sha256: "c9da52a513460b1b47097c738668924317151459334376a486a271e640bcd433"),
        Case(source: "photo.jpg", options: "sh:1.5/w:200", format: .jpeg, size: "200x133", sha256: "2c8cd913cca2c5e6e065b9b0fc21e41000f08a548fe57906a222609298e246c8"),
        Case(source: "photo.jpg", options: "w:200/q:40", format: .jpeg, size: "200x133", sha256: "514c277f1853a14371ffb6e6a5d9ebed98f99ea581117e6e92ec9ae8bd66b7ea"),
        Case(source: "photo.jpg", options: "w:200/fq:webp:30:jpeg:90", format: .webp, size: "200x133", sha256: "a1b5f31064c6cb8220b41a5faa70ee5b547bb151efb104495ef58df02c262612"),
        Case(source: "photo.jpg", options: "w:200/q:90", format: .avif, size: "200x133", sha256: "f7995397318e2913408b7b57524a337992e8047ae4d20f7f0aa2e8bc638146e6"),
        Case(source: "rotated.jpg", options: "w:150/sm:0", format: .jpeg, size: "150x225", sha256: "49e6c5eb7c9ef4eeeff50c054e62c9d625feba43053a76881681746073af1e60"),
        // Padding, extend, background; alpha kept, flattened, added
        Case(source: "photo.jpg", options: "w:200/pd:10:20", format: .png, size: "240x153", sha256: "9f7eaa4d2d861e5a30585890ea56b0c71cf07443dbebfc2981d582c4227dd80f"),
        Case(source: "photo.jpg", options: "w:200/pd:5:6:7:8", format: .jpeg, size: "214x145", sha256: "d22aad450fa88ed3d54e0655bffe08e9b92ac1c89ffad0a84ba35987041d5b5b"),
        Case(source: "photo.jpg", options: "rs:fit:300:300:0:1/bg:255:0:0", format: .jpeg, size: "300x300", sha256: "00d3a5e3ff17f090c081d7c44edb3a0b8b1a9b5f00ea95214d7ef94275e98069"),
        Case(source: "photo.jpg", options: "rs:fit:300:300:0:1/ex:1:nowe", format: .webp, size: "300x300", sha256: "e97fab94b7fd4768b6ad1ebbc163cc859eee3338586b61edde88e6d8d41959b9"),
        Case(source: "alpha.png", options: "w:100", format: .jpeg, size: "100x100", sha256: "cbceab81508588db9e17110ac2d31c2eb602d8820fdb57acffe8784d64252fdc"),
        Case(source: "alpha.png", options: "w:100/bg:0:0:255", format: .png, size: "100x100", sha256: "b33a0a5212665347cbb3c9919adc558817cbc136cef1499dae0c84bd3295834d"),
        Case(source: "alpha.png", options: "rs:fit:150:100:0:1", format: .png, size: "150x100", sha256: "ff146720d026d83c26cb8b3a3ed4ff592727d04cf867bc06746d5898ab3205fe"),
        Case(source: "alpha.png", options: "pd:5/bg:0a141e", format: .webp, size: "210x210", sha256: "5e4ffa2582d75f65999e24a592312f987f6ada1921d6b33def07a48ed762ebe4"),
        Case(source: "alpha.png", options: "w:100", format: .webp, size: "100x100", sha256: "79d320454d3cf91b85f009a71250fb233540bbc4b89ebe925e3bd24acd0da5db"),
        Case(source: "alpha.png", options: "w:100", format: .avif, size: "100x100", sha256: "27418b7fd61b4f365d555e46ade72a657340353a34b746cb915649ec7b345b52"),
        Case(source: "alpha.png", options: "w:100", format: .gif, size: "100x100", sha256: "66a3c8cbb9f43ab99978ef6f82f84c4e664d2c4269cf592d1f04e4b343a36e80"),
        Case(source: "alpha.png", options: "w:60", format: nil, size: "60x60", sha256: "cd383646e2857b1d3987955b12841568e3387cec4b8830e32095872692d88910"),
        Case(source: "grey.jpg", options: "rs:fit:200:200:0:1", format: .jpeg, size: "200x200", sha256: "2907a626afd965dc898c758c2e6bd0d195cf7c6467fc166df062595901983c0b"),
        Case(source: "grey.jpg", options: "rs:fit:200:200:0:1", format: .png, size: "200x200", sha256: "0d3b164d2c107e704cec72a759451148f7285e5c238ccd4f0b1ae7cbdde306a0"),
        Case(source: "grey.jpg", options: "pd:4/bg:100:150:200/w:80", format: .png, size: "88x62", sha256: "e0ae56fcc3626b102925f625ac5b7a955641f81b809e1849ab60b77ddd473074"),
        // Opaque PNG: its whole decode, box-averaged levels
        Case(source: "bordered.png", options: "w:50", format: .png, size: "50x50", sha256: "9e2d6610c617c50c33c2e595f7b3c9747ad3a067d778cceec5af67b7c3ab082f"),
        Case(source: "bordered.png", options: "w:150", format: .webp, size: "150x150", sha256: "208539982152a5c1bd74ed472ca8e2c3996604b77285e23b6b3a825a13901bff"),
        Case(source: "bordered.png", options: "rs:fill:100:50/g:sm", format: .avif, size: "100x50", sha256: "a5f49d9ad767b0f1a5df9e04fd4124efe432cab7d7329638afbf19cf02e1fffe"),
        Case(source: "bordered.png", options: "rs:fill:40:70", format: nil, size: "40x70", sha256: "ff1472c8d979b6effd5bdaabfc67747b601339c2a8bbf4bb08a1d2345ac733e9"),
        // Every output format from a photo
        Case(source: "photo.jpg", options: "w:160", format: .png, size: "160x107", sha256: "1a084ed57209e29dd2116813feb174cb4fd60a710aadcbf9e01ebdba19c7a457"),
        Case(source: "photo.jpg", options: "w:160", format: .webp, size: "160x107", sha256: "8f6c78e1643af36ca280a73665c21dee4a92fe3c553ab21b54bdf79f253f583e"),
        Case(source: "photo.jpg", options: "w:160", format: .avif, size: "160x107", sha256: "5e58b494cc32f3b339292b098f9c5f5a2e7c85a2f179208f5edc816771dab857"),
        Case(source: "photo.jpg", options: "w:160", format: .gif, size: "160x107", sha256: "d7a38af166eee911550271cc728187c3812df2526bdb8bb3cfe18242c2163248"),
        // Animations: kept animated (resize, window at centre and smart, blur), or a still of the first frame
        Case(source: "anim.gif", options: "w:60", format: .gif, size: "60x40x3", sha256: "8a3c4de0dee1a3913eed5216c56f852fe19777ac8ab18e5235f17cbb697f4fda"),
        Case(source: "anim.gif", options: "w:60", format: .webp, size: "60x40x3", sha256: "6ebff3345275e63f0f7d4af253926b86654e38d00f85c505b6c811c32f3953ad"),
        Case(source: "anim.gif", options: "rs:fill:50:50", format: .gif, size: "50x50x3", sha256: "0bf29f721cc3e7dd42854b338735083813de36f868d53b53d0efc9ef769b6b39"),
        Case(source: "anim.gif", options: "rs:fill:50:50/g:sm", format: .webp, size: "50x50x3", sha256: "731c99345c1176cd6a70d9560271abc3e31c339590bf5fdce6d0f7abb504b849"),
        Case(source: "anim.gif", options: "bl:1/sh:1", format: nil, size: "120x80x3", sha256: "63c3bbb27db4cf5b6039022016bad04594f960dc1b42a59be89815912a3b3f2a"),
        Case(source: "anim.gif", options: "w:60", format: .png, size: "60x40", sha256: "94ce86421b0a13d64b1154b8184c64ab753ce5f13b7ee3f20e0d1da7d0e3ce39"),
        Case(source: "anim.gif", options: "c:40:40", format: .gif, size: "40x40", sha256: "65b20ca57dc4335d7f1bec97580c1e66669ade68668b8eeaf137f2bf596204a2"),
        Case(source: "anim.gif", options: "rs:fill:50:50/g:no", format: .gif, size: "50x50", sha256: "b54e7473a6985a4e691852b13576030c17c73b9d4534b70544031ebb0667c76b"),
        Case(source: "anim-right.gif", options: "rs:fill:60:60/g:sm", format: .gif, size: "60x60x3", sha256: "675227cbc8f7214eb589d849559e6d1d57e5de720572c954d2a6cb0414cb1897"),
        Case(source: "anim-right.gif", options: "rs:fill-down:300:100", format: .webp, size: "200x67x3", sha256: "f068cd9acbe3d0fadc592d00dca6fcd86fd0602cd298ca805f82cd281b553aaf"),
        // Other source formats: SVG, TIFF, WebP (still and animated), AVIF
        Case(source: "image.svg", options: "w:200", format: .png, size: "100x100", sha256: "7d3fb10a9e0eb0ff40fa45f610f476e5246a7c648c0cf5a123bf073435a8779c"),
        Case(source: "image.svg", options: "rs:fill:50:80", format: nil, size: "50x80", sha256: "b386e59404b0f887187842c1337189188b492aa663d1e8f365de670afe7f5ffb"),
        Case(source: "made.tiff", options: "w:8", format: nil, size: "8x8", sha256: "463f908dd9cb4181ec5c0294cb81e458617482c09f64f795b17b8786d6803e67"),
        Case(source: "made.webp", options: "w:24", format: nil, size: "24x24", sha256: "36edb923421acccd8db3853db2c31a2dc85a7764f9f5140c51b2b9db7dd52563"),
        Case(source: "made-anim.webp", options: "w:8", format: nil, size: "8x6x3", sha256: "c2b6d37c981ba36fd802d0a4f3441c7caa6aa169a78da36c4d7ea7f986ad339d"),
        Case(source: "made.avif", options: "w:24", format: nil, size: "24x16", sha256: "76123f901fb327cd497de5c3ec83581784b86285f926b6db12e35f7664659a6c"),
    ]

    /// Large enough to keep every fixture decoded whole; shared by every case.
    static let keepsWhole = PixelCache(limitBytes: 128 << 20)

    static func source(_ name: String) throws -> [UInt8] {
        func made(_ name: String, _ options: String, _ format: ImageOutputFormat) throws -> [UInt8] {
            let spec = TransformSpec(options: try TransformOptions.parse(options.split(separator: "/")), format: format,
                                     limits: TransformLimits())
            return try Transformer.run(try source(name), spec).get().bytes
        }
        switch name {
        case "made.tiff": return TransformerFuzzTests.tiff()
        case "made.webp": return try made("bordered.png", "w:48", .webp)
        case "made-anim.webp": return try made("anim.gif", "w:16", .webp)
        case "made.avif": return try made("photo.jpg", "w:48", .avif)
        default: return try [UInt8](Data(contentsOf: RepositoryPath.fixtures.appendingPathComponent(name)))
        }
    }

    static func hex(_ bytes: [UInt8]) -> String {
        let base64 = bytes.withUnsafeBytes { ContentHash.sha256Base64(bytes: $0) }
        return Data(base64Encoded: base64)!.map { String(format: "%02x", $0) }.joined()
    }

    @Test("each case's rendition", arguments: cases)
    func rendition(_ rendition: Case) throws {
        // Given the source (SVG allowed) and its options
        try VipsRuntime.start(threadsPerImage: 1, allowSVG: true)
        let source = try Self.source(rendition.source)
        let options = try TransformOptions.parse(rendition.options.split(separator: "/"))
        var limits = TransformLimits()
        limits.allowSVG = true
        // When it is transformed without a pixel cache, with one that keeps it whole, and with one too small for that
        var results: [String] = []
        for cache in [nil, Self.keepsWhole, PixelCache(limitBytes: 1 << 20)] {
            let spec = TransformSpec(options: options, format: rendition.format, limits: limits, pixelCache: cache)
            let image = try Transformer.run(source, spec).get()
            let size = "\(image.width)x\(image.height)" + (image.frames > 1 ? "x\(image.frames)" : "")
            results.append("\(image.format.rawValue) \(size) \(Self.hex(image.bytes))")
        }
        // Then each is the table's: format, size and SHA-256 of the bytes
        let format = rendition.format ?? Self.sourceFormats[rendition.source]
        let expected = "\(format?.rawValue ?? "?") \(rendition.size) \(rendition.sha256)"
        #expect(results == [expected, expected, expected], "\(rendition.testDescription)")
    }

    /// The format a case without an explicit one is encoded in.
    static let sourceFormats: [String: ImageOutputFormat] = [
        "rotated.jpg": .jpeg, "alpha.png": .png, "bordered.png": .png, "anim.gif": .gif, "image.svg": .png,
        "made.tiff": .jpeg, "made.webp": .webp, "made-anim.webp": .webp, "made.avif": .avif,
    ]
}
