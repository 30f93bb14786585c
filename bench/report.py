"""Turns the runner's results into one Markdown table (printed, and written to bench/results/<date>.md)."""
import datetime
import json
import os
import platform
import re
import statistics
import subprocess

MIB = 1024 * 1024
COLUMNS = ["imagecached", "nginx", "varnish", "static"]


def med(runs, key):
    values = [r[key] for r in runs if r.get(key) is not None]   # results written before a metric existed lack it
    return statistics.median(values) if values else None


# Beside the cache's own CPU: what the rest of the machine did per request (see bench/README.md).
SCHEDULING = (("cs_per_req", "context switches/request (cache's threads)", 3),
              ("wrk_cpu_us_per_req", "wrk's CPU us/request", 1),
              ("idle_pct", "machine idle % during the run", 1))


def ms(us):
    return None if us is None else us / 1000


def fmt(v, digits=0, suffix=""):
    if v is None or v != v:
        return "-"
    return f"{v:,.{digits}f}{suffix}"


def version(argv):
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10)
        return (out.stdout + out.stderr).strip().splitlines()[0]
    except Exception:  # noqa: BLE001
        return "?"


def build_rows(res):
    rows = []  # (section, metric, {column: text}, bar text)

    def row(section, metric, values, bar=""):
        rows.append((section, metric, values, bar))

    for corpus in ("small", "mixed"):
        hits = res["hits"].get(corpus)
        if not hits:
            continue
        sec = f"1. memory hits, {corpus} ({res['corpus'][corpus]} URLs, {res['args']['connections']} conns)"
        m = {c: {k: med(hits.get(c, []), k) for k in ("rps", "mbps", "p50_us", "p99_us", "cpu_us_per_req")}
             for c in COLUMNS if c in hits}
        best = max(("nginx", "varnish"), key=lambda c: m.get(c, {}).get("rps") or 0)
        ic = m.get("imagecached", {})
        ok_rps = ic.get("rps") and ic["rps"] >= m[best]["rps"]
        ok_p99 = ic.get("p99_us") and ic["p99_us"] <= m[best]["p99_us"]
        row(sec, "requests/s (median of runs)", {c: fmt(v["rps"]) for c, v in m.items()},
            f"{'PASS' if ok_rps else 'FAIL'}: >= {best} {fmt(m[best]['rps'])}")
        row(sec, "MB/s", {c: fmt(v["mbps"]) for c, v in m.items()})
        row(sec, "p50 ms", {c: fmt(v["p50_us"] / 1000, 2) for c, v in m.items()})
        row(sec, "p99 ms", {c: fmt(v["p99_us"] / 1000, 2) for c, v in m.items()},
            f"{'PASS' if ok_p99 else 'FAIL'}: <= {best} {fmt(m[best]['p99_us'] / 1000, 2)}")
        for key, label in (("p999_us", "p99.9 ms"), ("mean_us", "mean ms")):   # the rest of the distribution
            row(sec, label, {c: fmt(ms(med(hits[c], key)), 2) for c in m})
        row(sec, "CPU us/request (cache's own)", {c: fmt(v["cpu_us_per_req"], 1) for c, v in m.items()})
        for key, label, digits in SCHEDULING:
            row(sec, label, {c: fmt(med(hits[c], key), digits) for c in m})
        for ref in ("nginx", "varnish"):
            if ref in m:
                row(sec, f"req/s ratio to {ref}", {c: fmt(v["rps"] / m[ref]["rps"], 2) for c, v in m.items()})
        row(sec, "origin requests during runs, errors",
            {c: f"{sum(r['origin_requests'] for r in hits[c])}, {sum(r['errors'] for r in hits[c])}" for c in m})

    co = res.get("coalescing") or {}
    if co:
        sec = "2. coalescing (200 clients, 1 new URL, origin delay 500 ms)"
        ic = co.get("imagecached", {})
        row(sec, "origin requests", {c: str(v["origin_requests"]) for c, v in co.items()},
            f"{'PASS' if ic.get('origin_requests') == 1 else 'FAIL'}: exactly 1")
        row(sec, "clients with the correct bytes", {c: f"{v['correct']}/{v['clients']}" for c, v in co.items()})
        row(sec, "origin had sent the image at ms", {c: fmt(v["origin_sent"] * 1000) for c, v in co.items()})
        row(sec, "latency p50 ms", {c: fmt(v["p50"] * 1000) for c, v in co.items()})
        row(sec, "latency p99 ms", {c: fmt(v["p99"] * 1000) for c, v in co.items()})
        row(sec, "latency max ms", {c: fmt(v["max"] * 1000) for c, v in co.items()},
            f"{'PASS' if ic.get('max', 9) <= 0.550 else 'FAIL'}: <= 550")

    st = res.get("streaming") or {}
    if st:
        sec = "3. streaming (1 MB dripped over 2 s, 50 clients)"
        ic = st.get("imagecached", {})
        row(sec, "origin requests", {c: str(v["origin_requests"]) for c, v in st.items()})
        row(sec, "clients with the correct bytes", {c: f"{v['correct']}/{v['clients']}" for c, v in st.items()})
        row(sec, "origin first byte ms", {c: fmt(v["origin_first_byte"] * 1000) for c, v in st.items()})
        row(sec, "client first body byte p50 / max ms",
            {c: f"{fmt(v['ttfb_p50'] * 1000)} / {fmt(v['ttfb_max'] * 1000)}" for c, v in st.items()})
        row(sec, "max first byte after origin's, ms", {c: fmt(v["lag_max"] * 1000) for c, v in st.items()},
            f"{'PASS' if ic.get('lag_max', 9) <= 0.050 else 'FAIL'}: <= 50")
        row(sec, "client total p50 / max ms",
            {c: f"{fmt(v['total_p50'] * 1000)} / {fmt(v['total_max'] * 1000)}" for c, v in st.items()})

    rv = res.get("revalidation") or {}
    if rv:
        any_v = next(iter(rv.values()))
        sec = f"4. revalidation ({any_v['urls']} URLs, max-age=1, {any_v['seconds']} s, 16 conns)"
        row(sec, "origin 304s / 200s", {c: f"{v['origin_304']} / {v['origin_200']}" for c, v in rv.items()})
        row(sec, "requests/s", {c: fmt(v["rps"]) for c, v in rv.items()})

    ls = res.get("lockstep") or {}
    if ls:
        any_v = next(iter(ls.values()))
        sec = f"4b. revalidation in lock-step ({any_v['urls']} URLs, max-age=1, origin 100 ms away, {any_v['seconds']} s, 16 conns)"
        row(sec, "origin 304s / 200s", {c: f"{v['origin_304']} / {v['origin_200']}" for c, v in ls.items()})
        row(sec, "requests/s", {c: fmt(v["rps"]) for c, v in ls.items()})
        row(sec, "p99 / max ms", {c: f"{fmt(v['p99_us'] / 1000)} / {fmt(v['max_us'] / 1000)}" for c, v in ls.items()})

    mem = res.get("memory") or {}
    if mem:
        sec = f"5. memory (corpus loaded: {res['corpus']['files']} files, {res['corpus']['bytes'] / MIB:.1f} MiB)"
        cached = res["corpus"]["bytes"]
        limit = 1.2 * cached + 64 * MIB
        ic = mem.get("imagecached", {})
        row(sec, "RSS before load MiB", {c: fmt(v["rss0"] / MIB, 1) for c, v in mem.items()})
        row(sec, "RSS after load MiB (PSS; nginx + its tmpfs cache)",
            {c: f"{fmt(v['rss'] / MIB, 1)} ({fmt((v['pss'] + v['tmpfs']) / MIB, 1)})" for c, v in mem.items()},
            f"{'PASS' if ic.get('rss', 1e18) <= limit else 'FAIL'}: <= {limit / MIB:.1f}")
        if all("rss_end" in v for v in mem.values()):
            row(sec, "RSS after the hit runs MiB", {c: fmt(v["rss_end"] / MIB, 1) for c, v in mem.items()})
        row(sec, "wrong answers / origin requests on 2nd pass",
            {c: f"{v['wrong']} / {v['second_pass_origin_requests']}" for c, v in mem.items()})
    return rows


