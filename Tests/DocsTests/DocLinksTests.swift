// The manual's links: every relative Markdown link and image in README.md, docs/*.md and the benchmark pages leads to
// a file of the repository, and every `#anchor` to a heading of its page (GitHub's slug of the heading's text).
// External links (a scheme: https:, mailto:, ...) are not followed. Links inside code (fenced blocks, `spans`) are
// not links.

import Foundation
import Testing
import ImageCacheTestSupport

/// Finds the relative links of a Markdown page and says which of them lead nowhere. Pure: the repository is the
/// `read` function (a repository-relative path -> the file's text, "" for a directory, nil when there is nothing).
enum DocLinks {
    /// The pages whose links are checked, relative to the repository's root.
    static func pages(root: URL = RepositoryPath.root) -> [String] {
        let docs = (try? FileManager.default.contentsOfDirectory(atPath: root.appendingPathComponent("docs").path)) ?? []
        let candidates = ["README.md"] + docs.filter { $0.hasSuffix(".md") }.sorted().map { "docs/" + $0 }
            + ["bench/README.md", "bench/results/history.md"]
        return candidates.filter { FileManager.default.fileExists(atPath: root.appendingPathComponent($0).path) }
    }

    /// The repository as `problems` reads it.
    static func readFromDisk(root: URL = RepositoryPath.root) -> @Sendable (String) -> String? {
        { path in
            let url = root.appendingPathComponent(path)
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: url.path, isDirectory: &isDirectory) else { return nil }
            if isDirectory.boolValue { return "" }
            return (try? String(contentsOf: url, encoding: .utf8)) ?? ""
        }
    }

    /// One line per link of `text` (the page at `path`) that leads nowhere: "path:line: target: why".
    static func problems(in text: String, at path: String, read: (String) -> String?) -> [String] {
        var found: [String] = []
        let directory = path.split(separator: "/").dropLast().joined(separator: "/")
        for (number, target) in links(in: text) {
            let (file, anchor) = split(target)
            let resolved: String
            if file.isEmpty {
                resolved = path
            } else if let joined = normalise(directory.isEmpty ? file : directory + "/" + file) {
                resolved = joined
            } else {
                found.append("\(path):\(number): \(target): leaves the repository")
                continue
            }
            guard let contents = read(resolved) else {
                found.append("\(path):\(number): \(target): no file \(resolved)")
                continue
            }
            guard let anchor else { continue }
            if !resolved.hasSuffix(".md") {
                found.append("\(path):\(number): \(target): an anchor into \(resolved), which is not a Markdown page")
            } else if !slugs(of: contents).contains(anchor) {
                found.append("\(path):\(number): \(target): \(resolved) has no heading #\(anchor)")
            }
        }
        return found
    }

    /// The relative link and image targets of a page, with their line numbers (1-based): inline `[text](target)`,
    /// `![alt](target "title")`, `[text](<target>)` and reference definitions `[name]: target`.
    static func links(in text: String) -> [(line: Int, target: String)] {
        var result: [(Int, String)] = []
        for (index, raw) in prose(text) {
            let line = withoutCodeSpans(raw)
            let trimmed = line.drop { $0 == " " }
            if trimmed.hasPrefix("["), let close = trimmed.firstIndex(of: "]"), trimmed[close...].hasPrefix("]: ") {
                let target = trimmed[trimmed.index(close, offsetBy: 3)...].split(separator: " ").first.map(String.init) ?? ""
                if isRelative(target) { result.append((index, target)) }
                continue
            }
            var rest = Substring(line)
            while let open = rest.range(of: "](") {
                var depth = 0, end = open.upperBound
                while end < rest.endIndex {
                    let c = rest[end]
                    if c == "(" { depth += 1 } else if c == ")" { if depth == 0 { break }; depth -= 1 }
                    end = rest.index(after: end)
                }
                var target = rest[open.upperBound..<end].trimmingCharacters(in: .whitespaces)
                if target.hasPrefix("<"), let close = target.firstIndex(of: ">") {
                    target = String(target[target.index(after: target.startIndex)..<close])
                } else if let space = target.firstIndex(of: " ") {
                    target = String(target[..<space])   // a title follows
                }
                if isRelative(target) { result.append((index, target)) }
                rest = end < rest.endIndex ? rest[rest.index(after: end)...] : rest[rest.endIndex...]
            }
        }
        return result
    }

    /// GitHub's anchors for the headings of a page: the heading's text lower-cased, without punctuation, spaces as
    /// hyphens (github-slugger), a repeated slug numbered -1, -2, ...
    static func slugs(of text: String) -> Set<String> {
        var seen: [String: Int] = [:]
        var result: Set<String> = []
        for (_, line) in prose(text) {
            guard line.hasPrefix("#") else { continue }
            let hashes = line.prefix { $0 == "#" }
            guard hashes.count <= 6, line.dropFirst(hashes.count).first == " " else { continue }
            var title = line.dropFirst(hashes.count).trimmingCharacters(in: .whitespaces)
            while title.hasSuffix("#") { title = String(title.dropLast()).trimmingCharacters(in: .whitespaces) }
            let base = slug(plainText(title))
            let count = seen[base, default: 0]
            seen[base] = count + 1
            result.insert(count == 0 ? base : "\(base)-\(count)")
        }
        return result
    }

    static func slug(_ heading: String) -> String {
        var out = ""
        for character in heading.lowercased() {
            if character == " " { out.append("-") }
            else if character == "-" || character == "_" || character.isLetter || character.isNumber { out.append(character) }
        }
        return out
    }

    // MARK: steps

    /// The lines outside fenced code blocks, numbered.
    private static func prose(_ text: String) -> [(Int, String)] {
        var result: [(Int, String)] = []
        var fence: String?
        for (offset, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = String(raw)
            let trimmed = line.drop { $0 == " " }
            if let open = fence {
                if trimmed.hasPrefix(open) { fence = nil }
                continue
            }
            if trimmed.hasPrefix("```") || trimmed.hasPrefix("~~~") {
                fence = String(trimmed.prefix { $0 == trimmed.first })
                continue
            }
            result.append((offset + 1, line))
        }
        return result
    }

    /// `line` with each code span (a run of backticks to the next run of the same length) blanked out.
    private static func withoutCodeSpans(_ line: String) -> String {
        var out = "", characters = Array(line), i = 0
        while i < characters.count {
            guard characters[i] == "`" else { out.append(characters[i]); i += 1; continue }
            var run = 0
            while i + run < characters.count, characters[i + run] == "`" { run += 1 }
            var j = i + run, closed: Int?
            while j < characters.count {
                if characters[j] == "`" {
                    var other = 0
                    while j + other < characters.count, characters[j + other] == "`" { other += 1 }
                    if other == run { closed = j; break }
                    j += other
                } else { j += 1 }
            }
            guard let closed else { out.append(contentsOf: String(characters[i..<(i + run)])); i += run; continue }
            out.append(" ")
            i = closed + run
        }
        return out
    }

    /// A heading as GitHub renders its text: links as their text, code and emphasis marks gone.
    private static func plainText(_ heading: String) -> String {
        var text = heading
        while let open = text.range(of: "]("), let start = text[..<open.lowerBound].lastIndex(of: "["),
              let close = text[open.upperBound...].firstIndex(of: ")") {
            text = String(text[..<start]) + text[text.index(after: start)..<open.lowerBound] + text[text.index(after: close)...]
        }
        return text.filter { $0 != "`" && $0 != "*" }
    }

    private static func isRelative(_ target: String) -> Bool {
        guard !target.isEmpty, !target.hasPrefix("/") else { return false }
        if let colon = target.firstIndex(of: ":"), !target[..<colon].contains("/"), !target[..<colon].contains("#") {
            return false   // a scheme: https:, mailto:, file:
        }
        return true
    }

    /// The target's file (percent-decoded; "" for the page itself) and its anchor, if any.
    private static func split(_ target: String) -> (file: String, anchor: String?) {
        let parts = target.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false)
        let file = String(parts[0]).removingPercentEncoding ?? String(parts[0])
        return (file, parts.count > 1 ? String(parts[1]) : nil)
    }

    /// `a/b/../c` as `a/c`; nil when the path climbs out of the repository.
    private static func normalise(_ path: String) -> String? {
        var components: [Substring] = []
        for component in path.split(separator: "/") where component != "." {
            if component == ".." {
                guard !components.isEmpty else { return nil }
                components.removeLast()
            } else {
                components.append(component)
            }
        }
        return components.joined(separator: "/")
    }
}

