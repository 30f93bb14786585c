#!/usr/bin/env python3
"""A fleet of three: imagecached with its memcached fleet tier against nginx proxy_cache and Varnish, 3 nodes each.

    bench/run --only fleet [--rounds 5] [--duration 10]          (or: python3 bench/fleet.py, after bench/run's installs)
    python3 bench/fleet.py --only-cluster nginx,varnish --rounds 1 --duration 3 --storm-urls 2 --hit-urls 480 --no-write

Everything listens on 127.0.0.1, on ports picked free at the start. One origin (bench/origin.py) and three clusters
of 3 nodes each, all in front of it, all running at once:
  imagecached  3 daemons (.build/release/imagecached), --memory-limit 256MiB --disk-limit 0 --server-cpu-affinity off,
               each with --fleet-servers naming the same 3 memcached processes
               (memcached -l 127.0.0.1 -p P -U 0 -t 1 -m 256 -I 32m)
  nginx        3 proxy_cache nodes (templates/nginx-fleet.conf), each with its own cache directory on tmpfs,
               proxy_cache_lock on; no peering between them (none exists: that is the point)
  varnish      3 varnishd, each its own -s malloc,256m
A binary without --fleet-servers (fleet support not merged) stops the run before anything starts, unless the
imagecached cluster is left out (--only-cluster nginx,varnish).

Scenarios, in rounds (--rounds, 5); in each round every cluster runs each scenario once, the clusters' order rotating:
  storm      cross-host storm: --storm-urls new URLs (5) per round, the origin waiting --origin-delay ms (300) before
             answering each; for each URL --storm-clients (30) connections spread evenly over the 3 nodes are opened
             first, then all send the GET back to back (bench.crowd: one thread, a selector). Origin fetches per new
             image (ideal: imagecached 1, nginx and Varnish 3: one per node) and how long after the origin wrote its
             last byte (its last_byte stat: the latest 200 of that URL) the last client had its whole answer. For
             imagecached also the tier's commands per image from memcached's own counters (stats: cmd_get = mg lookups
             and lease polls, cmd_set = ms stores, delete_* = lease releases).
  fleethit   --hit-urls (2400) new URLs (the thumbnails under distinct v= tags), each asked exactly once by wrk
             (lua/once.lua) in three steps: node A (all misses: the origin), then node B (imagecached: fleet hits, B's
             memory is empty of them; nginx and Varnish: misses again, their cost of a cross-host request), then node
             B again (local memory hits). Requests/s, and CPU per request (time on a CPU from /proc/PID/task/*/schedstat) of the node's
             process tree, of the 3 memcached together, and of the origin.
  tierdown   imagecached only: wrk (lua/rotate.lua, --connections, --duration s) against node 0 over the thumbnails
             it has in memory, with all 3 memcached up, one of them SIGSTOPped (SIGCONT after), and one SIGKILLed
             (started again after, same port): p50, p99, requests/s, origin requests (must be 0). Local hits never
             touch the tier, so p99 should not move.

Writes bench/results/<date>-<label>.md (label "fleet"; --no-write for trials): the tables, the bars, every setting,
the per-URL and per-step lines, and a JSON block of the raw numbers (bench/fleet_sim.py --check-against reads it).
Every load is bounded in time; every process started here is stopped in a finally.
"""
import argparse
import collections
import datetime
import json
import os
import pwd
import re
import select
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  - the runner's processes and helpers

WORK = f"{bench.WORK}/fleet"
SHM = f"{bench.SHM}-fleet"            # nginx's cache files (tmpfs), one directory per node
CLUSTERS = ["imagecached", "nginx", "varnish"]
SCENARIOS = ["storm", "fleethit", "tierdown"]
NODES = 3
MEMCACHED = "/usr/bin/memcached"
LINES = []   # every line said during the run, for the results file

TIER_STATS = ("cmd_get", "cmd_set", "cmd_touch", "delete_hits", "delete_misses", "get_hits", "get_misses",
              "bytes_read", "bytes_written", "curr_items")


# ---------------------------------------------------------------- processes

def say(line):
    """Prints a line and keeps it for the results file."""
    print(line, flush=True)
    LINES.append(line)


