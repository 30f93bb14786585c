#!/usr/bin/env python3
"""Projects a fleet of imagecached hosts sharing a memcached tier, against the same hosts each alone.

    python3 bench/fleet_sim.py                                   # 100 hosts, the defaults below (about 20 s)
    python3 bench/fleet_sim.py --hosts 20 --rate 200 --servers 4 --server-memory 512MiB
    python3 bench/fleet_sim.py --hosts 3 --replay                # fleet.py's storm, projected (no file)
    python3 bench/fleet_sim.py --check-against bench/results/<date>-fleet.md   # the same, beside what fleet.py measured

A discrete-event simulation, pure Python (no numpy), seeded (--seed): the same arguments print the same numbers.

The workload
  - H hosts (--hosts), each receiving requests as a Poisson process of rate R (--rate, per host). The fleet's
    requests are one Poisson stream of rate H*R, each given to a host chosen uniformly (the same thing).
  - A catalogue of K objects (--objects) ranked by popularity: a request asks rank r with probability proportional
    to 1/r^s (Zipf, --zipf s, 1.0). Sizes are lognormal (--size-median, --size-sigma), drawn once per object.
  - New objects arrive as a Poisson process (--new-rate, per second, fleet-wide). A new object takes a rank drawn
    from the same Zipf law and replaces the object there (the catalogue keeps its size; new objects are as popular
    as the law says, so now and then one lands near the top and every host asks for it at once: a storm).
  - Objects never expire during the run (freshness much longer than --duration): no revalidation is modelled.
The hosts
  - Each host has one local tier, an LRU by bytes of --memory (the memory tier; the disk tier is left out: with it
    the local tier is larger, and the projection of the fleet's share is an upper bound).
  - Per-host coalescing, as the daemon's coalescer: the first local miss of an object opens a fetch, later requests
    for it on that host wait on that fetch. Only that fetch talks to the tier (one lookup per object per host).
  - Without the fleet ("alone"): the fetch goes to the origin.
  - With the fleet: the fetch sends `mg <key> N<lease>` to the key's server (rendezvous hashing over --servers, a
    fixed list). memcached answers exactly as its meta protocol does, in the order the commands reach it:
      the value                 -> a fleet hit: the host keeps it in its local tier and answers its waiters;
      no value, no lease stub   -> W: a 0-byte stub with a fresh CAS is made; this host fetches from the origin
                                   (keeping the lease alive while its bytes arrive: one `mg T` every lease/3) and
                                   then stores with `ms ... C<cas>`, which replaces the stub;
      a stub (another's lease)  -> Z: the host asks again after 10 ms, doubling to 40 ms (--poll-first, --poll-cap;
                                   each delay jittered by x0.8..1.2, as Fetch.askFleet does), until a hit, a W (the
                                   stub went), or --fleet-wait seconds: then it fetches from the origin alone and
                                   stores nothing.
    The client's own commands are counted as it sends them: a lookup is `mg <key> s c f N<lease> t` (no value),
    and one that finds a value reads it with a second `mg <key> v` (one more round trip); a lease refresh is a check
    and a touch (two `mg`).
    A server listed in --servers-down is unavailable (its breaker open): its keys are fetched per host, at once.
  - A memcached server is an LRU by bytes of --server-memory (a hit moves the item to the head, as `mg` bumps it);
    stubs take no room (they live in memcached's temporary LRU). No slab classes: memory is counted in value bytes.
Time
  - A one-way trip host <-> memcached is --tier-rtt/2; a value also takes size / --tier-bandwidth. An origin fetch
    takes --origin-latency + size / --origin-bandwidth. Hosts, servers and the origin have no queues: no CPU or
    link saturation is modelled, only who asks what when. Hosts never fail (no lease is lost to a crash).
  - Warm start (unless --cold): every local tier starts holding the most popular objects that fit, every server the
    most popular of its own keys that fit. Counters start after --warmup seconds.
What is printed
  - origin fetches per second, per object fetched in the window, and per new object; the local hit ratio, fleet
    hits, waits; latency of requests that missed locally;
  - per memcached server: lookups/s (first asks), lease polls/s (asks after a Z), value reads/s, all mg/s, stores/s,
    lease refreshes/s, bytes/s out (values served) and in (values stored), evictions: the mean over servers and the
    busiest one.
Replay (--replay, --check-against): fleet.py's storm on 3 hosts: --storm-clients clients sent back to back over the
hosts, one new object, the origin waiting --origin-delay ms. Monte Carlo over --storms storms: origin fetches per
image, tier mg (lookups + polls) and ms per image, and the last client's end after the origin's last byte, with the
loopback's times (--replay-* options). --check-against reads a fleet.py results file (its JSON block) for the
clients, the delay and the thumbnail sizes, and prints the projection beside the measurement.
"""
import argparse
import bisect
import heapq
import json
import math
import os
import random
import re
import statistics
import sys
import time
from collections import OrderedDict

