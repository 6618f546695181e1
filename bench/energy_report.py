#!/usr/bin/env python3
"""Plots of the GPU energy study (bench/energy_h200.sh): decode J/token against context and against
batch per shape, mean with +-1 sd bars over the repetitions. Standard library only.

Usage: bench/energy_report.py DIR OUT.svg   (DIR: the extracted energybench.tgz, with
depth-<shape>.json and batch-<shape>.json written by `frugal bench --energy --json`)
"""
import json
import math
import os
import statistics
import sys

SHAPES = [("mha", "MHA (32 KV heads)", "#d62728"), ("gqa", "GQA (4 KV heads)", "#1f77b4"),
          ("swa", "GQA + SWA (4096 window)", "#2ca02c")]


def series(path, key):
    """[(x, mean, sd)] from one bench JSON; key 'depth' or 'parallel' (from the test name)."""
    with open(path) as f:
        doc = json.load(f)
    out = []
    for t in doc["tests"]:
        s = t["energy"]["samples_joules_per_token"]
        if key == "depth":
            x = t["depth"]
        else:  # tg128x64@d1024 -> 64, tg128@d1024 -> 1
            name = t["name"].split("@")[0]
            x = int(name.split("x")[1]) if "x" in name else 1
        out.append((x, statistics.mean(s), statistics.stdev(s) if len(s) > 1 else 0.0))
    return sorted(out)


def panel(x0, title, xlabel, data, logy):
    """One panel 360 x 260 at x0: log2 x axis, linear or log10 y axis."""
    w, h, left, top = 360, 260, 60, 30
    xs = sorted({p[0] for d in data for p in d[2]})
    ys = [p[1] + p[2] for d in data for p in d[2]] + [max(p[1] - p[2], 1e-3) for d in data for p in d[2]]
    lo, hi = (min(ys), max(ys))
    fy = (lambda v: math.log10(v)) if logy else (lambda v: v)
    ylo, yhi = (fy(lo) - 0.1, fy(hi) + 0.1) if logy else (0.0, hi * 1.1)
    lx = [math.log2(x) for x in xs]

    def px(x):
        return x0 + left + (math.log2(x) - lx[0]) / max(lx[-1] - lx[0], 1e-9) * (w - left - 20)

    def py(v):
        return top + (1 - (fy(max(v, 1e-3)) - ylo) / (yhi - ylo)) * (h - top - 40)

    o = [f'<text x="{x0 + w / 2}" y="18" text-anchor="middle" font-size="13">{title}</text>',
         f'<line x1="{x0 + left}" y1="{h - 40}" x2="{x0 + w - 20}" y2="{h - 40}" stroke="#000"/>',
         f'<line x1="{x0 + left}" y1="{top}" x2="{x0 + left}" y2="{h - 40}" stroke="#000"/>',
         f'<text x="{x0 + w / 2}" y="{h - 8}" text-anchor="middle" font-size="11">{xlabel}</text>',
         f'<text x="{x0 + 14}" y="{h / 2}" font-size="11" transform="rotate(-90 {x0 + 14} {h / 2})" '
         'text-anchor="middle">decode J/token</text>']
    for x in xs:
        o.append(f'<text x="{px(x):.1f}" y="{h - 26}" text-anchor="middle" font-size="10">{x:,}</text>')
    ticks = [t for t in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5) if lo * 0.8 <= t <= hi * 1.2] if logy else \
        [round(hi * 1.1 * k / 4, 2) for k in range(5)]
    for t in ticks:
        o.append(f'<text x="{x0 + left - 4}" y="{py(t) + 3:.1f}" text-anchor="end" font-size="10">{t:g}</text>')
        o.append(f'<line x1="{x0 + left}" y1="{py(t):.1f}" x2="{x0 + w - 20}" y2="{py(t):.1f}" stroke="#ddd"/>')
    for _, _, color, pts in [(d[0], d[1], d[3], d[2]) for d in data]:
        path = " ".join(f"{px(x):.1f},{py(m):.1f}" for x, m, _ in pts)
        o.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        for x, m, sd in pts:
            o.append(f'<line x1="{px(x):.1f}" y1="{py(m - sd):.1f}" x2="{px(x):.1f}" y2="{py(m + sd):.1f}" '
                     f'stroke="{color}"/>')
            o.append(f'<circle cx="{px(x):.1f}" cy="{py(m):.1f}" r="3" fill="{color}"/>')
    return o


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    d, out = sys.argv[1], sys.argv[2]
    depth, batch = [], []
    for key, label, color in SHAPES:
        for kind, acc in (("depth", depth), ("batch", batch)):
            p = os.path.join(d, f"{kind}-{key}.json")
            if os.path.exists(p):
                acc.append((key, label, series(p, "depth" if kind == "depth" else "parallel"), color))
    if not depth and not batch:
        sys.exit(f"{d}: no depth-*.json or batch-*.json")
    o = ['<svg xmlns="http://www.w3.org/2000/svg" width="740" height="300" font-family="sans-serif">',
         '<rect width="100%" height="100%" fill="#fff"/>']
    o += panel(0, "batch 1: J/token vs context", "context tokens", depth, False)
    o += panel(370, "1,024 tokens of context: J/token vs batch", "sequences", batch, True)
    for i, (_, label, color) in enumerate(SHAPES):
        o.append(f'<rect x="{80 + 220 * i}" y="284" width="10" height="10" fill="{color}"/>')
        o.append(f'<text x="{95 + 220 * i}" y="293" font-size="11">{label}</text>')
    o.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(o) + "\n")


if __name__ == "__main__":
    main()
