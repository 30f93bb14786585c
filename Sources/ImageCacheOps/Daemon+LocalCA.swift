// Daemon+LocalCA: the local CA, when intercept-hosts is set (docs/design/issue-29-plan.md, D9).
//   start    ca.pem and ca.key are read from intercept-ca-dir, or made for intercept-hosts at the first start; the log
//            says where the certificate is, its fingerprint, what it may sign and how to trust it. Unusable files
//            (a key open to others, not ours, not the certificate's, a key alone) or a host outside the CA's name
//            constraints stop the start with the CAError (main exits 1), whose fix names `imagecached ca init
//            --replace` or the chmod/chown to run.
//   reload   the files are read again, from the directory in force (intercept-ca-dir needs a restart): a CA replaced
//            with `ca init --replace` is taken up, and a new fingerprint logged. A list outside the constraints, or
//            files that no longer load, refuse the whole reload (config_reloads_total{result="refused"}).
// The status page and /metrics describe the CA in force (ProxyMetrics.setInterceptCA). The proxy gets it too
// (`Proxy.interception`): at start its first generation, and at a reload a new generation when the fingerprint
// changed (the old CA's leaves and ticket keys go), none when intercept-hosts is emptied, and the same one (its
// leaves kept) otherwise. Called from one thread at a time, as the rest of Daemon's start and reload are (main, then
// the signal queue): `localCAFingerprint` is theirs. The proxy mints leaves and hands them to the server
// (ConnectReply.intercept), which terminates the client's TLS inside the CONNECT with them.

internal import ImageCacheHTTP
internal import ImageCacheStatus
internal import ImageCacheConfig
internal import ImageCacheCertificates
internal import ImageCacheCore
internal import Foundation
internal import Logging

extension Daemon {
    /// The CA for `hosts` in `directory`: loaded, or made when there is none, and checked to cover `hosts`. Logs
    /// what it is and how to trust it. Nil when `hosts` is empty.
    static func prepareLocalCA(for hosts: InterceptHosts, directory path: String, logger: Logger) throws(CAError) -> LocalCA? {
        guard !hosts.isEmpty else { return nil }
        let directory = CADirectory(path: path)
        let (ca, created) = try directory.loadOrCreate(hosts: hosts)
        try ca.check(covers: hosts, path: directory.certificatePath)
        guard ca.notAfter > Date() else {
            // Leaves from it would not verify (and could not be valid for their 72 hours): refused, not served.
            throw CAError(path: directory.certificatePath, problem: "the local CA expired on \(ca.notAfter.formatted(.iso8601))",
                          fix: "imagecached ca init --replace, then trust the new ca.pem")
        }
        let expires = ca.notAfter.formatted(.iso8601.year().month().day())
        let trust = "trust it with `imagecached ca install` (as root: the system store), or point clients at \(directory.certificatePath) (curl --cacert, SSL_CERT_FILE, REQUESTS_CA_BUNDLE, NODE_EXTRA_CA_CERTS)"
        if created {
            logger.notice("local CA made in \(directory.path): \(directory.certificatePath), SHA-256 \(ca.fingerprint), \(ca.constraintSummary), valid until \(expires); \(trust)")
        } else {
            logger.info("local CA \(directory.certificatePath): SHA-256 \(ca.fingerprint), \(ca.constraintSummary), valid until \(expires); \(trust)")
        }
        if !ca.isConstrained {
            logger.warning("the local CA is \(CANameConstraints.unconstrainedWarning) (intercept-hosts lists *): keep \(directory.keyPath) secret, or list the hosts and run imagecached ca init --replace")
        }
        if ca.notAfter.timeIntervalSinceNow < 14 * 86_400 {
            logger.warning("the local CA expires on \(expires): make a new one with imagecached ca init --replace, and trust it again")
        }
        logger.notice("intercept-hosts \(hosts): CONNECT tunnels to these hosts are intercepted with leaves from this CA (HTTPS_PROXY clients must trust \(directory.certificatePath)); others stay blind")
        return ca
    }

    /// What the status page and /metrics say of `ca` (nil: no CA).
    static func statusOfLocalCA(_ ca: LocalCA?, directory: String) -> DaemonStats.InterceptCA? {
        ca.map { ca in
            DaemonStats.InterceptCA(certificatePath: CADirectory(path: directory).certificatePath, fingerprint: ca.fingerprint,
                                    constrained: ca.isConstrained, constraints: ca.constraintSummary,
                                    notAfter: ca.notAfter.timeIntervalSince1970)
        }
    }

    /// For a reload to `next`: the CA read again and checked against its intercept-hosts (refusing the reload when
    /// it does not cover them), handed to the proxy (a new fingerprint: a new generation), and the status updated.
    func reloadLocalCA(for next: Configuration) throws {
        let directory = proxy.configuration.interceptCADirectory   // restart only: the running one
        let ca = try Daemon.prepareLocalCA(for: next.interceptHosts, directory: directory, logger: logger)
        let change = try proxy.interception.use(ca)
        if let ca, let previous = localCAFingerprint, previous != ca.fingerprint {
            logger.notice("reload: a new local CA (SHA-256 \(ca.fingerprint), was \(previous)); clients must trust the new certificate; the old CA's leaf certificates are dropped")
        } else if change == .ended {
            logger.notice("reload: intercept-hosts is empty; no CONNECT is intercepted, and the leaf certificates are dropped")
        }
        localCAFingerprint = ca?.fingerprint
        proxy.metrics.setInterceptCA(Daemon.statusOfLocalCA(ca, directory: directory))
    }
}
