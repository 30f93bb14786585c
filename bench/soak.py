#!/usr/bin/env python3
"""Soak: an hour of mixed traffic near capacity against the release daemon (issue 27, item 10).

    python3 bench/soak.py [--minutes 60] [--binary PATH] [--clients 8] [--warmup MINUTES]

One imagecached in reverse mode in front of this script's own origin (a second process: `--serve-origin`), both on
127.0.0.1. The traffic, for --minutes:

  - CLIENTS closed-loop workers on keep-alive connections, each request drawn from a mix: memory and disk hits on a
    hot set, misses on a stream of new URLs (which keeps the disk tier at its limit) and revisits of recent ones, Range,
    HEAD, If-None-Match, 1-3 MB photos (sent from their files), images that change every 20 s with max-age 2
    (revalidation, 304 and 200), transforms to JPEG, WebP and AVIF, /fetch?url=, uploads in reverse mode (PUT and
    POST, Content-Length and chunked, some to cached URLs: invalidation), uploads that break off, the origin's 404,
    and origin faults: a reset mid-body, a stall mid-body and before the head (past the daemon's low-speed time), 500
    and 503 pages, a Content-Length longer than the body (then close) and one shorter, and URLs that fail every other
    time;
  - coalesced storms: every 30 s, 20 clients at once on a new URL the origin answers after 400 ms (one origin fetch
    expected), or on a new rendition (one transform);
  - slow clients: one reading 1 KB/s (a 4 KiB receive buffer), one reading a photo at 32 KB/s;
  - silent clients: every 20 s two connections that send nothing, one that sends half a head, one that stays idle
    after a response: each must be closed by the daemon within its timeout (+ 10 s: header-timeout for the half
    head, idle-timeout for the others);
  - a purge of one URL every 2 s (hot images, transform sources: their renditions go too);
  - a SIGHUP every 60 s, the configuration file rewritten in turn (stale-if-error, in-flight-limit);
  - the disk tier at its limit (`--disk-limit 48MiB`; the misses write about 2 MB/s).

Every body is checked against the origin's bytes (a Range against its slice; a transform decoded with Pillow: its
format and size); a fault must end as an error status or a cut-off response, never a 200 with other bytes. Every 5 s
the daemon's resident memory, open descriptors, threads, the cache directory's size and the p99 of the hits in the
window are sampled. At the end: one verdict line per bar, bench/results/<date>-soak.md and docs/soak.png (memory,
descriptors and threads, p99, disk over time). Exit 1 when a bar fails.

Bars: zero wrong bodies; zero unexpected errors; resident memory growth after the warm-up under 5% per hour (least
squares over the samples after it); descriptors and threads flat (the last third's maximum within 10% + 8 of the first
third's, after the warm-up); the cache directory within its limit (the disk-limit plus 8 MiB of writes in flight).
Installs Pillow and matplotlib from PyPI when missing. All traffic to 127.0.0.1; every loop bounded in count and time.
"""

import argparse
import base64
import datetime
import hashlib
import http.client
import io
import json
import os
import random
import selectors
import shutil
import signal
import socket
import socketserver
import statistics
import struct
import subprocess
import sys
import threading
import time
import urllib.parse
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
sys.path.insert(0, BENCH)

WORK = "/tmp/imagecached-soak"
SEED = 27
MIB = 1024 * 1024
DISK_LIMIT = 48 * MIB
DISK_SLACK = 8 * MIB
MEMORY_LIMIT = "16MiB"
HEADER_TIMEOUT = 5
IDLE_TIMEOUT = 20
LOW_SPEED_TIME = 5
STALL_SECONDS = 9           # the origin's stalls: past LOW_SPEED_TIME, well within the clients' timeout
CLIENT_TIMEOUT = 40
MUTABLE_PERIOD = 20
LAST_MODIFIED = "Mon, 01 Jan 2024 00:00:00 GMT"
SIGNATURES = {"jpg": b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01", "png": b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR",
              "gif": b"GIF89a\x10\x00\x10\x00", "webp": b"RIFF\x00\x00\x00\x00WEBPVP8 "}
TYPES = {"jpg": "image/jpeg", "png": "image/png", "gif": "image/gif", "webp": "image/webp"}
EXTS = ["jpg", "png", "webp", "gif"]
FAULTS = ["reset", "stall", "stallhead", "500", "503", "long", "short", "flaky"]


# ---------------------------------------------------------------- the corpus (both processes compute the same bytes)

def filler_image(name, ext, size):
    """The signature of its type, then bytes from a generator seeded by the name: an image as far as the daemon's
    content check goes (it sniffs the signature), cheap to make again in the checker."""
    rng = random.Random(f"{SEED}:{name}")
    sig = SIGNATURES[ext]
    return sig + rng.randbytes(max(0, size - len(sig)))


def hot_objects():
    """240 images of 4-160 KB (log-uniform); a quarter with max-age 4 (revalidated all the time), the rest 600."""
    rng = random.Random(SEED)
    out = {}
    for i in range(240):
        ext = EXTS[i % 4]
        size = int(4000 * (40 ** rng.random()))
        out[f"/img/h{i:03}.{ext}"] = (filler_image(f"h{i}", ext, size), TYPES[ext], 4 if i % 4 == 0 else 600)
    for i in range(6):
        out[f"/img/p{i}.jpg"] = (filler_image(f"p{i}", "jpg", 1_000_000 + i * 400_000), "image/jpeg", 600)
    return out


def cold_object(n):
    ext = EXTS[n % 4]
    return filler_image(f"c{n}", ext, 20_000 + (n * 7919) % 100_000), TYPES[ext]


def mutable_object(i, version):
    return filler_image(f"m{i}v{version}", "png", 8_000 + i * 1_500)


def storm_object(k):
    return filler_image(f"s{k}", "jpg", 60_000 + (k % 7) * 9_000)


def fault_object(kind, n):
    return filler_image(f"f{kind}{n}", "jpg", 40_000 + n * 3_000)


