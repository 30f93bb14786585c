#!/usr/bin/env python3
"""The benchmark origin: serves bench/corpus over HTTP/1.1 keep-alive on 127.0.0.1, one thread per connection.

  GET /<corpus path>                      200 with ETag, Last-Modified, Cache-Control: public, max-age=<--max-age>
  GET /_o/<options>/<corpus path>         the same, shaped by comma-separated options:
        delay=MS      wait MS before the response head
        drip=MS       send the body in 20 slices spread over MS (head and first slice at once)
        maxage=N      Cache-Control: public, max-age=N
        v=TAG         ignored: makes a URL no cache has seen
  If-None-Match / If-Modified-Since that match answer 304.
  GET /__stats    JSON {path: {"200": n, "304": n, "first_byte": unix time the last 200 was sent (its first slice when dripped),
                               "last_byte": the latest unix time a 200's last byte was written}}
  GET /__reset    clears the counters
With --tls-cert and --tls-key it speaks HTTPS instead (the https scenario: bench/https.py); the handshake is done in
the connection's thread, on its first read.
Every request is counted under its full path (options included).
"""
import argparse
import hashlib
import json
import os
import socket
import socketserver
import ssl
import threading
import time
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
LAST_MODIFIED = "Mon, 01 Jan 2024 00:00:00 GMT"
TYPES = {".jpg": "image/jpeg", ".png": "image/png", ".webp": "image/webp", ".gif": "image/gif"}

files = {}  # "/small/t000.jpg" -> (bytes, etag, content type)
stats = {}
stats_lock = threading.Lock()
default_max_age = 3600


def load():
    for folder, _, names in os.walk(CORPUS):
        for name in names:
            ext = os.path.splitext(name)[1]
            if ext not in TYPES:
                continue
            full = os.path.join(folder, name)
            with open(full, "rb") as f:
                data = f.read()
            rel = "/" + os.path.relpath(full, CORPUS)
            files[rel] = (data, '"%s"' % hashlib.sha256(data).hexdigest()[:20], TYPES[ext])


def count(path, status, first_byte=None):
    with stats_lock:
        entry = stats.setdefault(path, {"200": 0, "304": 0, "404": 0})
        entry[str(status)] = entry.get(str(status), 0) + 1
        if first_byte is not None:
            entry["first_byte"] = first_byte


def sent(path, last_byte):
    """Records when a 200's last byte was written (the latest of them, when several fetched the path)."""
    with stats_lock:
        entry = stats.setdefault(path, {"200": 0, "304": 0, "404": 0})
        entry["last_byte"] = max(entry.get("last_byte", 0), last_byte)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "bench-origin"
    sys_version = ""

    def log_message(self, *args):
        pass

    def reply(self, status, body=b"", headers=()):
        self.send_response_only(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        if path == "/__stats":
            with stats_lock:
                body = json.dumps(stats).encode()
            return self.reply(200, body, [("Content-Type", "application/json"), ("Cache-Control", "no-store")])
        if path == "/__reset":
            with stats_lock:
                stats.clear()
            return self.reply(200, b"ok\n", [("Cache-Control", "no-store")])
        options = {}
        rel = path
        if path.startswith("/_o/"):
            _, _, opts, rest = path.split("/", 3)
            rel = "/" + rest
            for item in opts.split(","):
                k, _, v = item.partition("=")
                options[k] = v
        found = files.get(rel)
        if found is None:
            count(path, 404)
            return self.reply(404, b"not found\n", [("Content-Type", "text/plain"), ("Cache-Control", "no-store")])
        data, etag, ctype = found
        if "delay" in options:
            time.sleep(int(options["delay"]) / 1000)
        max_age = int(options.get("maxage", default_max_age))
        headers = [("Date", formatdate(usegmt=True)), ("Cache-Control", f"public, max-age={max_age}"),
                   ("ETag", etag), ("Last-Modified", LAST_MODIFIED)]
        inm = self.headers.get("If-None-Match")
        ims = self.headers.get("If-Modified-Since")
        if (inm is not None and etag in inm) or (inm is None and ims == LAST_MODIFIED):
            count(path, 304)
            self.send_response_only(304)
            for k, v in headers:
                self.send_header(k, v)
            self.end_headers()
            return
        headers.append(("Content-Type", ctype))
        if "drip" not in options:
            self.reply(200, data, headers)
            now = time.time()
            count(path, 200, first_byte=now)
            sent(path, now)
            return
        slices = 20
        step = (len(data) + slices - 1) // slices
        pause = int(options["drip"]) / 1000 / (slices - 1)
        self.send_response_only(200)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command == "HEAD":
            return
        self.wfile.write(data[:step])
        self.wfile.flush()
        count(path, 200, first_byte=time.time())
        for i in range(1, slices):
            time.sleep(pause)
            self.wfile.write(data[i * step:(i + 1) * step])
            self.wfile.flush()
        sent(path, time.time())

    do_HEAD = do_GET


class Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024

    def handle_error(self, request, client_address):
        pass  # clients and caches hang up mid-response on purpose (timeouts, shutdown)

    def server_bind(self):
        self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().server_bind()


def main():
    global default_max_age
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--max-age", type=int, default=3600)
    parser.add_argument("--tls-cert", help="PEM chain: serve HTTPS (with --tls-key)")
    parser.add_argument("--tls-key")
    args = parser.parse_args()
    default_max_age = args.max_age
    load()
    server = Server(("127.0.0.1", args.port), Handler)
    if args.tls_cert:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.tls_cert, args.tls_key)
        context.set_alpn_protocols(["http/1.1"])
        accept = server.get_request

        def get_request():
            sock, address = accept()
            return context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), address
        server.get_request = get_request
    print(f"origin: {len(files)} files on 127.0.0.1:{args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
