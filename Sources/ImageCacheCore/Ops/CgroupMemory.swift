// The memory limit the process lives under (cgroup v2): systemd's MemoryMax= shows up as memory.max of the
// unit's cgroup. The process's cgroup is the "0::/path" line of /proc/self/cgroup; the limit in force is the
// smallest memory.max from that cgroup up to the root ("max" means none). cgroup v1 and a missing /sys/fs/cgroup
// give nil (no limit known): the fixed default applies.

internal import Foundation

public enum CgroupMemory {
    /// The smallest memory.max on the path of the process's cgroup, in bytes; nil when there is none.
    public static func limitBytes() -> Int? {
        limitBytes(procSelfCgroup: try? String(contentsOfFile: "/proc/self/cgroup", encoding: .utf8),
                   root: "/sys/fs/cgroup")
    }

    /// Pure over the file system under `root` (tests pass a temporary directory).
    public static func limitBytes(procSelfCgroup: String?, root: String) -> Int? {
        guard let procSelfCgroup,
              let line = procSelfCgroup.split(separator: "\n").first(where: { $0.hasPrefix("0::") }) else { return nil }
        var path = String(line.dropFirst(3)).trimmingCharacters(in: .whitespaces)
        var limit: Int?
        while true {
            let file = root + (path == "/" ? "" : path) + "/memory.max"
            if let text = try? String(contentsOfFile: file, encoding: .utf8),
               let value = Int(text.trimmingCharacters(in: .whitespacesAndNewlines)) {
                limit = min(limit ?? value, value)
            }
            guard path != "/", !path.isEmpty, let slash = path.lastIndex(of: "/") else { break }
            path = slash == path.startIndex ? "/" : String(path[..<slash])
        }
        return limit
    }
}