def free_ports(n):
    """n distinct free TCP ports on 127.0.0.1 (bound together to port 0, then released)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def make_dirs(*dirs):
    for d in dirs:
        os.makedirs(d, exist_ok=True)
        if os.getuid() == 0:
            nobody = pwd.getpwnam("nobody")
            os.chown(d, nobody.pw_uid, nobody.pw_gid)


def cpu_seconds(proc):
    """CPU time of a process tree in seconds, with nanosecond resolution: the sum over every thread of the first field
    of /proc/<pid>/task/<tid>/schedstat (time on a CPU). /proc/<pid>/stat's utime+stime count in ticks of 10 ms,
    too coarse for a step of a few hundred milliseconds. Threads that ended during a step are not counted (the
    caches' threads live as long as the process)."""
    total = 0
    for pid in proc.pids():
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                pass
    return total / 1e9


def version(argv):
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10)
        return ((out.stdout + out.stderr).strip().splitlines() or ["?"])[0]
    except (OSError, subprocess.TimeoutExpired):
        return "?"


def fleet_support(binary):
    """None when `binary --help` lists --fleet-servers, else why it cannot run the imagecached cluster."""
    if not os.path.exists(binary):
        return f"{binary} does not exist: build it (swift build -c release)"
    out = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30)
    if "--fleet-servers" not in out.stdout + out.stderr:
        return (f"{binary} has no --fleet-servers flag (the daemon's fleet support is not in this build); "
                "run the other clusters with --only-cluster nginx,varnish")
    return None