def make_sources(folder):
    """Transform sources: 8 photo-like pictures made with Pillow (gradients, shapes, noise), JPEG, PNG and WebP."""
    from PIL import Image, ImageDraw, ImageFilter  # noqa: PLC0415
    rng = random.Random(SEED)
    plan = [(640, 480, "jpg"), (800, 600, "jpg"), (1024, 768, "jpg"), (480, 640, "jpg"), (600, 400, "png"),
            (700, 500, "png"), (800, 533, "webp"), (512, 512, "webp")]
    os.makedirs(folder, exist_ok=True)
    sizes = {}
    for i, (w, h, ext) in enumerate(plan):
        img = Image.linear_gradient("L").resize((w, h)).convert("RGB")
        draw = ImageDraw.Draw(img)
        for _ in range(30):
            x, y = rng.randrange(w), rng.randrange(h)
            r = rng.randrange(10, max(11, w // 4))
            draw.ellipse((x - r, y - r, x + r, y + r), fill=(rng.randrange(256), rng.randrange(256), rng.randrange(256)))
        img = img.filter(ImageFilter.GaussianBlur(3))
        noise = Image.effect_noise((w, h), 24).convert("RGB")
        img = Image.blend(img, noise, 0.15)
        path = os.path.join(folder, f"s{i}.{ext}")
        img.save(path, {"jpg": "JPEG", "png": "PNG", "webp": "WEBP"}[ext], quality=88)
        sizes[f"/src/s{i}.{ext}"] = (w, h)
    return sizes


# ---------------------------------------------------------------- the origin (its own process)

class Origin:
    static = {}          # path -> (body, content type, max-age)
    counts = {}          # path (with query) -> {status: n}
    lock = threading.Lock()
    flaky = {}           # path -> requests so far


def origin_count(path, key):
    with Origin.lock:
        entry = Origin.counts.setdefault(path, {})
        entry[key] = entry.get(key, 0) + 1
        return entry[key]


class OriginHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "soak-origin"
    sys_version = ""

    def log_message(self, *args):
        pass

    def head_out(self, status, headers, length=None):
        self.send_response_only(status)
        self.send_header("Date", formatdate(usegmt=True))
        for k, v in headers:
            self.send_header(k, v)
        if length is not None:
            self.send_header("Content-Length", str(length))
        self.end_headers()

    def reply(self, status, body, headers=()):
        self.head_out(status, headers, len(body))
        if self.command != "HEAD":
            self.wfile.write(body)

    def reset(self):
        """Close with a RST (SO_LINGER 0), whatever is still in the socket's buffers."""
        self.wfile.flush()
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        raise ConnectionAbortedError("reset on purpose")

    def image(self, body, ctype, max_age, etag):
        headers = [("Cache-Control", f"public, max-age={max_age}"), ("ETag", etag), ("Last-Modified", LAST_MODIFIED)]
        inm = self.headers.get("If-None-Match")
        if inm is not None and etag in inm:
            self.head_out(304, headers)
            return 304
        self.reply(200, body, headers + [("Content-Type", ctype)])
        return 200

    def do_GET(self):
        path, _, query = self.path.partition("?")
        full = self.path
        if path == "/__stats":
            with Origin.lock:
                body = json.dumps(Origin.counts).encode()
            return self.reply(200, body, [("Content-Type", "application/json"), ("Cache-Control", "no-store")])
        found = Origin.static.get(path)
        if found is not None:
            body, ctype, max_age = found
            status = self.image(body, ctype, max_age, '"%s"' % hashlib.sha256(body).hexdigest()[:16])
            origin_count(full, str(status))
            return
        parts = path.split("/")
        if path.startswith("/img/c"):                      # /img/c<n>.<ext>: misses
            n = int(parts[2][1:].split(".")[0])
            body, ctype = cold_object(n)
            origin_count("/img/c*", str(self.image(body, ctype, 3600, f'"c{n}"')))
            return
        if path.startswith("/mut/m"):                      # /mut/m<i>.png: a new version every MUTABLE_PERIOD
            i = int(parts[2][1:].split(".")[0])
            version = int(time.time() // MUTABLE_PERIOD)
            origin_count("/mut/*", str(self.image(mutable_object(i, version), "image/png", 2, f'"m{i}v{version}"')))
            return
        if path.startswith("/storm/"):                     # /storm/<k>.jpg: answered after 400 ms
            k = int(parts[2].split(".")[0])
            time.sleep(0.4)
            origin_count(full, str(self.image(storm_object(k), "image/jpeg", 3600, f'"s{k}"')))
            return
        if path.startswith("/missing/"):
            origin_count("/missing/*", "404")
            return self.reply(404, b"no such image\n", [("Content-Type", "text/plain")])
        if path.startswith("/fault/"):                     # /fault/<kind>/<n>.jpg
            return self.fault(parts[2], int(parts[3].split(".")[0]), full)
        origin_count("other", "404")
        self.reply(404, b"not found\n", [("Content-Type", "text/plain"), ("Cache-Control", "no-store")])

    do_HEAD = do_GET

    def fault(self, kind, n, full):
        body = fault_object(kind, n)
        origin_count(f"/fault/{kind}", "requests")
        headers = [("Content-Type", "image/jpeg"), ("ETag", f'"f{kind}{n}"'), ("Cache-Control", "public, max-age=1")]
        half = len(body) // 2
        if kind == "flaky":
            with Origin.lock:
                Origin.flaky[full] = Origin.flaky.get(full, 0) + 1
                attempt = Origin.flaky[full]
            kind = "reset" if attempt % 2 == 1 else "good"
        if kind == "good":
            self.reply(200, body, headers)
        elif kind == "reset":
            self.head_out(200, headers, len(body))
            self.wfile.write(body[:half])
            self.reset()
        elif kind == "stall":
            self.head_out(200, headers, len(body))
            self.wfile.write(body[:half])
            self.wfile.flush()
            time.sleep(STALL_SECONDS)
            self.close_connection = True
        elif kind == "stallhead":
            time.sleep(STALL_SECONDS)
            self.close_connection = True
        elif kind in ("500", "503"):
            self.reply(int(kind), f"origin error {kind} for {n}\n".encode(),
                       [("Content-Type", "text/plain"), ("Cache-Control", "no-store")])
        elif kind == "long":                               # declares 1000 bytes more than it sends, then closes
            self.head_out(200, headers, len(body) + 1000)
            self.wfile.write(body)
            self.wfile.flush()
            self.close_connection = True
        elif kind == "short":                              # declares 100 bytes fewer than it sends, then closes
            self.head_out(200, headers, len(body) - 100)
            self.wfile.write(body)
            self.wfile.flush()
            self.close_connection = True

    def read_body(self):
        """The request body, Content-Length or chunked; None when it broke off."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            for _ in range(100_000):
                line = self.rfile.readline(100)
                if not line:
                    return None
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline(100)
                    return bytes(out)
                chunk = self.rfile.read(size + 2)
                if len(chunk) < size + 2:
                    return None
                out += chunk[:size]
            return None
        length = int(self.headers.get("Content-Length", "0"))
        data = self.rfile.read(length)
        return data if len(data) == length else None

    def do_PUT(self):
        path = self.path.split("?", 1)[0]
        data = self.read_body()
        if data is None:
            origin_count("/up/broken", "received-short")
            self.close_connection = True
            return
        if path.startswith("/up/abort"):
            origin_count("/up/abort", "completed")        # a body the client broke off reached us whole: wrong
        if path.startswith("/img/"):                        # an upload to a cached URL: invalidates it, same bytes
            origin_count("/img/put", self.command)
            return self.reply(204, b"", [("Cache-Control", "no-store")])
        origin_count("/up/*", self.command)
        digest = hashlib.sha256(data).hexdigest()
        self.reply(201, f"{digest} {len(data)}\n".encode(), [("Content-Type", "text/plain"), ("Cache-Control", "no-store")])

    do_POST = do_PUT


class OriginServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def handle_error(self, request, client_address):
        pass        # resets on purpose, and the daemon hanging up on a stall

    def server_bind(self):
        self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)   # accepted sockets inherit it
        super().server_bind()


def serve_origin(port, corpus):
    Origin.static = hot_objects()
    for name in sorted(os.listdir(corpus)):
        ext = name.rsplit(".", 1)[1]
        with open(os.path.join(corpus, name), "rb") as f:
            Origin.static[f"/src/{name}"] = (f.read(), TYPES[ext], 3600)
    server = OriginServer(("127.0.0.1", port), OriginHandler)
    print(f"soak origin: {len(Origin.static)} static objects on 127.0.0.1:{port}", flush=True)
    server.serve_forever()


# ---------------------------------------------------------------- the checker's bookkeeping

class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.kinds = {}                 # kind -> {"ok": n, "expected": n, "wrong": n, "unexpected": n}
        self.problems = []              # the first 50 wrong or unexpected, with their details
        self.hits = []                  # (time, seconds) of memory and disk hits, drained by the sampler
        self.requests = 0
        self.xcache = {}

    def record(self, kind, outcome, detail="", latency=None, xcache=None):
        with self.lock:
            entry = self.kinds.setdefault(kind, {"ok": 0, "expected": 0, "wrong": 0, "unexpected": 0})
            entry[outcome] += 1
            self.requests += 1
            if xcache:
                self.xcache[xcache] = self.xcache.get(xcache, 0) + 1
            if outcome in ("wrong", "unexpected"):
                if len(self.problems) < 50:
                    self.problems.append((time.time(), kind, outcome, detail))
                print(f"  {outcome.upper()}: {kind}: {detail}", flush=True)
            if latency is not None and xcache == "HIT":
                self.hits.append(latency)

    def drain_hits(self):
        with self.lock:
            out, self.hits = self.hits, []
        return out

    def total(self, outcome):
        with self.lock:
            return sum(e[outcome] for e in self.kinds.values())


class Connection(http.client.HTTPConnection):
    """http.client with TCP_NODELAY: a head and a body written apart must not wait for a delayed ACK."""

    def connect(self):
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class Exchange:
    """One request on a keep-alive connection; every failure is captured, and the connection dropped after one."""

    def __init__(self, port):
        self.port = port
        self.conn = None
        self.last_used = 0.0

    def close(self):
        if self.conn is not None:
            self.conn.close()
        self.conn = None

    def request(self, method, target, headers=None, body=None, chunked=False):
        """(status, headers (lower-case names), body, error text or None, seconds)."""
        if self.conn is not None and time.time() - self.last_used > IDLE_TIMEOUT - 5:
            self.close()          # the daemon may be closing it as idle: not what is tested here
        if self.conn is None:
            self.conn = Connection("127.0.0.1", self.port, timeout=CLIENT_TIMEOUT)
        start = time.monotonic()
        status, fields, data = None, {}, b""
        try:
            self.conn.request(method, target, body=body, headers=headers or {}, encode_chunked=chunked)
            response = self.conn.getresponse()
            status = response.status
            fields = {k.lower(): v for k, v in response.getheaders()}
            data = response.read()
            if response.will_close:
                self.close()
            self.last_used = time.time()
            return status, fields, data, None, time.monotonic() - start
        except (OSError, http.client.HTTPException) as error:
            self.close()
            partial = getattr(error, "partial", b"")
            return status, fields, partial or data, f"{type(error).__name__}: {error}"[:160], time.monotonic() - start


# ---------------------------------------------------------------- the traffic

class Soak:
    def __init__(self, args, port, origin_port, sources):
        self.args, self.port, self.origin_port = args, port, origin_port
        self.sources = sources                  # "/src/s0.jpg" -> (w, h)
        self.hot = hot_objects()
        self.hot_paths = sorted(p for p in self.hot if p.startswith("/img/h"))
        self.photos = sorted(p for p in self.hot if p.startswith("/img/p"))
        self.faults = [f for f in FAULTS if f not in args.skip_faults.split(",")]
        self.tally = Tally()
        self.stop = threading.Event()
        self.cold_next = 0
        self.counter_lock = threading.Lock()
        self.storms = []                        # (kind, path, origin fetches or None, clients ok, coalesced answers)
        self.silent = {"opened": 0, "closed_in_time": 0}
        self.purges = 0
        self.hups = 0

    def next_cold(self):
        with self.counter_lock:
            self.cold_next += 1
            return self.cold_next

    # each returns (outcome, detail, xcache)

    def check_image(self, status, fields, data, error, expected, what):
        if error is not None:
            return "unexpected", f"{what}: {error} (status {status})"
        if status != 200:
            return "unexpected", f"{what}: status {status}: {data[:120]!r}"
        if data != expected:
            return "wrong", f"{what}: {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()[:12]}, expected {len(expected)}"
        return "ok", ""

    def k_hot(self, ex, rng):
        path = rng.choice(self.hot_paths)
        r = ex.request("GET", path)
        return (*self.check_image(*r[:4], self.hot[path][0], path), r)

    def k_photo(self, ex, rng):
        path = rng.choice(self.photos)
        r = ex.request("GET", path)
        return (*self.check_image(*r[:4], self.hot[path][0], path), r)

    def k_fetch(self, ex, rng):
        path = rng.choice(self.hot_paths)
        url = f"http://127.0.0.1:{self.origin_port}{path}"
        r = ex.request("GET", "/fetch?url=" + urllib.parse.quote(url, safe=""))
        return (*self.check_image(*r[:4], self.hot[path][0], "fetch " + path), r)

    def k_cold(self, ex, rng):
        if rng.random() < 0.5 or self.cold_next < 100:
            n = self.next_cold()
        else:
            n = rng.randrange(max(1, self.cold_next - 3000), self.cold_next)
        body, ctype = cold_object(n)
        path = f"/img/c{n}.{ctype.split('/')[1].replace('jpeg', 'jpg')}"
        r = ex.request("GET", path)
        return (*self.check_image(*r[:4], body, path), r)

    def k_mutable(self, ex, rng):
        i = rng.randrange(20)
        v0 = int(time.time() // MUTABLE_PERIOD)
        r = ex.request("GET", f"/mut/m{i}.png")
        v1 = int(time.time() // MUTABLE_PERIOD)
        status, fields, data, error, _ = r
        if error is not None or status != 200:
            return "unexpected", f"/mut/m{i}.png: {error} status {status}", r
        for v in range(v0 - 1, v1 + 1):       # a copy fetched just before the change may be fresh for max-age 2 (+1 s of stale-if-error)
            if data == mutable_object(i, v):
                return "ok", "", r
        return "wrong", f"/mut/m{i}.png: {len(data)} bytes match no version in {v0 - 1}..{v1}", r

    def k_range(self, ex, rng):
        path = rng.choice(self.hot_paths)
        body = self.hot[path][0]
        first = rng.randrange(len(body))
        last = min(len(body) - 1, first + rng.randrange(1, 20000))
        shape = rng.randrange(3)
        spec = f"bytes={first}-{last}" if shape == 0 else (f"bytes={first}-" if shape == 1 else f"bytes=-{last - first + 1}")
        want = body[first:last + 1] if shape == 0 else (body[first:] if shape == 1 else body[-(last - first + 1):])
        r = ex.request("GET", path, {"Range": spec})
        status, fields, data, error, _ = r
        if error is not None:
            return "unexpected", f"{path} {spec}: {error}", r
        if status == 200:
            return ("ok", "", r) if data == body else ("wrong", f"{path} {spec}: 200 with other bytes", r)
        if status != 206:
            return "unexpected", f"{path} {spec}: status {status}", r
        cr = fields.get("content-range", "")
        if data != want or not cr.startswith("bytes ") or not cr.endswith(f"/{len(body)}"):
            return "wrong", f"{path} {spec}: 206 {cr}, {len(data)} bytes, expected {len(want)}", r
        return "ok", "", r

    def k_head(self, ex, rng):
        path = rng.choice(self.hot_paths)
        r = ex.request("HEAD", path)
        status, fields, data, error, _ = r
        if error is not None or status != 200 or data or fields.get("content-length") != str(len(self.hot[path][0])):
            return "unexpected", f"HEAD {path}: {error} status {status} length {fields.get('content-length')}", r
        return "ok", "", r

    def k_conditional(self, ex, rng):
        path = rng.choice(self.hot_paths)
        body = self.hot[path][0]
        etag = '"%s"' % hashlib.sha256(body).hexdigest()[:16]
        r = ex.request("GET", path, {"If-None-Match": etag})
        status, fields, data, error, _ = r
        if error is None and status == 304 and not data:
            return "ok", "", r
        return (*self.check_image(*r[:4], body, f"{path} If-None-Match"), r)

    def k_transform(self, ex, rng):
        src = rng.choice(sorted(self.sources))
        width = rng.choice([120, 200, 320])
        fmt = rng.choice(["jpeg", "webp", "avif"])
        if rng.random() < 0.5:
            target = f"/transform/insecure/rs:fit:{width}:0/f:{fmt}/plain{src}"
        else:
            target = f"/transform/insecure/rs:fit:{width}:0/{base64.urlsafe_b64encode(src.encode()).decode().rstrip('=')}.{fmt}"
        r = ex.request("GET", target)
        return (*self.check_rendition(r, src, width, fmt, target), r)

    def check_rendition(self, r, src, width, fmt, target):
        from PIL import Image  # noqa: PLC0415
        status, fields, data, error, _ = r
        if error is not None or status != 200:
            return "unexpected", f"{target}: {error} status {status} {data[:100]!r}"
        w0, h0 = self.sources[src]
        w = min(width, w0)
        h = round(h0 * w / w0)
        try:
            img = Image.open(io.BytesIO(data))
            img.load()
        except Exception as e:  # noqa: BLE001 - anything Pillow cannot read is a wrong body
            return "wrong", f"{target}: does not decode: {e}"
        want = {"jpeg": "JPEG", "webp": "WEBP", "avif": "AVIF"}[fmt]
        if img.format != want or img.width != w or abs(img.height - h) > 1:
            return "wrong", f"{target}: {img.format} {img.width}x{img.height}, expected {want} {w}x{h}"
        if fields.get("content-type") != f"image/{fmt}":
            return "wrong", f"{target}: Content-Type {fields.get('content-type')}"
        return "ok", ""

    def k_upload(self, ex, rng):
        size = rng.randrange(1, 200_000)
        data = rng.randbytes(size)
        method = rng.choice(["PUT", "POST"])
        if rng.random() < 0.2:                      # to a cached image: 204, which invalidates it
            path = rng.choice(self.hot_paths)
            r = ex.request(method, path, {"Content-Type": "application/octet-stream"}, data)
            status, _, _, error, _ = r
            if error is not None or status != 204:
                return "unexpected", f"{method} {path}: {error} status {status}", r
            return "ok", "", r
        path = f"/up/{rng.randrange(10**9)}"
        chunked = rng.random() < 0.5
        body = (data[i:i + 16384] for i in range(0, size, 16384)) if chunked else data
        r = ex.request(method, path, {"Content-Type": "application/octet-stream"}, body, chunked=chunked)
        status, _, answer, error, _ = r
        if error is not None or status != 201:
            return "unexpected", f"{method} {path} ({size} bytes{', chunked' if chunked else ''}): {error} status {status} {answer[:100]!r}", r
        if answer != f"{hashlib.sha256(data).hexdigest()} {size}\n".encode():
            return "wrong", f"{method} {path}: the origin received other bytes: {answer[:100]!r}", r
        return "ok", "", r

    def k_upload_abort(self, ex, rng):
        """A chunked upload that breaks off: the origin must never see it whole (counted there as a wrong body)."""
        ex.close()
        start = time.monotonic()
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as s:
            s.sendall(f"PUT /up/abort{rng.randrange(10**9)} HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
                      "Content-Type: application/octet-stream\r\n\r\n".encode())
            for _ in range(3):
                s.sendall(b"4000\r\n" + rng.randbytes(0x4000) + b"\r\n")
            s.sendall(b"4000\r\n" + rng.randbytes(100))     # half a chunk, then gone
            time.sleep(0.05)
        return "ok", "", (None, {}, b"", None, time.monotonic() - start)

    def k_missing(self, ex, rng):
        r = ex.request("GET", f"/missing/{rng.randrange(50)}.jpg")
        status, _, data, error, _ = r
        if error is not None or status != 404 or data != b"no such image\n":
            return "unexpected", f"404: {error} status {status} {data[:80]!r}", r
        return "ok", "", r

    def k_fault(self, ex, rng, stalls=False):
        """A fast fault in the mix; the stalls (seconds each) run on the fault workers, so the mix stays busy."""
        kind = rng.choice([f for f in self.faults if stalls or not f.startswith("stall")])
        n = rng.randrange(40)
        path = f"/fault/{kind}/{n}.jpg"
        body = fault_object(kind, n)
        r = ex.request("GET", path)
        status, fields, data, error, _ = r
        what = f"{path}: status {status}, {len(data)} bytes, {error}"
        if kind in ("500", "503"):
            want = f"origin error {kind} for {n}\n".encode()
            if error is None and status == int(kind) and data == want:
                return "expected", "", r
            return ("wrong" if error is None and status == 200 else "unexpected"), what, r
        if error is not None or status in (502, 504):
            return "expected", "", r              # cut off, reset, or the daemon's error
        if status == 200:
            if kind == "flaky" and data == body:
                return "ok", "", r                 # the good half of a flaky URL
            if kind == "short" and data == body[:-100]:
                return "ok", "", r                 # the origin's Content-Length is the message's length
            return "wrong", what, r
        return "unexpected", what, r

    MIX = [("hot", 40), ("range", 8), ("head", 2), ("conditional", 3), ("cold", 10), ("photo", 3), ("fetch", 2),
           ("mutable", 7), ("transform", 8), ("upload", 5), ("upload_abort", 1), ("missing", 2), ("fault", 6)]

    def worker(self, index, end):
        rng = random.Random(SEED * 1000 + index)
        ex = Exchange(self.port)
        kinds = [k for k, _ in self.MIX]
        weights = [w for _, w in self.MIX]
        for _ in range(10_000_000):
            if self.stop.is_set() or time.time() >= end:
                break
            kind = rng.choices(kinds, weights)[0]
            try:
                outcome, detail, r = getattr(self, "k_" + kind)(ex, rng)
            except Exception as e:  # noqa: BLE001 - a bug in the soak itself is reported, not hidden
                ex.close()
                self.tally.record(kind, "unexpected", f"client exception {type(e).__name__}: {e}")
                continue
            self.tally.record(kind, outcome, detail, r[4], r[1].get("x-cache") if r[1] else None)
        ex.close()

    def fault_worker(self, index, end):
        """Every origin fault in turn, stalls included, with a pause of 0.2 s between."""
        rng = random.Random(SEED * 2000 + index)
        ex = Exchange(self.port)
        for _ in range(1_000_000):
            if self.stop.is_set() or time.time() >= end:
                break
            outcome, detail, r = self.k_fault(ex, rng, stalls=True)
            self.tally.record("fault_worker", outcome, detail, r[4], r[1].get("x-cache") if r[1] else None)
            time.sleep(0.2)
        ex.close()

    # -- storms, slow and silent clients, purges, SIGHUP

    def storm(self, k):
        """20 clients at once on a new URL (odd k) or a new rendition of a cached source (even k)."""
        clients = 20
        if k % 2:
            path = f"/storm/{k}.jpg"
            check = lambda r: self.check_image(*r[:4], storm_object(k), path)  # noqa: E731
        else:
            src = sorted(self.sources)[k % len(self.sources)]
            width = 60 + (k // 2) % 400          # widths no other request asks for
            path = f"/transform/insecure/rs:fit:{width}:0/f:webp/plain{src}"
            check = lambda r: self.check_rendition(r, src, width, "webp", path)  # noqa: E731
        barrier = threading.Barrier(clients, timeout=20)
        results = [None] * clients

        def one(i):
            ex = Exchange(self.port)
            ex.conn = Connection("127.0.0.1", self.port, timeout=CLIENT_TIMEOUT)
            try:
                ex.conn.connect()
                ex.last_used = time.time()
                barrier.wait()
            except (OSError, threading.BrokenBarrierError) as e:
                results[i] = ("unexpected", f"storm {path}: {e}", None)
                return
            r = ex.request("GET", path)
            results[i] = (*check(r), r)
            ex.close()

        threads = [threading.Thread(target=one, args=(i,)) for i in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(CLIENT_TIMEOUT + 30)
        ok = coalesced = 0
        for res in results:
            if res is None:
                self.tally.record("storm", "unexpected", f"storm {path}: a client did not finish")
                continue
            outcome, detail, r = res
            xcache = r[1].get("x-cache") if r and r[1] else None
            self.tally.record("storm", outcome, detail, None, xcache)
            ok += outcome == "ok"
            coalesced += xcache == "COALESCED"
        fetches = None
        if k % 2:
            try:
                counts = json.loads(Exchange(self.origin_port).request("GET", "/__stats")[2])
                fetches = sum(counts.get(path, {}).values())
            except (ValueError, TypeError):
                pass
        self.storms.append(("url" if k % 2 else "rendition", path, fetches, ok, coalesced))

    def slow_client(self, end, photo):
        """Reads a hot image at 1 KB/s (4 KiB receive buffer), or a photo at 32 KB/s."""
        rng = random.Random(SEED + (7 if photo else 3))
        big = [p for p in self.hot_paths if len(self.hot[p][0]) >= 30_000]
        for _ in range(100_000):
            if self.stop.is_set() or time.time() >= end - 5:
                return
            path = rng.choice(self.photos if photo else big)
            body = self.hot[path][0]
            rate, step = (32_768, 4096) if photo else (1024, 256)
            deadline = time.time() + len(body) / rate * 1.5 + 60
            data = b""
            detail = None
            try:
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                    s.settimeout(CLIENT_TIMEOUT)
                    s.connect(("127.0.0.1", self.port))
                    s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
                    while time.time() < deadline and not self.stop.is_set():
                        chunk = s.recv(step)
                        if not chunk:
                            break
                        data += chunk
                        time.sleep(step / rate)
            except OSError as e:
                detail = f"slow {path}: {type(e).__name__}: {e}"
            if self.stop.is_set():
                return
            head, _, got = data.partition(b"\r\n\r\n")
            if detail is None and not head.startswith(b"HTTP/1.1 200"):
                detail = f"slow {path}: {head[:60]!r}"
            kind = "slow_photo" if photo else "slow"
            if detail is not None:
                self.tally.record(kind, "unexpected", detail)
            elif got != body:
                self.tally.record(kind, "wrong" if len(got) == len(body) else "unexpected",
                                  f"slow {path}: {len(got)} of {len(body)} bytes{' (other bytes)' if len(got) == len(body) else ''}")
            else:
                self.tally.record(kind, "ok")

    def silent_clients(self):
        """Two connections that send nothing, one half a head, one idle after a response: all closed in time."""
        socks = []
        try:
            for shape in ("silent", "silent", "half", "idle"):
                s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
                if shape == "half":
                    s.sendall(b"GET /img/h001.png HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                elif shape == "idle":
                    s.sendall(b"HEAD /img/h001.png HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                socks.append((shape, s, time.time()))
                self.silent["opened"] += 1
        except OSError as e:
            self.tally.record("silent", "unexpected", f"connect: {e}")
        pending = {s: (shape, opened, opened + (HEADER_TIMEOUT if shape == "half" else IDLE_TIMEOUT) + 10)
                   for shape, s, opened in socks}   # a new connection that sends nothing waits as an idle one
        with selectors.DefaultSelector() as sel:
            for s in pending:
                sel.register(s, selectors.EVENT_READ)
            for _ in range(10_000):
                if not pending:
                    break
                now = time.time()
                for s in [s for s, (_, _, deadline) in pending.items() if now >= deadline]:
                    shape, opened, deadline = pending.pop(s)
                    sel.unregister(s)
                    s.close()
                    self.tally.record("silent", "unexpected", f"{shape} connection still open after {deadline - opened:.0f} s")
                for key, _ in sel.select(timeout=0.5):
                    s = key.fileobj
                    try:
                        closed = not s.recv(65536)
                    except OSError:
                        closed = True
                    if closed:
                        pending.pop(s)
                        sel.unregister(s)
                        s.close()
                        self.silent["closed_in_time"] += 1
                        self.tally.record("silent", "expected")
            for s in pending:
                s.close()

    def purge(self, rng):
        path = rng.choice(self.hot_paths + sorted(self.sources))
        url = f"http://127.0.0.1:{self.origin_port}{path}"
        ex = Exchange(self.port)
        status, _, data, error, _ = ex.request("DELETE", "/_imagecached/cache?url=" + urllib.parse.quote(url, safe=""))
        ex.close()
        self.purges += 1
        if error is not None or status != 200:
            self.tally.record("purge", "unexpected", f"purge {path}: {error} status {status} {data[:100]!r}")
        else:
            self.tally.record("purge", "ok")

    def hup(self, pid, config_path):
        write_config(config_path, flip=self.hups % 2 == 0)
        os.kill(pid, signal.SIGHUP)
        self.hups += 1


def write_config(path, flip):
    """The file a SIGHUP reads: written whole and renamed over the old one (as docs/operations.md asks)."""
    text = (f"memory-limit: {MEMORY_LIMIT}\n"
            f"stale-if-error: {'1s' if flip else '0'}\n"
            f"in-flight-limit: {'48MiB' if flip else '64MiB'}\n")
    with open(path + ".new", "w") as f:
        f.write(text)
    os.rename(path + ".new", path)


# ---------------------------------------------------------------- sampling

def proc_status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "Threads"):
                out[key] = int(value.split()[0])
    return out


def dir_bytes(path):
    """(bytes of the files, which disk-limit governs; files; directories; blocks of files and directories, as du)."""
    total = files = dirs = blocks = 0
    for folder, subdirs, names in os.walk(path):
        dirs += len(subdirs)
        for name in subdirs:
            try:
                blocks += os.lstat(os.path.join(folder, name)).st_blocks * 512
            except OSError:
                pass
        for name in names:
            try:
                st = os.lstat(os.path.join(folder, name))
                total += st.st_size
                blocks += st.st_blocks * 512
                files += 1
            except OSError:
                pass           # renamed or evicted meanwhile
    return total, files, dirs, blocks


def daemon_cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy():
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def percentile(values, q):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def sample(soak, pid, cache_dir, t0, last):
    status = proc_status(pid)
    disk, files, dirs, blocks = dir_bytes(cache_dir)
    hits = soak.tally.drain_hits()
    now = time.time()
    requests = soak.tally.requests
    cpu = daemon_cpu(pid)
    busy, total = machine_busy()
    s = {"t": now - t0, "rss": status["VmRSS"] * 1024, "threads": status["Threads"], "fds": len(os.listdir(f"/proc/{pid}/fd")),
         "disk": disk, "files": files, "dirs": dirs, "du": blocks, "hits": len(hits), "p99_ms": (percentile(hits, 0.99) or 0) * 1000,
         "p50_ms": (percentile(hits, 0.5) or 0) * 1000,
         "rps": (requests - last["requests"]) / max(1e-3, now - last["time"]),
         "cpu": (cpu - last["cpu"]) / max(1e-3, now - last["time"]),
         "machine": (busy - last["busy"]) / max(1, total - last["total"])}
    last.update(requests=requests, time=now, cpu=cpu, busy=busy, total=total)
    return s


# ---------------------------------------------------------------- verdict, results, picture

def slope_per_hour(samples, key):
    xs = [s["t"] for s in samples]
    ys = [s[key] for s in samples]
    if len(xs) < 3:
        return 0.0
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx * 3600 if sxx else 0.0


def flat(samples, key):
    """(ok, first third's max, last third's max): the last third's maximum within 10% + 8 of the first third's."""
    third = max(1, len(samples) // 3)
    first = max(s[key] for s in samples[:third])
    final = max(s[key] for s in samples[-third:])
    return final <= first * 1.1 + 8, first, final


def verdict(soak, samples, warmup_s, origin_counts):
    after = [s for s in samples if s["t"] >= warmup_s] or samples
    rss0 = statistics.fmean(s["rss"] for s in after[:6])
    growth = slope_per_hour(after, "rss") / rss0 * 100
    fd_ok, fd_first, fd_last = flat(after, "fds")
    th_ok, th_first, th_last = flat(after, "threads")
    disk_max = max(s["disk"] for s in samples)
    abort_completed = origin_counts.get("/up/abort", {}).get("completed", 0)
    wrong = soak.tally.total("wrong") + abort_completed
    unexpected = soak.tally.total("unexpected")
    bars = [
        ("wrong bodies", wrong == 0, f"{wrong} (of {soak.tally.requests} requests; aborted uploads that reached the origin whole: {abort_completed})"),
        ("unexpected errors", unexpected == 0, f"{unexpected}"),
        ("memory growth after warm-up", growth < 5.0,
         f"{growth:+.2f}%/h (least squares over {len(after)} samples; RSS {rss0 / MIB:.1f} -> {after[-1]['rss'] / MIB:.1f} MiB, "
         f"min {min(s['rss'] for s in after) / MIB:.1f}, max {max(s['rss'] for s in after) / MIB:.1f})"),
        ("descriptors flat", fd_ok, f"first third max {fd_first}, last third max {fd_last} "
                                    f"(min {min(s['fds'] for s in after)}, max {max(s['fds'] for s in after)})"),
        ("threads flat", th_ok, f"first third max {th_first}, last third max {th_last} "
                                f"(min {min(s['threads'] for s in after)}, max {max(s['threads'] for s in after)})"),
        ("disk within its limit", disk_max <= DISK_LIMIT + DISK_SLACK,
         f"max {disk_max / MIB:.1f} MiB of {DISK_LIMIT / MIB:.0f} MiB (+{DISK_SLACK / MIB:.0f} MiB of writes in flight allowed); "
         f"at the end {samples[-1]['disk'] / MIB:.1f} MiB in {samples[-1]['files']} files; with the {samples[-1]['dirs']} "
         f"directories, {samples[-1]['du'] / MIB:.1f} MiB of blocks (du)"),
    ]
    numbers = {"growth_pct_per_hour": growth, "rss0": rss0, "disk_max": disk_max, "wrong": wrong, "unexpected": unexpected,
               "fds": (min(s["fds"] for s in after), max(s["fds"] for s in after)),
               "threads": (min(s["threads"] for s in after), max(s["threads"] for s in after))}
    return bars, numbers


def ensure_matplotlib():
    try:
        import matplotlib  # noqa: F401,PLC0415
    except ImportError:
        print("installing matplotlib from PyPI", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "matplotlib"], check=True, timeout=900)


def ensure_pillow():
    try:
        import PIL  # noqa: F401,PLC0415
    except ImportError:
        print("installing Pillow from PyPI", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "pillow"], check=True, timeout=900)


def picture(samples, warmup_s, path, title):
    import matplotlib  # noqa: PLC0415
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415
    minutes = [s["t"] / 60 for s in samples]
    fig, axes = plt.subplots(4, 1, figsize=(9, 9.5), sharex=True)
    panels = [
        (axes[0], [("resident memory (MiB)", [s["rss"] / MIB for s in samples], "tab:blue")], "MiB"),
        (axes[1], [("open descriptors", [s["fds"] for s in samples], "tab:orange"),
                   ("threads", [s["threads"] for s in samples], "tab:green")], "count"),
        (axes[2], [("p99 of hits (ms)", [s["p99_ms"] for s in samples], "tab:red"),
                   ("p50 of hits (ms)", [s["p50_ms"] for s in samples], "tab:gray")], "ms"),
        (axes[3], [("cache files (MiB)", [s["disk"] / MIB for s in samples], "tab:purple")], "MiB"),
    ]
    for ax, lines, unit in panels:
        for label, ys, colour in lines:
            ax.plot(minutes, ys, label=label, color=colour, linewidth=1.2)
        ax.axvspan(0, warmup_s / 60, color="0.92", zorder=0)
        ax.set_ylabel(unit)
        ax.set_ylim(bottom=0)
        ax.grid(True, color="0.88", linewidth=0.6)
        ax.legend(loc="lower right", fontsize=8, frameon=False)
    axes[3].set_ylim(0, DISK_LIMIT / MIB * 1.25)
    axes[3].axhline(DISK_LIMIT / MIB, color="tab:purple", linestyle="--", linewidth=0.8)
    axes[3].text(0.5, DISK_LIMIT / MIB, " disk-limit", va="bottom", fontsize=8, color="tab:purple")
    axes[0].text(warmup_s / 120, 1, "warm-up", fontsize=8, color="0.4")
    axes[3].set_xlabel("minutes")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_results(path, args, soak, samples, bars, numbers, storms, origin_counts, duration, argv, exit_code, log_notes,
                  metrics):
    lines = [f"# Soak: {duration / 60:.1f} minutes of mixed traffic ({datetime.datetime.now().isoformat(timespec='minutes')})", "",
             f"`python3 bench/soak.py --minutes {args.minutes:g}{' --skip-faults ' + args.skip_faults if args.skip_faults else ''}` against `{args.binary}`; {args.clients} closed-loop clients "
             f"plus storms, slow and silent clients, purges and a SIGHUP a minute; warm-up {args.warmup:g} min. "
             f"2 cores shared with other builds. See bench/README.md for what each part does.", "",
             "Daemon: `" + " ".join(argv) + "`", "", "## Bars", "", "| bar | result | |", "|---|---|---|"]
    for name, ok, text in bars:
        lines.append(f"| {name} | {'PASS' if ok else 'FAIL'} | {text} |")
    lines += ["", f"Requests: {soak.tally.requests} ({soak.tally.requests / duration:.0f}/s); exit status of the daemon after "
              f"SIGTERM: {exit_code}; SIGHUPs: {soak.hups} (reloads the daemon counted: {metrics.get('reloads')}); purges: {soak.purges}; "
              f"silent connections closed in time: {soak.silent['closed_in_time']} of {soak.silent['opened']}.", "",
              "## Requests by kind", "", "| kind | ok | expected error | wrong body | unexpected error |", "|---|---|---|---|---|"]
    for kind, e in sorted(soak.tally.kinds.items()):
        lines.append(f"| {kind} | {e['ok']} | {e['expected']} | {e['wrong']} | {e['unexpected']} |")
    lines += ["", "X-Cache of the answers: " + ", ".join(f"{k} {v}" for k, v in sorted(soak.tally.xcache.items(), key=lambda x: -x[1])), ""]
    url_storms = [s for s in storms if s[0] == "url"]
    one = sum(1 for s in url_storms if s[2] == 1)
    lines += ["## Coalesced storms", "",
              f"{len(storms)} storms of 20 clients: {len(url_storms)} on a new URL ({one} with exactly one origin fetch; "
              f"fetches per storm: {sorted(set(s[2] for s in url_storms))}), {len(storms) - len(url_storms)} on a new rendition. "
              f"Answers marked COALESCED: {sum(s[4] for s in storms)} of {20 * len(storms)}.", ""]
    lines += ["## Origin", "", "Requests the origin answered, by path group and status: " +
              "; ".join(f"`{k}` {v}" for k, v in sorted(origin_counts.items()) if not k.startswith("/storm/") and not k.startswith("/src/")
                        and not k.startswith("/img/h") and not k.startswith("/img/p")), ""]
    if soak.tally.problems:
        lines += ["## Wrong bodies and unexpected errors (first 50)", ""]
        lines += [f"- {p[0] - soak.t0:7.1f} s {p[1]} {p[2]}: {p[3]}" for p in soak.tally.problems]
        lines.append("")
    if log_notes:
        lines += ["## Daemon log (warnings and errors, by message, first 20)", "", "```"] + log_notes + ["```", ""]
    lines += ["## Samples (one a minute of the 5 s samples)", "",
              "| min | RSS MiB | fds | threads | disk MiB | files | dirs | du MiB | req/s | hits | p50 ms | p99 ms | daemon CPU (cores) | machine busy |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in samples[::12] + ([samples[-1]] if len(samples) % 12 != 1 else []):
        lines.append(f"| {s['t'] / 60:.1f} | {s['rss'] / MIB:.1f} | {s['fds']} | {s['threads']} | {s['disk'] / MIB:.1f} | {s['files']} | {s['dirs']} | {s['du'] / MIB:.1f} "
                     f"| {s['rps']:.0f} | {s['hits']} | {s['p50_ms']:.1f} | {s['p99_ms']:.1f} | {s['cpu']:.2f} | {s['machine'] * 100:.0f}% |")
    lines += ["", "Latency is measured by the Python clients (send to last body byte), which share the 2 cores with "
              "the daemon, the origin and the other work on the machine: it is the client's view under load, not "
              "the daemon's own time.", "", "![soak](../../docs/soak.png)", ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def log_summary(path):
    """Warnings and errors of the daemon's log, grouped by their text without numbers and URLs."""
    import re  # noqa: PLC0415
    groups = {}
    try:
        with open(path, errors="replace") as f:
            for line in f:
                low = line.lower()
                if not any(w in low for w in ("warning", "error", "critical", "fatal", "refused")):
                    continue
                key = re.sub(r"\d+", "N", re.sub(r"https?://\S+|(?<=\s)/\S+", "URL", line.split(" ", 1)[-1].strip()))[:160]
                groups[key] = groups.get(key, 0) + 1
    except OSError:
        return []
    return [f"{n:6} x {k}" for k, n in sorted(groups.items(), key=lambda x: -x[1])[:20]]


def metrics_of(port):
    out = {}
    try:
        text = Exchange(port).request("GET", "/_imagecached/metrics")[2].decode()
    except (AttributeError, UnicodeDecodeError):
        return out
    reloads = {}
    for line in text.splitlines():
        if line.startswith("imagecached_config_reloads_total"):
            reloads[line.split("{")[1].split("}")[0] if "{" in line else ""] = float(line.split()[-1])
    out["reloads"] = reloads
    return out


# ---------------------------------------------------------------- main

def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--binary", default=os.path.join(REPO, ".build/release/imagecached"))
    parser.add_argument("--clients", type=int, default=8, help="closed-loop clients (besides storms, slow and silent ones)")
    parser.add_argument("--warmup", type=float, default=None, help="minutes left out of the memory and flatness bars "
                        "(default: a fifth of the run, 2 to 10)")
    parser.add_argument("--skip-faults", default="", help=f"origin faults left out, comma-separated (of {','.join(FAULTS)})")
    parser.add_argument("--base-port", type=int, default=18400)
    parser.add_argument("--out", default=os.path.join(BENCH, "results", f"{datetime.date.today().isoformat()}-soak.md"))
    parser.add_argument("--picture", default=os.path.join(REPO, "docs", "soak.png"))
    parser.add_argument("--serve-origin", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_origin:
        return serve_origin(args.serve_origin, args.corpus)
    if args.warmup is None:
        args.warmup = min(10.0, max(2.0, args.minutes / 5))
    if not os.path.exists(args.binary):
        sys.exit(f"{args.binary} is missing: swift build -c release --product imagecached (or --binary PATH)")
    ensure_pillow()
    ensure_matplotlib()
    import bench  # noqa: PLC0415 - the runner's process helpers

    shutil.rmtree(WORK, ignore_errors=True)
    cache_dir, corpus = f"{WORK}/cache", f"{WORK}/corpus"
    bench.make_dirs(WORK, cache_dir)
    sources = make_sources(corpus)
    config_path = f"{WORK}/soak.yaml"
    write_config(config_path, flip=False)
    os.chmod(config_path, 0o644)
    origin_port, port = args.base_port, args.base_port + 1
    argv = [args.binary, "--config", config_path, "--listen", f"127.0.0.1:{port}", "--origin", f"http://127.0.0.1:{origin_port}",
            "--cache-dir", cache_dir, "--disk-limit", f"{DISK_LIMIT // MIB}MiB", "--transform-pixel-cache", "16MiB",
            "--server-header-timeout", f"{HEADER_TIMEOUT}s", "--server-idle-timeout", f"{IDLE_TIMEOUT}s",
            "--upstream-low-speed-time", f"{LOW_SPEED_TIME}s", "--allow-private-networks", "--log-level", "notice"]
    procs = {"origin": bench.Proc("origin", [sys.executable, os.path.abspath(__file__), "--serve-origin", str(origin_port),
                                             "--corpus", corpus], origin_port, f"{WORK}/origin.log")}
    soak = Soak(args, port, origin_port, sources)
    samples, exit_code = [], None
    duration = args.minutes * 60
    try:
        procs["daemon"] = bench.Proc("imagecached", bench.unprivileged() + argv, port, f"{WORK}/imagecached.log")
        pid = procs["daemon"].popen.pid
        t0 = soak.t0 = time.time()
        end = t0 + duration
        print(f"soak: {args.minutes:g} min, daemon pid {pid} on 127.0.0.1:{port}, origin on {origin_port}; "
              f"warm-up {args.warmup:g} min", flush=True)
        threads = [threading.Thread(target=soak.worker, args=(i, end), daemon=True) for i in range(args.clients)]
        threads += [threading.Thread(target=soak.slow_client, args=(end, photo), daemon=True) for photo in (False, True)]
        threads += [threading.Thread(target=soak.fault_worker, args=(i, end), daemon=True) for i in range(2)]
        for t in threads:
            t.start()
        rng = random.Random(SEED)
        busy, total = machine_busy()
        last = {"requests": 0, "time": t0, "cpu": daemon_cpu(pid), "busy": busy, "total": total}
        next_sample, next_hup, next_storm, next_silent, next_purge = t0 + 5, t0 + 60, t0 + 15, t0 + 10, t0 + 2
        storm_k = 0
        side = []                    # storm and silent-client threads in flight
        for _ in range(int(duration * 20) + 100):
            now = time.time()
            if now >= end:
                break
            if procs["daemon"].popen.poll() is not None:
                soak.tally.record("daemon", "unexpected", f"the daemon exited with {procs['daemon'].popen.returncode}")
                break
            if now >= next_sample:
                try:
                    samples.append(sample(soak, pid, cache_dir, t0, last))
                except OSError:
                    continue        # the daemon has just gone: the next turn says so
                s = samples[-1]
                if len(samples) % 12 == 0:
                    print(f"{s['t'] / 60:5.1f} min  {soak.tally.requests:8} requests  {s['rps']:5.0f}/s  RSS {s['rss'] / MIB:6.1f} MiB  "
                          f"fds {s['fds']:4}  threads {s['threads']:3}  disk {s['disk'] / MIB:5.1f} MiB  p99 hits {s['p99_ms']:6.1f} ms  "
                          f"busy {s['machine'] * 100:3.0f}%  wrong {soak.tally.total('wrong')}  unexpected {soak.tally.total('unexpected')}", flush=True)
                next_sample += 5
            if now >= next_hup:
                soak.hup(pid, config_path)
                next_hup += 60
            side = [t for t in side if t.is_alive()]
            if now >= next_storm and now < end - 60:
                storm_k += 1
                side.append(threading.Thread(target=soak.storm, args=(storm_k,), daemon=True))
                side[-1].start()
                next_storm += 30
            if now >= next_silent and now < end - 40:
                side.append(threading.Thread(target=soak.silent_clients, daemon=True))
                side[-1].start()
                next_silent += 20
            if now >= next_purge:
                soak.purge(rng)
                next_purge += 2
            time.sleep(0.05)
        soak.stop.set()
        for t in threads + side:
            t.join(CLIENT_TIMEOUT + 40)
        duration = time.time() - t0
        alive = procs["daemon"].popen.poll() is None
        if alive:
            samples.append(sample(soak, pid, cache_dir, t0, last))
        metrics = metrics_of(port) if alive else {}
        try:
            origin_counts = json.loads(Exchange(origin_port).request("GET", "/__stats")[2])
        except (ValueError, TypeError):
            origin_counts = {}
        if alive:
            os.kill(pid, signal.SIGTERM)
            try:
                exit_code = procs["daemon"].popen.wait(40)
            except subprocess.TimeoutExpired:
                exit_code = "still running 40 s after SIGTERM"
            if exit_code != 0:
                soak.tally.record("daemon", "unexpected", f"exit after SIGTERM: {exit_code}")
        else:
            exit_code = procs["daemon"].popen.returncode
    finally:
        soak.stop.set()
        for proc in procs.values():
            proc.stop()

    with open(f"{WORK}/samples.json", "w") as f:          # the raw 5 s samples, to look at again
        json.dump({"warmup_s": args.warmup * 60, "samples": samples}, f)
    bars, numbers = verdict(soak, samples, args.warmup * 60, origin_counts)
    url_storms = [s for s in soak.storms if s[0] == "url"]
    print(f"\n{soak.tally.requests} requests in {duration / 60:.1f} min; storms {len(soak.storms)} "
          f"(origin fetches per URL storm: {[s[2] for s in url_storms]}); SIGHUPs {soak.hups}; purges {soak.purges}; "
          f"silent connections closed in time {soak.silent['closed_in_time']}/{soak.silent['opened']}")
    for kind, e in sorted(soak.tally.kinds.items()):
        print(f"  {kind:13} ok {e['ok']:7}  expected {e['expected']:6}  wrong {e['wrong']}  unexpected {e['unexpected']}")
    for name, ok, text in bars:
        print(f"{'PASS' if ok else 'FAIL'}  {name}: {text}")
    log_notes = log_summary(f"{WORK}/imagecached.log")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    write_results(args.out, args, soak, samples, bars, numbers, soak.storms, origin_counts, duration, argv, exit_code,
                  log_notes, metrics)
    picture(samples, args.warmup * 60, args.picture,
            f"imagecached soak, {duration / 60:.0f} min: {soak.tally.requests} requests, {numbers['wrong']} wrong bodies, "
            f"{numbers['unexpected']} unexpected errors, memory {numbers['growth_pct_per_hour']:+.1f}%/h after warm-up")
    print(f"written {args.out} and {args.picture}")
    return 0 if all(ok for _, ok, _ in bars) else 1


if __name__ == "__main__":
    sys.exit(main())