@Suite("The manual's links lead somewhere", .timeLimit(.minutes(1)))
struct DocLinksTests {
    @Test("every relative link and image in the README, docs/ and bench/ leads to a file, and every anchor to a heading",
          arguments: DocLinks.pages())
    func linksResolve(page: String) throws {
        // Given
        let text = try String(contentsOf: RepositoryPath.at(page), encoding: .utf8)
        // When
        let problems = DocLinks.problems(in: text, at: page, read: DocLinks.readFromDisk())
        // Then
        #expect(problems.isEmpty, "\(problems.joined(separator: "\n"))")
    }

    @Test("the pages checked are the README and every page in docs/")
    func pagesChecked() {
        let pages = DocLinks.pages()
        #expect(pages.first == "README.md")
        #expect(pages.contains("docs/configuration.md") && pages.contains("docs/architecture.md"))
    }

    @Test("a link to a missing file, a missing heading or out of the repository is reported; code and URLs are not links")
    func brokenLinksAreFound() {
        // Given a repository of three pages and a picture
        let files = [
            "README.md": "",
            "docs/a.md": "# Title\n## Who owns what\n## Who owns what\n### `Config` (the keys)\n",
            "docs/b.png": "",
        ]
        let page = """
            [ok](a.md) [ok](a.md#who-owns-what) [ok](a.md#who-owns-what-1) [ok](a.md#config-the-keys) ![ok](b.png)
            [ok](../README.md) [ok](#local) [ok](https://example.com/x.md#nowhere) `[code](missing.md)`
            [gone](c.md) [anchor](a.md#nowhere) [out](../../x.md) [local](#nowhere)
            ```
            [fenced](missing.md)
            ```
            [ref]: missing-too.md
            ## Local
            """
        // When
        let problems = DocLinks.problems(in: page, at: "docs/page.md", read: { files[$0] ?? (($0 == "docs/page.md") ? page : nil) })
        // Then
        #expect(problems == [
            "docs/page.md:3: c.md: no file docs/c.md",
            "docs/page.md:3: a.md#nowhere: docs/a.md has no heading #nowhere",
            "docs/page.md:3: ../../x.md: leaves the repository",
            "docs/page.md:3: #nowhere: docs/page.md has no heading #nowhere",
            "docs/page.md:7: missing-too.md: no file docs/missing-too.md",
        ])
    }

    @Test("headings get GitHub's anchors", arguments: [
        ("Quick start (Debian 12 with Swift installed)", "quick-start-debian-12-with-swift-installed"),
        ("Three ways in, one cache", "three-ways-in-one-cache"),
        ("Memory under a cgroup limit", "memory-under-a-cgroup-limit"),
        ("RFC 9111, section by section", "rfc-9111-section-by-section"),
        ("Reverse mode is a transparent cache", "reverse-mode-is-a-transparent-cache"),
        ("`imagecached.yaml` and server.write-buffer", "imagecachedyaml-and-serverwrite-buffer"),
        ("Cache-Status / X-Cache", "cache-status--x-cache"),
    ])
    func slugs(heading: String, slug: String) {
        #expect(DocLinks.slugs(of: "## \(heading)\n") == [slug])
    }
}