def table(rows, columns=COLUMNS, headings=None):
    headings = headings or COLUMNS[:-1] + ["nginx static (ceiling)"]
    out = ["| scenario | metric | " + " | ".join(headings) + " | imagecached vs bar |",
           "|---|---|" + "---:|" * len(columns) + "---|"]
    last = None
    for section, metric, values, bar in rows:
        out.append(f"| {section if section != last else ''} | {metric} | "
                   + " | ".join(values.get(c, "") for c in columns) + f" | {bar} |")
        last = section
    return "\n".join(out)


DISK_COLUMNS = ["imagecached", "imagecached-file", "nginx"]
DISK_HEADINGS = ["imagecached (4 MiB memory, objects <= 512 KiB promoted)", "imagecached (4 MiB memory, every hit from its file)",
                 "nginx proxy_cache (disk)"]


def build_disk_rows(res):
    rows = []

    def row(section, metric, values, bar=""):
        rows.append((section, metric, values, bar))

    dk = res.get("disk") or {}
    if dk.get("runs"):
        runs = dk["runs"]
        sec = f"6. disk hits, mixed ({res['corpus']['mixed']} URLs, {res['corpus']['bytes'] / MIB:.0f} MiB, {res['args']['connections']} conns)"
        m = {c: {k: med(runs[c], k) for k in ("rps", "mbps", "p50_us", "p99_us", "cpu_us_per_req")} for c in DISK_COLUMNS if c in runs}
        ng = m.get("nginx", {})

        def vs(c):
            return f"{m[c]['rps'] / ng['rps']:.2f}x" if ng.get("rps") and c in m else "-"
        ok = {c: c in m and ng.get("rps") and m[c]["rps"] >= ng["rps"] for c in ("imagecached", "imagecached-file")}
        row(sec, "requests/s (median of runs)", {c: fmt(v["rps"]) for c, v in m.items()},
            f"{'PASS' if ok['imagecached'] else 'FAIL'} ({vs('imagecached')}), every hit from file: "
            f"{'PASS' if ok['imagecached-file'] else 'FAIL'} ({vs('imagecached-file')}): >= nginx {fmt(ng.get('rps'))}")
        row(sec, "MB/s", {c: fmt(v["mbps"]) for c, v in m.items()})
        row(sec, "p50 ms", {c: fmt(v["p50_us"] / 1000, 2) for c, v in m.items()})
        row(sec, "p99 ms", {c: fmt(v["p99_us"] / 1000, 2) for c, v in m.items()})
        row(sec, "CPU us/request (cache's own)", {c: fmt(v["cpu_us_per_req"], 1) for c, v in m.items()})
        for key, label, digits in SCHEDULING:
            row(sec, label, {c: fmt(med(runs[c], key), digits) for c in m})
        if ng.get("rps"):
            row(sec, "req/s ratio to nginx", {c: fmt(v["rps"] / ng["rps"], 2) for c, v in m.items()})
        row(sec, "origin requests during runs, errors",
            {c: f"{sum(r['origin_requests'] for r in runs[c])}, {sum(r['errors'] for r in runs[c])}" for c in m})
        row(sec, "origin requests on warm passes 2 and 3, wrong bytes",
            {c: f"{'+'.join(map(str, v['origin_requests_pass2_pass3']))}, {v['wrong']}" for c, v in dk["warm"].items()})
        row(sec, "cache files on disk (MiB)",
            {c: f"{v['files']} ({v['bytes'] / MIB:.1f})" for c, v in dk["warm"].items()})
        row(sec, "sequential sample: answers from disk",
            {c: f"{v['from_disk']}/{v['requests']}" for c, v in dk["sample"].items()},
            "imagecached: Cache-Status detail=disk; nginx: X-Cache HIT (all its hits are file reads)")
        row(sec, "under wrk load (3 s, status script): detail=disk",
            {c: (f"{v['disk']}/{v['disk'] + v['other']} ({100 * v['disk'] / max(1, v['disk'] + v['other']):.0f}%)"
                 if "disk" in v else "?") for c, v in dk["under_load"].items()})

    su = res.get("startup") or {}
    if su.get("runs"):
        runs, ds = su["runs"], su["dataset"]
        n = ds["files"]
        sec = f"7. restart with {n:,} entries on disk ({len(runs)} restarts, {su['fs']})"

        def mm(key, scale=1000, digits=0):
            vals = [r[key] for r in runs if key in r]
            if not vals:
                return "-"
            return f"{fmt(statistics.median(vals) * scale, digits)} / {fmt(max(vals) * scale, digits)}"
        accept = [r.get("accept_s", 99) for r in runs]
        ok = len(accept) == len(runs) and max(accept) < 1.0 and n >= 100_000
        row(sec, "exec to first health 200, ms (median / max)", {"imagecached": mm("accept_s", digits=1)},
            f"{'PASS' if ok else 'FAIL'}: < 1000 ms with >= 100,000 entries")
        row(sec, "exec to log `disk index loaded`, ms (median / max)", {"imagecached": mm("loaded_seen_s")})
        row(sec, "loader's own time, ms (median / max)", {"imagecached": mm("loader_s")})
        row(sec, "entries / MiB the loader indexed",
            {"imagecached": " ; ".join(sorted({f"{r.get('entries', '?')} / {r.get('bytes', 0) / MIB:.0f}" for r in runs}))})
        row(sec, "first stored image asked right after accept: ms (median / max)", {"imagecached": mm("probe_s", digits=1)},
            "Cache-Status: " + "; ".join(sorted({re.sub(r"ttl=-?[0-9]+", "ttl=N", r.get("probe_status", "?")) for r in runs})))
        row(sec, "data set", {"imagecached": f"{ds['fetched_ok']:,} fetched in {ds['fetch_seconds']} s"},
            f"{'reused (built ' + ds['built_at'] + ')' if ds.get('reused') else 'built in this run'}; {ds['bodies']}"
            + ("; STOPPED BY THE TIME LIMIT" if ds.get("stopped_by_time_limit") else ""))
    return rows