MASK = (1 << 64) - 1
INF = float("inf")


# ---------------------------------------------------------------- rules (pure)

def poll_delay(polls, first=0.01, cap=0.04):
    """Seconds before the next ask after `polls` answers of Z so far, before jitter: `first` doubling up to `cap`
    (FetchMachine.fleetPollDelay: min(0.01 * 2^min(polls, 2), 0.04), the same for these defaults)."""
    return min(first * (1 << min(polls, 30)), cap)


def mix64(x):
    """splitmix64's finaliser: a well-spread 64-bit hash of an integer."""
    x &= MASK
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & MASK
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def rendezvous(obj, servers):
    """The server owning an object: the highest hash of (object, server); a fixed list, never rehashed."""
    best, owner = -1, 0
    for s in range(servers):
        h = mix64(obj * 0x9E3779B97F4A7C15 + (s + 1) * 0xC2B2AE3D27D4EB4F)
        if h > best:
            best, owner = h, s
    return owner


def zipf_cdf(k, s):
    """Cumulative weights of ranks 0..k-1 under Zipf(s)."""
    out, total = [], 0.0
    for r in range(1, k + 1):
        total += r ** -s
        out.append(total)
    return out


def size_bytes(text):
    """'256MiB', '40KB', '1GiB', '5000' -> bytes."""
    m = re.fullmatch(r"\s*([\d.]+)\s*([KMG]i?B)?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text}")
    unit = {None: 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}[m.group(2)]
    return int(float(m.group(1)) * unit)


