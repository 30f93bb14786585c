// The fuzz targets' committed corpora (Fuzz/corpus/<target>/: seeds, and every input that once crashed), replayed
// through the same functions libFuzzer drives (scripts/fuzz): the short fuzz run of every test run. A failed check
// traps, as under libFuzzer; `imagecached-fuzz TARGET FILE` replays one input alone.

import Foundation
import ImageCacheFuzz
import Testing
import ImageCacheTestSupport

@Suite("Fuzz corpora: every committed input runs through its target without a failed check", .timeLimit(.minutes(1)))
struct FuzzCorpusTests {
    static let corpus = RepositoryPath.at("Fuzz/corpus")

    @Test("corpus replays", arguments: FuzzTarget.allCases)
    func replay(_ target: FuzzTarget) throws {
        let directory = Self.corpus.appendingPathComponent(target.rawValue)
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { !$0.hasPrefix(".") }.sorted()
        #expect(names.count >= 3, "a target has at least a few seeds")
        for name in names {
            target.run(Array(try Data(contentsOf: directory.appendingPathComponent(name))))
        }
    }
}