def write_disk_report(res, results_dir):
    """The disk scenarios' table, printed and written to bench/results/<date>-disk.md."""
    now = datetime.datetime.now()
    text = table(build_disk_rows(res), DISK_COLUMNS, DISK_HEADINGS)
    print("\n" + text)
    dk, su = res.get("disk") or {}, res.get("startup") or {}
    header = [
        f"# imagecached benchmark: disk tier, {now:%Y-%m-%d %H:%M}",
        "",
        f"- machine: {os.cpu_count()} cores, {platform.platform()}",
        f"- {version(['nginx', '-v'])}; {version(['wrk', '--version'])}",
    ]
    if dk:
        header += [
            f"- disk hits: wrk, 2 threads, {res['args']['connections']} connections, {res['args']['duration']} s x "
            f"{res['args']['runs']} runs (median), rotate script over the mixed corpus; the caches take turns, the order "
            "rotates each run",
            f"- imagecached: `{dk['settings']['imagecached']}` (object limit 1/8 = 512 KiB: thumbnails promoted, photos "
            f"streamed from their files); imagecached-file: `{dk['settings']['imagecached-file']}` (no corpus file fits: "
            "every hit is read from its file)",
            f"- nginx: {dk['nginx']}; cache directories on {dk['fs']['imagecached']} / {dk['fs']['nginx']} "
            "(a real disk, not tmpfs). After the warm-up both are read from the page cache: the files are on disk, "
            "the reads are mostly RAM",
            "- CPU us/request: the cache's own utime+stime (/proc/<pid>/stat, process tree) over requests served",
        ]
    if su:
        header += [
            f"- restart: the data set in `{su.get('path')}` ({su.get('fs')}) is written by the daemon itself (distinct "
            "URLs through the bench origin), kept between runs; then the daemon is started "
            f"{len(su.get('runs', []))} times: time from exec (setpriv included) to the first 200 from "
            "/_imagecached/health (polled in a tight loop), and to the log line `disk index loaded` (the loader runs "
            "in the background). Page cache: warm after a build; with a reused data set the first restart may read "
            "directories and headers from the device (cold), hence its max",
        ]
    raw = {k: res.get(k) for k in ("args", "corpus", "disk", "startup")}
    return write_markdown(results_dir, f"{now:%Y-%m-%d}-disk.md", header + ["", text], raw)


