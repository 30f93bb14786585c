// Where the tests find the repository's files: computed once from this file's own path, so a test file can move
// between folders and targets without counting `..` steps.
public import Foundation

public enum RepositoryPath {
    /// The repository's root (the folder holding Package.swift).
    public static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent()  // Tests/TestSupport
        .deletingLastPathComponent()  // Tests
        .deletingLastPathComponent()

    /// The image fixtures shared by unit and integration tests (`Tests/Fixtures`).
    public static let fixtures = root.appendingPathComponent("Tests/Fixtures")

    /// A file or folder under the root, by its relative path.
    public static func at(_ relative: String) -> URL { root.appendingPathComponent(relative) }
}
