// The TLS listener (`tls-listen`, `tls-cert`, `tls-key`): the certificate and key are read at start (a file that
// does not load stops the start) and again on each SIGHUP (one that does not load refuses the reload whole, and the
// certificate in force stays). The context is swapped whole: connections accepted after a reload get the new
// certificate, open ones keep theirs, so a reload drops no connection.

internal import ImageCacheConfig
internal import ImageCacheServer
internal import ImageCacheStatus
internal import ImageCacheTLS
internal import ImageCacheCore
internal import Foundation
internal import Logging

extension Daemon {
    /// How often the TLS contexts are made again for fresh session-ticket keys: OpenSSL keeps a context's keys for its
    /// life, and a TLS 1.2 ticket carries the session's master secret, so a key that leaked would decrypt every TLS 1.2
    /// session resumed or recorded under it. 12 hours bounds that; tickets from before fall back to a full handshake.
    static let ticketKeyRotationSeconds: Double = 12 * 3600

    /// Makes the TLS listener's and the interception generation's contexts again (fresh ticket keys), keeping their
    /// certificates and leaves.
    public func rotateTicketKeys() {
        do {
            try tlsListening?.rotateTicketKeys()
            try proxy.interception.current?.rotateTicketKeys()
            logger.debug("TLS session-ticket keys rotated")
        } catch {
            logger.error("could not rotate the TLS session-ticket keys: \(error)")
        }
    }

    /// The TLS listener's context, when `tls-cert` and `tls-key` are set; nil when neither is. Throws when only one
    /// is, when `tls-listen` is set without them, or when they do not load.
    static func loadTLS(_ configuration: Configuration, logger: Logger) throws -> TLSListening? {
        let certificate = configuration.tlsCertificateFile, key = configuration.tlsKeyFile
        if certificate.isEmpty && key.isEmpty {
            if configuration.tlsListen != nil {
                throw ConfigError(key: "tls-listen", reason: "needs tls-cert and tls-key (the certificate chain and its key, PEM)")
            }
            return nil
        }
        guard !certificate.isEmpty, !key.isEmpty else {
            throw ConfigError(key: certificate.isEmpty ? "tls-cert" : "tls-key", reason: "tls-cert and tls-key go together")
        }
        return TLSListening(context: try serverContext(certificate: certificate, key: key, logger: logger))
    }

    /// A server context for the certificate chain and key in these files.
    static func serverContext(certificate: String, key: String, logger: Logger) throws -> TLSContext {
        warnIfReadableByOthers(key, logger: logger)
        do {
            let identity = try TLSIdentity(certificateChainFile: certificate, privateKeyFile: key)
            let days = identity.notAfter.timeIntervalSinceNow / 86_400
            if days < 14 {
                logger.warning("the TLS certificate \(certificate) (\(identity.subject)) expires in \(String(format: "%.1f", days)) days")
            }
            return try TLSContext.server(identity: identity)
        } catch {
            throw ConfigError(key: "tls-cert", reason: "cannot use \(certificate) with \(key): \(error)")
        }
    }

    /// A key that others may read is a key others may have: said at start and at each reload, as ssh says it.
    private static func warnIfReadableByOthers(_ path: String, logger: Logger) {
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: path),
              let mode = (attributes[.posixPermissions] as? NSNumber)?.intValue else { return }
        if mode & 0o077 != 0 {
            logger.warning("the TLS key \(path) is readable by others (mode \(String(mode, radix: 8))): chmod 600 it")
        }
    }

    /// The TLS listener's counts and certificate, for the stats.
    static func tlsStatus(_ tls: TLSListening) -> @Sendable () -> DaemonStats.TLS {
        {
            let counters = tls.counters
            let identity = tls.current.identity
            return DaemonStats.TLS(fullHandshakes: counters.fullHandshakes, resumedHandshakes: counters.resumedHandshakes,
                                   failures: counters.failureCounts, openConnections: counters.openConnections,
                                   certificateSubject: identity?.subject ?? "",
                                   certificateFingerprint: identity?.fingerprintSHA256 ?? "",
                                   certificateNotAfter: identity?.notAfter.timeIntervalSince1970 ?? 0)
        }
    }

    /// For a reload: the context the next configuration's files make (nil when there is no TLS listener). Throws when
    /// they do not load: the reload is refused and the certificate in force stays.
    func nextTLSContext(for next: Configuration) throws -> TLSContext? {
        guard tlsListening != nil else { return nil }
        guard !next.tlsCertificateFile.isEmpty, !next.tlsKeyFile.isEmpty else {
            throw ConfigError(key: "tls-cert", reason: "the TLS listener is running: tls-cert and tls-key cannot be removed by a reload")
        }
        return try Self.serverContext(certificate: next.tlsCertificateFile, key: next.tlsKeyFile, logger: logger)
    }
}
