"""Pillow against pyvips for image variants: decode + 320 px fit + WebP encode.

Generates 12-megapixel JPEGs (4000 x 3000, noise over gradients so the encoder has real work),
then runs each library in its own child process, one image at a time, and prints per-image
time (median and mean) and the child's peak RSS. Each library is used the way swiftlite's
process pool would use it: one thread per process (the pool gives the parallelism), the
library's shrink-on-load (Pillow's JPEG draft mode through `thumbnail`, libvips'
`thumbnail_buffer`).

    .venv/bin/python loadtests/bench_images.py [--images 8] [--rounds 3] [--side 320]

pyvips needs `pip install pyvips pyvips-binary` (the wheel ships libvips); without it only
Pillow is measured.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

WIDTH, HEIGHT = 4000, 3000


def make_images(directory: str, count: int) -> list[str]:
    from PIL import Image, ImageDraw

    paths = []
    for i in range(count):
        noise = Image.effect_noise((WIDTH, HEIGHT), 40 + i).convert("RGB")
        base = Image.linear_gradient("L").resize((WIDTH, HEIGHT)).convert("RGB")
        img = Image.blend(noise, base, 0.5)
        draw = ImageDraw.Draw(img)
        for k in range(20):  # some edges, as photos have
            draw.rectangle((k * 190, k * 140, k * 190 + 400, k * 140 + 300),
                           fill=((k * 37) % 255, (i * 51) % 255, (k * 11) % 255))
        path = os.path.join(directory, f"img{i}.jpg")
        img.save(path, "JPEG", quality=90)
        paths.append(path)
    return paths


def run_pillow(blobs: list[bytes], side: int) -> list[int]:
    from PIL import Image, ImageOps

    sizes = []
    for data in blobs:
        with Image.open(io.BytesIO(data)) as im:
            im.draft("RGB", (side, side))  # DCT scaling: decode at 1/2..1/8 size
            im = ImageOps.exif_transpose(im)
            im.thumbnail((side, side), Image.Resampling.LANCZOS)
            out = io.BytesIO()
            im.save(out, "WEBP", quality=80)
            sizes.append(len(out.getvalue()))
    return sizes


def run_vips(blobs: list[bytes], side: int) -> list[int]:
    import pyvips

    sizes = []
    for data in blobs:
        im = pyvips.Image.thumbnail_buffer(data, side, height=side)
        sizes.append(len(im.write_to_buffer(".webp", Q=80, strip=True)))
    return sizes


def peak_rss_mib() -> float:
    """This process's peak RSS (VmHWM: unlike ru_maxrss, not inherited across exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def child(lib: str, paths: list[str], rounds: int, side: int) -> None:
    """One library, in this (fresh) process: prints a JSON line of figures."""
    blobs = [open(p, "rb").read() for p in paths]
    before = peak_rss_mib()  # interpreter + the JPEGs held in memory
    run = run_pillow if lib == "pillow" else run_vips
    if lib == "pyvips":
        import pyvips
        pyvips.cache_set_max(0)  # a server sees each source once: no operation cache
        version = ".".join(str(pyvips.version(i)) for i in range(3))
    else:
        import PIL
        version = PIL.__version__
    run(blobs[:1], side)  # warm-up: library load, codec init
    times = []
    for _ in range(rounds):
        for data in blobs:
            t0 = time.perf_counter()
            run([data], side)
            times.append(time.perf_counter() - t0)
    print(json.dumps({"lib": lib, "version": version, "n": len(times),
                      "median_ms": statistics.median(times) * 1000,
                      "mean_ms": statistics.mean(times) * 1000,
                      "per_s": 1 / statistics.mean(times),
                      "peak_rss_mib": peak_rss_mib(),
                      "added_rss_mib": peak_rss_mib() - before}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--side", type=int, default=320)
    ap.add_argument("--vips-threads", type=int, default=1,
                    help="VIPS_CONCURRENCY (1: as in a process pool)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("paths", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.paths, args.rounds, args.side)
        return
    with tempfile.TemporaryDirectory() as tmp:
        paths = make_images(tmp, args.images)
        mean_size = statistics.mean(os.path.getsize(p) for p in paths) / 1e6
        print(f"# {args.images} JPEGs {WIDTH}x{HEIGHT} (12 MP, q90, mean {mean_size:.1f} MB), "
              f"{args.rounds} rounds, fit {args.side}x{args.side}, WebP q80, "
              f"VIPS_CONCURRENCY={args.vips_threads}, "
              f"Python {platform.python_version()}, {os.cpu_count()} CPUs")
        env = dict(os.environ, VIPS_CONCURRENCY=str(args.vips_threads))
        for lib in ("pillow", "pyvips"):
            proc = subprocess.run(
                [sys.executable, __file__, "--child", lib, "--rounds", str(args.rounds),
                 "--side", str(args.side), *paths],
                capture_output=True, text=True, env=env)
            if proc.returncode != 0:
                last = (proc.stderr.strip().splitlines() or ["?"])[-1]
                print(f"{lib}: not measured ({last})")
                continue
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            print(f"{r['lib']:7} {r['version']:8} median {r['median_ms']:6.1f} ms  "
                  f"mean {r['mean_ms']:6.1f} ms  {r['per_s']:5.1f} images/s  "
                  f"peak RSS {r['peak_rss_mib']:6.1f} MiB "
                  f"(+{r['added_rss_mib']:.1f} over the loaded inputs)  (n={r['n']})")


if __name__ == "__main__":
    main()
