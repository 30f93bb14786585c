#!/usr/bin/env python3
"""HTTPS hits through the proxy: imagecached with TLS interception against Squid with ssl_bump, runs in turns.

    bench/run --only https [--runs 5] [--duration 10]     (or: python3 bench/https.py, after bench/run's installs)

One origin (bench/origin.py speaking HTTPS with its own test CA, max-age 3600) on 127.0.0.1 and, beside each other,
  imagecached  --intercept-hosts localhost --intercept-ca-dir DIR --upstream-ca-bundle ORIGIN_CA
               --allow-private-networks --connect-ports 443,ORIGIN_PORT --memory-limit 256MiB --disk-limit 0
  Squid        (Debian's squid-openssl) http_port ssl-bump, generate-host-certificates, ssl_bump bump all,
               cache_mem 1 GB, no cache_dir, access log off while measuring; `workers 1`, and `workers 2` as a
               second instance (--squid-workers 1,2)
Both proxies mint leaves with ECDSA P-256 keys (imagecached's local CA; Squid's CA is made here with a P-256 key,
which its generated certificates reuse).

The load: wrk (2 threads, --connections keep-alive connections) through one stunnel per proxy in client mode with
`protocol = connect`: each wrk connection is one CONNECT tunnel, TLS 1.3 to the proxy's minted leaf (verified:
verifyChain, checkHost), then keep-alive GETs for https://localhost:ORIGIN_PORT/small/... inside it. wrk alone
cannot speak CONNECT + TLS; stunnel is C with OpenSSL, so the client side costs about what a proxy's TLS costs and
both proxies pay the same. Hits/s, each proxy's utime+stime (its process tree, /proc/PID/stat) per hit, stunnel's and
wrk's, and the machine's idle share. The origin's counters must not move during the rounds (all hits).

New tunnels: client processes (Python ssl, --tunnel-clients of them) that each loop CONNECT, TLS handshake, one GET
with `Connection: close`, read to the end; with resumption (the last session's ticket offered) and without.
Tunnels/s, the proxy's CPU per tunnel, and the share of handshakes the client saw resumed (SSLSocket.session_reused:
the client's view works for both proxies; imagecached counts intercepted handshakes in TLSCounters.intercepted, which
the metrics do not show yet).

Each round runs every proxy once, the order rotating each round; ratios are taken within a round, then the median.
Writes bench/results/<date>-https.md with --label (or --write). Only 127.0.0.1; every load is bounded in time.
"""

import argparse
import datetime
import json
import multiprocessing
import os
import pwd
import resource
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  - the runner's processes and helpers

WORK = f"{bench.WORK}/https"
SQUID = "/usr/sbin/squid"
CERTGEN = "/usr/lib/squid/security_file_certgen"
HOST = "localhost"   # the name the clients CONNECT to (in intercept-hosts, and the origin leaf's SAN)


def run(*argv, **kw):
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kw)


