#!/usr/bin/env python3
"""Drives the real daemon through a few minutes of varied traffic and takes the status page's screenshots in docs/.

Starts bench/origin.py on the benchmark corpus (bench/corpus.py makes it) and the daemon in front of it (reverse mode,
disk tier in a temporary directory, transforms on, status-history-interval 2s so that a few minutes fill the charts),
then plays phases, each a few tens of seconds: a cold start (misses), a warm cache (hits), bursts of clients on slow
new URLs (coalesced), an origin that fails (errors), transforms, short-lived entries (revalidated). Then headless
Chromium saves the page in light and dark mode.

  python3 bench/status_page.py [--binary .build/release/imagecached] [--out docs] [--seconds 180]
Only 127.0.0.1 is used.
"""
import argparse
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                r.read()
                return
        except (urllib.error.URLError, ConnectionError, OSError):
            time.sleep(0.1)
    sys.exit(f"{url} did not answer in {timeout}s")


def get(base, path):
    try:
        with urllib.request.urlopen(base + path, timeout=30) as r:
            r.read()
    except urllib.error.HTTPError as e:
        e.read()
    except (urllib.error.URLError, OSError):
        pass


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default=os.path.join(ROOT, ".build/release/imagecached"))
    parser.add_argument("--out", default=os.path.join(ROOT, "docs"))
    parser.add_argument("--seconds", type=int, default=180, help="length of the traffic (the phases share it)")
    args = parser.parse_args()
    subprocess.run([sys.executable, os.path.join(HERE, "corpus.py")], check=True)
    origin_port, port = free_port(), free_port()
    cache = tempfile.mkdtemp(prefix="imagecached-status-")
    children = []
    try:
        children.append(subprocess.Popen([sys.executable, os.path.join(HERE, "origin.py"), "--port", str(origin_port), "--max-age", "600"],
                                         stdout=subprocess.DEVNULL))
        wait_for(f"http://127.0.0.1:{origin_port}/small/t000.jpg")
        children.append(subprocess.Popen([args.binary, "--listen", f"127.0.0.1:{port}", "--origin", f"http://127.0.0.1:{origin_port}",
                                          "--cache-dir", cache, "--transforms", "--status-history-interval", "2s",
                                          "--status-history-length", f"{args.seconds + 30}s", "--log-level", "warning"]))
        base = f"http://127.0.0.1:{port}"
        wait_for(base + "/_imagecached/health")
        corpus = os.path.join(HERE, "corpus")
        small = ["/small/" + name for name in sorted(os.listdir(os.path.join(corpus, "small")))][::3]
        photos = ["/photos/" + name for name in sorted(os.listdir(os.path.join(corpus, "photos")))]
        rng = random.Random(7)
        phase_length = args.seconds / 6

        def play(seconds, pick, threads=4):
            stop = time.time() + seconds

            def worker():
                while time.time() < stop:
                    get(base, pick())
            workers = [threading.Thread(target=worker) for _ in range(threads)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()

        def burst(path, clients=12):
            workers = [threading.Thread(target=get, args=(base, path)) for _ in range(clients)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()

        print("phase 1: cold start", flush=True)
        play(phase_length, lambda: rng.choice(small))
        print("phase 2: warm", flush=True)
        play(phase_length, lambda: rng.choice(small[:40]), threads=6)
        print("phase 3: bursts on slow new URLs (coalesced)", flush=True)
        stop = time.time() + phase_length
        version = 0
        while time.time() < stop:
            version += 1
            burst(f"/_o/delay=400,v={version}" + photos[version % len(photos)])
            get(base, rng.choice(small[:40]))
        print("phase 4: a failing origin path and refusals", flush=True)
        play(phase_length, lambda: rng.choice(small[:40] + ["/missing/x.jpg", "/_o/delay=50,maxage=0" + small[1]]))
        print("phase 5: transforms", flush=True)
        formats = ["webp", "avif", "jpeg"]
        play(phase_length, lambda: f"/transform/insecure/rs:fit:{rng.choice([160, 320, 480])}:0/plain/local://"
             f"{rng.choice(photos)}@{rng.choice(formats)}", threads=3)
        print("phase 6: short-lived entries (revalidated) and hits", flush=True)
        play(phase_length, lambda: rng.choice(small[:40] + ["/_o/maxage=1" + path for path in small[:5]]))
        os.makedirs(args.out, exist_ok=True)
        chromium = shutil.which("chromium") or shutil.which("chromium-browser")
        if not chromium:
            sys.exit("chromium is not installed (apt-get install chromium)")
        for name, extra in [("status-page.png", []), ("status-page-dark.png", ["--force-dark-mode", "--blink-settings=preferredColorScheme=0"])]:
            profile = tempfile.mkdtemp(prefix="imagecached-chromium-")
            subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-proxy-server",
                            "--disable-background-networking", "--disable-component-update", f"--user-data-dir={profile}",
                            "--window-size=1280,2300", "--virtual-time-budget=3000", "--screenshot=" + os.path.join(args.out, name)]
                           + extra + [base + "/_imagecached/"], check=True, stderr=subprocess.DEVNULL)
            shutil.rmtree(profile, ignore_errors=True)
            print("wrote", os.path.join(args.out, name), flush=True)
    finally:
        for child in children:
            child.terminate()
        for child in children:
            child.wait()
        shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
