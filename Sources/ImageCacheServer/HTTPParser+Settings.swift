// The request parser's limits from the server's settings (server.max-request-line, ...).

public import ImageCacheHTTP

extension HTTPParser.Limits {
    public init(_ settings: ServerSettings) {
            self.init(maxRequestLineBytes: settings.maxRequestLineBytes,
                      maxHeaderBytes: settings.maxHeaderBytes,
                      maxHeaderCount: settings.maxHeaderCount,
                      maxRequestBodyBytes: settings.maxRequestBodyBytes)
        }
}

extension HTTPParser {
    public init(settings: ServerSettings, bodyDecision: @escaping BodyDecision = { _ in .read }) {
        self.init(limits: Limits(settings), bodyDecision: bodyDecision)
    }
}
