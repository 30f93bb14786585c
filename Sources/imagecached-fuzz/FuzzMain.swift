// imagecached-fuzz: the fuzz targets of ImageCacheFuzz as one executable, two ways.
//
// Why this shape: the targets call the parsers' `package` API (ResponseHeadParser, RangeAnswer, Route), which only
// targets of the root package can see, so they cannot live in a package of their own under Fuzz/. And a root-package
// target is built by every `swift build`, so it must build without libFuzzer. Hence:
//   - built normally (`swift build`), this is a replay tool: `imagecached-fuzz TARGET FILE|DIR...` runs each file
//     through the target once (a corpus, a crash artifact), and says how many it ran. No libFuzzer, a few hundred lines.
//   - built by `scripts/fuzz` (`--sanitize=fuzzer --sanitize=address`, `-DFUZZING`), libFuzzer's own main drives
//     `LLVMFuzzerTestOneInput` below; the target is named by IMAGECACHED_FUZZ_TARGET (scripts/fuzz sets it).
//     SwiftPM, told of the fuzzer sanitizer, links libFuzzer's main in place of ours; so no `@main` then.
// The corpora under Fuzz/corpus/<target>/ are also replayed by FuzzCorpusTests in every test run.

import ImageCacheFuzz

#if FUZZING
#if canImport(Glibc)
import Glibc
#endif

/// The target chosen by IMAGECACHED_FUZZ_TARGET, read once.
let fuzzTarget: FuzzTarget = {
    let name = getenv("IMAGECACHED_FUZZ_TARGET").map { String(cString: $0) } ?? ""
    guard let target = FuzzTarget(rawValue: name) else {
        fatalError("IMAGECACHED_FUZZ_TARGET must be one of: \(FuzzTarget.allCases.map(\.rawValue).joined(separator: ", ")) (got '\(name)')")
    }
    return target
}()

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    fuzzTarget.run(size == 0 ? [] : Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
}
#else
import Foundation

@main
enum FuzzReplay {
    static func main() {
        let arguments = Array(CommandLine.arguments.dropFirst())
        guard let name = arguments.first, let target = FuzzTarget(rawValue: name), arguments.count > 1 else {
            FileHandle.standardError.write(Data("""
                usage: imagecached-fuzz TARGET FILE|DIR...   (runs each file through TARGET once)
                targets: \(FuzzTarget.allCases.map(\.rawValue).joined(separator: " "))
                (scripts/fuzz builds this with libFuzzer and fuzzes a target)

                """.utf8))
            exit(2)
        }
        var count = 0
        for path in arguments.dropFirst() {
            for file in files(path) {
                guard let data = FileManager.default.contents(atPath: file) else {
                    FileHandle.standardError.write(Data("cannot read \(file)\n".utf8))
                    exit(1)
                }
                target.run(Array(data))
                count += 1
            }
        }
        print("\(target.rawValue): \(count) input(s) replayed, no failure")
    }

    /// `path` if it is a file, else the files in it, sorted.
    static func files(_ path: String) -> [String] {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue else { return [path] }
        let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
        return names.filter { !$0.hasPrefix(".") }.sorted().map { path + "/" + $0 }
    }
}
#endif
