#!/usr/bin/env python3
"""Runs imagecached, nginx proxy_cache and Varnish in front of bench/origin.py and compares them.

Scenarios (see bench/README.md): memory hits (wrk, small and mixed corpus), coalescing, streaming,
revalidation, memory use, and nginx serving the files statically as the ceiling. Prints one table and
writes bench/results/<date>.md. Every load loop is bounded by time and count; all traffic is to 127.0.0.1.
"""
import argparse
import datetime
import hashlib
import http.client
import json
import os
import platform
import pwd
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
CORPUS = os.path.join(BENCH, "corpus")
RESULTS = os.path.join(BENCH, "results")
WORK = "/tmp/imagecached-bench"          # temp dirs, pid files, generated configs
SHM = "/dev/shm/imagecached-bench"       # nginx's cache files (tmpfs: its cache lives in RAM like the others)
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
CACHES = ["imagecached", "nginx", "varnish"]
MIB = 1024 * 1024


# ---------------------------------------------------------------- processes

def unprivileged():
    """setpriv prefix that drops to nobody when we are root (the caches run unprivileged)."""
    if os.getuid() != 0:
        return []
    return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]


def wait_port(port, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


class Proc:
    def __init__(self, name, argv, port, log):
        self.name, self.port = name, port
        self.log = open(log, "w")
        self.popen = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_port(port)
        except RuntimeError:
            self.stop()
            print(open(log).read()[-3000:], file=sys.stderr)
            raise

    def pids(self):
        """This process and its descendants (nginx workers, varnishd's child)."""
        children = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                    children.setdefault(ppid, []).append(int(entry))
                except (OSError, IndexError, ValueError):
                    pass
        out, todo = [], [self.popen.pid]
        while todo:
            pid = todo.pop()
            out.append(pid)
            todo.extend(children.get(pid, []))
        return out

    def cpu_seconds(self):
        """utime + stime of the process tree, from /proc/<pid>/stat."""
        total = 0
        for pid in self.pids():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])
            except OSError:
                pass
        return total / CLK_TCK

    def memory(self):
        """(RSS, PSS) of the process tree in bytes, from /proc/<pid>/smaps_rollup."""
        rss = pss = 0
        for pid in self.pids():
            try:
                with open(f"/proc/{pid}/smaps_rollup") as f:
                    for line in f:
                        if line.startswith("Rss:"):
                            rss += int(line.split()[1]) * 1024
                        elif line.startswith("Pss:"):
                            pss += int(line.split()[1]) * 1024
            except OSError:
                pass
        return rss, pss

    def stop(self):
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGTERM)   # the session we created for this child only
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(5)
        self.log.close()


def render(template, path, **values):
    with open(os.path.join(BENCH, "templates", template)) as f:
        text = f.read().format(**values)
    with open(path, "w") as f:
        f.write(text)
    return path


def start_all(ports, memory_mib):
    for d in (WORK, SHM):
        shutil.rmtree(d, ignore_errors=True)
    for d in (WORK, f"{WORK}/nginx", f"{WORK}/static", f"{WORK}/varnish", SHM):
        os.makedirs(d)
    if os.getuid() == 0:
        nobody = pwd.getpwnam("nobody")
        for d in (WORK, f"{WORK}/nginx", f"{WORK}/static", f"{WORK}/varnish", SHM):
            os.chown(d, nobody.pw_uid, nobody.pw_gid)
    drop = unprivileged()
    procs = {}
    procs["origin"] = Proc("origin", [sys.executable, os.path.join(BENCH, "origin.py"), "--port", str(ports["origin"])],
                           ports["origin"], f"{WORK}/origin.log")
    origin_url = f"http://127.0.0.1:{ports['origin']}"
    procs["imagecached"] = Proc("imagecached", drop + [
        os.path.join(REPO, ".build/release/imagecached"), "--listen", f"127.0.0.1:{ports['imagecached']}",
        "--origin", origin_url, "--memory-limit", f"{memory_mib}MiB", "--cache-dir", f"{WORK}/imagecached-disk",
        "--log-level", "warning"], ports["imagecached"], f"{WORK}/imagecached.log")
    conf = render("nginx-proxy.conf", f"{WORK}/nginx/nginx.conf", work=f"{WORK}/nginx", cache_dir=SHM,
                  memory_mib=memory_mib, origin_port=ports["origin"], port=ports["nginx"])
    procs["nginx"] = Proc("nginx", drop + ["nginx", "-c", conf, "-p", f"{WORK}/nginx", "-e", f"{WORK}/nginx/error.log"],
                          ports["nginx"], f"{WORK}/nginx.log")
    vcl = render("varnish.vcl", f"{WORK}/varnish/default.vcl", origin_port=ports["origin"])
    # thread_pools=2: one per core (the default). Varnish runs a thread per connection by design, so its pool
    # threads are not capped to 2; that is how it is deployed.
    procs["varnish"] = Proc("varnish", drop + [
        "varnishd", "-F", "-j", "none", "-n", f"{WORK}/varnish/n", "-a", f"127.0.0.1:{ports['varnish']}",
        "-f", vcl, "-s", f"malloc,{memory_mib}m", "-p", "thread_pools=2", "-p", "default_grace=0"],
        ports["varnish"], f"{WORK}/varnish.log")
    conf = render("nginx-static.conf", f"{WORK}/static/nginx.conf", work=f"{WORK}/static", corpus=CORPUS,
                  port=ports["static"])
    procs["static"] = Proc("static", drop + ["nginx", "-c", conf, "-p", f"{WORK}/static", "-e", f"{WORK}/static/error.log"],
                           ports["static"], f"{WORK}/static.log")
    return procs


