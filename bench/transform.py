#!/usr/bin/env python3
"""Image transforms: imagecached against thumbor and vipsthumbnail's own CPU, one run, the same machine.

    python3 bench/transform.py [--binary PATH] [--note TEXT] [--duration 10] [--runs 5] [--no-thumbor] [--quick]
                               [--out FILE]

Installs what is missing: vipsthumbnail and wrk from Debian (`apt-get install -y libvips-tools wrk`), Pillow from PyPI
(the corpus), thumbor from PyPI into its own virtualenv (`python3 -m venv /tmp/imagecached-bench-thumbor-venv` then
`pip install thumbor`, 7.8.0 when this was written; it brings its own Pillow with AVIF). The imagecached binary is
`.build/release/imagecached` unless --binary names another (`swift build -c release --product imagecached`).

Corpus (made once under bench/corpus/transform/, which is git-ignored; --corpus real, the default): 16 real
photographs of 1, 2, 4, 8 and 12 megapixels, 10 JPEG and 6 PNG, from Debian's wallpaper packages mate-backgrounds and
plasma-workspace-wallpapers (`apt-get download`, about 140 MB; their photographs only, listed in REAL_PLAN): at their
native pixels where a size allows (the JPEGs as the package has them), scaled down (Lanczos) to 1 and 2 MP, a quarter
turn for the two portraits, and for 8 and 12 MP, which no single photograph there has but one of a painting
(Elephants, used too), 2x2 mosaics of four 2560x1600 photographs cut to 4:3 (every pixel a camera's); made JPEGs at
quality 90, PNGs at level 6. `--corpus generated`: the 16 photo-like pictures of the earlier runs (seed fixed,
Pillow: three octaves of colour noise, a sky gradient, 60 blurred shapes, sensor grain). Served by bench/origin.py
(`Cache-Control: public, max-age=3600`, ETag).

Jobs: each source to widths 320, 480, 640 and 800 (height follows) as JPEG (q 80), WebP (q 79) and AVIF (q 63):
192 distinct variants, imagecached's defaults (WebP effort 4, AVIF effort 2, JPEG optimize_coding, metadata stripped).

  a. imagecached cold: each source primed first (a full-size JPEG variant that is not a job: the source is then in
     the cache, so the runs time transforms, not origin fetches, and its pixel cache holds no level of it, so every
     source is decoded in the runs), then every job once, 2 clients (2 cores, a new
     connection per request), one format at a time: transforms/s, and the daemon's CPU (utime+stime,
     /proc/<pid>/stat) per transform. Again on a fresh daemon with --server-cpu-affinity off (threads that a pinned
     event loop starts inherit its CPU; the threads' allowed CPUs are recorded after each run).
  b. imagecached warm: wrk (2 threads, 64 connections, --duration s, --runs runs, turns) over the 192 variant URLs,
     against the anchor: the same 192 bodies put on the origin as plain files and served through the reverse proxy
     (and one variant URL of the median size against its plain copy alone). Bar: warm variants within 10% of the
     plain files' requests/s, as the median of each run's ratio (pairs measured side by side cancel the drift).
  c. thumbor 7 (Pillow engine, 2 processes, file storage for sources, file result storage with
     RESULT_STORAGE_STORES_UNSAFE) primed and run the same way, cold and warm; CPU of its process tree.
     Warm requests must come from result storage: the results file counts the result files written or rewritten
     during the warm run (0), and its CPU per request stands beside the cold one.
  d. vipsthumbnail (VIPS_CONCURRENCY=1, one thread per image as the daemon's workers) for every job, from the local
     files, one process per format and width with its 16 sources: user+sys from getrusage(RUSAGE_CHILDREN) deltas;
     the process start (exec, libvips init and its modules: a 64x48 image, median of 20) is taken off for the floor.
  e. Memory: a daemon with --transform-workers 2 --transform-queue 4 --memory-limit 64MiB, 40 clients, each with its
     own 12 MP source (distinct URLs /_o/v=N/...), asking new variants for --flood-seconds; VmRSS sampled every 50 ms.
     The bound: idle RSS + (workers + queue) x the largest source + workers x one full decode + the memory tier.

Each cold and warm measurement also records the rest of the machine's CPU meanwhile (/proc/stat busy time less the
server's and this script's own), so that another job on the machine shows.

Bars: cold transforms/s >= 1.5x thumbor's; CPU per image <= 1.3x vipsthumbnail's; warm variants >= 0.9x the plain
files' requests/s; peak RSS under the bound. Prints the table and writes bench/results/<date>-transforms.md.
Only 127.0.0.1; every load is bounded in count and time.
"""
import argparse
import collections
import datetime
import hashlib
import http.client
import io
import json
import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  - processes, wrk, helpers

BENCH = bench.BENCH
REPO = bench.REPO
CORPUS = os.path.join(bench.CORPUS, "transform")
SRC = os.path.join(CORPUS, "src")
MIRROR = os.path.join(CORPUS, "mirror")
WORK = os.path.join(bench.WORK, "transform")
VENV = "/tmp/imagecached-bench-thumbor-venv"
SEED = 20261126
CORPUS_VERSION = 1
MIB = 1024 * 1024

WIDTHS = [320, 480, 640, 800]
FORMATS = ["jpeg", "webp", "avif"]
QUALITY = {"jpeg": 80, "webp": 79, "avif": 63}          # imagecached's defaults
EXT = {"jpeg": "jpg", "webp": "webp", "avif": "avif"}
# vipsthumbnail save options matching the daemon's icv_save (CVipsShim): Q, optimize_coding, effort, strip
VIPS_SAVE = {"jpeg": "jpg[Q=80,optimize_coding,strip]", "webp": "webp[Q=79,effort=4,strip]",
             "avif": "avif[Q=63,effort=2,compression=av1,strip]"}
# (name, megapixels, format): 10 JPEG and 6 PNG, 1-12 MP; two portrait pictures
PLAN = [("j01a", 1, "JPEG"), ("j01b", 1, "JPEG"), ("j02a", 2, "JPEG"), ("j02b", 2, "JPEG"), ("j04a", 4, "JPEG"),
        ("j04b", 4, "JPEG"), ("j08a", 8, "JPEG"), ("j08b", 8, "JPEG"), ("j12a", 12, "JPEG"), ("j12b", 12, "JPEG"),
        ("p01a", 1, "PNG"), ("p02a", 2, "PNG"), ("p04a", 4, "PNG"), ("p04b", 4, "PNG"), ("p08a", 8, "PNG"),
        ("p12a", 12, "PNG")]
PORTRAIT = {"j02b", "p04b"}


# ---------------------------------------------------------------- setup

def ensure_tools(want_thumbor):
    """apt-get / pip what is missing; returns (thumbor executable or None, why not)."""
    missing = [tool for tool, pkg in (("vipsthumbnail", "libvips-tools"), ("wrk", "wrk")) if shutil.which(tool) is None]
    if missing:
        pkgs = {"vipsthumbnail": "libvips-tools", "wrk": "wrk"}
        sudo = [] if os.getuid() == 0 else ["sudo"]
        print(f"installing: {' '.join(pkgs[m] for m in missing)}", file=sys.stderr)
        subprocess.run(sudo + ["apt-get", "update", "-qq"], check=True, timeout=600)
        subprocess.run(sudo + ["apt-get", "install", "-y", "-qq"] + [pkgs[m] for m in missing], check=True, timeout=900,
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    try:
        import PIL  # noqa: F401,PLC0415
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "pillow"], check=True, timeout=900)
    if not want_thumbor:
        return None, "skipped (--no-thumbor)"
    exe = os.path.join(VENV, "bin", "thumbor")
    if not os.path.exists(exe):
        print(f"installing thumbor into {VENV}", file=sys.stderr)
        try:
            subprocess.run([sys.executable, "-m", "venv", VENV], check=True, timeout=300)
            subprocess.run([os.path.join(VENV, "bin", "pip"), "install", "-q", "thumbor"], check=True, timeout=1800)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:
            return None, f"pip install thumbor failed: {error}"
    check = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    if check.returncode != 0:
        return None, f"thumbor --version failed: {check.stderr.strip()[-300:]}"
    return exe, check.stdout.strip() or check.stderr.strip()