def pct(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    k = (len(values) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


# ---------------------------------------------------------------- the model's parts

class LRU:
    """An LRU by bytes: touch moves to the head, put inserts and evicts from the tail."""
    __slots__ = ("items", "bytes", "cap", "evictions")

    def __init__(self, cap):
        self.items, self.bytes, self.cap, self.evictions = OrderedDict(), 0, cap, 0

    def touch(self, obj):
        if obj in self.items:
            self.items.move_to_end(obj)
            return True
        return False

    def put(self, obj, size):
        if size > self.cap:
            return
        if obj in self.items:
            self.items.move_to_end(obj)
            return
        self.items[obj] = size
        self.bytes += size
        while self.bytes > self.cap:
            _, s = self.items.popitem(last=False)
            self.bytes -= s
            self.evictions += 1


class Server:
    """One memcached: items (LRU), lease stubs {obj: cas}, and its counters."""
    __slots__ = ("lru", "stubs", "cas", "up", "lookups", "polls", "reads", "stores", "refreshes", "lost", "bytes_out",
                 "bytes_in")

    def __init__(self, cap, up):
        self.lru, self.stubs, self.cas, self.up = LRU(cap), {}, 0, up
        self.lookups = self.polls = self.reads = self.stores = self.refreshes = self.lost = 0
        self.bytes_out = self.bytes_in = 0


class Fetch:
    """One host's fetch of one object (its coalescer's entry): who waits, and where it stands with the tier."""
    __slots__ = ("host", "obj", "arrivals", "asked", "polls", "cas", "started", "counted")

    def __init__(self, host, obj, t, counted):
        self.host, self.obj, self.arrivals, self.counted = host, obj, [t], counted
        self.asked, self.polls, self.cas, self.started = t, 0, None, t


# event kinds
ASK, ANSWER, ORIGIN_DONE, STORE = range(4)
HIT, WON, WAIT = range(3)


class Simulation:
    def __init__(self, p, fleet):
        self.p, self.fleet = p, fleet
        work = random.Random(p.seed)                 # the workload: the same in both modes
        self.work = work
        self.jitter = random.Random(p.seed + 1)      # the fleet's poll jitter: its own stream
        self.cdf = zipf_cdf(p.objects, p.zipf)
        self.total_weight = self.cdf[-1]
        mu = math.log(p.size_median)
        self.draw_size = lambda: max(200, int(work.lognormvariate(mu, p.size_sigma)))
        self.sizes = [self.draw_size() for _ in range(p.objects)]
        self.rank_obj = list(range(p.objects))       # rank -> object id (new objects replace)
        self.owner = []                               # object id -> server (computed on first use)
        self.new_objects = set()
        self.hosts = [LRU(p.memory) for _ in range(p.hosts)]
        self.inflight = [dict() for _ in range(p.hosts)]
        self.servers = [Server(p.server_memory, s >= p.servers_down) for s in range(p.servers)]
        self.events, self.seq = [], 0
        # counters (from --warmup on)
        self.requests = self.local_hits = self.coalesced = 0
        self.fleet_hits = self.origin_fetches = self.wait_expired = self.unavailable = 0
        self.waited_fetches, self.poll_counts, self.wait_times = 0, [], []
        self.fetches_per_obj = {}
        self.latencies = []
        if not p.cold:
            self.warm()

    def owner_of(self, obj):
        while len(self.owner) <= obj:
            self.owner.append(-1)
        if self.owner[obj] < 0:
            self.owner[obj] = rendezvous(obj, self.p.servers)
        return self.owner[obj]

    def warm(self):
        """Every local tier holds the most popular objects that fit (the most popular the most recent); every server
        the most popular of its own keys that fit."""
        order = list(range(self.p.objects))
        for lru in self.hosts:
            taken = []
            total = 0
            for rank in order:
                s = self.sizes[self.rank_obj[rank]]
                if total + s > lru.cap:
                    break
                taken.append(self.rank_obj[rank])
                total += s
            for obj in reversed(taken):
                lru.put(obj, self.sizes[obj])
        if self.fleet:
            used = [0] * len(self.servers)
            per_server = [[] for _ in self.servers]
            full = 0
            for rank in order:
                obj = self.rank_obj[rank]
                srv = self.owner_of(obj)
                if used[srv] < 0:
                    continue
                if used[srv] + self.sizes[obj] > self.servers[srv].lru.cap:
                    used[srv] = -1
                    full += 1
                    if full == len(self.servers):
                        break
                    continue
                used[srv] += self.sizes[obj]
                per_server[srv].append(obj)
            for srv, objs in enumerate(per_server):
                for obj in reversed(objs):
                    self.servers[srv].lru.put(obj, self.sizes[obj])
        for lru in self.hosts:
            lru.evictions = 0
        for srv in self.servers:
            srv.lru.evictions = 0

    def push(self, t, kind, payload):
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, payload))

    # -- requests

    def request(self, t):
        p, work = self.p, self.work
        host = work.randrange(p.hosts)
        rank = bisect.bisect(self.cdf, work.random() * self.total_weight)
        obj = self.rank_obj[min(rank, p.objects - 1)]
        counted = t >= p.warmup
        if counted:
            self.requests += 1
        if self.hosts[host].touch(obj):
            if counted:
                self.local_hits += 1
            return
        f = self.inflight[host].get(obj)
        if f is not None:
            f.arrivals.append(t)
            if counted:
                self.coalesced += 1
            return
        f = Fetch(host, obj, t, counted)
        self.inflight[host][obj] = f
        if not self.fleet:
            self.origin(f, t)
        elif not self.servers[self.owner_of(obj)].up:
            if counted:
                self.unavailable += 1   # the breaker is open: no trip at all, the origin at once
            self.origin(f, t)
        else:
            self.push(t + p.tier_rtt / 2, ASK, f)

    def new_object(self, t):
        rank = bisect.bisect(self.cdf, self.work.random() * self.total_weight)
        obj = len(self.sizes)
        self.sizes.append(self.draw_size())
        self.rank_obj[min(rank, self.p.objects - 1)] = obj
        if t >= self.p.warmup:
            self.new_objects.add(obj)

    # -- the fetch's steps

    def origin(self, f, t):
        if f.counted:
            self.origin_fetches += 1
            self.fetches_per_obj[f.obj] = self.fetches_per_obj.get(f.obj, 0) + 1
        f.started = t
        self.push(t + self.p.origin_latency + self.sizes[f.obj] / self.p.origin_bandwidth, ORIGIN_DONE, f)

    def complete(self, f, t):
        self.hosts[f.host].put(f.obj, self.sizes[f.obj])
        del self.inflight[f.host][f.obj]
        if f.counted:
            self.latencies.extend(t - a for a in f.arrivals)

    def on_ask(self, t, f):
        """At the server: memcached's answer to `mg <key> v c N<lease>`, in arrival order."""
        p = self.p
        srv = self.servers[self.owner_of(f.obj)]
        if f.counted:
            if f.polls == 0:
                srv.lookups += 1
            else:
                srv.polls += 1
        size = self.sizes[f.obj]
        if srv.lru.touch(f.obj):
            # the lookup (`mg <key> s c f N t`) answers the value's size; a second `mg <key> v` reads it
            if f.counted:
                srv.reads += 1
                srv.bytes_out += size
            self.push(t + p.tier_rtt * 1.5 + size / p.tier_bandwidth, ANSWER, (f, HIT, None))
        elif f.obj in srv.stubs:
            self.push(t + p.tier_rtt / 2, ANSWER, (f, WAIT, None))
        else:
            srv.cas += 1
            srv.stubs[f.obj] = srv.cas
            self.push(t + p.tier_rtt / 2, ANSWER, (f, WON, srv.cas))

    def on_answer(self, t, f, what, cas):
        """At the host: what the fetch does with the tier's answer."""
        p = self.p
        if what == HIT:
            if f.counted:
                self.fleet_hits += 1
                if f.polls:
                    self.waited_fetches += 1
                    self.poll_counts.append(f.polls)
                    self.wait_times.append(t - f.asked)
            self.complete(f, t)
        elif what == WON:
            f.cas = cas
            if f.counted and f.polls:
                self.waited_fetches += 1
                self.poll_counts.append(f.polls)
                self.wait_times.append(t - f.asked)
            self.origin(f, t)
        elif t - f.asked >= p.fleet_wait:
            if f.counted:
                self.wait_expired += 1
            self.origin(f, t)
        else:
            delay = poll_delay(f.polls, p.poll_first, p.poll_cap) * self.jitter.uniform(0.8, 1.2)
            f.polls += 1
            self.push(t + delay + p.tier_rtt / 2, ASK, f)

    def on_origin_done(self, t, f):
        self.complete(f, t)
        if f.cas is not None:
            srv = self.servers[self.owner_of(f.obj)]
            if f.counted:
                srv.refreshes += int((t - f.started) / (self.p.lease / 3))
            self.push(t + self.p.tier_rtt / 2 + self.sizes[f.obj] / self.p.tier_bandwidth, STORE, f)

    def on_store(self, t, f):
        """At the server: `ms <key> S<size> C<cas>`: stored while the stub is this lease's."""
        srv = self.servers[self.owner_of(f.obj)]
        if srv.stubs.get(f.obj) == f.cas:
            del srv.stubs[f.obj]
            srv.lru.put(f.obj, self.sizes[f.obj])
            if f.counted:
                srv.stores += 1
                srv.bytes_in += self.sizes[f.obj]
        elif f.counted:
            srv.lost += 1

    # -- the loop

    def run(self):
        p, work = self.p, self.work
        rate = p.hosts * p.rate
        next_req = work.expovariate(rate)
        next_new = work.expovariate(p.new_rate) if p.new_rate > 0 else INF
        events = self.events
        while True:
            t_event = events[0][0] if events else INF
            t = min(next_req, next_new, t_event)
            if t >= p.duration:
                break
            if t == t_event:
                _, _, kind, payload = heapq.heappop(events)
                if kind == ASK:
                    self.on_ask(t, payload)
                elif kind == ANSWER:
                    self.on_answer(t, *payload)
                elif kind == ORIGIN_DONE:
                    self.on_origin_done(t, payload)
                else:
                    self.on_store(t, payload)
            elif t == next_req:
                self.request(t)
                next_req = t + work.expovariate(rate)
            else:
                self.new_object(t)
                next_new = t + work.expovariate(p.new_rate)
        return self.report()

    def report(self):
        p = self.p
        seconds = p.duration - p.warmup
        fetched = self.fetches_per_obj
        new_fetched = [fetched[o] for o in self.new_objects if o in fetched]
        r = {"requests": self.requests, "requests_per_s": self.requests / seconds,
             "local_hit_ratio": self.local_hits / max(1, self.requests),
             "coalesced_locally": self.coalesced,
             "fleet_hits": self.fleet_hits, "origin_fetches": self.origin_fetches,
             "origin_fetches_per_s": self.origin_fetches / seconds,
             "objects_fetched": len(fetched),
             "fetches_per_object": self.origin_fetches / max(1, len(fetched)),
             "most_fetches_one_object": max(fetched.values(), default=0),
             "new_objects": len(self.new_objects), "new_objects_fetched": len(new_fetched),
             "fetches_per_new_object": statistics.mean(new_fetched) if new_fetched else float("nan"),
             "miss_latency_p50_ms": pct(self.latencies, 50) * 1000, "miss_latency_p99_ms": pct(self.latencies, 99) * 1000,
             "waited_fetches": self.waited_fetches,
             "polls_per_waiting_fetch": statistics.mean(self.poll_counts) if self.poll_counts else 0.0,
             "wait_p99_ms": pct(self.wait_times, 99) * 1000 if self.wait_times else 0.0,
             "fleet_wait_expired": self.wait_expired, "tier_unavailable": self.unavailable,
             "host_evictions_per_s": sum(h.evictions for h in self.hosts) / p.duration}
        if self.fleet:
            per = []
            for srv in self.servers:
                mg = srv.lookups + srv.polls + srv.reads + 2 * srv.refreshes
                per.append({"lookups_per_s": srv.lookups / seconds, "polls_per_s": srv.polls / seconds,
                            "reads_per_s": srv.reads / seconds, "mg_per_s": mg / seconds,
                            "stores_per_s": srv.stores / seconds, "refreshes_per_s": srv.refreshes / seconds,
                            "mb_out_per_s": srv.bytes_out / seconds / 1e6, "mb_in_per_s": srv.bytes_in / seconds / 1e6,
                            "evictions": srv.lru.evictions, "lost_leases": srv.lost, "up": srv.up,
                            "items": len(srv.lru.items), "mb_used": srv.lru.bytes / 1e6})
            r["servers"] = per
        return r


