// The request parser's limits from the server's configuration (server.max-request-line, ...).

public import ImageCacheConfig
public import ImageCacheHTTP

extension HTTPParser.Limits {
    public init(_ configuration: ServerConfiguration) {
            self.init(maxRequestLineBytes: configuration.maxRequestLineBytes,
                      maxHeaderBytes: configuration.maxHeaderBytes,
                      maxHeaderCount: configuration.maxHeaderCount,
                      maxRequestBodyBytes: configuration.maxRequestBodyBytes)
        }
}

extension HTTPParser {
    public init(configuration: ServerConfiguration, bodyDecision: @escaping BodyDecision = { _ in .read }) {
        self.init(limits: Limits(configuration), bodyDecision: bodyDecision)
    }
}