def make_pki():
    """The origin's CA and leaf (localhost, 127.0.0.1), and Squid's signing CA (P-256)."""
    pki = f"{WORK}/pki"
    os.makedirs(pki, exist_ok=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    run("openssl", "req", "-x509", *ec, "-keyout", f"{pki}/origin-ca.key", "-out", f"{pki}/origin-ca.pem", "-days", "30",
        "-subj", "/CN=bench origin CA", "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    run("openssl", "req", *ec, "-keyout", f"{pki}/origin.key", "-out", f"{pki}/origin.csr", "-subj", f"/CN={HOST}")
    with open(f"{pki}/origin.ext", "w") as f:
        f.write(f"subjectAltName=DNS:{HOST},IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
    run("openssl", "x509", "-req", "-in", f"{pki}/origin.csr", "-CA", f"{pki}/origin-ca.pem", "-CAkey", f"{pki}/origin-ca.key",
        "-CAcreateserial", "-out", f"{pki}/origin.pem", "-days", "30", "-extfile", f"{pki}/origin.ext")
    run("openssl", "req", "-x509", *ec, "-keyout", f"{pki}/squid-ca.key", "-out", f"{pki}/squid-ca.pem", "-days", "30",
        "-subj", "/CN=bench squid CA", "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    for name in os.listdir(pki):
        os.chmod(f"{pki}/{name}", 0o644)
    return pki


def chown_tree(path, user):
    entry = pwd.getpwnam(user)
    for folder, dirs, files in os.walk(path):
        for name in [folder] + [os.path.join(folder, x) for x in dirs + files]:
            os.chown(name, entry.pw_uid, entry.pw_gid)


def squid_conf(port, workers, pki, access_log):
    base = f"{WORK}/squid-w{workers}"
    os.makedirs(base, exist_ok=True)
    db = f"{base}/ssl_db"
    if not os.path.exists(db):
        run(CERTGEN, "-c", "-s", db, "-M", "16MB")
    conf = f"""# bench/https.py: Squid with ssl_bump and a memory cache, the peer of imagecached --intercept-hosts
http_port 127.0.0.1:{port} ssl-bump generate-host-certificates=on dynamic_cert_mem_cache_size=16MB tls-cert={pki}/squid-ca.pem tls-key={pki}/squid-ca.key
sslcrtd_program {CERTGEN} -s {db} -M 16MB
sslcrtd_children 5
ssl_bump bump all
tls_outgoing_options cafile={pki}/origin-ca.pem
http_access allow localhost
http_access deny all
cache_mem 1 GB
maximum_object_size_in_memory 10 MB
maximum_object_size 10 MB
memory_replacement_policy lru
workers {workers}
cache_effective_user proxy
pid_filename {base}/squid.pid
cache_log {base}/cache.log
access_log {"stdio:" + base + "/access.log" if access_log else "none"}
cache_store_log none
coredump_dir {base}
logfile_rotate 0
shutdown_lifetime 1 seconds
visible_hostname bench-squid
forwarded_for delete
via off
"""
    path = f"{base}/squid.conf"
    with open(path, "w") as f:
        f.write(conf)
    chown_tree(base, "proxy")
    return path, base


class Stunnel(bench.Proc):
    """stunnel in client mode: plain on `port`, CONNECT through the proxy at `proxy_port`, TLS to HOST inside."""

    def __init__(self, name, port, proxy_port, origin_port, ca):
        conf = f"{WORK}/stunnel-{name}.conf"
        with open(conf, "w") as f:
            f.write(f"""foreground = yes
pid =
debug = 3
socket = l:TCP_NODELAY=1
socket = r:TCP_NODELAY=1
[{name}]
client = yes
accept = 127.0.0.1:{port}
connect = 127.0.0.1:{proxy_port}
protocol = connect
protocolHost = {HOST}:{origin_port}
sni = {HOST}
verifyChain = yes
checkHost = {HOST}
CAfile = {ca}
""")
        super().__init__(f"stunnel-{name}", ["stunnel", conf], port, f"{WORK}/stunnel-{name}.log")


def warm(port, origin_port, paths, times=2):
    """GETs every path `times` over one keep-alive connection through the stunnel at `port`; wrong answers."""
    import http.client  # noqa: PLC0415
    bad = 0
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for _ in range(times):
        for path in paths:
            conn.request("GET", path, headers={"Host": f"{HOST}:{origin_port}"})
            resp = conn.getresponse()
            body = resp.read()
            if resp.status != 200 or not body:
                bad += 1
    conn.close()
    return bad


def origin_200s(origin_port, ca):
    ctx = ssl.create_default_context(cafile=ca)
    with urllib.request.urlopen(f"https://{HOST}:{origin_port}/__stats", context=ctx, timeout=10) as r:
        stats = json.load(r)
    return sum(v.get("200", 0) for v in stats.values())


def wrk(port, origin_port, paths, duration, connections, label):
    path_file = f"{WORK}/paths-{label}.txt"
    with open(path_file, "w") as f:
        f.write("\n".join(paths) + "\n")
    children0, idle0 = resource.getrusage(resource.RUSAGE_CHILDREN), bench.cpu_idle_seconds()
    out = subprocess.run(["wrk", "-t2", f"-c{connections}", f"-d{duration}s", "--timeout", "5s", "-H", f"Host: {HOST}:{origin_port}",
                          "-s", os.path.join(bench.BENCH, "lua", "rotate.lua"), f"http://127.0.0.1:{port}", "--", path_file],
                         capture_output=True, text=True, timeout=duration + 60)
    children1, idle1 = resource.getrusage(resource.RUSAGE_CHILDREN), bench.cpu_idle_seconds()
    for line in out.stdout.splitlines():
        if line.startswith("WRKJSON "):
            r = json.loads(line[8:])
            seconds = r["duration_us"] / 1e6
            r["rps"] = r["requests"] / seconds
            r["mbps"] = r["bytes"] / seconds / 1e6
            r["wrk_cpu_us"] = ((children1.ru_utime + children1.ru_stime) - (children0.ru_utime + children0.ru_stime)) * 1e6 / max(1, r["requests"])
            r["idle_pct"] = 100 * (idle1 - idle0) / (seconds * os.cpu_count())
            return r
    raise RuntimeError(f"wrk gave no result: {out.stdout}\n{out.stderr}")


def tunnel_client(proxy_port, origin_port, path, ca, resume, duration, queue):
    """One process: CONNECT, handshake, one GET with Connection: close, read to the end; again until the deadline."""
    ctx = ssl.create_default_context(cafile=ca)
    ctx.options |= getattr(ssl, "OP_IGNORE_UNEXPECTED_EOF", 0)
    connect = f"CONNECT {HOST}:{origin_port} HTTP/1.1\r\nHost: {HOST}:{origin_port}\r\n\r\n".encode()
    request = f"GET {path} HTTP/1.1\r\nHost: {HOST}:{origin_port}\r\nConnection: close\r\n\r\n".encode()
    done = reused = errors = 0
    session = None
    t0 = time.time()
    deadline = t0 + duration
    while time.time() < deadline:
        try:
            s = socket.create_connection(("127.0.0.1", proxy_port), timeout=10)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.sendall(connect)
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = s.recv(4096)
                if not chunk:
                    break
                head += chunk
            if b" 200 " not in head.split(b"\r\n", 1)[0]:
                errors += 1
                s.close()
                continue
            t = ctx.wrap_socket(s, server_hostname=HOST, session=session if resume else None)
            t.sendall(request)
            data = b""
            while True:
                try:
                    chunk = t.recv(65536)
                except (ssl.SSLEOFError, ConnectionResetError):
                    break
                if not chunk:
                    break
                data += chunk
            if not data.startswith(b"HTTP/1.1 200"):
                errors += 1
            else:
                done += 1
                reused += t.session_reused
            if resume:
                session = t.session
            t.close()
        except OSError:
            errors += 1
    queue.put((done, reused, errors, time.time() - t0))


def tunnels(proxy_port, origin_port, path, ca, resume, duration, clients):
    queue = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=tunnel_client, args=(proxy_port, origin_port, path, ca, resume, duration, queue))
             for _ in range(clients)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=duration + 60) for _ in procs]
    for p in procs:
        p.join()
    done = sum(r[0] for r in results)
    seconds = max(r[3] for r in results)
    return {"tunnels": done, "tps": done / seconds, "reused": sum(r[1] for r in results), "errors": sum(r[2] for r in results)}


def start_squid(name, port, workers, pki, access_log):
    conf, base = squid_conf(port, workers, pki, access_log)
    for f in ("access.log", "cache.log"):
        if os.path.exists(f"{base}/{f}"):
            os.remove(f"{base}/{f}")
    proc = bench.Proc(name, [SQUID, "--foreground", "-f", conf], port, f"{base}/stdout.log")
    return proc, base


def check_squid(pki, origin_port, small, port):
    """A Squid with its access log on: the second GET of each URL must be a TCP_MEM_HIT. Returns the log's tally."""
    proc, base = start_squid("squid-check", port, 1, pki, True)
    st = Stunnel("squid-check", port + 1, port, origin_port, f"{pki}/squid-ca.pem")
    try:
        bad = warm(port + 1, origin_port, small[:40], times=3)
    finally:
        st.stop()
        proc.stop()
    tally = {}
    with open(f"{base}/access.log") as f:
        for line in f:
            code = line.split()[3] if len(line.split()) > 3 else "?"
            tally[code] = tally.get(code, 0) + 1
    return bad, tally


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default=os.path.join(bench.REPO, ".build/release/imagecached"))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--squid-workers", default="1,2")
    parser.add_argument("--corpus", default="small", help="small and/or mixed")
    parser.add_argument("--tunnel-duration", type=int, default=8)
    parser.add_argument("--tunnel-clients", type=int, default=4)
    parser.add_argument("--tunnel-runs", type=int, default=3)
    parser.add_argument("--base-port", type=int, default=18290)
    parser.add_argument("--label", default="", help="write bench/results/<date>-<label>.md")
    args = parser.parse_args()
    if os.getuid() != 0:
        sys.exit("run as root: Squid runs as root and drops to proxy, as packaged")

    with open(os.path.join(bench.CORPUS, "manifest.json")) as f:
        manifest = json.load(f)
    sha = {"/" + x["path"]: x["sha256"] for x in manifest["files"]}
    small = sorted(p for p in sha if p.startswith("/small/"))
    mixed = sorted(p for p in sha if not p.startswith("/stream/"))
    corpora = [(c, {"small": small, "mixed": mixed}[c]) for c in args.corpus.split(",")]

    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    os.chmod(bench.WORK, 0o755)
    pki = make_pki()
    p = args.base_port
    origin_port = p
    workers = [int(w) for w in args.squid_workers.split(",") if w]
    procs, lines = {}, []

    def say(line):
        print(line, flush=True)
        lines.append(line)

    try:
        procs["origin"] = bench.Proc("origin", [sys.executable, os.path.join(bench.BENCH, "origin.py"), "--port", str(origin_port),
                                                "--tls-cert", f"{pki}/origin.pem", "--tls-key", f"{pki}/origin.key"],
                                     origin_port, f"{WORK}/origin.log")
        bad, tally = check_squid(pki, origin_port, small, p + 20)
        say(f"squid check (access log on, 40 URLs x 3 through ssl_bump): wrong answers {bad}, access log {tally}")
        if tally.get("TCP_MEM_HIT/200", 0) < 80:
            raise RuntimeError("Squid does not serve bumped requests from memory: see its access log")

        ca_dir = f"{WORK}/ic-ca"
        # The CA is made by `imagecached ca init` first: the release build (Swift 6.3.1) of 90d9b80 crashes (SIGSEGV
        # printing a CAError) when the daemon itself makes the CA at its first start; a start with the CA there works.
        os.makedirs(ca_dir, mode=0o700)
        chown_tree(ca_dir, "nobody")
        subprocess.run(bench.unprivileged() + [args.binary, "ca", "init", "--intercept-ca-dir", ca_dir], check=True,
                       capture_output=True, env={**os.environ, "IMAGECACHED_INTERCEPT_HOSTS": HOST})
        servers = {}   # name -> (proxy Proc, stunnel port, client CA)
        procs["imagecached"] = bench.Proc("imagecached", bench.unprivileged() + [
            args.binary, "--listen", f"127.0.0.1:{p + 1}", "--memory-limit", "256MiB", "--disk-limit", "0", "--log-level", "warning",
            "--intercept-hosts", HOST, "--intercept-ca-dir", ca_dir, "--upstream-ca-bundle", f"{pki}/origin-ca.pem",
            "--allow-private-networks", "--connect-ports", f"443,{origin_port}"], p + 1, f"{WORK}/imagecached.log")
        shutil.copy(f"{ca_dir}/ca.pem", f"{pki}/imagecached-ca.pem")
        servers["imagecached"] = (procs["imagecached"], p + 2, f"{pki}/imagecached-ca.pem")
        for i, w in enumerate(workers):
            name = f"squid-w{w}"
            procs[name], _ = start_squid(name, p + 3 + 2 * i, w, pki, False)
            servers[name] = (procs[name], p + 4 + 2 * i, f"{pki}/squid-ca.pem")
        for name, (proxy, sport, ca) in servers.items():
            procs[f"stunnel-{name}"] = Stunnel(name, sport, proxy.port, origin_port, ca)
            bad = warm(sport, origin_port, mixed, times=2)
            say(f"{name}: loaded the mixed corpus twice through CONNECT + TLS, wrong answers {bad}")
            if bad:
                raise RuntimeError(f"{name}: {bad} wrong answers while loading")
        names = list(servers)
        results = {c: {n: [] for n in names} for c, _ in corpora}
        fills0 = origin_200s(origin_port, f"{pki}/origin-ca.pem")
        for run_i in range(args.runs):
            order = names[run_i % len(names):] + names[:run_i % len(names)]
            for corpus_name, paths in corpora:
                for name in order:
                    proxy, sport, _ = servers[name]
                    st = procs[f"stunnel-{name}"]
                    origin0 = origin_200s(origin_port, f"{pki}/origin-ca.pem")
                    cpu0, st0 = proxy.cpu_seconds(), st.cpu_seconds()
                    r = wrk(sport, origin_port, paths, args.duration, args.connections, f"{name}-{corpus_name}")
                    r["cpu_us"] = (proxy.cpu_seconds() - cpu0) * 1e6 / max(1, r["requests"])
                    r["stunnel_us"] = (st.cpu_seconds() - st0) * 1e6 / max(1, r["requests"])
                    r["origin_200s"] = origin_200s(origin_port, f"{pki}/origin-ca.pem") - origin0
                    results[corpus_name][name].append(r)
                    say(f"run {run_i + 1} {corpus_name:5} {name:12} {r['rps']:7.0f} hits/s  p50 {r['p50_us'] / 1000:6.2f}  "
                        f"p99 {r['p99_us'] / 1000:6.2f} ms  cpu {r['cpu_us']:6.1f} us/hit  stunnel {r['stunnel_us']:5.1f}  "
                        f"wrk {r['wrk_cpu_us']:5.1f}  idle {r['idle_pct']:4.1f}%  errors {r['errors']}  origin 200s {r['origin_200s']}")
        fills1 = origin_200s(origin_port, f"{pki}/origin-ca.pem")
        say(f"origin 200s during the hit rounds: {fills1 - fills0} (must be 0)")

        tun = {n: {True: [], False: []} for n in names}
        for run_i in range(args.tunnel_runs):
            order = names[run_i % len(names):] + names[:run_i % len(names)]
            for name in order:
                for resume in ((True, False) if run_i % 2 == 0 else (False, True)):
                    proxy = servers[name][0]
                    cpu0 = proxy.cpu_seconds()
                    r = tunnels(proxy.port, origin_port, small[0], servers[name][2], resume, args.tunnel_duration, args.tunnel_clients)
                    r["cpu_us"] = (proxy.cpu_seconds() - cpu0) * 1e6 / max(1, r["tunnels"])
                    tun[name][resume].append(r)
                    say(f"tunnels run {run_i + 1} {name:12} resume {'on ' if resume else 'off'}  {r['tps']:6.0f} tunnels/s  "
                        f"cpu {r['cpu_us']:6.1f} us/tunnel  resumed {r['reused']}/{r['tunnels']}  errors {r['errors']}")
    finally:
        for proc in reversed(list(procs.values())):
            proc.stop()

    summary = []
    for corpus_name, _ in corpora:
        res = results[corpus_name]
        for name in names:
            summary.append(f"{corpus_name:5} {name:12} medians: {statistics.median(r['rps'] for r in res[name]):7.0f} hits/s  "
                           f"cpu {statistics.median(r['cpu_us'] for r in res[name]):6.1f} us/hit  "
                           f"p99 {statistics.median(r['p99_us'] for r in res[name]) / 1000:6.2f} ms")
        for name in names[1:]:
            rps = statistics.median(a["rps"] / b["rps"] for a, b in zip(res["imagecached"], res[name]))
            cpu = statistics.median(a["cpu_us"] / b["cpu_us"] for a, b in zip(res["imagecached"], res[name]))
            summary.append(f"{corpus_name:5} imagecached / {name}: hits/s x{rps:.2f}, cpu per hit x{cpu:.2f} (median of per-round ratios)")
    for name in names:
        for resume in (True, False):
            rs = tun[name][resume]
            summary.append(f"tunnels {name:12} resume {'on ' if resume else 'off'} medians: {statistics.median(r['tps'] for r in rs):6.0f} tunnels/s  "
                           f"cpu {statistics.median(r['cpu_us'] for r in rs):6.1f} us/tunnel  resumed {sum(r['reused'] for r in rs)}/{sum(r['tunnels'] for r in rs)}")
    print("\n".join(summary))
    if args.label:
        path = os.path.join(bench.RESULTS, f"{datetime.date.today().isoformat()}-{args.label}.md")
        with open(path, "w") as f:
            f.write("```\n" + "\n".join(lines) + "\n\n" + "\n".join(summary) + "\n```\n")
        print(f"written {path}")


if __name__ == "__main__":
    main()