# ---------------------------------------------------------------- the storm replay (fleet.py, 3 hosts)

def replay(p, sizes, storms, rng):
    """fleet.py's storm, Monte Carlo: per storm one new object of a size drawn from `sizes`; clients sent back to back
    (client i at i * send gap, on host i mod H); each host's coalesced fetch asks memcached once its first client is
    in; the first ask to reach memcached wins. Returns lists per storm."""
    out = {"fetches": [], "mg": [], "ms": [], "lag_ms": [], "polls": []}
    rtt, bw = p.replay_tier_rtt, p.tier_bandwidth
    for _ in range(storms):
        size = rng.choice(sizes)
        first = {}
        for c in range(p.storm_clients):
            first.setdefault(c % p.hosts, c * p.replay_send_gap)
        # each host's ask reaches the server after its own handling (uniform noise: scheduling on a shared machine)
        at_server = {h: t0 + p.replay_host_delay * rng.uniform(0.5, 1.5) + rtt / 2 for h, t0 in first.items()}
        order = sorted(at_server, key=lambda h: at_server[h])
        winner = order[0]
        origin_done = at_server[winner] + rtt / 2 + p.origin_delay / 1000 + size / p.replay_origin_bandwidth
        store_at = origin_done + p.replay_store_delay + rtt / 2 + size / bw
        ends = [origin_done + p.replay_serve]
        mg, polls = 1, 0
        for h in order[1:]:
            t_ask = at_server[h]
            k = 0
            while t_ask < store_at:         # Z (the stub is there), until the store has replaced it
                answer = t_ask + rtt / 2
                t_ask = answer + poll_delay(k, p.poll_first, p.poll_cap) * rng.uniform(0.8, 1.2) + rtt / 2
                k += 1
            mg += 1 + k + 1                 # its lookup, its polls, and the read of the value it found
            polls += k
            ends.append(t_ask + rtt * 1.5 + size / bw + p.replay_serve)
        out["fetches"].append(1)
        out["mg"].append(mg)
        out["ms"].append(1)
        out["polls"].append(polls)
        out["lag_ms"].append((max(ends) - origin_done) * 1000)
    return out