# ---------------------------------------------------------------- clients

def origin_stats(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/__stats")
    data = json.loads(conn.getresponse().read())
    conn.close()
    return data


def origin_total(stats, prefix=""):
    return sum(v.get("200", 0) + v.get("304", 0) for k, v in stats.items() if k.startswith(prefix))


def fetch_all(port, paths, expect=None, threads=4):
    """GETs every path once over keep-alive connections; returns the number of wrong answers."""
    bad = [0]
    lock = threading.Lock()

    def worker(chunk):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for path in chunk:
            conn.request("GET", path)
            resp = conn.getresponse()
            body = resp.read()
            ok = resp.status == 200 and (expect is None or hashlib.sha256(body).hexdigest() == expect[path])
            if not ok:
                with lock:
                    bad[0] += 1
        conn.close()

    ts = [threading.Thread(target=worker, args=(paths[i::threads],)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return bad[0]


def wrk(port, paths, duration, connections, label):
    path_file = f"{WORK}/paths-{label}.txt"
    with open(path_file, "w") as f:
        f.write("\n".join(paths) + "\n")
    out = subprocess.run(["wrk", "-t2", f"-c{connections}", f"-d{duration}s", "--timeout", "5s",
                          "-s", os.path.join(BENCH, "lua", "rotate.lua"), f"http://127.0.0.1:{port}", "--", path_file],
                         capture_output=True, text=True, timeout=duration + 60)
    for line in out.stdout.splitlines():
        if line.startswith("WRKJSON "):
            r = json.loads(line[8:])
            seconds = r["duration_us"] / 1e6
            r["rps"] = r["requests"] / seconds
            r["mbps"] = r["bytes"] / seconds / 1e6
            return r
    raise RuntimeError(f"wrk gave no result: {out.stdout}\n{out.stderr}")


def crowd(port, path, clients, expect_sha, timeout=30):
    """`clients` connections, opened first, send GET `path` back to back from one thread, then one selector
    loop reads every answer (one thread, so the client adds no scheduling noise to the latencies).
    Per client: start (request sent), first body byte and end (unix times), and whether the bytes were right."""
    import selectors
    sel = selectors.DefaultSelector()
    request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: bench-crowd\r\n\r\n".encode()
    socks = [socket.create_connection(("127.0.0.1", port), timeout=timeout) for _ in range(clients)]
    results = []
    t0 = time.time()
    for s in socks:
        s.sendall(request)
        s.setblocking(False)
        r = {"ok": False, "start": time.time(), "first": None, "end": None, "buf": b"", "head": None, "length": None}
        results.append(r)
        sel.register(s, selectors.EVENT_READ, r)
    left = clients
    deadline = t0 + timeout
    while left and time.time() < deadline:
        for key, _ in sel.select(0.5):
            r, s = key.data, key.fileobj
            try:
                data = s.recv(262144)
            except BlockingIOError:
                continue
            now = time.time()
            r["buf"] += data
            if r["head"] is None and b"\r\n\r\n" in r["buf"]:
                head, _, body = r["buf"].partition(b"\r\n\r\n")
                r["head"], r["buf"] = head.decode("latin-1"), body
                lines = r["head"].split("\r\n")
                r["status"] = int(lines[0].split()[1])
                fields = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
                r["chunked"] = "chunked" in fields.get("transfer-encoding", "")
                r["length"] = int(fields["content-length"]) if "content-length" in fields else None
            if r["head"] is not None and r["buf"] and r["first"] is None:
                r["first"] = now
            complete = False
            if r["head"] is not None:
                if r["chunked"]:
                    complete = r["buf"].endswith(b"0\r\n\r\n")
                elif r["length"] is not None:
                    complete = len(r["buf"]) >= r["length"]
            if complete or not data:
                r["end"] = now
                body = r["buf"]
                if r.get("chunked"):
                    body = dechunk(body)
                r["ok"] = complete and r.get("status") == 200 and hashlib.sha256(body).hexdigest() == expect_sha
                if not complete:
                    r["error"] = "closed early"
                sel.unregister(s)
                s.close()
                left -= 1
    for key in list(sel.get_map().values()):
        key.data["error"] = "timeout"
        key.fileobj.close()
    for r in results:
        r.pop("buf", None)
    return t0, results


def dechunk(data):
    out, i = [], 0
    while True:
        j = data.index(b"\r\n", i)
        n = int(data[i:j].split(b";")[0], 16)
        if n == 0:
            return b"".join(out)
        out.append(data[j + 2:j + 2 + n])
        i = j + 2 + n + 2


def pct(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    k = (len(values) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


# ---------------------------------------------------------------- scenarios

def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=int, default=int(os.environ.get("BENCH_DURATION", 10)), help="seconds per wrk run")
    parser.add_argument("--runs", type=int, default=int(os.environ.get("BENCH_RUNS", 3)))
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--memory-mib", type=int, default=256)
    parser.add_argument("--base-port", type=int, default=18080)
    parser.add_argument("--only", default="", help="comma-separated scenarios: hits,coalescing,streaming,revalidation")
    args = parser.parse_args()
    only = set(filter(None, args.only.split(",")))
    want = lambda s: not only or s in only  # noqa: E731

    with open(os.path.join(CORPUS, "manifest.json")) as f:
        manifest = json.load(f)
    sha = {"/" + x["path"]: x["sha256"] for x in manifest["files"]}
    size = {"/" + x["path"]: x["bytes"] for x in manifest["files"]}
    small = sorted(p for p in sha if p.startswith("/small/"))
    mixed = sorted(p for p in sha if not p.startswith("/stream/"))
    corpus_bytes = sum(size[p] for p in mixed) + size["/stream/big.jpg"]
    ports = {name: args.base_port + i for i, name in enumerate(["origin"] + CACHES + ["static"])}
    nonce = str(int(time.time()))
    res = {"args": vars(args), "corpus": {"files": len(sha), "bytes": corpus_bytes, "small": len(small), "mixed": len(mixed)},
           "hits": {}, "memory": {}, "coalescing": {}, "streaming": {}, "revalidation": {}}

    procs = start_all(ports, args.memory_mib)
    try:
        time.sleep(1)
        # 5. memory: baseline, then load the whole corpus through each cache (twice: fill, then check hits)
        for name in CACHES:
            rss0, pss0 = procs[name].memory()
            bad = fetch_all(ports[name], mixed + ["/stream/big.jpg"], sha)
            before = origin_total(origin_stats(ports["origin"]))
            bad += fetch_all(ports[name], mixed + ["/stream/big.jpg"], sha)
            refetched = origin_total(origin_stats(ports["origin"])) - before
            time.sleep(1)
            rss, pss = procs[name].memory()
            shm = 0
            if name == "nginx":
                shm = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(SHM) for f in fs)
            res["memory"][name] = {"rss0": rss0, "pss0": pss0, "rss": rss, "pss": pss, "tmpfs": shm,
                                   "wrong": bad, "second_pass_origin_requests": refetched}
            print(f"loaded {name}: rss {rss / MIB:.0f} MiB pss {pss / MIB:.0f} MiB tmpfs {shm / MIB:.0f} MiB, "
                  f"wrong {bad}, origin requests on 2nd pass {refetched}", flush=True)

        # 1 + 6. memory hits, and the static ceiling; targets rotate each run so none always goes first
        if want("hits"):
            targets = CACHES + ["static"]
            for corpus_name, paths in (("small", small), ("mixed", mixed)):
                for run in range(args.runs):
                    order = targets[run % len(targets):] + targets[:run % len(targets)]
                    for name in order:
                        cpu0 = procs[name].cpu_seconds()
                        o0 = origin_total(origin_stats(ports["origin"]))
                        r = wrk(ports[name], paths, args.duration, args.connections, f"{corpus_name}")
                        r["cpu_s"] = procs[name].cpu_seconds() - cpu0
                        r["cpu_us_per_req"] = r["cpu_s"] * 1e6 / max(1, r["requests"])
                        r["origin_requests"] = origin_total(origin_stats(ports["origin"])) - o0
                        res["hits"].setdefault(corpus_name, {}).setdefault(name, []).append(r)
                        print(f"hits {corpus_name} run {run + 1} {name}: {r['rps']:.0f} req/s {r['mbps']:.0f} MB/s "
                              f"p50 {r['p50_us'] / 1000:.2f} ms p99 {r['p99_us'] / 1000:.2f} ms "
                              f"cpu {r['cpu_us_per_req']:.1f} us/req errors {r['errors']} origin {r['origin_requests']}",
                              flush=True)
            for name in CACHES:
                res["memory"][name]["rss_end"], res["memory"][name]["pss_end"] = procs[name].memory()

        # 2. coalescing: 200 clients, one new URL, origin delay 500 ms
        if want("coalescing"):
            target = "/small/t007.jpg"
            for name in CACHES:
                path = f"/_o/delay=500,v={name}-{nonce}{target}"
                t0, rs = crowd(ports[name], path, 200, sha[target])
                lat = [r["end"] - r["start"] for r in rs if r and r["end"]]
                st = origin_stats(ports["origin"]).get(path, {})
                res["coalescing"][name] = {
                    "origin_requests": st.get("200", 0) + st.get("304", 0), "clients": len(rs),
                    "correct": sum(1 for r in rs if r and r["ok"]), "p50": pct(lat, 50), "p99": pct(lat, 99),
                    "max": max(lat) if lat else float("nan"),
                    "origin_sent": (st["first_byte"] - t0) if "first_byte" in st else float("nan"),
                    "errors": sorted({r.get("error", "") for r in rs if r and "error" in r})[:3]}
                print(f"coalescing {name}: {res['coalescing'][name]}", flush=True)

        # 3. streaming: 1 MB dripped over 2 s, 50 clients together
        if want("streaming"):
            target = "/stream/big.jpg"
            for name in CACHES:
                path = f"/_o/drip=2000,v={name}-{nonce}{target}"
                t0, rs = crowd(ports[name], path, 50, sha[target])
                st = origin_stats(ports["origin"]).get(path, {})
                ofb = st.get("first_byte")
                done = [r for r in rs if r and r["end"]]
                ttfb = [r["first"] - r["start"] for r in done]
                total = [r["end"] - r["start"] for r in done]
                lag = [r["first"] - ofb for r in done] if ofb else []
                res["streaming"][name] = {
                    "origin_requests": st.get("200", 0) + st.get("304", 0), "clients": len(rs),
                    "correct": sum(1 for r in rs if r and r["ok"]),
                    "origin_first_byte": (ofb - t0) if ofb else float("nan"),
                    "ttfb_p50": pct(ttfb, 50), "ttfb_max": max(ttfb) if ttfb else float("nan"),
                    "lag_max": max(lag) if lag else float("nan"),
                    "total_p50": pct(total, 50), "total_max": max(total) if total else float("nan"),
                    "errors": sorted({r.get("error", "") for r in rs if r and "error" in r})[:3]}
                print(f"streaming {name}: {res['streaming'][name]}", flush=True)

        # 4. revalidation: 20 thumbnails with max-age=1 under load
        if want("revalidation"):
            for name in CACHES:
                paths = [f"/_o/maxage=1,v={name}-{nonce}{p}" for p in small[:20]]
                prefix = f"/_o/maxage=1,v={name}-{nonce}/"
                r = wrk(ports[name], paths, args.duration, 16, "reval")
                st = origin_stats(ports["origin"])
                res["revalidation"][name] = {
                    "rps": r["rps"], "errors": r["errors"], "seconds": args.duration, "urls": len(paths),
                    "origin_200": sum(v.get("200", 0) for k, v in st.items() if k.startswith(prefix)),
                    "origin_304": sum(v.get("304", 0) for k, v in st.items() if k.startswith(prefix))}
                print(f"revalidation {name}: {res['revalidation'][name]}", flush=True)
    finally:
        for name in ["static", "varnish", "nginx", "imagecached", "origin"]:
            if name in procs:
                procs[name].stop()

    from report import write_report  # noqa: E402,PLC0415 - next to this file
    path = write_report(res, RESULTS)
    print(f"\nwritten {path}")


if __name__ == "__main__":
    main()
