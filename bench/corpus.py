#!/usr/bin/env python3
"""Deterministic image corpus for the benchmarks (fixed seed, Pillow).

Writes bench/corpus/{small,photos,stream}/... and bench/corpus/manifest.json:
  small/   240 thumbnails, 10-60 KB: JPEG, PNG, WebP, GIF (a realistic mix, JPEG-heavy)
  photos/   24 photos, 150 KB - 1 MB: JPEG and WebP
  stream/    1 photo of about 1 MB (the streaming scenario)
The pixels are smooth colour fields plus seeded noise, so the encoders produce realistic sizes.
Re-running with the same Pillow version gives the same bytes; the manifest records sizes and hashes.
"""
import hashlib
import io
import json
import os
import random
import sys

from PIL import Image, ImageFilter

SEED = 20240611
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
VERSION = 1  # bump when the recipe changes


def picture(rng, w, h, noise):
    """A smooth random colour field with `noise` (0-255) of seeded grain on top."""
    grid = Image.frombytes("RGB", (6, 5), rng.randbytes(6 * 5 * 3)).resize((w, h), Image.BICUBIC)
    grain = Image.frombytes("RGB", (w, h), rng.randbytes(w * h * 3)).filter(ImageFilter.BoxBlur(1))
    return Image.blend(grid, grain, noise / 255.0)


def encode(img, fmt, quality):
    out = io.BytesIO()
    if fmt == "JPEG":
        img.save(out, "JPEG", quality=quality, optimize=False)
    elif fmt == "WEBP":
        img.save(out, "WEBP", quality=quality, method=2)
    elif fmt == "PNG":
        img.convert("P", palette=Image.ADAPTIVE, colors=max(8, quality)).save(out, "PNG", optimize=False)
    elif fmt == "GIF":
        img.convert("P", palette=Image.ADAPTIVE, colors=max(8, quality)).save(out, "GIF")
    return out.getvalue()


# Bytes per pixel each encoder produces for these pictures (measured), for a first guess at the dimensions.
BYTES_PER_PIXEL = {"JPEG": 0.16, "WEBP": 0.075, "PNG": 0.115, "GIF": 0.195}


def make(rng, fmt, target, noise, quality):
    """Encode at a size near `target` bytes: guess the dimensions, then correct once if more than 15% off."""
    side = int((target / BYTES_PER_PIXEL[fmt] / 1.33) ** 0.5)
    for _ in range(2):
        w, h = max(16, int(side * 1.33)), max(16, side)
        data = encode(picture(rng, w, h, noise), fmt, quality)
        if abs(len(data) - target) < 0.15 * target:
            break
        side = int(side * (target / max(1, len(data))) ** 0.5)
    return data, w, h


def main():
    manifest_path = os.path.join(ROOT, "manifest.json")
    if os.path.exists(manifest_path):
        with open(manifest_path) as f:
            if json.load(f).get("version") == VERSION:
                print("corpus: up to date", file=sys.stderr)
                return
    rng = random.Random(SEED)
    files = []
    plan = []
    # Thumbnails: JPEG-heavy like the web (60% JPEG, 20% WebP, 12% PNG, 8% GIF), 10-60 KB.
    kinds = ["JPEG"] * 15 + ["WEBP"] * 5 + ["PNG"] * 3 + ["GIF"] * 2
    for i in range(240):
        fmt = kinds[i % len(kinds)]
        plan.append(("small", f"t{i:03d}", fmt, rng.randint(10_000, 60_000)))
    for i in range(24):
        fmt = "JPEG" if i % 3 else "WEBP"
        plan.append(("photos", f"p{i:02d}", fmt, rng.randint(150_000, 1_000_000)))
    plan.append(("stream", "big", "JPEG", 1_000_000))
    ext = {"JPEG": "jpg", "WEBP": "webp", "PNG": "png", "GIF": "gif"}
    for folder, name, fmt, target in plan:
        noise = {"JPEG": 60, "WEBP": 60, "PNG": 30, "GIF": 30}[fmt]
        quality = {"JPEG": 85, "WEBP": 80, "PNG": 64, "GIF": 64}[fmt]
        data, w, h = make(rng, fmt, target, noise, quality)
        rel = f"{folder}/{name}.{ext[fmt]}"
        os.makedirs(os.path.join(ROOT, folder), exist_ok=True)
        with open(os.path.join(ROOT, rel), "wb") as f:
            f.write(data)
        files.append({"path": rel, "bytes": len(data), "format": fmt, "width": w, "height": h,
                      "sha256": hashlib.sha256(data).hexdigest()})
    with open(manifest_path, "w") as f:
        json.dump({"version": VERSION, "seed": SEED, "files": files}, f, indent=1)
    total = sum(x["bytes"] for x in files)
    print(f"corpus: {len(files)} files, {total / 1e6:.1f} MB in {ROOT}", file=sys.stderr)


if __name__ == "__main__":
    main()
