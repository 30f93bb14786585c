// The memory limit the process lives under (cgroup v2): systemd's MemoryMax= shows up as memory.max of the
// unit's cgroup. The process's cgroup is the "0::/path" line of /proc/self/cgroup; the limit in force is the
// smallest memory.max from that cgroup up to the root ("max" means none). On a cgroup v1 (or hybrid) host the
// "N:memory:/path" line leads to memory/<path>/memory.limit_in_bytes the same way (a value near 2^63 means none).
// No file found gives nil (no limit known): the fixed default applies.

internal import Foundation

public enum CgroupMemory {
    /// The smallest memory.max on the path of the process's cgroup, in bytes; nil when there is none.
    public static func limitBytes() -> Int? {
        limitBytes(procSelfCgroup: try? String(contentsOfFile: "/proc/self/cgroup", encoding: .utf8),
                   root: "/sys/fs/cgroup")
    }

    /// Pure over the file system under `root` (tests pass a temporary directory).
    public static func limitBytes(procSelfCgroup: String?, root: String) -> Int? {
        guard let procSelfCgroup else { return nil }
        let lines = procSelfCgroup.split(separator: "\n")
        if let line = lines.first(where: { $0.hasPrefix("0::") }),
           let limit = smallest(path: String(line.dropFirst(3)), root: root, file: "memory.max") {
            return limit
        }
        // cgroup v1: "4:memory:/path" (the controller list may name several, "4:memory,hugetlb:/path").
        for line in lines {
            let fields = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            guard fields.count == 3, fields[1].split(separator: ",").contains("memory") else { continue }
            return smallest(path: String(fields[2]), root: root + "/memory", file: "memory.limit_in_bytes")
        }
        return nil
    }

    /// The smallest limit in `file` from `path` up to the root of the hierarchy at `root`.
    private static func smallest(path: String, root: String, file name: String) -> Int? {
        var path = path.trimmingCharacters(in: .whitespaces)
        var limit: Int?
        while true {
            let file = root + (path == "/" ? "" : path) + "/" + name
            if let text = try? String(contentsOfFile: file, encoding: .utf8),
               let value = Int(text.trimmingCharacters(in: .whitespacesAndNewlines)), value < 1 << 60 {
                limit = min(limit ?? value, value)
            }
            guard path != "/", !path.isEmpty, let slash = path.lastIndex(of: "/") else { break }
            path = slash == path.startIndex ? "/" : String(path[..<slash])
        }
        return limit
    }
}