class Memcached:
    """One memcached server of the imagecached cluster's tier; can be stopped (SIGSTOP), killed and started again."""

    def __init__(self, index, port):
        self.index, self.port = index, port
        self.proc = None
        self.start()

    def start(self):
        argv = bench.unprivileged() + [MEMCACHED, "-l", "127.0.0.1", "-p", str(self.port), "-U", "0", "-t", "1",
                                       "-m", "256", "-I", "32m"]
        if os.getuid() == 0 and not bench.unprivileged():
            argv += ["-u", "nobody"]
        self.proc = bench.Proc(f"memcached-{self.index}", argv, self.port, f"{WORK}/memcached-{self.index}.log")

    def signal(self, sig):
        os.kill(self.proc.popen.pid, sig)

    def kill(self):
        self.signal(signal.SIGKILL)
        self.proc.popen.wait(10)
        self.proc.log.close()

    def stats(self):
        """memcached's `stats` counters (TIER_STATS), over a connection of its own; {} when it does not answer."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
                s.sendall(b"stats\r\n")
                data = b""
                while not data.endswith(b"END\r\n"):
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    data += chunk
        except OSError:
            return {}
        out = {}
        for line in data.decode().splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[0] == "STAT" and parts[1] in TIER_STATS:
                out[parts[1]] = int(parts[2])
        return out

    def cpu_seconds(self):
        return cpu_seconds(self.proc) if self.proc.popen.poll() is None else 0.0

    def stop(self):
        if self.proc.popen.poll() is None:
            self.signal(signal.SIGCONT)   # a stopped process would not act on SIGTERM
        self.proc.stop()


class Cluster:
    """Three nodes of one kind in front of the same origin; for imagecached also the 3 memcached of its tier."""

    def __init__(self, name, ports):
        self.name, self.ports = name, ports
        self.nodes = []      # bench.Proc per node
        self.tier = []       # Memcached (imagecached only)

    def tier_stats(self):
        total = collections.Counter()
        for m in self.tier:
            total.update(m.stats())
        return total

    def tier_cpu(self):
        return sum(m.cpu_seconds() for m in self.tier)

    def stop(self):
        for p in reversed(self.nodes):
            p.stop()
        for m in self.tier:
            m.stop()


def start_imagecached(args, origin_port, ports, tier_ports):
    c = Cluster("imagecached", ports)
    for i, p in enumerate(tier_ports):
        c.tier.append(Memcached(i, p))
    servers = ",".join(f"127.0.0.1:{p}" for p in tier_ports)
    for i, port in enumerate(ports):
        make_dirs(f"{WORK}/imagecached-{i}")
        argv = bench.unprivileged() + [
            args.binary, "--listen", f"127.0.0.1:{port}", "--origin", f"http://127.0.0.1:{origin_port}",
            "--memory-limit", "256MiB", "--disk-limit", "0", "--cache-dir", f"{WORK}/imagecached-{i}",
            "--server-cpu-affinity", "off", "--log-level", "warning",
            *(["--fleet-servers", servers] if args.fleet == "on" else []), *shlex.split(args.imagecached_args)]
        c.nodes.append(bench.Proc(f"imagecached-{i}", argv, port, f"{WORK}/imagecached-{i}.log"))
    return c


def start_nginx(origin_port, ports):
    c = Cluster("nginx", ports)
    for i, port in enumerate(ports):
        work, cache = f"{WORK}/nginx-{i}", f"{SHM}/nginx-{i}"
        make_dirs(work, cache)
        conf = bench.render("nginx-fleet.conf", f"{work}/nginx.conf", work=work, cache_dir=cache, memory_mib=256,
                            origin_port=origin_port, port=port)
        c.nodes.append(bench.Proc(f"nginx-{i}", bench.unprivileged() + ["nginx", "-c", conf, "-p", work, "-e", f"{work}/error.log"],
                                  port, f"{WORK}/nginx-{i}.log"))
    return c


def start_varnish(origin_port, ports):
    c = Cluster("varnish", ports)
    for i, port in enumerate(ports):
        work = f"{WORK}/varnish-{i}"
        make_dirs(work)
        vcl = bench.render("varnish.vcl", f"{work}/default.vcl", origin_port=origin_port, grace=0)
        c.nodes.append(bench.Proc(f"varnish-{i}", bench.unprivileged() + [
            "varnishd", "-F", "-j", "none", "-n", f"{work}/n", "-a", f"127.0.0.1:{port}", "-f", vcl,
            "-s", "malloc,256m", "-p", "thread_pools=2", "-p", "default_grace=0"], port, f"{WORK}/varnish-{i}.log"))
    return c


# ---------------------------------------------------------------- scenarios

def short_status(head):
    """The cache's own verdict from a response head: imagecached's Cache-Status without its ttl, else X-Cache."""
    fields = {}
    for line in (head or "").split("\r\n")[1:]:
        k, _, v = line.partition(":")
        fields[k.strip().lower()] = v.strip()
    if "cache-status" in fields:
        return re.sub(r"; ttl=-?\d+", "", fields["cache-status"])
    return fields.get("x-cache", "-")


def storm(cluster, origin_port, args, paths, sha, tag):
    """One crowd per new URL, spread over the cluster's nodes; returns a record per URL."""
    out = []
    for i, target in enumerate(paths):
        path = f"/_o/delay={args.origin_delay},v={tag}-{i}{target}"
        tier0 = cluster.tier_stats()
        t0, rs = bench.crowd(cluster.ports, path, args.storm_clients, sha[target], timeout=args.origin_delay / 1000 + 30)
        time.sleep(0.05)   # the tier's last commands (a waiter's final poll) are counted before the stats are read
        st = bench.origin_stats(origin_port).get(path, {})
        tier = {k: v - tier0.get(k, 0) for k, v in cluster.tier_stats().items() if k != "curr_items"}
        ends = [r["end"] for r in rs if r.get("end")]
        last = st.get("last_byte")
        lat = [(r["end"] - r["start"]) * 1000 for r in rs if r.get("end")]
        per_node = {}
        for n, port in enumerate(cluster.ports):
            e = [r["end"] for r in rs if r.get("end") and r["port"] == port]
            per_node[n] = round((max(e) - last) * 1000, 1) if e and last else None
        rec = {"path": path, "clients": len(rs), "correct": sum(1 for r in rs if r["ok"]),
               "origin_fetches": st.get("200", 0),
               "origin_last_byte_ms": round((last - t0) * 1000, 1) if last else None,
               "last_client_ms": round((max(ends) - t0) * 1000, 1) if ends else None,
               "lag_ms": round((max(ends) - last) * 1000, 1) if ends and last else None,
               "lag_per_node_ms": per_node,
               "p50_ms": round(bench.pct(lat, 50), 1), "max_ms": round(max(lat), 1) if lat else None,
               "statuses": dict(collections.Counter(short_status(r.get("head")) for r in rs)),
               "errors": sorted({r["error"] for r in rs if "error" in r}),
               "tier": tier}
        out.append(rec)
        say(f"storm {cluster.name:11} {path}: origin fetches {rec['origin_fetches']}, correct {rec['correct']}/{rec['clients']}, "
              f"origin last byte {rec['origin_last_byte_ms']} ms, last client {rec['last_client_ms']} ms, "
              f"lag {rec['lag_ms']} ms (per node {per_node}), tier {tier or '-'}, statuses {rec['statuses']}"
              + (f", errors {rec['errors']}" if rec["errors"] else ""))
    return out