def write_markdown(results_dir, name, lines, raw):
    """Writes `lines`, then `raw` as JSON in a folded block, to results_dir/name (tmp + rename); returns the path."""
    lines = lines + [
        "",
        "<details><summary>raw results</summary>",
        "",
        "```json",
        json.dumps(raw, indent=1, default=str),
        "```",
        "</details>",
        "",
    ]
    os.makedirs(results_dir, exist_ok=True)
    path = os.path.join(results_dir, name)
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(lines))
    os.replace(path + ".tmp", path)
    return path


def write_report(res, results_dir):
    now = datetime.datetime.now()
    text = table(build_rows(res))
    print("\n" + text)
    header = [
        f"# imagecached benchmark, {now:%Y-%m-%d %H:%M}",
        "",
        f"- machine: {os.cpu_count()} cores, {platform.platform()}",
        f"- {version(['nginx', '-v'])}; {version(['varnishd', '-V'])}; {version(['wrk', '--version'])}",
        f"- wrk: 2 threads, {res['args']['connections']} connections, {res['args']['duration']} s x {res['args']['runs']} runs "
        "(median); caches take turns, the order rotates each run",
        f"- every cache: {res['args']['memory_mib']} MiB memory budget, keep-alive to the origin, coalescing on, "
        "no access log, 2 workers pinned one per core (Varnish: 2 thread pools, unpinned; see bench/README.md)",
        (f"- grace {res['args'].get('grace', 0)} s: stale served while one request revalidates (imagecached "
         "--stale-while-revalidate, nginx proxy_cache_use_stale updating + background update, Varnish grace)"
         if res['args'].get('grace') else "- no grace: a stale entry is never served while it is revalidated"),
        f"- imagecached extra flags: {res['args'].get('imagecached_args') or 'none'}",
        "- CPU us/request: the cache's own utime+stime (/proc/<pid>/stat, process tree) over requests served",
        "",
        text,
    ]
    return write_markdown(results_dir, f"{now:%Y-%m-%d}.md", header, res)
