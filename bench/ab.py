#!/usr/bin/env python3
"""A/B of two imagecached builds on memory hits (the hot path), runs taken in turns.

    bench/ab.py --a OLD_BINARY --b NEW_BINARY [--label NAME] [--runs 5] [--duration 10] [--corpus small,mixed,renditions]

Both daemons run side by side (as `nobody` when root, loops pinned as by default) in front of bench/origin.py with
the bench corpus (`python3 bench/corpus.py` first), each loaded with the mixed corpus twice; then wrk (2 threads,
64 connections) over the thumbnails and over the mixed corpus, A and B alternating and the order flipping each run.
`renditions` adds warm renditions: a 64 px WebP of each thumbnail (`/transform/insecure/rs:fit:64:0/f:webp/plain/...`),
made once while loading, then served from memory like any hit.
Prints one line per run (requests/s, p50, p99, the daemon's CPU per request, wrk's, the machine's idle share) and the
medians; with --label also writes bench/results/<date>-ab-<label>.md. Only 127.0.0.1; every load is bounded in time.
A change on the hit path comes with such a run: the same machine, the same minutes, so drift cancels out."""

import argparse
import datetime
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  - the runner's processes and clients


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--a", required=True, help="the imagecached binary before the change")
    parser.add_argument("--b", required=True, help="the imagecached binary after the change")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--base-port", type=int, default=18180)
    parser.add_argument("--label", default="")
    parser.add_argument("--corpus", default="small,mixed", help="small, mixed and/or renditions (default small,mixed)")
    args = parser.parse_args()

    with open(os.path.join(bench.CORPUS, "manifest.json")) as f:
        manifest = json.load(f)
    sha = {"/" + x["path"]: x["sha256"] for x in manifest["files"]}
    small = sorted(p for p in sha if p.startswith("/small/"))
    mixed = sorted(p for p in sha if not p.startswith("/stream/"))
    renditions = [f"/transform/insecure/rs:fit:64:0/f:webp/plain{p}" for p in small]
    corpora = (("small", small), ("mixed", mixed), ("renditions", renditions))

    os.makedirs(bench.WORK, exist_ok=True)
    if os.getuid() == 0:
        import pwd  # noqa: PLC0415
        nobody = pwd.getpwnam("nobody")
        os.chown(bench.WORK, nobody.pw_uid, nobody.pw_gid)
    ports = {"origin": args.base_port, "a": args.base_port + 1, "b": args.base_port + 2}
    procs = {"origin": bench.Proc("origin", [sys.executable, os.path.join(bench.BENCH, "origin.py"), "--port",
                                            str(ports["origin"])], ports["origin"], f"{bench.WORK}/ab-origin.log")}
    lines, results = [], {name: {corpus: [] for corpus, _ in corpora} for name in ("a", "b")}
    try:
        for name in ("a", "b"):
            procs[name] = bench.Proc(name, bench.unprivileged() + [
                getattr(args, name), "--listen", f"127.0.0.1:{ports[name]}", "--origin", f"http://127.0.0.1:{ports['origin']}",
                "--memory-limit", "256MiB", "--disk-limit", "0", "--log-level", "warning"], ports[name], f"{bench.WORK}/ab-{name}.log")
            bad = bench.fetch_all(ports[name], mixed, sha) + bench.fetch_all(ports[name], mixed, sha)
            if "renditions" in args.corpus.split(","):
                bad += bench.fetch_all(ports[name], renditions) + bench.fetch_all(ports[name], renditions)
            if bad:
                raise RuntimeError(f"{name}: {bad} wrong answers while loading the corpus")
        for run in range(args.runs):
            order = ("a", "b") if run % 2 == 0 else ("b", "a")
            for corpus_name, paths in corpora:
                if corpus_name not in args.corpus.split(","):
                    continue
                for name in order:
                    proc = procs[name]
                    cpu0 = proc.cpu_seconds()
                    r = bench.wrk(ports[name], paths, args.duration, args.connections, f"ab-{corpus_name}")
                    r["cpu_us_per_req"] = (proc.cpu_seconds() - cpu0) * 1e6 / max(1, r["requests"])
                    r["p50_ms"], r["p99_ms"] = r["p50_us"] / 1000, r["p99_us"] / 1000
                    results[name][corpus_name].append(r)
                    line = (f"run {run + 1} {corpus_name:5} {name}  {r['rps']:8.0f} req/s  p50 {r['p50_ms']:6.2f}  "
                            f"p99 {r['p99_ms']:6.2f}  cpu {r['cpu_us_per_req']:5.1f} us  wrk {r['wrk_cpu_us_per_req']:5.1f} us  "
                            f"idle {r['idle_pct']:4.1f}%  errors {r.get('errors', 0)}")
                    print(line, flush=True)
                    lines.append(line)
    finally:
        for proc in procs.values():
            proc.stop()

    summary = []
    for corpus_name in [c for c, _ in corpora if c in args.corpus.split(",")]:
        def med(name, key):
            return statistics.median(r[key] for r in results[name][corpus_name])
        a_rps, b_rps = med("a", "rps"), med("b", "rps")
        summary.append(f"{corpus_name:10} medians: A {a_rps:8.0f} req/s p99 {med('a', 'p99_ms'):6.2f} cpu {med('a', 'cpu_us_per_req'):5.1f} us | "
                       f"B {b_rps:8.0f} req/s p99 {med('b', 'p99_ms'):6.2f} cpu {med('b', 'cpu_us_per_req'):5.1f} us | "
                       f"B/A {b_rps / a_rps:.3f}")
    print("\n".join(summary))
    if args.label:
        path = os.path.join(bench.RESULTS, f"{datetime.date.today().isoformat()}-ab-{args.label}.md")
        with open(path, "a") as f:
            f.write(f"# A/B on memory hits: {args.label}\n\nA: `{args.a}`\nB: `{args.b}`\n\n"
                    f"{args.runs} runs of {args.duration} s, wrk 2 threads x {args.connections} connections, A and B in turns "
                    f"(order flipped each run), both daemons side by side, `--memory-limit 256MiB --disk-limit 0`.\n\n"
                    "```\n" + "\n".join(lines) + "\n\n" + "\n".join(summary) + "\n```\n")
        print(f"written {path}")


if __name__ == "__main__":
    main()
