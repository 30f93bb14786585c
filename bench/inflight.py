#!/usr/bin/env python3
"""Memory held for clients that never read (issue 13, item 9).

    bench/inflight.py --binary PATH [--binary PATH2 ...] [--clients 40] [--mib 20] [--seconds 10]

For each binary: a local origin serving distinct images of MIB MiB (PNG signature + filler, Content-Length,
`Cache-Control: max-age=600`), imagecached in front of it (`--memory-limit 64MiB`, defaults otherwise: disk tier on,
in-flight-limit at its default of 64 MiB), then CLIENTS connections that each ask for a different image with a 16 KiB
receive buffer and never read. The daemon's resident memory (VmRSS, sampled every 100 ms, and VmHWM) is reported
after SECONDS, with what its stats say is in flight, and the peak above the idle footprint against the bound that
docs/security.md states: memory-limit + in-flight-limit (128 MiB here) plus overhead. With 20 MiB images nothing
completes (the memory tier stays empty); with 5 MiB images fetches complete, fill the memory tier and leave their
bodies in the clients' connections. Only 127.0.0.1; bounded in time."""

import argparse
import http.server
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402


def origin(port, size):
    filler = bytes(range(256)) * (size // 256 + 1)
    body = (b"\x89PNG\r\n\x1a\n" + filler)[:size]

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Cache-Control", "max-age=600")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except OSError:
                pass

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    server.handle_error = lambda request, address: None   # clients the daemon cut off reset their connections
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def run(binary, args, origin_port, port):
    cache = tempfile.mkdtemp(prefix="imagecached-inflight-")
    log = open(f"{cache}.log", "w")
    daemon = subprocess.Popen([binary, "--listen", f"127.0.0.1:{port}", "--origin", f"http://127.0.0.1:{origin_port}",
                               "--memory-limit", "64MiB", "--cache-dir", cache, "--log-level", "warning"],
                              stdout=log, stderr=subprocess.STDOUT)
    try:
        bench.wait_port(port)
        idle = status_kib(daemon.pid, "VmRSS")
        socks = []
        for i in range(args.clients):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 10)
            s.connect(("127.0.0.1", port))
            s.sendall(f"GET /img{i}-{time.time_ns()}.png HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
            socks.append(s)
        peak = 0
        deadline = time.time() + args.seconds
        while time.time() < deadline:
            peak = max(peak, status_kib(daemon.pid, "VmRSS"))
            time.sleep(0.1)
        hwm = status_kib(daemon.pid, "VmHWM")
        try:
            conn = socket.create_connection(("127.0.0.1", port), timeout=5)
            conn.sendall(b"GET /_imagecached/stats HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            raw = b""
            while chunk := conn.recv(65536):
                raw += chunk
            stats = json.loads(raw.split(b"\r\n\r\n", 1)[1])
            upstream = stats.get("upstream", {})
            inflight, paused = upstream.get("inFlightBytes", "-"), upstream.get("paused", "-")
        except (OSError, ValueError, IndexError):
            inflight, paused = "-", "-"
        for s in socks:
            s.close()
        return {"binary": binary, "idle_mib": idle / 1024, "peak_rss_mib": peak / 1024, "hwm_mib": hwm / 1024,
                "inflight_bytes": inflight, "paused": paused}
    finally:
        daemon.terminate()
        daemon.wait(10)
        log.close()
        subprocess.run(["rm", "-rf", cache, f"{cache}.log"])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", action="append", required=True)
    parser.add_argument("--clients", type=int, default=40)
    parser.add_argument("--mib", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--base-port", type=int, default=18280)
    args = parser.parse_args()
    server = origin(args.base_port, args.mib << 20)
    try:
        for index, binary in enumerate(args.binary):
            r = run(binary, args, args.base_port, args.base_port + 1 + index)
            above = max(r['peak_rss_mib'], r['hwm_mib']) - r['idle_mib']
            print(f"{r['binary']}: {args.clients} x {args.mib} MiB: idle {r['idle_mib']:.1f} MiB, peak RSS {r['peak_rss_mib']:.1f} MiB "
                  f"(VmHWM {r['hwm_mib']:.1f}), {above:.1f} MiB above idle against memory-limit + in-flight-limit = 128 MiB "
                  f"({above - 128:+.1f}); in flight {r['inflight_bytes']} bytes, paused {r['paused']}", flush=True)
    finally:
        server.shutdown()


if __name__ == "__main__":
    main()