def photo(rng, w, h, grain):
    """Photo-like pixels: three octaves of smooth colour noise, a sky gradient, blurred shapes, sensor grain."""
    from PIL import Image, ImageDraw, ImageFilter  # noqa: PLC0415
    base = None
    for cells, weight in ((6, 1.0), (32, 0.45), (160, 0.25)):
        gw, gh = max(2, cells * w // max(w, h) + 1), max(2, cells * h // max(w, h) + 1)
        layer = Image.frombytes("RGB", (gw, gh), rng.randbytes(gw * gh * 3)).resize((w, h), Image.BICUBIC)
        base = layer if base is None else Image.blend(base, layer, weight / (1 + weight))
    grad = Image.linear_gradient("L").resize((w, h), Image.BILINEAR)
    tint = Image.new("RGB", (w, h), tuple(rng.randrange(256) for _ in range(3)))
    base = Image.composite(base, tint, grad.point(lambda v: 60 + v * 195 // 255))
    shapes = base.copy()
    draw = ImageDraw.Draw(shapes)
    side = min(w, h)
    for _ in range(60):
        x, y = rng.randrange(w), rng.randrange(h)
        r = rng.randrange(max(8, side // 60), max(16, side // 7))
        colour = tuple(rng.randrange(256) for _ in range(3))
        kind = rng.randrange(3)
        if kind == 0:
            draw.ellipse((x - r, y - r, x + r, y + int(r * 0.7)), fill=colour)
        elif kind == 1:
            draw.rectangle((x, y, x + r * 2, y + r), fill=colour)
        else:
            draw.polygon([(x, y), (x + r, y + r // 3), (x + r // 2, y + r * 2)], fill=colour)
    shapes = shapes.filter(ImageFilter.GaussianBlur(max(1, w // 1500)))
    img = Image.blend(base, shapes, 0.7)
    if grain:
        g = Image.frombytes("L", (w, h), rng.randbytes(w * h))
        img = Image.blend(img, Image.merge("RGB", (g, g, g)), grain)
    return img


# The real photographs: Debian's wallpaper packages (apt-get download; their photographs only, not the renders and
# paintings beside them), at their native pixels where a size allows. (name, megapixels, format, how); how is
# ("native", photo), ("scaled", photo), ("turned", photo: a quarter turn, for a portrait), or ("mosaic", photos: four
# 2560x1600 photographs in a 2x2 grid, cut to 4:3 from its centre: every pixel a camera's, seams between them; the
# packages hold no single photograph of 8 or 12 MP but one painting's photograph, Elephants, used for j08a/j12a).
REAL_PACKAGES = ["mate-backgrounds", "plasma-workspace-wallpapers"]
PL = "usr/share/wallpapers/{}/contents/images/2560x1600.jpg"
MN = "usr/share/backgrounds/mate/nature/{}.jpg"
ELEPHANTS = "usr/share/backgrounds/mate/abstract/Elephants_{}.jpg"
REAL_PLAN = [
    ("j01a", 1, "JPEG", ("scaled", PL.format("EveningGlow"))), ("j01b", 1, "JPEG", ("scaled", MN.format("LadyBird"))),
    ("j02a", 2, "JPEG", ("scaled", PL.format("Path"))), ("j02b", 2, "JPEG", ("turned", PL.format("FallenLeaf"))),
    ("j04a", 4, "JPEG", ("native", PL.format("OneStandsOut"))), ("j04b", 4, "JPEG", ("native", MN.format("YellowFlower"))),
    ("j08a", 8, "JPEG", ("native", ELEPHANTS.format("3840x2160"))),
    ("j08b", 8, "JPEG", ("mosaic", [PL.format(n) for n in ("ColorfulCups", "Kite", "DarkestHour", "summer_1am")])),
    ("j12a", 12, "JPEG", ("scaled", ELEPHANTS.format("5640x3172"))),
    ("j12b", 12, "JPEG", ("mosaic", [MN.format(n) for n in ("Aqua", "Garden", "TwoWings", "LadyBird")])),
    ("p01a", 1, "PNG", ("scaled", PL.format("BytheWater"))), ("p02a", 2, "PNG", ("scaled", MN.format("Garden"))),
    ("p04a", 4, "PNG", ("native", PL.format("Kite"))), ("p04b", 4, "PNG", ("turned", PL.format("ColdRipple"))),
    ("p08a", 8, "PNG", ("mosaic", [PL.format(n) for n in ("Path", "EveningGlow", "OneStandsOut", "BytheWater")])),
    ("p12a", 12, "PNG", ("mosaic", [PL.format(n) for n in ("FallenLeaf", "ColorfulCups", "summer_1am", "Kite")])),
]


def real_photos():
    """The packages' files under bench/corpus/transform/debs/root (downloaded and unpacked once); their versions."""
    debs = os.path.join(CORPUS, "debs")
    root = os.path.join(debs, "root")
    os.makedirs(debs, exist_ok=True)
    versions = {}
    for package in REAL_PACKAGES:
        found = [f for f in os.listdir(debs) if f.startswith(package + "_") and f.endswith(".deb")]
        if not found:
            command = ["apt-get", "download", "-o", "APT::Sandbox::User=root", package]
            if subprocess.run(command, cwd=debs, timeout=900).returncode != 0:
                subprocess.run(["apt-get", "update", "-qq"], check=True, timeout=600)
                subprocess.run(command, cwd=debs, check=True, timeout=900)
            found = [f for f in os.listdir(debs) if f.startswith(package + "_") and f.endswith(".deb")]
        deb = sorted(found)[-1]
        versions[package] = deb
        subprocess.run(["dpkg-deb", "-x", os.path.join(debs, deb), root], check=True, timeout=600)
    return root, versions


def real_picture(root, name, mp, how):
    """One picture of the plan, as a Pillow image (RGB)."""
    from PIL import Image  # noqa: PLC0415
    kind, what = how

    def load(path):
        return Image.open(os.path.join(root, path)).convert("RGB")

    def scaled_to(img, megapixels):
        w, h = img.size
        factor = (megapixels * 1e6 / (w * h)) ** 0.5
        return img.resize((round(w * factor), round(h * factor)), Image.LANCZOS) if factor < 1 else img

    if kind == "native":
        return load(what)
    if kind == "scaled":
        return scaled_to(load(what), mp)
    if kind == "turned":
        return scaled_to(load(what).transpose(Image.ROTATE_90), mp)
    tiles = [load(path).resize((2560, 1600), Image.LANCZOS) for path in what]
    grid = Image.new("RGB", (5120, 3200))
    for i, tile in enumerate(tiles):
        grid.paste(tile, ((i % 2) * 2560, (i // 2) * 1600))
    h = int((mp * 1e6 * 3 / 4) ** 0.5)
    w = int(mp * 1e6 / h)
    left, top = (5120 - w) // 2, (3200 - h) // 2
    return grid.crop((left, top, left + w, top + h))


def encoded(img, fmt):
    """A corpus picture's bytes: JPEG at quality 90, PNG at level 6."""
    out = io.BytesIO()
    if fmt == "JPEG":
        img.save(out, "JPEG", quality=90)
    else:
        img.save(out, "PNG", compress_level=6)
    return out.getvalue()


def make_corpus(kind="real"):
    """bench/corpus/transform/src/*.jpg|png and manifest.json (once per kind; rebuilt when CORPUS_VERSION changes)."""
    manifest_path = os.path.join(CORPUS, "manifest.json")
    if os.path.exists(manifest_path):
        with open(manifest_path) as f:
            manifest = json.load(f)
        if manifest.get("version") == CORPUS_VERSION and manifest.get("kind", "generated") == kind and all(
                os.path.exists(os.path.join(SRC, x["file"])) for x in manifest["files"]):
            return manifest
    shutil.rmtree(SRC, ignore_errors=True)
    if kind == "real":
        return make_real_corpus(manifest_path)
    rng = random.Random(SEED)
    os.makedirs(SRC, exist_ok=True)
    files = []
    t0 = time.time()
    for name, mp, fmt in PLAN:
        h = int((mp * 1e6 * 3 / 4) ** 0.5)
        w = int(mp * 1e6 / h)
        if name in PORTRAIT:
            w, h = h, w
        data = encoded(photo(rng, w, h, 0.08 if fmt == "JPEG" else 0.01), fmt)
        file = f"{name}.{'jpg' if fmt == 'JPEG' else 'png'}"
        with open(os.path.join(SRC, file), "wb") as f:
            f.write(data)
        files.append({"file": file, "format": fmt, "width": w, "height": h, "megapixels": round(w * h / 1e6, 2),
                      "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
        print(f"corpus: {file} {w}x{h} {len(data) / 1e6:.1f} MB", file=sys.stderr)
    manifest = {"version": CORPUS_VERSION, "kind": "generated", "seed": SEED, "files": files}
    with open(manifest_path, "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"corpus: {len(files)} files, {sum(x['bytes'] for x in files) / 1e6:.1f} MB in {time.time() - t0:.0f} s",
          file=sys.stderr)
    return manifest


def make_real_corpus(manifest_path):
    """The 16 pictures of REAL_PLAN: JPEG as the package has it when native, else quality 90; PNG level 6."""
    root, versions = real_photos()
    os.makedirs(SRC, exist_ok=True)
    files = []
    t0 = time.time()
    for name, mp, fmt, how in REAL_PLAN:
        file = f"{name}.{'jpg' if fmt == 'JPEG' else 'png'}"
        if how[0] == "native" and fmt == "JPEG":
            with open(os.path.join(root, how[1]), "rb") as f:
                data = f.read()
            from PIL import Image  # noqa: PLC0415
            w, h = Image.open(io.BytesIO(data)).size
        else:
            img = real_picture(root, name, mp, how)
            w, h = img.size
            data = encoded(img, fmt)
        with open(os.path.join(SRC, file), "wb") as f:
            f.write(data)
        sources = how[1] if isinstance(how[1], list) else [how[1]]
        files.append({"file": file, "format": fmt, "width": w, "height": h, "megapixels": round(w * h / 1e6, 2),
                      "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(), "made": how[0],
                      "from": [p.split("/wallpapers/")[1].split("/")[0] if "/wallpapers/" in p
                               else os.path.basename(p) for p in sources]})
        print(f"corpus: {file} {w}x{h} {len(data) / 1e6:.1f} MB ({how[0]})", file=sys.stderr)
    manifest = {"version": CORPUS_VERSION, "kind": "real", "packages": versions, "files": files}
    with open(manifest_path, "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"corpus: {len(files)} real photographs, {sum(x['bytes'] for x in files) / 1e6:.1f} MB in "
          f"{time.time() - t0:.0f} s", file=sys.stderr)
    return manifest


def jobs_for(manifest):
    """The 192 jobs: (source file, width, format), shuffled with the seed so sizes mix within each format."""
    jobs = [(x["file"], w, fmt) for x in manifest["files"] for w in WIDTHS for fmt in FORMATS]
    random.Random(SEED).shuffle(jobs)
    return jobs


def src_path(file):
    return f"/transform/src/{file}"


def ic_url(file, width, fmt):
    return f"/transform/insecure/rs:fit:{width}:0/q:{QUALITY[fmt]}/f:{fmt}/plain{src_path(file)}"


def thumbor_url(origin_port, file, width, fmt):
    return f"/unsafe/{width}x0/filters:format({fmt}):quality({QUALITY[fmt]})/127.0.0.1:{origin_port}{src_path(file)}"


# ---------------------------------------------------------------- clients

def run_requests(port, paths, clients, time_limit, keep=False, timeout=120, reuse=True):
    """GETs each path once with `clients` clients pulling from one queue, over keep-alive connections (`reuse`) or a
    new connection per request; stops taking new paths after `time_limit` s. Returns (wall seconds, {path: result})."""
    todo = collections.deque(paths)
    lock = threading.Lock()
    results = {}
    deadline = time.time() + time_limit

    def worker():
        conn = None
        while True:
            with lock:
                if not todo or time.time() > deadline:
                    break
                path = todo.popleft()
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
            t0 = time.time()
            try:
                conn.request("GET", path, headers={} if reuse else {"Connection": "close"})
                resp = conn.getresponse()
                body = resp.read()
            except (OSError, http.client.HTTPException) as error:
                results[path] = {"status": 0, "error": str(error), "seconds": time.time() - t0}
                conn.close()
                conn = None
                continue
            r = {"status": resp.status, "seconds": time.time() - t0, "bytes": len(body),
                 "cache_status": resp.getheader("Cache-Status", ""), "x_cache": resp.getheader("X-Cache", ""),
                 "type": resp.getheader("Content-Type", "")}
            if keep:
                r["body"] = body
            results[path] = r
            if not reuse or resp.getheader("Connection", "").lower() == "close":
                conn.close()
                conn = None
        if conn is not None:
            conn.close()

    t0 = time.time()
    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.time() - t0, results


def get_json(port, path):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", path)
    data = json.loads(conn.getresponse().read())
    conn.close()
    return data


def wait_http(port, path, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", path)
            conn.getresponse().read()
            conn.close()
            return
        except (OSError, http.client.HTTPException):
            time.sleep(0.2)
    raise RuntimeError(f"127.0.0.1:{port}{path} does not answer after {timeout}s")


def cold_phase(name, proc, port, jobs, url, clients, time_limit, stats=None):
    """Every job once, one format at a time. Per format: wall time, CPU of the process tree, answers."""
    out = {}
    for fmt in FORMATS:
        paths = [url(file, width, fmt) for file, width, f in jobs if f == fmt]
        stats0 = get_json(port, "/_imagecached/stats") if stats else None
        cpu0, busy0, self0 = proc.cpu_seconds(), machine_busy_seconds(), own_cpu_seconds()
        # a new connection per request: a pre-forked server (thumbor --processes 2) then spreads requests over its
        # processes by accept; with keep-alive both clients may stay on one process (one core)
        wall, results = run_requests(port, paths, clients, time_limit, keep=True, reuse=False)
        cpu = proc.cpu_seconds() - cpu0
        # what the rest of the machine used meanwhile (not the server, not these clients): another job on the
        # machine shows here
        others = (machine_busy_seconds() - busy0) - cpu - (own_cpu_seconds() - self0)
        ok = [r for r in results.values() if r["status"] == 200]
        entry = {"requests": len(paths), "answered": len(results), "ok": len(ok), "wall_s": wall, "cpu_s": cpu,
                 "tps": len(ok) / wall if wall else 0, "cpu_ms_per": cpu * 1000 / max(1, len(ok)),
                 "mean_bytes": statistics.mean(r["bytes"] for r in ok) if ok else 0,
                 "latency_p50_ms": bench.pct([r["seconds"] * 1000 for r in ok], 50),
                 "latency_max_ms": max((r["seconds"] * 1000 for r in ok), default=0),
                 "statuses": dict(collections.Counter(r["status"] for r in results.values())),
                 "cache_status": dict(collections.Counter(status_label(r["cache_status"])
                                                          for r in results.values() if r.get("cache_status"))),
                 "types": dict(collections.Counter(r["type"] for r in ok)),
                 "cores_busy": cpu / wall if wall else 0, "other_cores": others / wall if wall else 0}
        if stats:
            stats1 = get_json(port, "/_imagecached/stats")
            entry["stats_delta"] = transform_delta(stats0, stats1)
        entry["bodies"] = {p: r["body"] for p, r in results.items() if r["status"] == 200}
        out[fmt] = entry
        print(f"{name} cold {fmt:4}: {len(ok)}/{len(paths)} in {wall:5.1f} s = {entry['tps']:5.2f}/s, "
              f"CPU {entry['cpu_ms_per']:6.1f} ms per transform, {entry['mean_bytes'] / 1000:5.1f} KB mean, "
              f"statuses {entry['statuses']}, {entry['cores_busy']:.2f} cores busy, others {entry['other_cores']:.2f}",
              flush=True)
    total_ok = sum(e["ok"] for e in out.values())
    wall = sum(e["wall_s"] for e in out.values())
    cpu = sum(e["cpu_s"] for e in out.values())
    out["all"] = {"ok": total_ok, "requests": sum(e["requests"] for e in out.values()), "wall_s": wall, "cpu_s": cpu,
                  "tps": total_ok / wall if wall else 0, "cpu_ms_per": cpu * 1000 / max(1, total_ok),
                  "cores_busy": cpu / wall if wall else 0}
    return out


def machine_busy_seconds():
    """CPU seconds all CPUs spent not idle since boot (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:8]]
    return (sum(fields) - fields[3] - fields[4]) / bench.CLK_TCK


def own_cpu_seconds():
    """This process's CPU (the client threads) and its children's (wrk, vipsthumbnail)."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def thread_affinity(pid):
    """{"thread name cpus=LIST": count} over the process's threads (/proc/<pid>/task/*/status Cpus_allowed_list):
    shows whether the transform threads inherited an event loop's CPU pin."""
    out = collections.Counter()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                cpus = next(line.split()[1] for line in f if line.startswith("Cpus_allowed_list"))
        except (OSError, StopIteration):
            continue
        out[f"{comm} cpus={cpus}"] += 1
    return dict(out)


def prime_imagecached(port, manifest):
    files = [x["file"] for x in manifest["files"]]
    # A full-size variant (no job; no resize): the source is then in the cache, and none of its decoded levels is in the
    # pixel cache (a level is made only for a result at least 4 times smaller), so the cold runs decode every source.
    _, primed = run_requests(port, [f"/transform/insecure/rs:fit:8192:0/f:jpeg/plain{src_path(f)}" for f in files], 2, 300)
    return dict(collections.Counter(r["status"] for r in primed.values()))


def transform_delta(a, b):
    """What the daemon's stats say happened between two snapshots (transforms by result, bytes, seconds)."""
    ta, tb = a.get("transforms") or {}, b.get("transforms") or {}
    out = {}
    for key in ("bytesIn", "bytesOut"):
        if isinstance(tb.get(key), (int, float)):
            out[key] = tb[key] - (ta.get(key) or 0)
    results = {}
    for fmt, by in (tb.get("results") or {}).items():
        for result, n in (by or {}).items():
            before = ((ta.get("results") or {}).get(fmt) or {}).get(result, 0)
            if isinstance(n, (int, float)) and n - before:
                results[f"{fmt}/{result}"] = n - before
    out["results"] = results
    sec_a, sec_b = ta.get("seconds") or {}, tb.get("seconds") or {}
    if isinstance(sec_b, dict) and isinstance(sec_b.get("sum"), (int, float)):
        out["count"] = sec_b.get("count", 0) - (sec_a.get("count") or 0)
        out["worker_seconds"] = round(sec_b["sum"] - (sec_a.get("sum") or 0), 3)
    return out


def status_label(value):
    """A Cache-Status value without the cache's name and the ttl: "fwd=uri-miss; stored; detail=transformed", "hit"."""
    return "; ".join(p.strip() for p in value.split(";")[1:] if not p.strip().startswith("ttl="))


def first_pass_check(port, paths, header):
    """GETs each path once on one connection, returns the counts of `header`'s values (a check, not timed)."""
    values = bench.cache_status_sample(port, paths, header)
    return dict(collections.Counter(status_label(v) if header == "Cache-Status" else v for v in values))


def warm_wrk(proc, port, paths, duration, label):
    cpu0, busy0, self0, t0 = proc.cpu_seconds(), machine_busy_seconds(), own_cpu_seconds(), time.time()
    r = bench.wrk(port, paths, duration, 64, label)
    cpu = proc.cpu_seconds() - cpu0
    r["cpu_us_per_req"] = cpu * 1e6 / max(1, r["requests"])
    r["other_cores"] = ((machine_busy_seconds() - busy0) - cpu - (own_cpu_seconds() - self0)) / (time.time() - t0)
    r["p50_ms"], r["p99_ms"] = r["p50_us"] / 1000, r["p99_us"] / 1000
    return r


# ---------------------------------------------------------------- the scenarios

def imagecached_argv(binary, port, origin_port, cache_dir, *extra):
    return bench.unprivileged() + [binary, "--listen", f"127.0.0.1:{port}", "--origin", f"http://127.0.0.1:{origin_port}",
                                   "--cache-dir", cache_dir, "--log-level", "warning", *extra]


def start_origin(port):
    """bench/origin.py as it is, plus the AVIF media type (the daemon checks that a body is what its type says)."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import origin; origin.TYPES['.avif'] = 'image/avif'; "
            "sys.argv = ['origin.py', '--port', sys.argv[2]]; origin.main()")
    return bench.Proc("origin", [sys.executable, "-c", code, BENCH, str(port)], port, f"{WORK}/origin.log")


def write_mirror(bodies):
    """The cold run's variant bodies as plain files on the origin, the same bytes and media type.
    Returns {variant path: (origin path, bytes)}."""
    shutil.rmtree(MIRROR, ignore_errors=True)
    os.makedirs(MIRROR)
    out = {}
    for i, (path, body) in enumerate(sorted(bodies.items())):
        ext = next(EXT[fmt] for fmt in FORMATS if f"/f:{fmt}/" in path)
        name = f"v{i:03d}.{ext}"
        with open(os.path.join(MIRROR, name), "wb") as f:
            f.write(body)
        out[path] = (f"/_o/v=plain/transform/mirror/{name}", len(body))
    return out


def thumbor_config(origin_port):
    root = f"{WORK}/thumbor"
    conf = f"{root}/thumbor.conf"
    with open(conf, "w") as f:
        f.write(f"""# written by bench/transform.py
LOADER = 'thumbor.loaders.http_loader'
STORAGE = 'thumbor.storages.file_storage'
FILE_STORAGE_ROOT_PATH = '{root}/storage'
RESULT_STORAGE = 'thumbor.result_storages.file_storage'
RESULT_STORAGE_FILE_STORAGE_ROOT_PATH = '{root}/result'
RESULT_STORAGE_STORES_UNSAFE = True
RESULT_STORAGE_EXPIRATION_SECONDS = 0
ALLOW_UNSAFE_URL = True
ENGINE = 'thumbor.engines.pil'
QUALITY = 80
PROGRESSIVE_JPEG = False
AVIF_SPEED = 7
AUTO_WEBP = False
AUTO_AVIF = False
RESPECT_ORIENTATION = False
HTTP_LOADER_MAX_CLIENTS = 10
MAX_AGE = 3600
""")
    return conf


def result_files(root):
    """{path: (size, mtime_ns)} of thumbor's result storage."""
    out = {}
    for d, _, names in os.walk(root):
        for name in names:
            full = os.path.join(d, name)
            try:
                st = os.stat(full)
                out[full] = (st.st_size, st.st_mtime_ns)
            except OSError:
                pass
    return out


def vips_floor(manifest, jobs):
    """vipsthumbnail's user+sys per job (one thread, as a daemon worker), and its start-up cost."""
    outdir = f"{WORK}/vips"
    shutil.rmtree(outdir, ignore_errors=True)
    os.makedirs(outdir)
    env = dict(os.environ, VIPS_CONCURRENCY="1")

    def run(argv):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(argv, check=True, timeout=120, env=env)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)

    # the process start and libvips init: a 64x48 JPEG to 32 px, 20 times
    from PIL import Image  # noqa: PLC0415
    tiny = f"{outdir}/tiny.jpg"
    Image.new("RGB", (64, 48), (90, 120, 150)).save(tiny, "JPEG", quality=80)
    startup = statistics.median(run(["vipsthumbnail", tiny, "-s", "32x", "-o", f"{outdir}/tiny-out.jpg[Q=80]"])
                                for _ in range(20))
    # one process per (format, width) with that group's sources, so the start-up is paid once per 16 images
    result = {"startup_ms": startup * 1000, "processes": 0}
    cpu_all = n_all = 0
    for fmt in FORMATS:
        cpu_fmt, sizes = 0.0, []
        for width in WIDTHS:
            files = [file for file, w, f in jobs if f == fmt and w == width]
            if not files:
                continue
            pattern = f"{outdir}/%s-{width}.{VIPS_SAVE[fmt]}"
            cpu_fmt += run(["vipsthumbnail", *[os.path.join(SRC, file) for file in files], "-s", f"{width}x", "-o", pattern])
            result["processes"] += 1
            sizes += [os.path.getsize(pattern.split("[", 1)[0].replace("%s", os.path.splitext(file)[0])) for file in files]
        groups = len([w for w in WIDTHS if any(f == fmt and jw == w for _, jw, f in jobs)])
        result[fmt] = {"gross_ms": cpu_fmt * 1000 / len(sizes), "net_ms": (cpu_fmt - groups * startup) * 1000 / len(sizes),
                       "mean_bytes": statistics.mean(sizes), "n": len(sizes)}
        cpu_all += cpu_fmt - groups * startup
        n_all += len(sizes)
    result["all"] = {"net_ms": cpu_all * 1000 / n_all,
                     "gross_ms": (cpu_all + result["processes"] * startup) * 1000 / n_all, "n": n_all}
    print(f"vipsthumbnail: start-up {startup * 1000:.1f} ms; per image " + ", ".join(
        f"{fmt} {result[fmt]['gross_ms']:.1f} ms ({result[fmt]['net_ms']:.1f} net)" for fmt in FORMATS), flush=True)
    return result


class RSSSampler(threading.Thread):
    """VmRSS of one process every `interval` s (from /proc/<pid>/status) until stopped."""

    def __init__(self, pid, interval=0.05):
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.samples = []
        self.halt = threading.Event()

    def rss(self):
        try:
            with open(f"/proc/{self.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def run(self):
        while not self.halt.is_set():
            self.samples.append((time.time(), self.rss()))
            self.halt.wait(self.interval)

    def stop(self):
        self.halt.set()
        self.join(5)


def flood(args, manifest, origin_port, port):
    """e. 40 clients, each its own 12 MP source (distinct URLs through the origin's /_o/v=N/), new variants for
    args.flood_seconds, against a daemon admitting 2 workers + 4 queued; RSS every 50 ms."""
    large = [x for x in manifest["files"] if x["megapixels"] >= 11]
    workers, queue, memory = 2, 4, 64 * MIB
    cache_dir = f"{WORK}/flood-cache"
    shutil.rmtree(cache_dir, ignore_errors=True)
    bench.make_dirs(cache_dir)
    proc = bench.Proc("imagecached-flood", imagecached_argv(
        args.binary, port, origin_port, cache_dir, "--memory-limit", "64MiB", "--transform-workers", str(workers),
        "--transform-queue", str(queue)), port, f"{WORK}/imagecached-flood.log")
    try:
        wait_http(port, "/_imagecached/stats")
        time.sleep(1)
        sampler = RSSSampler(proc.popen.pid)
        idle = sampler.rss()
        sampler.start()
        clients = 40
        counts = collections.Counter()
        first_wave = collections.Counter()
        lock = threading.Lock()
        barrier = threading.Barrier(clients)
        deadline = time.time() + args.flood_seconds + 5

        def client(i):
            source = large[i % len(large)]
            base = f"/_o/v=flood{i}/transform/src/{source['file']}"
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            barrier.wait(30)
            stop = time.time() + args.flood_seconds
            n = 0
            while time.time() < stop and time.time() < deadline:
                width = 200 + n * 7 + i % 7          # a new variant every time
                fmt = FORMATS[(i + n) % 3]
                path = f"/transform/insecure/rs:fit:{width}:0/f:{fmt}/plain{base}"
                try:
                    conn.request("GET", path)
                    resp = conn.getresponse()
                    resp.read()
                    status = resp.status
                except (OSError, http.client.HTTPException):
                    status = 0
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                with lock:
                    counts[status] += 1
                    if n == 0:
                        first_wave[status] += 1
                n += 1
                if status != 200:
                    time.sleep(0.05)   # a refused client waits a moment before its next new variant
            conn.close()

        stats0 = get_json(port, "/_imagecached/stats")
        threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
        t0 = time.time()
        for t in threads:
            t.start()
        for t in threads:
            t.join(args.flood_seconds + 90)
        wall = time.time() - t0
        time.sleep(1)
        sampler.stop()
        stats1 = get_json(port, "/_imagecached/stats")
        peak = max(v for _, v in sampler.samples)
        trace = {}
        for t, v in sampler.samples:
            second = max(0, int(t - t0))
            trace[second] = max(trace.get(second, 0), v)
        after = sampler.samples[-1][1]
        biggest = max(x["bytes"] for x in large)
        decode = max(x["width"] * x["height"] * 3 for x in large)   # one full 8-bit RGB decode
        # The documented bound (docs/transforms.md, Memory): each admitted job's source up to twice while it arrives
        # (the fetch's copy kept to store it, the job's own), the bodies waiting for the disk tier within
        # in-flight-limit (64 MiB by default), one full decode per worker, the memory tier, the decoded levels of PNG
        # and JPEG sources kept for their next variants (transform-pixel-cache, 128 MiB by default).
        inflight = 64 * MIB
        pixel_cache = 128 * MIB
        bound = idle + (workers + queue) * 2 * biggest + inflight + workers * decode + memory + pixel_cache
        return {"clients": clients, "seconds": wall, "workers": workers, "queue": queue, "memory_limit": memory,
                "sources": [f"{x['file']} {x['width']}x{x['height']} {x['bytes']} B" for x in large],
                "counts": dict(counts), "first_wave": dict(first_wave), "idle_rss": idle, "peak_rss": peak,
                "after_rss": after, "samples": len(sampler.samples),
                "rss_max_by_second_mib": [round(trace[k] / MIB) for k in sorted(trace)], "largest_source": biggest, "decode": decode,
                "bound": bound, "stats_delta": transform_delta(stats0, stats1),
                "flags": f"--memory-limit 64MiB --transform-workers {workers} --transform-queue {queue}"}
    finally:
        proc.stop()


# ---------------------------------------------------------------- report

def fmt_bytes(n):
    return f"{n / MIB:.1f} MiB"


def report(res):
    ic, th, vp, warm, fl = res["ic_cold"], res.get("thumbor_cold"), res["vips"], res["warm"], res["flood"]
    rows = []
    bars = []

    def bar(name, value, target, met, note=""):
        bars.append((name, value, target, "met" if met else "NOT met", note))

    rows.append("| measure | " + " | ".join(["imagecached", "thumbor", "vipsthumbnail (floor)", "ratio"]) + " |")
    rows.append("|---|---|---|---|---|")
    icu = res["ic_cold_unpinned"]
    nan = float("nan")
    for label, cold in (("", ic), (", imagecached with --server-cpu-affinity off", icu)):
        for fmt in FORMATS + ["all"]:
            t = th[fmt]["tps"] if th else nan
            tc = th[fmt]["cores_busy"] if th else nan
            ratio = cold[fmt]["tps"] / t if th else nan
            rows.append(f"| cold transforms/s, {fmt}{label} | {cold[fmt]['tps']:.2f} ({cold[fmt]['cores_busy']:.2f} cores busy) | "
                        f"{t:.2f} ({tc:.2f} cores) | | {ratio:.2f}x thumbor |")
    for fmt in FORMATS + ["all"]:
        t = th[fmt]["cpu_ms_per"] if th else nan
        floor = vp[fmt]["net_ms"]
        rows.append(f"| CPU ms per transform, {fmt} | {ic[fmt]['cpu_ms_per']:.1f} (unpinned {icu[fmt]['cpu_ms_per']:.1f}) | "
                    f"{t:.1f} | {floor:.1f} (gross {vp[fmt]['gross_ms']:.1f}) | {ic[fmt]['cpu_ms_per'] / floor:.2f}x vips net, "
                    f"{ic[fmt]['cpu_ms_per'] / vp[fmt]['gross_ms']:.2f}x gross |")
    for fmt in FORMATS:
        t = th[fmt]["mean_bytes"] / 1000 if th else float("nan")
        rows.append(f"| mean output KB, {fmt} | {ic[fmt]['mean_bytes'] / 1000:.1f} | {t:.1f} | "
                    f"{vp[fmt]['mean_bytes'] / 1000:.1f} | |")
    wv, wp, v1, p1 = warm["variants"], warm["plain"], warm["variant_one"], warm["plain_one"]
    tw = res.get("thumbor_warm") or {}
    pair = res["warm_paired"]
    rows.append(f"| warm req/s, all variant URLs (imagecached: / the same bytes as plain files), medians | {wv['rps']:.0f} / "
                f"{wp['rps']:.0f} | {tw.get('rps', nan):.0f} | | {pair['variants/plain']:.3f} variants/plain, paired by run "
                f"({wv['rps'] / wp['rps']:.3f} of the medians) |")
    rows.append(f"| warm req/s, one variant URL of the median size / its plain copy | {v1['rps']:.0f} / {p1['rps']:.0f} | "
                f"| | {pair['variant_one/plain_one']:.3f} paired ({v1['rps'] / p1['rps']:.3f} of the medians) |")
    rows.append(f"| warm p50 / p99 ms, all variant URLs | {wv['p50_ms']:.2f} / {wv['p99_ms']:.2f} (plain {wp['p50_ms']:.2f} / "
                f"{wp['p99_ms']:.2f}) | {tw.get('p50_ms', nan):.2f} / {tw.get('p99_ms', nan):.2f} | | |")
    rows.append(f"| warm CPU us per request, all variant URLs | {wv['cpu_us_per_req']:.1f} (plain {wp['cpu_us_per_req']:.1f}) | "
                f"{tw.get('cpu_us_per_req', nan):.0f} | | |")
    rows.append(f"| warm wrk errors (variants / plain / one / one plain) | {wv['errors']:.0f} / {wp['errors']:.0f} / "
                f"{v1['errors']:.0f} / {p1['errors']:.0f} | {tw.get('errors', nan):.0f} | | |")
    def others(cold):
        return statistics.mean(cold[f]["other_cores"] for f in FORMATS) if cold else nan
    rows.append(f"| the rest of the machine's CPU, cold runs (cores; another job shows here) | {others(ic):.2f} (unpinned "
                f"{others(icu):.2f}) | {others(th):.2f} | | |")
    rows.append(f"| the rest of the machine's CPU, warm runs (cores) | {wv['other_cores']:.2f} / {wp['other_cores']:.2f} | "
                f"{tw.get('other_cores', nan):.2f} | | |")
    rows.append(f"| flood: peak RSS / bound | {fmt_bytes(fl['peak_rss'])} / {fmt_bytes(fl['bound'])} | | | "
                f"{fl['peak_rss'] / fl['bound']:.2f} of the bound |")
    rows.append(f"| flood: answers (all / first wave) | {fl['counts']} / {fl['first_wave']} | | | |")

    if th:
        r = ic["all"]["tps"] / th["all"]["tps"]
        bar("cold transforms/s >= 1.5x thumbor's", f"{r:.2f}x ({ic['all']['tps']:.2f} vs {th['all']['tps']:.2f}/s)",
            ">= 1.5x", r >= 1.5, "per format: " + ", ".join(f"{f} {ic[f]['tps'] / th[f]['tps']:.2f}x" for f in FORMATS)
            + f"; with --server-cpu-affinity off {icu['all']['tps'] / th['all']['tps']:.2f}x (" + ", ".join(
                f"{f} {icu[f]['tps'] / th[f]['tps']:.2f}x" for f in FORMATS) + ")")
    else:
        bars.append(("cold transforms/s >= 1.5x thumbor's", "no thumbor", ">= 1.5x", "not measured", res["thumbor_note"]))
    r = ic["all"]["cpu_ms_per"] / vp["all"]["net_ms"]
    bar("CPU per image <= 1.3x vipsthumbnail's", f"{r:.2f}x ({ic['all']['cpu_ms_per']:.1f} vs {vp['all']['net_ms']:.1f} ms net; "
        f"{ic['all']['cpu_ms_per'] / vp['all']['gross_ms']:.2f}x of {vp['all']['gross_ms']:.1f} ms gross)", "<= 1.3x", r <= 1.3,
        "per format (net): " + ", ".join(f"{f} {ic[f]['cpu_ms_per'] / vp[f]['net_ms']:.2f}x" for f in FORMATS))
    r = pair["variants/plain"]
    bar("warm variants >= 0.9x plain cached files' req/s", f"{r:.3f} (median of the runs' ratios; medians {wv['rps']:.0f} vs "
        f"{wp['rps']:.0f}: {wv['rps'] / wp['rps']:.3f})", ">= 0.9", r >= 0.9 and not (wv["errors"] or wp["errors"]),
        f"each run: {pair['per_run_variants/plain']}; CPU per request variants/plain {pair['cpu variants/plain']:.2f}x; "
        f"one URL each (the median-size variant and its plain copy): {pair['variant_one/plain_one']:.3f}")
    bar("flood: peak RSS under the bound", f"{fmt_bytes(fl['peak_rss'])} of {fmt_bytes(fl['bound'])}", "<= bound",
        fl["peak_rss"] <= fl["bound"], f"{fl['counts'].get(503, 0)} answers 503")
    table = "\n".join(rows)
    bar_rows = ["| bar | value | target | |", "|---|---|---|---|"] + [f"| {b[0]} | {b[1]} | {b[2]} | {b[3]} |" for b in bars]
    notes = [f"- {b[0]}: {b[4]}" for b in bars if b[4]]
    return table, "\n".join(bar_rows), "\n".join(notes)


def machine_notes():
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    vips = subprocess.run(["vips", "--version"], capture_output=True, text=True).stdout.strip() if shutil.which("vips") else "?"
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return (f"{platform.node()}: {os.cpu_count()} CPUs ({cpu}), {mem / 2**30:.0f} GiB, {platform.platform()}, "
            f"Python {platform.python_version()}, {vips}")


# ---------------------------------------------------------------- main

def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default=os.path.join(REPO, ".build/release/imagecached"))
    parser.add_argument("--duration", type=int, default=10, help="seconds of each wrk run")
    parser.add_argument("--runs", type=int, default=5, help="wrk runs per warm target (median)")
    parser.add_argument("--clients", type=int, default=2, help="concurrent clients in the cold runs")
    parser.add_argument("--flood-seconds", type=int, default=15)
    parser.add_argument("--base-port", type=int, default=18300)
    parser.add_argument("--no-thumbor", action="store_true")
    parser.add_argument("--corpus", choices=["real", "generated"], default="real",
                        help="real: photographs from Debian's wallpaper packages (the default); generated: the "
                             "photo-like pictures of earlier runs")
    parser.add_argument("--note", default="", help="what the binary is (e.g. the commit it was built from), for the results")
    parser.add_argument("--quick", action="store_true",
                        help="a look, not a result: the 1-2 MP sources only, one wrk run of 3 s, a 5 s flood")
    parser.add_argument("--out", default=os.path.join(bench.RESULTS, f"{datetime.date.today().isoformat()}-transforms.md"))
    args = parser.parse_args()
    if not os.path.exists(args.binary):
        sys.exit(f"{args.binary} is missing: swift build -c release --product imagecached (or --binary PATH)")
    thumbor_exe, thumbor_note = ensure_tools(not args.no_thumbor)
    manifest = make_corpus(args.corpus)
    if args.quick:
        manifest = dict(manifest, files=[x for x in manifest["files"] if x["megapixels"] < 3 or x["megapixels"] >= 11])
        args.duration, args.runs, args.flood_seconds = 3, 1, 5
    jobs = jobs_for(manifest)
    if args.quick:
        jobs = [j for j in jobs if j[0][1:3] in ("01", "02")]
    ports = {"origin": args.base_port, "ic": args.base_port + 1, "thumbor": args.base_port + 2, "flood": args.base_port + 3}
    shutil.rmtree(WORK, ignore_errors=True)
    bench.make_dirs(bench.WORK, WORK, f"{WORK}/ic-cache", f"{WORK}/thumbor", f"{WORK}/thumbor/storage",
                    f"{WORK}/thumbor/result")
    shutil.rmtree(MIRROR, ignore_errors=True)
    res = {"machine": machine_notes(), "binary": args.binary, "note": args.note, "thumbor_note": thumbor_note,
           "corpus": manifest["files"], "corpus_note": (f"real photographs from {', '.join(manifest['packages'].values())}"
                                                         if manifest.get("kind") == "real" else f"generated, seed {SEED}"),
           "jobs": len(jobs), "started": datetime.datetime.now().isoformat(timespec="seconds")}
    ic_flags = ["--memory-limit", "1GiB"]
    res["ic_flags"] = " ".join(ic_flags)
    procs = {}
    try:
        procs["origin"] = start_origin(ports["origin"])
        procs["ic"] = bench.Proc("imagecached", imagecached_argv(args.binary, ports["ic"], ports["origin"],
                                                                  f"{WORK}/ic-cache", *ic_flags),
                                 ports["ic"], f"{WORK}/imagecached.log")
        wait_http(ports["ic"], "/_imagecached/stats")
        res["ic_stats_start"] = get_json(ports["ic"], "/_imagecached/stats").get("transforms")

        # a. cold: prime the sources (a full-size variant that is no job), then the jobs, a format at a time
        files = [x["file"] for x in manifest["files"]]
        res["ic_prime"] = prime_imagecached(ports["ic"], manifest)
        origin0 = bench.origin_stats(ports["origin"])
        res["ic_cold"] = cold_phase("imagecached", procs["ic"], ports["ic"], jobs, ic_url, args.clients, 600, stats=True)
        res["ic_threads"] = thread_affinity(procs["ic"].popen.pid)
        # the decoded levels the cold runs kept (and whether the cache had to evict: then levels were made again)
        res["ic_pixel_cache"] = get_json(ports["ic"], "/_imagecached/stats").get("transforms", {}).get("pixelCache")
        origin1 = bench.origin_stats(ports["origin"])
        res["ic_cold_origin_requests"] = bench.origin_total(origin1) - bench.origin_total(origin0)
        bodies = {}
        for fmt in FORMATS:
            bodies.update(res["ic_cold"][fmt].pop("bodies"))

        # b. warm: the same URLs; the anchor is the same bytes as plain files through the reverse proxy
        variant_paths = [ic_url(f, w, fmt) for f, w, fmt in jobs]
        mirror = write_mirror(bodies)
        procs["origin"].stop()
        procs["origin"] = start_origin(ports["origin"])          # reloads the corpus with the mirror
        plain_paths = [mirror[p][0] for p in variant_paths]
        # one URL of each: the variant of the median size and its plain copy
        one_variant = sorted(variant_paths, key=lambda p: (mirror[p][1], p))[len(variant_paths) // 2]
        one_plain, median_size = mirror[one_variant]
        for _ in range(2):
            bad = bench.fetch_all(ports["ic"], plain_paths)
        res["warm_check"] = {"variants": first_pass_check(ports["ic"], variant_paths, "Cache-Status"),
                             "variants_x_cache": first_pass_check(ports["ic"], variant_paths, "X-Cache"),
                             "plain": first_pass_check(ports["ic"], plain_paths, "Cache-Status"),
                             "plain_fetch_errors": bad, "plain_one_bytes": median_size,
                             "variant_bytes_mean": statistics.mean(n for _, n in mirror.values()),
                             "one_variant": one_variant, "one_plain": one_plain}
        stats0 = get_json(ports["ic"], "/_imagecached/stats")
        origin0 = bench.origin_stats(ports["origin"])
        order = ["variants", "plain", "variant_one", "plain_one"]
        runs = {name: [] for name in order}
        targets = {"variants": variant_paths, "plain": plain_paths, "variant_one": [one_variant], "plain_one": [one_plain]}
        for run in range(args.runs):
            for name in (order if run % 2 == 0 else list(reversed(order))):
                paths = targets[name]
                r = warm_wrk(procs["ic"], ports["ic"], paths, args.duration, f"tx-{name}")
                runs[name].append(r)
                print(f"imagecached warm run {run + 1} {name:11}: {r['rps']:8.0f} req/s  p50 {r['p50_ms']:6.2f}  "
                      f"p99 {r['p99_ms']:6.2f} ms  CPU {r['cpu_us_per_req']:5.1f} us/req  errors {r['errors']}  "
                      f"others {r['other_cores']:.2f} cores", flush=True)
        res["warm_runs"] = runs
        res["warm"] = {name: {k: statistics.median(r[k] for r in rs) for k in
                              ("rps", "p50_ms", "p99_ms", "cpu_us_per_req", "mbps", "errors", "idle_pct", "wrk_cpu_us_per_req",
                               "other_cores")}
                       for name, rs in runs.items()}
        # each run's variants against the plain files measured next to them: a paired ratio cancels the drift of a
        # shared machine between runs (seen here: +-15% from one 10 s run to the next for the same URLs)
        res["warm_paired"] = {
            "variants/plain": statistics.median(v["rps"] / p["rps"] for v, p in zip(runs["variants"], runs["plain"])),
            "variant_one/plain_one": statistics.median(v["rps"] / p["rps"] for v, p in zip(runs["variant_one"], runs["plain_one"])),
            "cpu variants/plain": statistics.median(v["cpu_us_per_req"] / p["cpu_us_per_req"]
                                                    for v, p in zip(runs["variants"], runs["plain"])),
            "per_run_variants/plain": [round(v["rps"] / p["rps"], 3) for v, p in zip(runs["variants"], runs["plain"])]}
        res["warm_transforms_during"] = transform_delta(stats0, get_json(ports["ic"], "/_imagecached/stats"))
        res["warm_origin_requests"] = bench.origin_total(bench.origin_stats(ports["origin"])) - bench.origin_total(origin0)
        res["ic_rss_after"] = procs["ic"].memory()[0]
        procs["ic"].stop()
        del procs["ic"]

        # a'. the same cold run with the event loops unpinned (--server-cpu-affinity off): threads made by a pinned
        # loop inherit its CPU, and the transform threads may be among them
        bench.make_dirs(f"{WORK}/ic-unpinned-cache")
        procs["ic"] = bench.Proc("imagecached-unpinned", imagecached_argv(
            args.binary, ports["ic"], ports["origin"], f"{WORK}/ic-unpinned-cache", *ic_flags, "--server-cpu-affinity", "off"),
            ports["ic"], f"{WORK}/imagecached-unpinned.log")
        wait_http(ports["ic"], "/_imagecached/stats")
        res["ic_unpinned_prime"] = prime_imagecached(ports["ic"], manifest)
        res["ic_cold_unpinned"] = cold_phase("imagecached --server-cpu-affinity off", procs["ic"], ports["ic"], jobs, ic_url,
                                             args.clients, 600, stats=True)
        for fmt in FORMATS:
            res["ic_cold_unpinned"][fmt].pop("bodies")
        res["ic_unpinned_threads"] = thread_affinity(procs["ic"].popen.pid)
        procs["ic"].stop()
        del procs["ic"]

        # c. thumbor, the same jobs
        if thumbor_exe:
            conf = thumbor_config(ports["origin"])
            bench.make_dirs(f"{WORK}/thumbor")
            procs["thumbor"] = bench.Proc("thumbor", bench.unprivileged() + [
                thumbor_exe, "-p", str(ports["thumbor"]), "-i", "127.0.0.1", "-c", conf, "--processes", "2", "-l", "error"],
                ports["thumbor"], f"{WORK}/thumbor.log")
            wait_http(ports["thumbor"], "/healthcheck")
            time.sleep(1)
            _, primed = run_requests(ports["thumbor"], [
                f"/unsafe/64x0/filters:format(jpeg)/127.0.0.1:{ports['origin']}{src_path(f)}" for f in files], 2, 600)
            res["thumbor_prime"] = dict(collections.Counter(r["status"] for r in primed.values()))
            res["thumbor_processes"] = len(procs["thumbor"].pids())
            origin0 = bench.origin_stats(ports["origin"])
            res["thumbor_cold"] = cold_phase("thumbor", procs["thumbor"], ports["thumbor"], jobs,
                                             lambda f, w, fmt: thumbor_url(ports["origin"], f, w, fmt), args.clients, 900)
            res["thumbor_cold_origin_requests"] = bench.origin_total(bench.origin_stats(ports["origin"])) - bench.origin_total(origin0)
            for fmt in FORMATS:
                res["thumbor_cold"][fmt].pop("bodies")
            tpaths = [thumbor_url(ports["origin"], f, w, fmt) for f, w, fmt in jobs]
            before = result_files(f"{WORK}/thumbor/result")
            wr = [warm_wrk(procs["thumbor"], ports["thumbor"], tpaths, args.duration, "tx-thumbor") for _ in range(1)]
            after = result_files(f"{WORK}/thumbor/result")
            res["thumbor_warm"] = wr[0]
            res["thumbor_result_storage"] = {
                "files_before": len(before), "files_after": len(after),
                "rewritten_during_warm": sum(1 for k, v in after.items() if before.get(k) != v)}
            print(f"thumbor warm: {wr[0]['rps']:.0f} req/s p50 {wr[0]['p50_ms']:.2f} p99 {wr[0]['p99_ms']:.2f} ms, "
                  f"CPU {wr[0]['cpu_us_per_req']:.0f} us/req; result storage {res['thumbor_result_storage']}", flush=True)
            procs["thumbor"].stop()
            del procs["thumbor"]

        # d. the floor
        res["vips"] = vips_floor(manifest, jobs)

        # e. memory under a flood of large sources
        res["flood"] = flood(args, manifest, ports["origin"], ports["flood"])
        fl = res["flood"]
        print(f"flood: {fl['counts']} (first wave {fl['first_wave']}); RSS idle {fmt_bytes(fl['idle_rss'])}, peak "
              f"{fmt_bytes(fl['peak_rss'])}, bound {fmt_bytes(fl['bound'])}", flush=True)
    finally:
        for proc in procs.values():
            proc.stop()

    table, bars, notes = report(res)
    print("\n" + table + "\n\n" + bars + "\n" + notes)
    write_results(args, res, table, bars, notes)


def write_results(args, res, table, bars, notes):
    fl = res["flood"]
    th = res.get("thumbor_cold")
    text = f"""# Image transforms: imagecached, thumbor, vipsthumbnail ({res['started'][:10]})

`python3 bench/transform.py` (bench/README.md, "Transforms"), one run, one machine, started {res['started']}.

## Results

{table}

## Bars

{bars}

{notes}

## Settings

- Machine: {res['machine']}. Every server, wrk and the Python clients share the 2 cores.
- imagecached: `{res['binary']}` {res['note']}, `{' '.join(imagecached_argv(res['binary'], 'PORT', 'ORIGIN', 'DIR', *res['ic_flags'].split())[len(bench.unprivileged()):])}`
  (transform-workers default: one per CPU, 2; transform-queue 64; JPEG Q 80 optimize_coding, WebP Q 79 effort 4,
  AVIF Q 63 effort 2); as `nobody`. URLs `/transform/insecure/rs:fit:W:0/q:Q/f:FORMAT/plain/transform/src/FILE`.
- thumbor: {res['thumbor_note']}; `thumbor -p PORT -i 127.0.0.1 -c thumbor.conf --processes 2 -l error` as `nobody`,
  Pillow engine (LANCZOS, JPEG draft mode), `STORAGE = file_storage` (sources), `RESULT_STORAGE = file_storage`,
  `RESULT_STORAGE_STORES_UNSAFE = True`, `ALLOW_UNSAFE_URL = True`, `PROGRESSIVE_JPEG = False` (the daemon's JPEGs are
  baseline), `QUALITY = 80`, `AVIF_SPEED = 7` (libvips's AVIF effort 2 is aom speed 7); URLs
  `/unsafe/Wx0/filters:format(FORMAT):quality(Q)/127.0.0.1:ORIGIN/transform/src/FILE`. thumbor's quality scales
  are Pillow's (AVIF quality is libavif's), so its files are not the same size: the mean output sizes are in the table.
- vipsthumbnail: `VIPS_CONCURRENCY=1 vipsthumbnail SRC1 ... SRC16 -s Wx -o DIR/%s-W.{{{', '.join(VIPS_SAVE.values())}}}`,
  one process per format and width ({res['vips']['processes']} processes), one after another, user+sys of each from
  getrusage(RUSAGE_CHILDREN); the start-up (a 64x48 JPEG, median of 20: {res['vips']['startup_ms']:.1f} ms) is taken off
  once per process for "net"; "gross" leaves it in (spread over the 16 images of the process).
- Cold: each source primed first (imagecached {res['ic_prime']}, thumbor {res.get('thumbor_prime')}); origin requests
  during the cold runs: imagecached {res['ic_cold_origin_requests']}, thumbor {res.get('thumbor_cold_origin_requests')}.
  {res['jobs']} jobs: 16 sources x widths {WIDTHS} x {FORMATS}, {args.clients} clients, a new connection per request
  (`Connection: close`: with keep-alive both clients can stay on one of thumbor's two processes, as happened in a
  trial run, JPEG at 1.0 core), one format after another. imagecached's pixel cache after the cold runs:
  {res.get('ic_pixel_cache')}.
- Unpinned: the same cold run again on a fresh daemon with `--server-cpu-affinity off` (primed {res['ic_unpinned_prime']}).
  The daemon's threads after each cold run (name, allowed CPUs: count): default {res['ic_threads']}; unpinned
  {res['ic_unpinned_threads']}.
- Warm: wrk 2 threads, 64 connections, {args.duration} s, {args.runs} runs in turns (the order flips each run),
  `bench/lua/rotate.lua`; the bar takes the median of each run's variants/plain ratio (the two measured side by side).
  Anchor: the {res['jobs']} variant bodies written to `bench/corpus/transform/mirror/`,
  served by bench/origin.py, fetched through imagecached twice, then the same wrk over
  `/_o/v=plain/transform/mirror/vNNN.*` (mean {res['warm_check']['variant_bytes_mean'] / 1000:.1f} KB); "one plain
  file" is the median-size body ({res['warm_check']['plain_one_bytes']} B) alone.
  Check pass before wrk (one GET each): variants Cache-Status {res['warm_check']['variants']},
  X-Cache {res['warm_check']['variants_x_cache']}; plain files {res['warm_check']['plain']}. Transforms during the warm
  runs: {res['warm_transforms_during']}; origin requests: {res['warm_origin_requests']}.
- thumbor warm: result storage files before/after {res.get('thumbor_result_storage')}.
- Flood: `{fl['flags']}`, {fl['clients']} clients for {fl['seconds']:.0f} s, each its own source URL
  (`/_o/v=floodN/transform/src/...`, the 12 MP pictures {fl['sources']}), a new variant each request (width 200 + 7n,
  the format in turn), 50 ms pause after a refusal. RSS sampled every 50 ms ({fl['samples']} samples): idle
  {fmt_bytes(fl['idle_rss'])}, peak {fmt_bytes(fl['peak_rss'])}, at the end {fmt_bytes(fl['after_rss'])}.
  Bound = idle + (2 + 4) x 2 x {fmt_bytes(fl['largest_source'])} (largest source, held twice while it arrives) +
  64 MiB (in-flight-limit) + 2 x {fmt_bytes(fl['decode'])} (one full RGB decode per worker) + 64 MiB (memory tier) +
  128 MiB (transform-pixel-cache) = {fmt_bytes(fl['bound'])}. Transforms: {fl['stats_delta']}.
  RSS, the highest sample of each second from the clients' start (MiB): {fl['rss_max_by_second_mib']}.

## Raw

```json
{json.dumps({k: v for k, v in res.items() if k != 'corpus'}, indent=1, default=str)}
```

Corpus ({res.get('corpus_note')}):

| file | format | size | bytes | made | from |
|---|---|---|---|---|---|
""" + "\n".join(f"| {x['file']} | {x['format']} | {x['width']}x{x['height']} | {x['bytes']} | {x.get('made', 'generated')} | "
                f"{', '.join(x.get('from', []))} |" for x in res["corpus"]) + "\n"
    with open(args.out, "w") as f:
        f.write(text)
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