def read_results(path):
    """The JSON block of a fleet.py results file."""
    with open(path) as f:
        text = f.read()
    m = re.search(r"```json\n(.*?)\n```", text, re.S)
    if not m:
        sys.exit(f"{path}: no JSON block (is it a bench/fleet.py results file?)")
    return json.loads(m.group(1))


def corpus_sizes(paths):
    manifest = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "manifest.json")
    try:
        with open(manifest) as f:
            by_path = {"/" + x["path"]: x["bytes"] for x in json.load(f)["files"]}
    except OSError:
        return []
    return [by_path[t] for t in paths if t in by_path]


def spread(values, digits=1):
    if not values:
        return "-"
    return f"{statistics.median(values):.{digits}f} [{pct(values, 10):.{digits}f}, {pct(values, 90):.{digits}f}]"


def measured_spread(values, digits=1):
    if not values:
        return "-"
    return f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}, {max(values):.{digits}f}]"


def run_replay(p):
    measured = None
    if p.check_against:
        res = read_results(p.check_against)
        p.storm_clients = res["args"]["storm_clients"]
        p.origin_delay = res["args"]["origin_delay"]
        p.hosts = res.get("nodes", 3)
        measured = res.get("storm", {})
        targets = [re.sub(r"^/_o/[^/]*", "", u["path"]) for rnd in measured.get("imagecached", []) for u in rnd]
        sizes = corpus_sizes(targets) or [35_000]
    else:
        sizes = [p.size_median]
    rng = random.Random(p.seed)
    pred = replay(p, sizes, p.storms, rng)
    print(f"storm replay: {p.hosts} hosts, {p.storm_clients} clients sent back to back, origin delay {p.origin_delay} ms, "
          f"polls {p.poll_first * 1000:g} ms doubling to {p.poll_cap * 1000:g} ms, "
          f"{p.storms} storms; loopback: tier rtt {p.replay_tier_rtt * 1000:.2f} ms, host delay {p.replay_host_delay * 1000:.2f} ms, "
          f"store delay {p.replay_store_delay * 1000:.2f} ms, serve {p.replay_serve * 1000:.2f} ms")
    print("projected: median [p10, p90] over storms; measured: median [min, max] over fleet.py's URLs\n")
    rows = [("origin fetches per image (fleet)", spread(pred["fetches"], 2)),
            ("tier mg per image (lookups + polls + reads)", spread(pred["mg"])),
            ("  of which polls", spread(pred["polls"])),
            ("tier ms per image (stores)", spread(pred["ms"])),
            ("last client after the origin's last byte, ms", spread(pred["lag_ms"])),
            ("origin fetches per image, each host alone", f"{p.hosts:.2f}")]
    meas = {}
    if measured is not None:
        fleet_on = res["args"].get("fleet", "on") == "on"
        ic = [u for rnd in measured.get("imagecached", []) for u in rnd] if fleet_on else []
        alone_names = ("nginx", "varnish") + (() if fleet_on else ("imagecached",))
        alone = [u for c in alone_names for rnd in measured.get(c, []) for u in rnd]
        if not fleet_on:
            print("(the file's imagecached nodes ran with --fleet off: they count as hosts alone)\n")
        meas = {rows[0][0]: measured_spread([u["origin_fetches"] for u in ic], 2),
                rows[1][0]: measured_spread([u["tier"].get("cmd_get", 0) for u in ic]),
                rows[2][0]: measured_spread([u["tier"].get("cmd_get", 0) - 2 * p.hosts + 1 for u in ic])
                + (" (mg - 2 x hosts + 1)" if ic else ""),
                rows[3][0]: measured_spread([u["tier"].get("cmd_set", 0) for u in ic]),
                rows[4][0]: measured_spread([u["lag_ms"] for u in ic if u.get("lag_ms") is not None]),
                rows[5][0]: measured_spread([u["origin_fetches"] for u in alone], 2) + f" ({', '.join(alone_names)})"}
        if not ic and fleet_on:
            print("(the file has no imagecached storm: only the 'alone' row can be compared)\n")
    width = max(len(r[0]) for r in rows)
    print(f"{'':{width}}  {'projected':28}  measured")
    for name, value in rows:
        print(f"{name:{width}}  {value:28}  {meas.get(name, '-')}")
    over = sum(1 for x in pred["lag_ms"] if x > 50) / len(pred["lag_ms"])
    print(f"\nprojected share of storms whose last client ends more than 50 ms after the origin's last byte: {over:.0%} "
          f"(a waiter's next poll comes up to --poll-cap ({p.poll_cap * 1000:g} ms) after the store)")


