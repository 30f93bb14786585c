// ListenAddress: where a Listener binds, "HOST:PORT" or "[V6]:PORT" as the `listen` key and the admin client
// write it. Pure text, no I/O.

/// Where to listen.
public struct ListenAddress: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    public var port: Int
    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }
    public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }

    /// "HOST:PORT", "[V6]:PORT", or ":PORT" (all IPv4 interfaces).
    public static func parse(_ text: String) -> ListenAddress? {
        let host: Substring
        let portText: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { return nil }
            host = text[text.index(after: text.startIndex)..<close]
            let rest = text[text.index(after: close)...]
            guard rest.hasPrefix(":") else { return nil }
            portText = rest.dropFirst()
        } else {
            guard let colon = text.lastIndex(of: ":") else { return nil }
            host = text[..<colon]
            portText = text[text.index(after: colon)...]
            if host.contains(":") { return nil }
        }
        guard let port = Int(portText), (0...65535).contains(port) else { return nil }
        return ListenAddress(host: host.isEmpty ? "0.0.0.0" : String(host), port: port)
    }
}