def walk_once(port, paths, connections, meters, label, limit):
    """wrk (lua/once.lua) asks every path once; returns requests/s and CPU per request of each meter
    ({name: callable returning CPU seconds}), read when the last thread reports its last answer."""
    path_file = f"{WORK}/paths-{label}.txt"
    with open(path_file, "w") as f:
        f.write("\n".join(paths) + "\n")
    threads = 2
    if len(paths) < threads:
        raise ValueError(f"walk_once needs at least {threads} paths")
    cpu0 = {k: f() for k, f in meters.items()}
    t0 = time.monotonic()
    popen = subprocess.Popen(["wrk", f"-t{threads}", f"-c{connections}", f"-d{int(limit) + 5}s", "--timeout", "10s",
                              "-s", os.path.join(bench.BENCH, "lua", "once.lua"), f"http://127.0.0.1:{port}", "--",
                              path_file, str(threads)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    fd = popen.stdout.fileno()   # read unbuffered: two threads' lines may come in one read
    done, text = [], b""
    try:
        deadline = t0 + limit
        while len(done) < threads and time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.5)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            text += chunk
            done = [json.loads(x[9:]) for x in text.decode(errors="replace").splitlines() if x.startswith("ONCEDONE ") and x.endswith("}")]
        t1 = time.monotonic()
        cpu1 = {k: f() for k, f in meters.items()}
        if len(done) < threads and popen.poll() is None:
            popen.send_signal(signal.SIGINT)   # wrk stops and prints its summary (socket errors, timeouts)
            end = time.monotonic() + 5
            while time.monotonic() < end and select.select([fd], [], [], 0.5)[0]:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                text += chunk
    finally:
        if popen.poll() is None:
            os.killpg(popen.pid, signal.SIGKILL)
        popen.wait(10)
        popen.stdout.close()
    if len(done) < threads:
        raise RuntimeError(f"wrk (once.lua) did not finish {label} in {limit:.0f} s; its output: {text.decode(errors='replace')[-2000:]}")
    requests = sum(d["requests"] for d in done)
    seconds = t1 - t0
    r = {"requests": requests, "seconds": round(seconds, 3), "rps": requests / seconds,
         "fleet": sum(d["fleet"] for d in done), "hit": sum(d["hit"] for d in done), "errors": sum(d["errors"] for d in done)}
    for k in meters:
        r[f"cpu_us_{k}"] = (cpu1[k] - cpu0[k]) * 1e6 / max(1, requests)
    return r


def fleethit(cluster, origin, origin_port, args, paths, round_i, tag):
    """The three steps on fresh URLs: A misses, B reads what A fetched, B again (local hits)."""
    a, b = round_i % NODES, (round_i + 1) % NODES
    urls = [f"/_o/v={tag}-k{k}{p}" for k in range(-(-args.hit_urls // len(paths))) for p in paths][:args.hit_urls]
    prefix = f"/_o/v={tag}-"
    out = {"node_a": a, "node_b": b, "urls": len(urls)}
    for step, node in (("miss", a), ("cross", b), ("local", b)):
        # the origin runs a thread per connection and its threads come and go: its ticks (utime+stime) include the
        # ended ones, where schedstat would lose them
        meters = {"node": lambda: cpu_seconds(cluster.nodes[node]), "origin": origin.cpu_seconds}
        if cluster.tier:
            meters["tier"] = cluster.tier_cpu
        tier0 = cluster.tier_stats()
        o0 = bench.origin_total(bench.origin_stats(origin_port), prefix)
        r = walk_once(cluster.ports[node], urls, args.hit_connections, meters, f"{cluster.name}-{step}",
                      limit=max(args.hit_limit, len(urls) / 50))
        r["origin_requests"] = bench.origin_total(bench.origin_stats(origin_port), prefix) - o0
        r["tier"] = {k: v - tier0.get(k, 0) for k, v in cluster.tier_stats().items() if k != "curr_items"}
        out[step] = r
        say(f"fleethit {cluster.name:11} {step:5} node {node}: {r['rps']:7.0f} req/s  cpu node {r['cpu_us_node']:6.1f} "
              f"tier {r.get('cpu_us_tier', 0):5.1f} origin {r['cpu_us_origin']:6.1f} us/req  requests {r['requests']} "
              f"in {r['seconds']} s  origin {r['origin_requests']}  fleet {r['fleet']}  hit {r['hit']}  errors {r['errors']}"
              + (f"  tier {r['tier']}" if r["tier"] else ""))
    return out


def tierdown(cluster, origin_port, args, paths, round_i):
    """wrk on node 0's local hits with the tier whole, one server stopped, one killed (the order rotating)."""
    node = cluster.nodes[0]
    victim = cluster.tier[round_i % len(cluster.tier)]
    states = ["up", "stopped", "killed"]
    states = states[round_i % 3:] + states[:round_i % 3]
    out = {"victim": victim.index}
    for state in states:
        cpu0 = cpu_seconds(node)
        o0 = bench.origin_total(bench.origin_stats(origin_port))
        if state == "stopped":
            victim.signal(signal.SIGSTOP)
        elif state == "killed":
            victim.kill()
        try:
            r = bench.wrk(cluster.ports[0], paths, args.duration, args.connections, f"fleet-tierdown-{state}")
        finally:
            if state == "stopped":
                victim.signal(signal.SIGCONT)
            elif state == "killed":
                victim.start()
        r["cpu_us_per_req"] = (cpu_seconds(node) - cpu0) * 1e6 / max(1, r["requests"])
        r["origin_requests"] = bench.origin_total(bench.origin_stats(origin_port)) - o0
        out[state] = r
        say(f"tierdown {state:7} (memcached-{victim.index}): {r['rps']:7.0f} req/s  p50 {r['p50_us'] / 1000:6.2f} "
              f"p99 {r['p99_us'] / 1000:6.2f} max {r['max_us'] / 1000:7.2f} ms  cpu {r['cpu_us_per_req']:5.1f} us/req  "
              f"errors {r['errors']}  origin {r['origin_requests']}")
    return out


# ---------------------------------------------------------------- summary

def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(v, digits=0):
    return "-" if v is None else f"{v:,.{digits}f}"


def summarize(res):
    """Rows (section, metric, {cluster: text}, bar) from the rounds' records: medians over rounds."""
    rows = []
    clusters = res["clusters"]
    fleet_on = res["args"]["fleet"] == "on"   # the bars are for the fleet; --fleet off is the baseline
    if res["storm"]:
        sec = (f"1. cross-host storm ({res['args']['storm_clients']} clients over {NODES} nodes per new URL, "
               f"origin delay {res['args']['origin_delay']} ms)")
        per = {}
        for c in clusters:
            recs = [u for rnd in res["storm"].get(c, []) for u in rnd]
            if not recs:
                continue
            per[c] = {
                "fetches": median([statistics.mean(u["origin_fetches"] for u in rnd) for rnd in res["storm"][c]]),
                "fetches_max": max(u["origin_fetches"] for u in recs),
                "lag": median([median([u["lag_ms"] for u in rnd]) for rnd in res["storm"][c]]),
                "lag_max": max((u["lag_ms"] for u in recs if u["lag_ms"] is not None), default=None),
                "p50": median([u["p50_ms"] for u in recs]),
                "correct": sum(u["correct"] for u in recs), "clients": sum(u["clients"] for u in recs),
                "mg": median([u["tier"].get("cmd_get") for u in recs]) if c == "imagecached" else None,
                "ms": median([u["tier"].get("cmd_set") for u in recs]) if c == "imagecached" else None}
        ic = per.get("imagecached") if fleet_on else None
        rows.append((sec, "origin fetches per new image (median of rounds' means)",
                     {c: fmt(v["fetches"], 2) for c, v in per.items()},
                     "" if not ic else ("PASS" if ic["fetches_max"] == 1 else "FAIL") + " (imagecached: 1 for every URL)"))
        rows.append((sec, "most origin fetches for one URL", {c: fmt(v["fetches_max"]) for c, v in per.items()}, ""))
        rows.append((sec, "last client done after the origin's last byte, ms (median)",
                     {c: fmt(v["lag"], 1) for c, v in per.items()},
                     "" if not ic or ic["lag"] is None else ("PASS" if ic["lag"] <= 50 else "FAIL") + " (imagecached <= 50 ms)"))
        rows.append((sec, "the same, worst URL, ms", {c: fmt(v["lag_max"], 1) for c, v in per.items()}, ""))
        rows.append((sec, "client latency p50, ms", {c: fmt(v["p50"], 1) for c, v in per.items()}, ""))
        rows.append((sec, "clients with the right bytes", {c: f"{v['correct']}/{v['clients']}" for c, v in per.items()}, ""))
        if ic:
            rows.append((sec, "tier mg per image (lookups + lease polls; median)", {"imagecached": fmt(ic["mg"], 1)}, ""))
            rows.append((sec, "tier ms per image (stores; median)", {"imagecached": fmt(ic["ms"], 1)}, ""))
    if res["fleethit"]:
        sec = f"2. cross-host reads ({res['args']['hit_urls']} new thumbnail URLs, each once, {res['args']['hit_connections']} conns)"
        names = {"miss": "A, first read (origin)", "cross": "B, what A fetched (imagecached: fleet hit; others: origin)",
                 "local": "B again (local memory hit)"}
        for step in ("miss", "cross", "local"):
            m = {}
            for c in clusters:
                rounds = [rnd[step] for rnd in res["fleethit"].get(c, [])]
                if rounds:
                    m[c] = {k: median([r.get(k) for r in rounds]) for k in ("rps", "cpu_us_node", "cpu_us_tier", "cpu_us_origin")}
                    m[c]["origin"] = sum(r["origin_requests"] for r in rounds)
                    m[c]["fleet"] = sum(r["fleet"] for r in rounds)
                    m[c]["requests"] = sum(r["requests"] for r in rounds)
            rows.append((sec, f"{names[step]}: requests/s", {c: fmt(v["rps"]) for c, v in m.items()}, ""))
            rows.append((sec, f"{names[step]}: CPU us/request, node (+ tier)",
                         {c: fmt(v["cpu_us_node"], 1) + (f" + {v['cpu_us_tier']:.1f}" if v["cpu_us_tier"] is not None else "")
                          for c, v in m.items()}, ""))
            rows.append((sec, f"{names[step]}: origin requests / requests (all rounds)",
                         {c: f"{v['origin']}/{v['requests']}" for c, v in m.items()},
                         "imagecached B: 0 (all fleet hits)" if step == "cross" and "imagecached" in m and fleet_on else ""))
            if step == "cross" and "imagecached" in m and fleet_on:
                rows.append((sec, f"{names[step]}: answers marked detail=fleet", {"imagecached": f"{m['imagecached']['fleet']}"}, ""))
        for c in clusters:
            rounds = res["fleethit"].get(c, [])
            if rounds:
                ratio = median([r["cross"]["rps"] / r["local"]["rps"] for r in rounds])
                cost = median([(r["cross"]["cpu_us_node"] + r["cross"].get("cpu_us_tier", 0)) /
                               (r["local"]["cpu_us_node"] + r["local"].get("cpu_us_tier", 0)) for r in rounds])
                rows.append((sec, f"{c}: cross-host / local hit, requests/s and CPU per request (median of rounds)",
                             {c: f"x{ratio:.2f}, x{cost:.2f}"}, ""))
    if res["tierdown"]:
        sec = f"3. imagecached node 0's local hits, wrk {res['args']['connections']} conns, {res['args']['duration']} s"
        rounds = res["tierdown"]
        for state, label in (("up", "3 memcached up"), ("stopped", "one SIGSTOPped"), ("killed", "one killed")):
            rows.append((sec, f"{label}: requests/s, p50 / p99 ms",
                         {"imagecached": f"{fmt(median([r[state]['rps'] for r in rounds]))}, "
                                         f"{fmt(median([r[state]['p50_us'] for r in rounds]) / 1000, 2)} / "
                                         f"{fmt(median([r[state]['p99_us'] for r in rounds]) / 1000, 2)}"}, ""))
        for state in ("stopped", "killed"):
            ratio = median([r[state]["p99_us"] / r["up"]["p99_us"] for r in rounds if r["up"]["p99_us"]])
            rows.append((sec, f"p99 {state} / p99 up (median of rounds)", {"imagecached": f"x{ratio:.2f}"},
                         ("PASS" if ratio is not None and ratio <= 1.2 else "FAIL") + " (<= x1.2)" if fleet_on else ""))
        rows.append((sec, "origin requests during the runs", {"imagecached": str(sum(r[s]["origin_requests"] for r in rounds
                                                                                     for s in ("up", "stopped", "killed")))},
                     "0"))
    return rows


def table(rows, clusters):
    out, section = [], None
    for sec, metric, values, bar in rows:
        if sec != section:
            out += ["", f"**{sec}**", "", "| metric | " + " | ".join(clusters) + " | bar |",
                    "|---|" + "---|" * len(clusters) + "---|"]
            section = sec
        out.append(f"| {metric} | " + " | ".join(values.get(c, "") for c in clusters) + f" | {bar} |")
    return out


def write_report(res, path):
    rows = summarize(res)
    text = [f"# Fleet of three: imagecached + memcached tier vs nginx proxy_cache_lock vs Varnish ({res['date']})", "",
            f"bench/fleet.py at {res['commit']}; {os.cpu_count()} cores, {res['kernel']}.", "",
            "Versions: " + "; ".join(f"{k} `{v}`" for k, v in res["versions"].items()), "",
            f"Settings: `{' '.join(res['argv'])}`; rounds {res['args']['rounds']}, clusters {', '.join(res['clusters'])}, "
            f"scenarios {', '.join(res['scenarios'])}. imagecached nodes: `{res['imagecached_flags']}`; memcached "
            "`-U 0 -t 1 -m 256 -I 32m` x3; nginx: templates/nginx-fleet.conf (proxy_cache_lock on, tmpfs cache, one "
            "per node); Varnish: `-s malloc,256m -p thread_pools=2`, one per node.", ""]
    text += table(rows, res["clusters"])
    text += ["", "Medians are over rounds; in each round the clusters ran in turn, the order rotating. The storm's lag "
             "is the last client's end minus the origin's last byte of that URL (its latest 200 when several nodes "
             "fetched it). CPU per request is the process tree's time on a CPU (/proc/PID/task/*/schedstat), divided by the "
             "requests asked.",
             "", "## Lines", "", "```"] + LINES + ["```", "", "## Raw", "", "```json", json.dumps(res, indent=1), "```", ""]
    with open(path, "w") as f:
        f.write("\n".join(text))
    return rows


def rewrite_report(path):
    """Rewrites a results file from its JSON block and its lines (after a change to the summary)."""
    with open(path) as f:
        text = f.read()
    raw = re.search(r"```json\n(.*?)\n```", text, re.S)
    lines = re.search(r"## Lines\n\n```\n(.*?)\n```", text, re.S)
    if not raw or not lines:
        sys.exit(f"{path}: not a fleet.py results file (no Lines or JSON block)")
    res = json.loads(raw.group(1))
    LINES[:] = lines.group(1).split("\n")
    tail = text[raw.end():] if "## Projection" in text[raw.end():] else ""   # a section added after the raw block
    write_report(res, path)
    if tail.strip():
        with open(path, "a") as f:
            f.write("\n" + tail.lstrip("\n"))
    print(f"rewritten {path}")


# ---------------------------------------------------------------- main

def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default=os.path.join(bench.REPO, ".build/release/imagecached"))
    parser.add_argument("--only-cluster", default=",".join(CLUSTERS), help="comma-separated: imagecached,nginx,varnish")
    parser.add_argument("--only", default=",".join(SCENARIOS), help="comma-separated scenarios: storm,fleethit,tierdown")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=int, default=10, help="seconds per wrk run (tierdown)")
    parser.add_argument("--connections", type=int, default=64, help="wrk connections (tierdown)")
    parser.add_argument("--storm-urls", type=int, default=5, help="new URLs per round and cluster")
    parser.add_argument("--storm-clients", type=int, default=30, help="clients per URL, spread over the 3 nodes")
    parser.add_argument("--origin-delay", type=int, default=300, help="ms the origin waits before each storm answer")
    parser.add_argument("--hit-urls", type=int, default=2400, help="new URLs per round and cluster in fleethit")
    parser.add_argument("--hit-connections", type=int, default=16)
    parser.add_argument("--hit-limit", type=int, default=60, help="seconds one fleethit step may take at most")
    parser.add_argument("--fleet", choices=["on", "off"], default="on",
                        help="off: the imagecached nodes run without --fleet-servers (each alone, as nginx and Varnish; "
                             "the memcached are started but unused): the baseline, and a run on a build without fleet support")
    parser.add_argument("--imagecached-args", default="", help="more flags for the 3 daemons, e.g. '--fleet-wait 5s'")
    parser.add_argument("--label", default="fleet", help="writes bench/results/<date>-<label>.md")
    parser.add_argument("--no-write", action="store_true", help="print only (trial runs)")
    parser.add_argument("--report-only", metavar="RESULTS_MD",
                        help="run nothing: rewrite that results file's tables from its own raw records and lines")
    args = parser.parse_args()
    if args.report_only:
        return rewrite_report(args.report_only)
    clusters = [c for c in CLUSTERS if c in args.only_cluster.split(",")]
    scenarios = [s for s in SCENARIOS if s in args.only.split(",")]
    unknown = set(filter(None, args.only_cluster.split(","))) - set(CLUSTERS) | set(filter(None, args.only.split(","))) - set(SCENARIOS)
    if unknown or not clusters or not scenarios:
        sys.exit(f"unknown or empty selection: {sorted(unknown)}; clusters {CLUSTERS}, scenarios {SCENARIOS}")
    if "imagecached" in clusters:
        why = fleet_support(args.binary) if args.fleet == "on" else \
            (None if os.path.exists(args.binary) else f"{args.binary} does not exist: build it (swift build -c release)")
        if why:
            sys.exit(f"fleet.py: {why}")
    for tool in ("wrk",) + (("nginx",) if "nginx" in clusters else ()) + (("varnishd",) if "varnish" in clusters else ()) \
            + ((MEMCACHED,) if "imagecached" in clusters else ()):
        if not shutil.which(tool):
            sys.exit(f"fleet.py: {tool} is not installed (bench/run installs it)")

    with open(os.path.join(bench.CORPUS, "manifest.json")) as f:
        manifest = json.load(f)
    sha = {"/" + x["path"]: x["sha256"] for x in manifest["files"]}
    small = sorted(p for p in sha if p.startswith("/small/"))
    nonce = str(int(time.time()))

    for d in (WORK, SHM):
        shutil.rmtree(d, ignore_errors=True)
    make_dirs(bench.WORK, WORK, SHM)
    ports = free_ports(1 + NODES * len(clusters) + (NODES if "imagecached" in clusters else 0))
    origin_port = ports.pop(0)
    res = {"date": datetime.date.today().isoformat(), "argv": sys.argv[1:], "args": vars(args), "clusters": clusters,
           "scenarios": scenarios, "nodes": NODES,
           "commit": subprocess.run(["git", "-C", bench.REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                                    text=True).stdout.strip(),
           "kernel": os.uname().release,
           "versions": {"nginx": version(["nginx", "-v"]), "varnish": version(["varnishd", "-V"]),
                        "memcached": version([MEMCACHED, "-V"])},
           "imagecached_flags": "--memory-limit 256MiB --disk-limit 0 --server-cpu-affinity off "
                                + ("--fleet-servers S1,S2,S3 " if args.fleet == "on" else "(no fleet) ") + args.imagecached_args,
           "storm": {}, "fleethit": {}, "tierdown": []}
    if "imagecached" in clusters:
        res["versions"]["imagecached"] = version([args.binary, "--version"])
    running = {}
    origin = None
    try:
        origin = bench.Proc("origin", [sys.executable, os.path.join(bench.BENCH, "origin.py"), "--port", str(origin_port)],
                            origin_port, f"{WORK}/origin.log")
        for name in clusters:
            nodes = [ports.pop(0) for _ in range(NODES)]
            if name == "imagecached":
                running[name] = start_imagecached(args, origin_port, nodes, [ports.pop(0) for _ in range(NODES)])
            elif name == "nginx":
                running[name] = start_nginx(origin_port, nodes)
            else:
                running[name] = start_varnish(origin_port, nodes)
            say(f"{name}: nodes on {nodes}" + (f", memcached on {[m.port for m in running[name].tier]}"
                                                if running[name].tier else ""))
        if "tierdown" in scenarios and "imagecached" in running:
            c = running["imagecached"]
            wrong = bench.fetch_all(c.ports[0], small, sha) + bench.fetch_all(c.ports[0], small, sha)
            say(f"tierdown: node 0 loaded the {len(small)} thumbnails twice, wrong answers {wrong}")
            if wrong:
                raise RuntimeError("imagecached node 0 gave wrong answers while loading")
        for rnd in range(args.rounds):
            order = clusters[rnd % len(clusters):] + clusters[:rnd % len(clusters)]
            say(f"-- round {rnd + 1}: {', '.join(order)}")
            if "storm" in scenarios:
                for name in order:
                    targets = [small[(rnd * args.storm_urls + i) * 7 % len(small)] for i in range(args.storm_urls)]
                    res["storm"].setdefault(name, []).append(
                        storm(running[name], origin_port, args, targets, sha, f"storm-{nonce}-{name}-r{rnd}"))
            if "fleethit" in scenarios:
                for name in order:
                    res["fleethit"].setdefault(name, []).append(
                        fleethit(running[name], origin, origin_port, args, small, rnd, f"hit-{nonce}-{name}-r{rnd}"))
            if "tierdown" in scenarios and "imagecached" in running:
                res["tierdown"].append(tierdown(running["imagecached"], origin_port, args, small, rnd))
    finally:
        for c in reversed(list(running.values())):
            c.stop()
        if origin:
            origin.stop()
    rows = summarize(res)
    print("\n".join(table(rows, clusters)))
    if not args.no_write:
        path = os.path.join(bench.RESULTS, f"{res['date']}-{args.label}.md")
        write_report(res, path)
        print(f"written {path}")


if __name__ == "__main__":
    main()