# ---------------------------------------------------------------- main

def print_comparison(p, runs, seconds):
    names = list(runs)
    rows = [("requests/s (fleet-wide)", "requests_per_s", 0), ("local hit ratio", "local_hit_ratio", 3),
            ("origin fetches/s", "origin_fetches_per_s", 1), ("objects fetched from the origin", "objects_fetched", 0),
            ("origin fetches per object fetched", "fetches_per_object", 2),
            ("most origin fetches of one object", "most_fetches_one_object", 0),
            ("new objects (asked at least once)", None, 0),
            ("origin fetches per new object", "fetches_per_new_object", 2),
            ("fleet hits (host fetches served by the tier)", "fleet_hits", 0),
            ("host fetches that waited on another's lease", "waited_fetches", 0),
            ("polls per waiting fetch (mean)", "polls_per_waiting_fetch", 2),
            ("wait p99, ms", "wait_p99_ms", 1), ("fleet.wait expired (fetched alone)", "fleet_wait_expired", 0),
            ("tier unavailable (fetched alone)", "tier_unavailable", 0),
            ("local misses: latency p50 / p99, ms", None, 1)]
    width = 48
    print(f"\n{'':{width}}" + "".join(f"{n:>22}" for n in names))
    for label, key, digits in rows:
        cells = []
        for n in names:
            r = runs[n]
            if label.startswith("new objects"):
                cells.append(f"{r['new_objects_fetched']} of {r['new_objects']}")
            elif label.startswith("local misses"):
                cells.append(f"{r['miss_latency_p50_ms']:.1f} / {r['miss_latency_p99_ms']:.1f}")
            elif n == "alone" and key in ("fleet_hits", "waited_fetches", "polls_per_waiting_fetch", "wait_p99_ms",
                                          "fleet_wait_expired", "tier_unavailable"):
                cells.append("-")
            else:
                v = r[key]
                cells.append("nan" if v != v else f"{v:,.{digits}f}")
        print(f"{label:{width}}" + "".join(f"{c:>22}" for c in cells))
    if "fleet" in runs and "alone" in runs and runs["fleet"]["origin_fetches"]:
        print(f"\norigin fetches, alone / fleet: x{runs['alone']['origin_fetches'] / runs['fleet']['origin_fetches']:.1f}")
    if "fleet" in runs:
        servers = runs["fleet"]["servers"]
        up = [s for s in servers if s["up"]]
        keys = [("lookups/s", "lookups_per_s", 0), ("lease polls/s", "polls_per_s", 0),
                ("value reads/s (after a lookup found one)", "reads_per_s", 0), ("mg commands/s, all", "mg_per_s", 0),
                ("stores/s", "stores_per_s", 1),
                ("lease refreshes/s", "refreshes_per_s", 2), ("MB/s out (values served)", "mb_out_per_s", 1),
                ("MB/s in (values stored)", "mb_in_per_s", 2), ("evictions", "evictions", 0),
                ("lost leases", "lost_leases", 0), ("MB held at the end", "mb_used", 0)]
        print(f"\nper memcached server ({len(up)} up of {len(servers)}, {p.server_memory / 2**20:.0f} MiB each):")
        print(f"{'':{width}}{'mean':>22}{'busiest':>22}")
        for label, key, digits in keys:
            values = [s[key] for s in up] or [0]
            print(f"{label:{width}}{statistics.mean(values):>22,.{digits}f}{max(values):>22,.{digits}f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--rate", type=float, default=50, help="requests/s per host")
    parser.add_argument("--objects", type=int, default=100_000, help="catalogue size K")
    parser.add_argument("--zipf", type=float, default=1.0, help="Zipf exponent s")
    parser.add_argument("--new-rate", type=float, default=2, help="new objects per second, fleet-wide")
    parser.add_argument("--size-median", type=size_bytes, default=size_bytes("40KB"))
    parser.add_argument("--size-sigma", type=float, default=0.8, help="lognormal sigma of object sizes")
    parser.add_argument("--memory", type=size_bytes, default=size_bytes("256MiB"), help="local tier per host")
    parser.add_argument("--servers", type=int, default=10, help="memcached servers")
    parser.add_argument("--server-memory", type=size_bytes, default=size_bytes("1GiB"), help="memcached -m, each")
    parser.add_argument("--servers-down", type=int, default=0, help="this many servers unavailable (breaker open)")
    parser.add_argument("--origin-latency", type=float, default=0.2, help="seconds before an origin's first byte")
    parser.add_argument("--origin-bandwidth", type=size_bytes, default=size_bytes("50MB"), help="bytes/s per origin transfer")
    parser.add_argument("--tier-rtt", type=float, default=0.0005, help="host <-> memcached round trip, s")
    parser.add_argument("--tier-bandwidth", type=size_bytes, default=size_bytes("1000MB"), help="bytes/s of a value transfer")
    parser.add_argument("--lease", type=float, default=5, help="fleet.lease, s")
    parser.add_argument("--fleet-wait", type=float, default=10, help="fleet.wait, s")
    parser.add_argument("--poll-first", type=float, default=0.01, help="s before a waiter's first poll (the daemon: 10 ms)")
    parser.add_argument("--poll-cap", type=float, default=0.04, help="s the doubling poll delay stops at (the daemon: 40 ms, FetchMachine.fleetPollCap)")
    parser.add_argument("--duration", type=float, default=60, help="simulated seconds")
    parser.add_argument("--warmup", type=float, default=10, help="seconds before counting")
    parser.add_argument("--cold", action="store_true", help="start with every tier empty")
    parser.add_argument("--mode", default="fleet,alone", help="fleet, alone, or both")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="also print the raw results as JSON")
    g = parser.add_argument_group("storm replay (fleet.py's storm scenario)")
    g.add_argument("--replay", action="store_true", help="project fleet.py's storm instead (with --hosts 3)")
    g.add_argument("--check-against", metavar="RESULTS_MD", help="replay with a fleet.py results file's settings, and compare")
    g.add_argument("--storms", type=int, default=2000)
    g.add_argument("--storm-clients", type=int, default=30)
    g.add_argument("--origin-delay", type=int, default=300, help="ms")
    g.add_argument("--replay-tier-rtt", type=float, default=0.0002, help="loopback round trip to memcached, s")
    g.add_argument("--replay-send-gap", type=float, default=0.00003, help="s between two clients' sends (one Python thread)")
    g.add_argument("--replay-host-delay", type=float, default=0.001, help="s from a host's first client to its tier ask")
    g.add_argument("--replay-store-delay", type=float, default=0.0005, help="s from the origin's last byte to the ms sent")
    g.add_argument("--replay-serve", type=float, default=0.002, help="s from a host's answer to its clients' last bytes")
    g.add_argument("--replay-origin-bandwidth", type=size_bytes, default=size_bytes("500MB"))
    p = parser.parse_args()
    if p.replay or p.check_against:
        return run_replay(p)
    modes = [m for m in ("fleet", "alone") if m in p.mode.split(",")]
    catalogue = p.objects * math.exp(math.log(p.size_median) + p.size_sigma ** 2 / 2)
    print(f"{p.hosts} hosts x {p.rate:g} req/s, Zipf s={p.zipf:g} over {p.objects:,} objects (about {catalogue / 1e9:.1f} GB; "
          f"median {p.size_median / 1e3:.0f} KB), {p.new_rate:g} new objects/s; local tier {p.memory / 2**20:.0f} MiB per host; "
          f"{p.servers} memcached x {p.server_memory / 2**20:.0f} MiB ({p.servers_down} down); origin {p.origin_latency * 1000:.0f} ms "
          f"+ size at {p.origin_bandwidth / 1e6:.0f} MB/s; {p.duration:g} s simulated, counted after {p.warmup:g} s"
          + ("; cold start" if p.cold else "; warm start"))
    runs = {}
    for mode in modes:
        t0 = time.monotonic()
        runs[mode] = Simulation(p, mode == "fleet").run()
        print(f"{mode}: simulated in {time.monotonic() - t0:.1f} s", flush=True)
    print_comparison(p, runs, p.duration - p.warmup)
    if p.json:
        print(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
